// TIMELY rate updates, original (Algorithm 1 of the SIGCOMM'15 paper) and
// patched (gradient weighting w(g) and reference RTT, CoNEXT'16 Section 5).
#include "cc/timely.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace uccl::cc {

Result<TimelyParams> Timely::params_from(const CcParams& c) {
  TimelyParams p;
  p.ewma_alpha = c.get("ewma_alpha", p.ewma_alpha);
  p.beta = c.get("beta", p.beta);
  p.add_rate_bps = c.get("add_rate_mbps", p.add_rate_bps / 1e6) * 1e6;
  p.t_low_us = c.get("t_low_us", p.t_low_us);
  p.t_high_us = c.get("t_high_us", p.t_high_us);
  p.min_rtt_us = c.get("min_rtt_us", p.min_rtt_us);
  p.hai_threshold = static_cast<int>(c.get("hai_threshold", p.hai_threshold));
  p.hai_factor = static_cast<int>(c.get("hai_factor", p.hai_factor));
  p.min_rate_bps = c.get("min_rate_gbps", p.min_rate_bps / 1e9) * 1e9;
  p.max_rate_bps = c.get("max_rate_gbps", p.max_rate_bps / 1e9) * 1e9;
  p.init_rate_bps = c.get("init_rate_gbps", p.init_rate_bps / 1e9) * 1e9;
  p.rtt_ref_us = c.get("rtt_ref_us", p.rtt_ref_us);
  p.window_rtts = c.get("window_rtts", p.window_rtts);
  p.thresholds_from_min_rtt =
      c.get("thresholds_from_min_rtt", p.thresholds_from_min_rtt);
  p.segment_bytes = c.get("segment_bytes", p.segment_bytes);
  if (!(p.ewma_alpha > 0 && p.ewma_alpha <= 1) || !(p.beta > 0 && p.beta < 1) ||
      p.t_low_us <= 0 || p.t_high_us <= p.t_low_us || p.min_rtt_us <= 0 ||
      p.min_rate_bps <= 0 || p.hai_threshold < 1 || p.window_rtts <= 0 ||
      p.segment_bytes < 0) {
    return InvalidArgument(
        "timely: need 0<ewma_alpha<=1, 0<beta<1, 0<t_low_us<t_high_us, "
        "min_rtt_us>0, min_rate_gbps>0, hai_threshold>=1, window_rtts>0, "
        "segment_bytes>=0");
  }
  return p;
}

Timely::Timely(const TimelyParams& p, bool patched, double line_rate_bps,
               uint32_t mss_bytes)
    : p_(p), patched_(patched), mss_(mss_bytes), line_rate_bps_(line_rate_bps) {
  max_rate_ = p.max_rate_bps > 0 ? p.max_rate_bps : line_rate_bps;
  rate_bps_ =
      p.init_rate_bps > 0 ? std::min(p.init_rate_bps, max_rate_) : max_rate_;
}

void Timely::on_ack(const CcSample& s) {
  if (s.rtt_ns == 0) return;
  double segments = std::max<uint32_t>(1, s.acked_packets);
  if (p_.segment_bytes > 0) {
    // One update per completed segment, with the newest RTT.
    pending_bytes_ += s.acked_bytes;
    if (pending_bytes_ < p_.segment_bytes) return;
    segments = 1;
    pending_bytes_ = 0;
  }
  // TIMELY's RTT excludes the segment's own serialization at line rate
  // (SIGCOMM'15, Section 4.1): with 64 KiB chunks on a slow link it would
  // otherwise exceed T_high by itself.
  const double ser_us =
      line_rate_bps_ > 0 ? s.segment_bytes * 8e6 / line_rate_bps_ : 0;
  // Like the paper's NIC-generated ACKs, the RTT excludes the time the
  // receiver held the ACK (coalescing, its engine loop): the fabric part.
  const uint64_t rtt_ns = s.fabric_ns();
  const double raw = std::max(rtt_ns / 1000.0 - ser_us, 0.0);
  floor_.observe(raw);
  const double floor = floor_.us();
  const double rtt =
      p_.thresholds_from_min_rtt != 0 ? std::max(raw - floor, 0.0) : raw;
  if (prev_rtt_us_ == 0) prev_rtt_us_ = rtt;
  const double new_diff = rtt - prev_rtt_us_;
  prev_rtt_us_ = rtt;
  last_rtt_us_ = rtt;
  last_raw_rtt_us_ = raw;
  rtt_diff_us_ = (1 - p_.ewma_alpha) * rtt_diff_us_ + p_.ewma_alpha * new_diff;
  // The paper normalizes by the network's minimum RTT (20 us there); with
  // thresholds_from_min_rtt the measured floor, if larger, is that minimum
  // (host-inclusive RTTs jitter by tens of us: a 20 us normalizer turns
  // that noise into gradients that cut the rate to min_rate).
  const double norm_us = p_.thresholds_from_min_rtt != 0
                             ? std::max(p_.min_rtt_us, floor)
                             : p_.min_rtt_us;
  const double gradient = rtt_diff_us_ / norm_us;
  neg_count_ = gradient <= 0 ? neg_count_ + 1 : 0;

  // The paper updates once per completed segment; an ACK that covers k
  // chunks counts as k completions for the additive steps.
  const double k = segments;
  double rate = rate_bps_;
  if (rtt < p_.t_low_us) {
    rate += k * p_.add_rate_bps;
  } else if (rtt > p_.t_high_us) {
    rate *= 1 - p_.beta * (1 - p_.t_high_us / rtt);
  } else if (!patched_) {
    if (gradient <= 0) {
      const int n = neg_count_ >= p_.hai_threshold ? p_.hai_factor : 1;
      rate += k * n * p_.add_rate_bps;
    } else {
      rate *= std::max(0.0, 1 - p_.beta * gradient);
    }
  } else {
    // w(g): 0 for g <= -1/4, 2g + 1/2 in between, 1 for g >= 1/4.
    const double w = gradient <= -0.25  ? 0.0
                     : gradient >= 0.25 ? 1.0
                                        : 2 * gradient + 0.5;
    rate = k * p_.add_rate_bps * (1 - w) +
           rate * (1 - p_.beta * w * (1 - p_.rtt_ref_us / std::max(rtt, 1.0)));
  }
  rate_bps_ = std::clamp(rate, p_.min_rate_bps, max_rate_);
}

void Timely::share_delay_floor(std::shared_ptr<DelayFloor> floor) {
  floor_.share(std::move(floor));
}

double Timely::cwnd_bytes() const {
  // The window covers the whole RTT (host delay included), not just the
  // part above the floor the thresholds apply to.
  const double floor = floor_.us();
  const double base_us =
      p_.thresholds_from_min_rtt != 0 && floor > 0 ? floor : 0;
  const double rtt_us = std::max(last_raw_rtt_us_, p_.t_high_us + base_us);
  return std::max<double>(mss_, rate_bps_ / 8 * rtt_us * 1e-6 * p_.window_rtts);
}

std::string Timely::state() const {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "rate_gbps=%.3f rtt_us=%.1f grad=%.3f%s",
                rate_bps_ / 1e9, last_rtt_us_, rtt_diff_us_ / p_.min_rtt_us,
                in_hai() ? " hai" : "");
  return buf;
}

}  // namespace uccl::cc
