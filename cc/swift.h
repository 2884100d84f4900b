// Swift: delay-based window control (Kumar et al., SIGCOMM 2020): target
// delay with flow and hop scaling, AIMD with at most one decrease per RTT,
// fractional windows paced below one packet, separate fabric/endpoint windows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cc/cc.h"

namespace uccl::cc {

struct SwiftParams {
  // Algorithm from the Swift paper (Section 3, Algorithm 1). Numeric
  // defaults follow the paper's description (max_mdf, fs range over
  // [0.1, 100] packets) and the values used by its public simulator ports;
  // delays are deployment-specific and meant to be configured.
  double ai = 1.0;                  // additive increase, packets per RTT
  double beta = 0.8;                // multiplicative decrease factor
  double max_mdf = 0.5;             // largest decrease per RTT (fraction)
  double base_target_us = 25;       // fabric target with no scaling
  double hop_scale_us = 1;          // h: extra target per hop
  double fs_range_us = 25;          // flow scaling: extra target at small cwnd
  double fs_min_cwnd = 0.1;         // packets: flow scaling is fs_range here
  double fs_max_cwnd = 100;         // packets: ... and zero here
  double endpoint_target_us = 100;  // target for the endpoint window
  double min_cwnd = 0.001;          // packets (fractional windows are paced)
  double max_cwnd = 1000;           // packets
  double init_cwnd = 10;            // packets
  int retx_reset_threshold = 5;     // RTOs in a row before cwnd = min_cwnd
  // Ours: 1 adds the smallest fabric delay seen to the target, so delay
  // that no queue causes (host stacks: 100+ us on the software NIC) does
  // not read as congestion; with an absolute target below that floor every
  // sample looks congested and flows starve. 0: the paper's absolute target.
  double target_from_min_delay = 1;
  // Ours: room in the target for this many of our packets serialized at
  // line rate. The paper's packets are 4 KB at 50-100 Gb/s (< 1 us each, so
  // its 25 us target holds dozens); an engine chunk is 64 KiB, half a
  // millisecond at 1 Gb/s, and one flow's chunk ahead in the queue would
  // otherwise read as congestion to every other flow. Needs the line rate.
  double target_queue_pkts = 2;
};

class Swift final : public CongestionControl {
 public:
  // line_rate_bps > 0: a sample's fabric delay excludes its segment's
  // serialization (our adaptation to chunk-sized packets; the paper's 4 KB
  // packets at 50-100 Gb/s make it negligible).
  Swift(const SwiftParams& p, uint32_t mss_bytes, double line_rate_bps = 0);
  static Result<SwiftParams> params_from(const CcParams& c);

  const char* name() const override { return "swift"; }
  void on_ack(const CcSample& s) override;
  void on_loss(uint64_t now_ns, bool timeout) override;
  double cwnd_bytes() const override { return cwnd_pkts() * mss_; }
  double rate_bps() const override { return 0; }
  uint64_t pacing_gap_ns(uint32_t bytes) const override;
  std::string state() const override;
  bool uses_delay() const override { return true; }
  bool uses_hops() const override { return p_.hop_scale_us != 0; }
  void share_delay_floor(std::shared_ptr<DelayFloor> floor) override;

  // Windows in packets; the effective one is the smaller.
  double cwnd_pkts() const { return fcwnd_ < ecwnd_ ? fcwnd_ : ecwnd_; }
  double fabric_cwnd() const { return fcwnd_; }
  double endpoint_cwnd() const { return ecwnd_; }
  // Fabric target delay for the current window (us): base + hops*h +
  // clamp(alpha/sqrt(cwnd) + beta', 0, fs_range).
  double target_delay_us(uint32_t hops) const;
  // The target applied: target_delay_us plus, with target_from_min_delay,
  // the smallest fabric delay seen.
  double effective_target_us(uint32_t hops) const;
  uint64_t srtt_ns() const { return srtt_ns_; }
  int retransmit_count() const { return retx_count_; }

 private:
  bool can_decrease(uint64_t now_ns) const;
  double clamp(double w) const;
  // The floor the target adds (us, 0 before any sample): the shared one
  // where there is one.
  double floor_us() const;

  SwiftParams p_;
  uint32_t mss_;
  double line_rate_bps_;
  double fs_alpha_, fs_beta_;
  double fcwnd_, ecwnd_;
  uint64_t srtt_ns_ = 0;
  // Smoothed fabric delay (the fabric window's input, as srtt) for state(),
  // us; -1: no sample yet.
  double sfabric_us_ = -1;
  uint64_t last_decrease_ns_ = 0;
  bool decreased_ever_ = false;
  int retx_count_ = 0;
  uint32_t last_hops_ = 0;
  LearnedFloor floor_;  // smallest fabric delay (its own or its peer's)
};

}  // namespace uccl::cc
