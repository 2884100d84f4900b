// Congestion-control interface shared by the engine and the simulator: ACK
// feedback in, window and pacing decisions out. Pure code, injected time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cc/delay_floor.h"
#include "cc/params.h"
#include "uccl/status.h"

namespace uccl::cc {

// In-band telemetry one switch egress port wrote into a data packet as it
// left (HPCC, SIGCOMM 2019, Section 3.2), echoed back on the ACK.
struct IntHop {
  uint64_t ts_ns = 0;       // when the packet left the port
  uint64_t tx_bytes = 0;    // bytes the port had sent by then (cumulative)
  uint64_t qlen_bytes = 0;  // its queue as the packet left
  double rate_bps = 0;      // the link's rate
};

// Feedback from one ACK (engine: a chunk; simulator: a packet).
struct CcSample {
  uint64_t now_ns = 0;
  uint64_t rtt_ns = 0;  // send -> ACK, everything included
  // With delay_split, the sender measured the round trip's parts: the
  // receiver's (host queuing) and the fabric's (the rest, less what the
  // engine can tell was its own host's: engine_ack.cc). Without it only
  // rtt_ns is known.
  uint64_t endpoint_delay_ns = 0;
  uint64_t fabric_delay_ns = 0;
  bool delay_split = false;
  uint32_t acked_bytes = 0;    // newly acknowledged
  uint32_t acked_packets = 0;  // same, in packets (chunks)
  uint32_t hops = 0;           // network hops of the path, 0 = unknown
  uint32_t segment_bytes = 0;  // size of the sampled packet (chunk), 0 =
                               // unknown; its serialization time at line
                               // rate is not queueing (TIMELY, 4.1)
  bool ecn = false;            // congestion-experienced mark
  // The data packet's telemetry, one record per switch on its path in
  // order (simulator only, for controllers that ask for it); valid during
  // on_ack.
  const IntHop* int_hops = nullptr;
  uint32_t int_count = 0;

  // The fabric's part of the round trip, or all of it where the parts are
  // unknown. A measured 0 is 0 (the receiver's time was the whole trip),
  // not a sign to fall back to rtt_ns, which is mostly that receiver time.
  uint64_t fabric_ns() const { return delay_split ? fabric_delay_ns : rtt_ns; }
};

// One flow's (or path's) congestion controller. The engine enforces both
// outputs: a flow may have at most cwnd_bytes() in flight (always at least
// one packet when nothing is in flight) and sends no faster than
// pacing_gap_ns() apart.
class CongestionControl {
 public:
  virtual ~CongestionControl() = default;
  virtual const char* name() const = 0;

  virtual void on_ack(const CcSample& s) = 0;
  // Loss signals: a fast retransmit (timeout=false) or an RTO (true).
  virtual void on_loss(uint64_t now_ns, bool timeout) {
    (void)now_ns;
    (void)timeout;
  }
  virtual void on_send(uint64_t now_ns, uint32_t bytes) {
    (void)now_ns;
    (void)bytes;
  }
  // Receiver-granted credit (credit-based controllers only).
  virtual void on_credit(uint64_t bytes) { (void)bytes; }

  // Bytes that may be in flight; +inf (1e300) when unlimited.
  virtual double cwnd_bytes() const = 0;
  // Sending rate in bits/s, 0 when not rate-based.
  virtual double rate_bps() const = 0;
  // Minimum time between the starts of two sends of `bytes` each.
  virtual uint64_t pacing_gap_ns(uint32_t bytes) const;
  // Whether `bytes` more may leave now with `inflight` bytes unacknowledged.
  virtual bool can_send(uint64_t inflight, uint32_t bytes) const;

  // "cwnd=... rate=..." for logs and CSV traces.
  virtual std::string state() const;
  // Whether on_ack needs CcSample::int_hops (the simulator records INT only
  // then).
  virtual bool wants_int() const { return false; }
  // Whether on_ack reads the fabric/endpoint split of the RTT (the engine
  // then asks its NIC for receive timestamps, so time spent waiting for
  // its thread is endpoint delay), and CcSample::hops.
  virtual bool uses_delay() const { return false; }
  virtual bool uses_hops() const { return false; }
  // Controllers that learn their target from the smallest delay seen
  // (Swift's target_from_min_delay, TIMELY's thresholds_from_min_rtt)
  // keep that floor in `floor`, shared
  // with the other flows to the same peer (cc/delay_floor.h); the others
  // ignore it.
  virtual void share_delay_floor(std::shared_ptr<DelayFloor> floor) {
    (void)floor;
  }
};

constexpr double kUnlimited = 1e300;

// Creates a controller by name: "none", "timely", "timely_patched",
// "swift", "credit". `params` overrides defaults (unknown keys refused);
// `mss_bytes` is the packet (engine: chunk) size; `line_rate_bps` the NIC's.
Result<std::unique_ptr<CongestionControl>> make_cc(const std::string& name,
                                                   const CcParams& params,
                                                   uint32_t mss_bytes,
                                                   double line_rate_bps);

// Names accepted by make_cc, for --help texts.
const char* cc_names();

// Unlimited controller: no window, no pacing.
class NoCc final : public CongestionControl {
 public:
  const char* name() const override { return "none"; }
  void on_ack(const CcSample&) override {}
  double cwnd_bytes() const override { return kUnlimited; }
  double rate_bps() const override { return 0; }
};

}  // namespace uccl::cc
