// DCQCN reaction point: CNP-driven cuts, alpha decay, and the three rate
// increase stages driven by a timer and a byte counter.
#include "cc/dcqcn.h"

#include <algorithm>
#include <cstdio>

namespace uccl::cc {

Result<DcqcnParams> Dcqcn::params_from(const CcParams& c) {
  DcqcnParams p;
  p.g = c.get("g", p.g);
  p.alpha_timer_us = c.get("alpha_timer_us", p.alpha_timer_us);
  p.increase_timer_us = c.get("increase_timer_us", p.increase_timer_us);
  p.byte_counter_kb = c.get("byte_counter_kb", p.byte_counter_kb);
  p.fast_recovery_steps =
      static_cast<int>(c.get("fast_recovery_steps", p.fast_recovery_steps));
  p.rate_ai_frac = c.get("rate_ai_frac", p.rate_ai_frac);
  p.rate_hai_frac = c.get("rate_hai_frac", p.rate_hai_frac);
  p.cnp_interval_us = c.get("cnp_interval_us", p.cnp_interval_us);
  p.min_rate_frac = c.get("min_rate_frac", p.min_rate_frac);
  p.window_rtts = c.get("window_rtts", p.window_rtts);
  if (!(p.g > 0 && p.g <= 1) || p.alpha_timer_us <= 0 ||
      p.increase_timer_us <= 0 || p.byte_counter_kb <= 0 ||
      p.fast_recovery_steps < 1 || p.rate_ai_frac <= 0 ||
      p.rate_hai_frac < p.rate_ai_frac || p.cnp_interval_us < 0 ||
      !(p.min_rate_frac > 0 && p.min_rate_frac <= 1) || p.window_rtts < 0) {
    return InvalidArgument(
        "dcqcn: need 0<g<=1, positive timers and byte counter, "
        "fast_recovery_steps>=1, 0<rate_ai_frac<=rate_hai_frac, "
        "cnp_interval_us>=0, 0<min_rate_frac<=1, window_rtts>=0");
  }
  return p;
}

Dcqcn::Dcqcn(const DcqcnParams& p, double line_rate_bps, uint32_t mss_bytes)
    : p_(p), line_(line_rate_bps), mss_(mss_bytes) {
  rc_ = rt_ = line_;  // RoCE flows start at line rate
}

void Dcqcn::on_cnp(uint64_t now_ns) {
  ++cnps_;
  rt_ = rc_;
  rc_ = std::max(rc_ * (1 - alpha_ / 2), p_.min_rate_frac * line_);
  alpha_ = (1 - p_.g) * alpha_ + p_.g;
  // The cut restarts every increase counter and both timers.
  timer_count_ = byte_count_ = 0;
  bytes_since_ = 0;
  alpha_timer_at_ = now_ns + static_cast<uint64_t>(p_.alpha_timer_us * 1000);
  increase_timer_at_ =
      now_ns + static_cast<uint64_t>(p_.increase_timer_us * 1000);
}

void Dcqcn::increase() {
  const int f = p_.fast_recovery_steps;
  const int most = std::max(timer_count_, byte_count_);
  const int least = std::min(timer_count_, byte_count_);
  if (most < f) {
    // Fast recovery: halfway back to the rate before the cut.
  } else if (least >= f) {
    rt_ += (least - f + 1) * p_.rate_hai_frac * line_;  // hyper increase
  } else {
    rt_ += p_.rate_ai_frac * line_;  // additive increase
  }
  rt_ = std::min(rt_, line_);
  rc_ = std::min((rt_ + rc_) / 2, line_);
}

void Dcqcn::advance_timers(uint64_t now_ns) {
  if (!timers_started_) {
    timers_started_ = true;
    alpha_timer_at_ = now_ns + static_cast<uint64_t>(p_.alpha_timer_us * 1e3);
    increase_timer_at_ =
        now_ns + static_cast<uint64_t>(p_.increase_timer_us * 1e3);
    return;
  }
  const uint64_t alpha_ns = static_cast<uint64_t>(p_.alpha_timer_us * 1e3);
  while (now_ns >= alpha_timer_at_) {
    alpha_ *= 1 - p_.g;
    alpha_timer_at_ += alpha_ns;
  }
  const uint64_t inc_ns = static_cast<uint64_t>(p_.increase_timer_us * 1e3);
  // A flow at line rate has nothing to raise: skip the elapsed periods.
  while (now_ns >= increase_timer_at_) {
    increase_timer_at_ += inc_ns;
    if (rc_ >= line_ && rt_ >= line_) continue;
    ++timer_count_;
    increase();
  }
}

void Dcqcn::on_ack(const CcSample& s) {
  if (s.rtt_ns > 0) {
    srtt_ns_ = srtt_ns_ == 0 ? s.rtt_ns : (7 * srtt_ns_ + s.rtt_ns) / 8;
  }
  advance_timers(s.now_ns);
  if (!s.ecn) return;
  const uint64_t gap = static_cast<uint64_t>(p_.cnp_interval_us * 1e3);
  if (had_cnp_ && s.now_ns - last_cnp_ns_ < gap) return;
  had_cnp_ = true;
  last_cnp_ns_ = s.now_ns;
  on_cnp(s.now_ns);
}

void Dcqcn::on_send(uint64_t now_ns, uint32_t bytes) {
  advance_timers(now_ns);
  bytes_since_ += bytes;
  const double b = p_.byte_counter_kb * 1024;
  while (bytes_since_ >= b) {
    bytes_since_ -= b;
    if (rc_ >= line_ && rt_ >= line_) continue;
    ++byte_count_;
    increase();
  }
}

void Dcqcn::on_loss(uint64_t now_ns, bool timeout) {
  // RoCE assumes PFC (no loss); a lost packet says at least as much as a
  // mark, so it counts as a CNP (rate-limited the same way).
  (void)timeout;
  const uint64_t gap = static_cast<uint64_t>(p_.cnp_interval_us * 1e3);
  if (had_cnp_ && now_ns - last_cnp_ns_ < gap) return;
  had_cnp_ = true;
  last_cnp_ns_ = now_ns;
  on_cnp(now_ns);
}

double Dcqcn::cwnd_bytes() const {
  if (p_.window_rtts <= 0 || srtt_ns_ == 0) return kUnlimited;
  return std::max<double>(mss_, rc_ / 8 * srtt_ns_ * 1e-9 * p_.window_rtts);
}

std::string Dcqcn::state() const {
  char buf[128];
  std::snprintf(buf, sizeof(buf),
                "rate_gbps=%.3f target_gbps=%.3f alpha=%.4f stage=%d/%d",
                rc_ / 1e9, rt_ / 1e9, alpha_, timer_count_, byte_count_);
  return buf;
}

}  // namespace uccl::cc
