// HPCC (Li et al., SIGCOMM 2019): a window from in-band telemetry, each
// ACK's per-hop queue and transmit rate giving the path's utilization.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "cc/cc.h"

namespace uccl::cc {

struct HpccParams {
  // The paper's defaults (Section 5.1): eta 95%, maxStage 5; W_AI so that
  // N flows' additive steps fit in the (1 - eta) headroom of one BDP.
  double eta = 0.95;           // target utilization
  int max_stage = 5;           // additive steps before a multiplicative one
  double base_rtt_us = 10;     // T: the network's base RTT (configure it)
  double expected_flows = 20;  // N in W_AI = BDP (1 - eta) / N
  double min_cwnd_bytes = 0;   // 0 = one packet
};

// Algorithm 1 of the paper. The reference window Wc moves once per RTT
// (the paper: once per window of sequence numbers; CcSample has none, so a
// time of T since the last move stands for it); every ACK recomputes the
// window W from Wc and the path's utilization U, an EWMA over the ACKs'
// spacing of the most loaded hop's qlen / (B T) + txRate / B. The rate
// paces at W / T. Losses (which INT should prevent) halve W.
class Hpcc final : public CongestionControl {
 public:
  static constexpr uint32_t kMaxHops = 8;

  Hpcc(const HpccParams& p, double line_rate_bps, uint32_t mss_bytes);
  static Result<HpccParams> params_from(const CcParams& c);

  const char* name() const override { return "hpcc"; }
  void on_ack(const CcSample& s) override;
  void on_loss(uint64_t now_ns, bool timeout) override;
  double cwnd_bytes() const override { return w_; }
  double rate_bps() const override;
  std::string state() const override;
  bool wants_int() const override { return true; }

  double utilization() const { return u_; }
  double reference_window() const { return wc_; }
  int stage() const { return stage_; }

 private:
  double measure(const CcSample& s);  // U after this ACK
  double window(double u, bool update_wc);

  HpccParams p_;
  double line_;
  double bdp_, w_ai_, min_w_;
  double w_, wc_;
  double u_ = 0;
  int stage_ = 0;
  uint64_t last_wc_ns_ = 0;
  bool have_wc_time_ = false;
  std::array<IntHop, kMaxHops> last_{};  // the previous ACK's hops
  uint32_t last_count_ = 0;
};

}  // namespace uccl::cc
