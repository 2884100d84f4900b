// HPCC window updates: utilization from INT (MeasureInflight), then a
// multiplicative step towards eta or an additive one (ComputeWind).
#include "cc/hpcc.h"

#include <algorithm>
#include <cstdio>

namespace uccl::cc {

Result<HpccParams> Hpcc::params_from(const CcParams& c) {
  HpccParams p;
  p.eta = c.get("eta", p.eta);
  p.max_stage = static_cast<int>(c.get("max_stage", p.max_stage));
  p.base_rtt_us = c.get("base_rtt_us", p.base_rtt_us);
  p.expected_flows = c.get("expected_flows", p.expected_flows);
  p.min_cwnd_bytes = c.get("min_cwnd_bytes", p.min_cwnd_bytes);
  if (!(p.eta > 0 && p.eta < 1) || p.max_stage < 0 || p.base_rtt_us <= 0 ||
      p.expected_flows < 1 || p.min_cwnd_bytes < 0) {
    return InvalidArgument(
        "hpcc: need 0<eta<1, max_stage>=0, base_rtt_us>0, "
        "expected_flows>=1, min_cwnd_bytes>=0");
  }
  return p;
}

Hpcc::Hpcc(const HpccParams& p, double line_rate_bps, uint32_t mss_bytes)
    : p_(p), line_(line_rate_bps) {
  bdp_ = line_ / 8 * p.base_rtt_us * 1e-6;
  w_ai_ = bdp_ * (1 - p.eta) / p.expected_flows;
  min_w_ = p.min_cwnd_bytes > 0 ? p.min_cwnd_bytes : mss_bytes;
  w_ = wc_ = bdp_;  // flows start at line rate: one BDP
}

double Hpcc::measure(const CcSample& s) {
  const double t_ns = p_.base_rtt_us * 1e3;
  const uint32_t n = std::min(s.int_count, kMaxHops);
  if (n == 0 || n != last_count_) {
    // First ACK, or the path changed: nothing to difference against.
    std::copy(s.int_hops, s.int_hops + n, last_.begin());
    last_count_ = n;
    return u_;
  }
  double u = 0, tau_ns = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const IntHop& now = s.int_hops[i];
    const IntHop& before = last_[i];
    // A record older than the last, or a counter that went back (another
    // switch: the ACKs of a sprayed flow come over different paths), has
    // no rate to give.
    if (now.ts_ns <= before.ts_ns || now.rate_bps <= 0 ||
        now.tx_bytes < before.tx_bytes) {
      continue;
    }
    const double dt = static_cast<double>(now.ts_ns - before.ts_ns);
    const double tx_bps = (now.tx_bytes - before.tx_bytes) * 8e9 / dt;
    const double bytes_per_t = now.rate_bps / 8 * t_ns * 1e-9;
    const double hop_u =
        std::min(now.qlen_bytes, before.qlen_bytes) / bytes_per_t +
        tx_bps / now.rate_bps;
    if (hop_u > u) {
      u = hop_u;
      tau_ns = dt;
    }
  }
  std::copy(s.int_hops, s.int_hops + n, last_.begin());
  tau_ns = std::min(tau_ns, t_ns);
  u_ = (1 - tau_ns / t_ns) * u_ + tau_ns / t_ns * u;
  return u_;
}

double Hpcc::window(double u, bool update_wc) {
  double w;
  if (u >= p_.eta || stage_ >= p_.max_stage) {
    w = wc_ / (std::max(u, 1e-9) / p_.eta) + w_ai_;
    if (update_wc) {
      stage_ = 0;
      wc_ = std::clamp(w, min_w_, bdp_);
    }
  } else {
    w = wc_ + w_ai_;
    if (update_wc) {
      ++stage_;
      wc_ = std::clamp(w, min_w_, bdp_);
    }
  }
  return std::clamp(w, min_w_, bdp_);
}

void Hpcc::on_ack(const CcSample& s) {
  const double u = measure(s);
  const uint64_t t_ns = static_cast<uint64_t>(p_.base_rtt_us * 1e3);
  const bool update_wc = !have_wc_time_ || s.now_ns - last_wc_ns_ >= t_ns;
  if (update_wc) {
    have_wc_time_ = true;
    last_wc_ns_ = s.now_ns;
  }
  w_ = window(u, update_wc);
}

void Hpcc::on_loss(uint64_t now_ns, bool timeout) {
  (void)now_ns;
  wc_ = std::max(timeout ? min_w_ : wc_ / 2, min_w_);
  w_ = wc_;
  stage_ = 0;
}

double Hpcc::rate_bps() const { return w_ * 8 / (p_.base_rtt_us * 1e-6); }

std::string Hpcc::state() const {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "cwnd=%.0f wc=%.0f U=%.3f stage=%d", w_, wc_,
                u_, stage_);
  return buf;
}

}  // namespace uccl::cc
