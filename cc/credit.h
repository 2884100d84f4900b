// Receiver-driven credit (EQDS / clear-to-send style): a receiver pull pacer
// that grants credit at no more than its line rate, and the sender side that
// sends only against credit, with speculative credit for a new flow's start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/cc.h"

namespace uccl::cc {

struct CreditParams {
  double base_rtt_us = 20;     // for the speculative window (one BDP)
  double spec_bytes = 0;       // speculative credit; 0 = line rate x base RTT
  double grant_bytes = 65536;  // largest single grant (one engine chunk)
  // Token bucket depth: line rate x bucket_us, at least 2 x grant_bytes.
  // Ours: a bucket of one grant loses the tokens of every pacer poll that
  // comes late (the engine loop is no hardware timer): 4.5 of 10 Gb/s
  // measured on the software NIC, 5.7 with 200 us.
  double bucket_us = 200;
  // Fraction of the line rate the receiver pulls at. Below 1 (as pull
  // pacers are run) so that a small error in the header overhead the
  // engine assumes cannot build a standing queue at the bottleneck.
  double rate_frac = 0.99;
};

// Sender half. Everything it sends needs credit, retransmissions included:
// the engine asks the receiver to pull those again (CtrlType::kPullReq).
class CreditSender final : public CongestionControl {
 public:
  CreditSender(const CreditParams& p, double line_rate_bps);
  static Result<CreditParams> params_from(const CcParams& c);

  const char* name() const override { return "credit"; }
  void on_ack(const CcSample&) override {}
  void on_send(uint64_t now_ns, uint32_t bytes) override;
  void on_credit(uint64_t bytes) override {
    credit_ += static_cast<double>(bytes);
  }
  bool can_send(uint64_t inflight, uint32_t bytes) const override;
  double cwnd_bytes() const override { return credit_ > 0 ? credit_ : 0; }
  double rate_bps() const override { return 0; }
  std::string state() const override;
  double credit() const { return credit_; }

 private:
  double credit_;
};

// Receiver half: one per receiving NIC (engine). Flows add demand (bytes
// they expect); poll() hands out grants round-robin, paced so the bytes
// granted in any interval never exceed line_rate x interval + bucket_bytes.
class PullPacer {
 public:
  struct Grant {
    uint32_t flow;
    uint32_t bytes;
  };
  PullPacer(const CreditParams& p, double line_rate_bps, uint32_t max_flows,
            uint64_t now_ns);
  // The rate to grant payload at so that the packets carrying it fill
  // `line_rate_bps` and no more: each packet of up to `packet_payload`
  // bytes adds `packet_overhead` header bytes on the wire. Granting
  // payload at the line rate would overrun the receiver's link by the
  // headers' share and keep a queue growing there.
  static double payload_rate_bps(double line_rate_bps, uint32_t packet_payload,
                                 uint32_t packet_overhead);

  // `bytes` more will arrive on `flow`; the first spec_bytes of a new flow
  // were covered by speculative credit and are not granted again.
  void add_demand(uint32_t flow, uint64_t bytes, bool new_flow);
  void remove_flow(uint32_t flow);
  // `bytes` arrived without a grant (speculative credit): they used the
  // link too, so they use tokens (the bucket goes negative) and the pacer
  // grants that much less (EQDS paces unscheduled arrivals the same way).
  void charge_unscheduled(uint64_t bytes);
  // Writes up to `max` grants due at `now_ns`; returns how many.
  int poll(uint64_t now_ns, Grant* out, int max);

  uint64_t demand(uint32_t flow) const { return demand_[flow]; }
  uint64_t total_granted() const { return total_granted_; }
  double bucket_bytes() const { return bucket_; }
  double spec_bytes() const { return spec_; }

 private:
  double rate_bytes_per_ns_;
  double grant_bytes_;
  double bucket_;
  double spec_;
  double tokens_;
  uint64_t last_ns_;
  std::vector<uint64_t> demand_;     // per flow, bytes not yet granted
  std::vector<uint64_t> spec_left_;  // speculative bytes still to absorb
  std::vector<uint32_t> active_;     // round-robin list of flows
  std::vector<uint8_t> in_active_;
  size_t rr_ = 0;
  uint64_t total_granted_ = 0;
};

}  // namespace uccl::cc
