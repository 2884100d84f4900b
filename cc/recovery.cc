// RtoEstimator: RFC 6298 smoothing with a 1.5 x srtt floor, clamped, and
// exponential backoff.
#include "cc/recovery.h"

#include <algorithm>

namespace uccl::cc {

void RtoEstimator::on_rtt(uint64_t rtt_ns) {
  if (srtt_ns_ == 0) {
    srtt_ns_ = rtt_ns;
    rttvar_ns_ = rtt_ns / 2;
  } else {
    const uint64_t err =
        srtt_ns_ > rtt_ns ? srtt_ns_ - rtt_ns : rtt_ns - srtt_ns_;
    rttvar_ns_ = (3 * rttvar_ns_ + err) / 4;
    srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
  }
  rto_ns_ = std::clamp(srtt_ns_ + std::max(4 * rttvar_ns_, srtt_ns_ / 2),
                       min_ns_, max_ns_);
}

void RtoEstimator::on_spurious_timeout(uint64_t rtt_ns) {
  srtt_ns_ = std::max(srtt_ns_, rtt_ns);
  rttvar_ns_ = std::max(rttvar_ns_, rtt_ns / 2);
  rto_ns_ = std::clamp(srtt_ns_ + std::max(4 * rttvar_ns_, srtt_ns_ / 2),
                       min_ns_, max_ns_);
}

uint64_t RtoEstimator::backed_off_ns(uint32_t backoff) const {
  if (backoff >= 20) return max_ns_;
  return std::min(max_ns_, rto_ns_ << backoff);
}

}  // namespace uccl::cc
