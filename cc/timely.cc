// TIMELY rate updates, original (Algorithm 1 of the SIGCOMM'15 paper) and
// patched (gradient weighting w(g) and reference RTT, CoNEXT'16 Section 5).
#include "cc/timely.h"

#include <algorithm>
#include <cstdio>

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
  if (!(p.ewma_alpha > 0 && p.ewma_alpha <= 1) || !(p.beta > 0 && p.beta < 1) ||
      p.t_low_us <= 0 || p.t_high_us <= p.t_low_us || p.min_rtt_us <= 0 ||
      p.min_rate_bps <= 0 || p.hai_threshold < 1 || p.window_rtts <= 0) {
    return InvalidArgument(
        "timely: need 0<ewma_alpha<=1, 0<beta<1, 0<t_low_us<t_high_us, "
        "min_rtt_us>0, min_rate_gbps>0, hai_threshold>=1, window_rtts>0");
  }
  return p;
}

Timely::Timely(const TimelyParams& p, bool patched, double line_rate_bps,
               uint32_t mss_bytes)
    : p_(p), patched_(patched), mss_(mss_bytes) {
  max_rate_ = p.max_rate_bps > 0 ? p.max_rate_bps : line_rate_bps;
  rate_bps_ =
      p.init_rate_bps > 0 ? std::min(p.init_rate_bps, max_rate_) : max_rate_;
}

void Timely::on_ack(const CcSample& s) {
  const double rtt = s.rtt_ns / 1000.0;
  if (rtt <= 0) return;
  if (prev_rtt_us_ == 0) prev_rtt_us_ = rtt;
  const double new_diff = rtt - prev_rtt_us_;
  prev_rtt_us_ = rtt;
  last_rtt_us_ = rtt;
  rtt_diff_us_ = (1 - p_.ewma_alpha) * rtt_diff_us_ + p_.ewma_alpha * new_diff;
  const double gradient = rtt_diff_us_ / p_.min_rtt_us;
  neg_count_ = gradient <= 0 ? neg_count_ + 1 : 0;

  double rate = rate_bps_;
  if (rtt < p_.t_low_us) {
    rate += p_.add_rate_bps;
  } else if (rtt > p_.t_high_us) {
    rate *= 1 - p_.beta * (1 - p_.t_high_us / rtt);
  } else if (!patched_) {
    if (gradient <= 0) {
      const int n = neg_count_ >= p_.hai_threshold ? p_.hai_factor : 1;
      rate += n * p_.add_rate_bps;
    } else {
      rate *= std::max(0.0, 1 - p_.beta * gradient);
    }
  } else {
    // w(g): 0 for g <= -1/4, 2g + 1/2 in between, 1 for g >= 1/4.
    const double w = gradient <= -0.25  ? 0.0
                     : gradient >= 0.25 ? 1.0
                                        : 2 * gradient + 0.5;
    rate = p_.add_rate_bps * (1 - w) +
           rate * (1 - p_.beta * w * (1 - p_.rtt_ref_us / rtt));
  }
  rate_bps_ = std::clamp(rate, p_.min_rate_bps, max_rate_);
}

double Timely::cwnd_bytes() const {
  const double rtt_us = std::max(last_rtt_us_, p_.t_high_us);
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
