// TIMELY: RTT-gradient rate control (Mittal et al., SIGCOMM 2015) and the
// patched variant of Zhu et al. ("ECN or Delay", CoNEXT 2016, Section 5).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cc/cc.h"

namespace uccl::cc {

struct TimelyParams {
  // Defaults from the TIMELY paper (SIGCOMM'15, Table 1 / Section 5), as also
  // listed in Zhu et al. CoNEXT'16 Table 3.
  double ewma_alpha = 0.875;   // weight of the newest RTT difference
  double beta = 0.8;           // multiplicative decrease factor
  double add_rate_bps = 10e6;  // delta: additive increase, 10 Mb/s
  double t_low_us = 50;        // below: always increase
  double t_high_us = 500;      // above: decrease by (1 - Thigh/rtt)
  double min_rtt_us = 20;      // normalises the gradient
  int hai_threshold = 5;       // negative gradients in a row before HAI
  int hai_factor = 5;          // N in "rate += N * delta" during HAI
  // Bounds (not in the paper; our choice): [min_rate, line rate].
  double min_rate_bps = 100e6;
  double max_rate_bps = 0;   // 0 = the line rate
  double init_rate_bps = 0;  // 0 = the line rate
  // Patched TIMELY only: reference RTT the rate converges to (tau*).
  double rtt_ref_us = 300;
  // Window on top of the rate (ours): at most rate x window_rtts x RTT
  // in flight, so a stalled receiver cannot make the flow queue unbounded.
  double window_rtts = 2;
  // Ours: 1 measures the RTT above the smallest seen (T_low, T_high and the
  // patched reference then count from it), so host delay no queue causes
  // (100+ us through the software NIC, vs the paper's NIC timestamps) does
  // not hold every flow at min_rate. 0: the paper's absolute thresholds.
  double thresholds_from_min_rtt = 1;
  // Bytes per completion event: the paper updates the rate once per
  // completed segment (16-64 KB, Section 5), not per packet. 0: every ACK
  // is one completion (the engine, whose ACKs cover 64 KiB chunks). With
  // packet-level ACKs (the simulator) set it to the segment size, or the
  // multiplicative decrease compounds once per packet.
  double segment_bytes = 0;
};

class Timely final : public CongestionControl {
 public:
  Timely(const TimelyParams& p, bool patched, double line_rate_bps,
         uint32_t mss_bytes);
  static Result<TimelyParams> params_from(const CcParams& c);

  const char* name() const override {
    return patched_ ? "timely_patched" : "timely";
  }
  void on_ack(const CcSample& s) override;
  double cwnd_bytes() const override;
  double rate_bps() const override { return rate_bps_; }
  std::string state() const override;
  bool uses_delay() const override { return true; }
  void share_delay_floor(std::shared_ptr<DelayFloor> floor) override;

  // For tests.
  double rtt_diff_us() const { return rtt_diff_us_; }
  int neg_gradient_count() const { return neg_count_; }
  bool in_hai() const { return neg_count_ >= p_.hai_threshold; }
  void set_rate_for_testing(double bps) { rate_bps_ = bps; }

 private:
  TimelyParams p_;
  bool patched_;
  uint32_t mss_;
  double line_rate_bps_;
  double max_rate_;
  double rate_bps_;
  double prev_rtt_us_ = 0;
  double rtt_diff_us_ = 0;
  double last_rtt_us_ = 0;
  LearnedFloor floor_;  // smallest RTT (thresholds_from_min_rtt)
  double last_raw_rtt_us_ = 0;
  int neg_count_ = 0;

  double pending_bytes_ = 0;  // acked since the last update (segment_bytes)
};

}  // namespace uccl::cc
