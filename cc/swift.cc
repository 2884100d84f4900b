// Swift window updates (SIGCOMM'20 Algorithm 1): AI below target, MD by
// beta*(delay-target)/delay bounded by max_mdf at most once per RTT, loss
// reactions, and pacing for fractional windows.
#include "cc/swift.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace uccl::cc {

Result<SwiftParams> Swift::params_from(const CcParams& c) {
  SwiftParams p;
  p.ai = c.get("ai", p.ai);
  p.beta = c.get("beta", p.beta);
  p.max_mdf = c.get("max_mdf", p.max_mdf);
  p.base_target_us = c.get("base_target_us", p.base_target_us);
  p.hop_scale_us = c.get("hop_scale_us", p.hop_scale_us);
  p.fs_range_us = c.get("fs_range_us", p.fs_range_us);
  p.fs_min_cwnd = c.get("fs_min_cwnd", p.fs_min_cwnd);
  p.fs_max_cwnd = c.get("fs_max_cwnd", p.fs_max_cwnd);
  p.endpoint_target_us = c.get("endpoint_target_us", p.endpoint_target_us);
  p.min_cwnd = c.get("min_cwnd", p.min_cwnd);
  p.max_cwnd = c.get("max_cwnd", p.max_cwnd);
  p.init_cwnd = c.get("init_cwnd", p.init_cwnd);
  p.target_from_min_delay =
      c.get("target_from_min_delay", p.target_from_min_delay);
  p.target_queue_pkts = c.get("target_queue_pkts", p.target_queue_pkts);
  p.retx_reset_threshold =
      static_cast<int>(c.get("retx_reset_threshold", p.retx_reset_threshold));
  if (p.ai <= 0 || !(p.beta > 0 && p.beta <= 1) ||
      !(p.max_mdf > 0 && p.max_mdf < 1) || p.base_target_us <= 0 ||
      p.fs_range_us < 0 || p.target_queue_pkts < 0 ||
      !(p.fs_min_cwnd > 0 && p.fs_min_cwnd < p.fs_max_cwnd) ||
      !(p.min_cwnd > 0 && p.min_cwnd <= p.init_cwnd &&
        p.init_cwnd <= p.max_cwnd) ||
      p.retx_reset_threshold < 1) {
    return InvalidArgument(
        "swift: need ai>0, 0<beta<=1, 0<max_mdf<1, base_target_us>0, "
        "0<fs_min_cwnd<fs_max_cwnd, 0<min_cwnd<=init_cwnd<=max_cwnd");
  }
  return p;
}

Swift::Swift(const SwiftParams& p, uint32_t mss_bytes, double line_rate_bps)
    : p_(p), mss_(mss_bytes), line_rate_bps_(line_rate_bps) {
  // Flow scaling: alpha/sqrt(cwnd) + beta' is fs_range at fs_min_cwnd and 0
  // at fs_max_cwnd (Swift Section 3.3).
  fs_alpha_ = p.fs_range_us /
              (1 / std::sqrt(p.fs_min_cwnd) - 1 / std::sqrt(p.fs_max_cwnd));
  fs_beta_ = -fs_alpha_ / std::sqrt(p.fs_max_cwnd);
  fcwnd_ = ecwnd_ = p.init_cwnd;
}

double Swift::clamp(double w) const {
  return std::clamp(w, p_.min_cwnd, p_.max_cwnd);
}

double Swift::target_delay_us(uint32_t hops) const {
  double fs = fs_alpha_ / std::sqrt(fcwnd_) + fs_beta_;
  fs = std::clamp(fs, 0.0, p_.fs_range_us);
  return p_.base_target_us + hops * p_.hop_scale_us + fs;
}

void Swift::share_delay_floor(std::shared_ptr<DelayFloor> floor) {
  floor_.share(std::move(floor));
}

double Swift::floor_us() const { return std::max(floor_.us(), 0.0); }

double Swift::effective_target_us(uint32_t hops) const {
  const double floor = p_.target_from_min_delay != 0 ? floor_us() : 0;
  const double room_us =
      line_rate_bps_ > 0 ? p_.target_queue_pkts * mss_ * 8e6 / line_rate_bps_
                         : 0;
  return target_delay_us(hops) + floor + room_us;
}

bool Swift::can_decrease(uint64_t now_ns) const {
  return !decreased_ever_ || now_ns - last_decrease_ns_ >= srtt_ns_;
}

void Swift::on_ack(const CcSample& s) {
  if (s.rtt_ns > 0) {
    srtt_ns_ = srtt_ns_ == 0 ? s.rtt_ns : (7 * srtt_ns_ + s.rtt_ns) / 8;
  }
  retx_count_ = 0;
  last_hops_ = s.hops;
  const double n = std::max<uint32_t>(1, s.acked_packets);
  const bool may_decrease = can_decrease(s.now_ns);
  bool decreased = false;
  auto update = [&](double* w, double delay_us, double target_us) {
    if (delay_us < target_us) {
      *w += (*w >= 1 ? p_.ai / *w : p_.ai) * n;
    } else if (may_decrease) {
      double f = std::max(1 - p_.beta * (delay_us - target_us) / delay_us,
                          1 - p_.max_mdf);
      *w *= f;
      decreased = true;
    }
    *w = clamp(*w);
  };
  const double ser_us =
      line_rate_bps_ > 0 ? s.segment_bytes * 8e6 / line_rate_bps_ : 0;
  const double fabric_us = std::max(s.fabric_ns() / 1000.0 - ser_us, 0.0);
  floor_.observe(fabric_us);
  sfabric_us_ = sfabric_us_ < 0 ? fabric_us : (7 * sfabric_us_ + fabric_us) / 8;
  update(&fcwnd_, fabric_us, effective_target_us(s.hops));
  update(&ecwnd_, s.endpoint_delay_ns / 1000.0, p_.endpoint_target_us);
  if (decreased) {
    last_decrease_ns_ = s.now_ns;
    decreased_ever_ = true;
  }
}

void Swift::on_loss(uint64_t now_ns, bool timeout) {
  if (timeout) {
    if (++retx_count_ >= p_.retx_reset_threshold) {
      fcwnd_ = p_.min_cwnd;
      last_decrease_ns_ = now_ns;
      decreased_ever_ = true;
      return;
    }
  } else {
    retx_count_ = 0;
  }
  if (can_decrease(now_ns)) {
    fcwnd_ = clamp(fcwnd_ * (1 - p_.max_mdf));
    last_decrease_ns_ = now_ns;
    decreased_ever_ = true;
  }
}

uint64_t Swift::pacing_gap_ns(uint32_t bytes) const {
  const double w = cwnd_pkts();
  if (w >= 1) return 0;
  // Below one packet: one packet every RTT / cwnd.
  const double rtt =
      srtt_ns_ ? static_cast<double>(srtt_ns_) : p_.base_target_us * 1000.0;
  return static_cast<uint64_t>(rtt * (static_cast<double>(bytes) / mss_) / w);
}

std::string Swift::state() const {
  char buf[192];
  std::snprintf(buf, sizeof(buf),
                "cwnd_pkts=%.3f fcwnd=%.3f ecwnd=%.3f "
                "target_us=%.1f floor_us=%.1f srtt_us=%.1f fabric_us=%.1f",
                cwnd_pkts(), fcwnd_, ecwnd_, effective_target_us(last_hops_),
                floor_us(), srtt_ns_ / 1000.0, std::max(sfabric_us_, 0.0));
  return buf;
}

}  // namespace uccl::cc
