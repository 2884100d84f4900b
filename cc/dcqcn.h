// DCQCN (Zhu et al., SIGCOMM 2015): RoCEv2's rate control from ECN. The
// notification point's CNPs cut the rate by alpha/2; timers and a byte
// counter raise it in fast-recovery, additive and hyper stages.
#pragma once

#include <cstdint>
#include <string>

#include "cc/cc.h"

namespace uccl::cc {

struct DcqcnParams {
  // Defaults: the paper's (Section 5, Table 4; timer 55 us as in its
  // fluid model and HPCC's DCQCN runs), rates scaled by line rate where the
  // paper gives them for 40 Gb/s: R_AI 40 Mb/s and R_HAI 200 Mb/s there.
  double g = 1.0 / 256;            // alpha EWMA weight
  double alpha_timer_us = 55;      // alpha decays without CNPs
  double increase_timer_us = 55;   // rate-increase timer (T)
  double byte_counter_kb = 10240;  // rate-increase byte counter (B), 10 MB
  int fast_recovery_steps = 5;     // F
  double rate_ai_frac = 0.001;     // R_AI as a fraction of line rate
  double rate_hai_frac = 0.005;    // R_HAI
  double cnp_interval_us = 50;     // at most one CNP per flow per interval
  double min_rate_frac = 0.001;    // lowest rate, fraction of line rate
  double window_rtts = 0;          // >0: also cap inflight at rate x RTTs
};

// The simulator echoes each data packet's ECN mark on its ACK; the reaction
// point treats a marked ACK as a CNP, at most one per cnp_interval_us
// (the notification point's CNP pacing). Timers run on ACK and send
// events, with elapsed periods applied in one step: the interface has no
// timer callbacks, and a flow that neither sends nor receives has no rate
// to raise.
class Dcqcn final : public CongestionControl {
 public:
  Dcqcn(const DcqcnParams& p, double line_rate_bps, uint32_t mss_bytes);
  static Result<DcqcnParams> params_from(const CcParams& c);

  const char* name() const override { return "dcqcn"; }
  void on_ack(const CcSample& s) override;
  void on_send(uint64_t now_ns, uint32_t bytes) override;
  void on_loss(uint64_t now_ns, bool timeout) override;
  double cwnd_bytes() const override;
  double rate_bps() const override { return rc_; }
  std::string state() const override;

  double alpha() const { return alpha_; }
  double target_rate_bps() const { return rt_; }
  uint64_t cnps() const { return cnps_; }

 private:
  void on_cnp(uint64_t now_ns);
  void advance_timers(uint64_t now_ns);
  void increase();  // one rate-increase event

  DcqcnParams p_;
  double line_;
  uint32_t mss_;
  double rc_, rt_;  // current and target rate
  double alpha_ = 1;
  uint64_t last_cnp_ns_ = 0;
  bool had_cnp_ = false;
  uint64_t alpha_timer_at_ = 0, increase_timer_at_ = 0;
  bool timers_started_ = false;
  int timer_count_ = 0, byte_count_ = 0;  // increase events since the cut
  double bytes_since_ = 0;
  uint64_t srtt_ns_ = 0;
  uint64_t cnps_ = 0;
};

}  // namespace uccl::cc
