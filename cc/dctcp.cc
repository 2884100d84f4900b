// DCTCP window updates: per-RTT alpha from the marked fraction, a cut of
// alpha/2 once per window with marks, TCP's growth and loss reactions.
#include "cc/dctcp.h"

#include <algorithm>
#include <cstdio>

namespace uccl::cc {

Result<DctcpParams> Dctcp::params_from(const CcParams& c) {
  DctcpParams p;
  p.g = c.get("g", p.g);
  p.init_cwnd = c.get("init_cwnd", p.init_cwnd);
  p.min_cwnd = c.get("min_cwnd", p.min_cwnd);
  p.max_cwnd = c.get("max_cwnd", p.max_cwnd);
  p.init_alpha = c.get("init_alpha", p.init_alpha);
  if (!(p.g > 0 && p.g <= 1) || !(p.init_alpha >= 0 && p.init_alpha <= 1) ||
      !(p.min_cwnd > 0 && p.min_cwnd <= p.init_cwnd &&
        p.init_cwnd <= p.max_cwnd)) {
    return InvalidArgument(
        "dctcp: need 0<g<=1, 0<=init_alpha<=1, "
        "0<min_cwnd<=init_cwnd<=max_cwnd");
  }
  return p;
}

Dctcp::Dctcp(const DctcpParams& p, uint32_t mss_bytes)
    : p_(p), mss_(mss_bytes), cwnd_(p.init_cwnd), alpha_(p.init_alpha) {}

void Dctcp::end_window(uint64_t now_ns) {
  if (acked_ > 0) {
    alpha_ = (1 - p_.g) * alpha_ + p_.g * (marked_ / acked_);
  }
  acked_ = marked_ = 0;
  cut_this_window_ = false;
  window_start_ns_ = now_ns;
}

void Dctcp::on_ack(const CcSample& s) {
  if (s.rtt_ns > 0) {
    srtt_ns_ = srtt_ns_ == 0 ? s.rtt_ns : (7 * srtt_ns_ + s.rtt_ns) / 8;
  }
  if (!window_open_) {
    window_open_ = true;
    window_start_ns_ = s.now_ns;
  } else if (s.now_ns - window_start_ns_ >= srtt_ns_) {
    end_window(s.now_ns);
  }
  const double bytes = std::max<uint32_t>(s.acked_bytes, 1);
  acked_ += bytes;
  if (s.ecn) {
    marked_ += bytes;
    if (!cut_this_window_) {
      // RFC 8257 section 3.3: cut with the alpha of the windows before
      // (the current one is not complete yet), once per window.
      cwnd_ = std::max(cwnd_ * (1 - alpha_ / 2), p_.min_cwnd);
      ssthresh_ = cwnd_;
      cut_this_window_ = true;
    }
    return;
  }
  const double pkts = bytes / mss_;
  cwnd_ += in_slow_start() ? pkts : pkts / cwnd_;
  cwnd_ = std::min(cwnd_, p_.max_cwnd);
}

void Dctcp::on_loss(uint64_t now_ns, bool timeout) {
  // One halving per round trip for fast retransmits (a window's losses are
  // one congestion event); every timeout resets.
  if (!timeout && loss_cut_ever_ && now_ns - last_loss_cut_ns_ < srtt_ns_) {
    return;
  }
  loss_cut_ever_ = true;
  last_loss_cut_ns_ = now_ns;
  ssthresh_ = std::max(cwnd_ / 2, p_.min_cwnd);
  cwnd_ = timeout ? p_.min_cwnd : ssthresh_;
}

std::string Dctcp::state() const {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "cwnd_pkts=%.2f alpha=%.4f%s", cwnd_, alpha_,
                in_slow_start() ? " ss" : "");
  return buf;
}

}  // namespace uccl::cc
