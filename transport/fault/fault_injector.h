// Fault injection at the NIC boundary: seeded per-direction drop, burst drop,
// reorder, duplicate, delay and corrupt decisions, plus counters of each.
#pragma once

#include <cstdint>
#include <string>

#include "uccl/status.h"

namespace uccl::transport {

// Faults for one direction. Probabilities are per packet (software NIC) or
// per work request (verbs backend, UC/UD sends only: drop and duplicate).
struct FaultSpec {
  double drop = 0;              // P(drop this packet)
  double burst = 0;             // P(start a burst of drops)
  uint32_t burst_len = 8;       // packets dropped per burst (see kBurstMaxNs)
  double reorder = 0;           // P(hold this packet back ...)
  uint32_t reorder_window = 4;  // ... until this many later packets passed
  uint32_t reorder_max_us = 1000;  // ... or this long, so none waits forever
  double duplicate = 0;            // P(deliver twice)
  double delay = 0;                // P(delay this packet ...)
  uint32_t delay_us = 100;         // ... by this long
  double corrupt = 0;              // P(flip one random bit)
  // Transmit only: P(the send call that carries this packet stalls ...
  // (a host stack that is cold or preempted; the engine waits in it)
  double stall = 0;
  uint32_t stall_us = 100;  // ... this long before the packet leaves)

  bool any() const;
  // "drop=0.01,burst=0.001:8,reorder=0.01:4,dup=0.001,delay=0.01:200,
  //  corrupt=0.0001,stall=0.01:100" (every key optional; "" = no faults).
  //  reorder takes the longest hold in microseconds third:
  //  "reorder=0.01:4:1000".
  static Result<FaultSpec> parse(const std::string& text);
  std::string to_string() const;
};

struct FaultOptions {
  FaultSpec tx, rx;
  uint64_t seed = 1;
  bool any() const { return tx.any() || rx.any(); }
  // What a direction cannot take (a stall of received packets).
  Status validate() const;
  // From UCCL_FAULT_TX, UCCL_FAULT_RX (FaultSpec::parse syntax) and
  // UCCL_FAULT_SEED. Error names the knob and what is wrong with it.
  static Result<FaultOptions> from_knobs();
};

enum class Direction : uint8_t { kTx = 0, kRx = 1 };

struct FaultDecision {
  bool drop = false;
  bool duplicate = false;
  bool corrupt = false;
  uint64_t corrupt_bit = 0;     // which bit to flip (mod packet bits)
  uint64_t delay_ns = 0;        // > 0: hold for this long
  uint32_t reorder_after = 0;   // > 0: hold until this many packets passed
  uint64_t reorder_max_ns = 0;  // ... or this long
  uint64_t stall_ns = 0;        // > 0: the send call takes this long first
};

struct FaultCounters {
  uint64_t packets = 0;  // packets that went through the injector
  uint64_t dropped = 0;
  uint64_t burst_dropped = 0;
  uint64_t reordered = 0;
  uint64_t duplicated = 0;
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t stalled = 0;
};

class FaultInjector {
 public:
  explicit FaultInjector(const FaultOptions& opts);

  bool enabled(Direction d) const { return spec(d).any(); }
  // A burst is a loss episode: it drops burst_len consecutive packets, but
  // only those sent within kBurstMaxNs of its start. Otherwise an idle link
  // would stretch one episode over every retransmission for seconds, which
  // no real link does (and which defeats any retry limit).
  static constexpr uint64_t kBurstMaxNs = 1000000;

  // The fate of the next packet in direction `d` at monotonic time now_ns
  // (0: time unknown, bursts bounded by count only). Deterministic for a
  // seed and packet/time sequence.
  FaultDecision decide(Direction d, uint64_t now_ns = 0);

  const FaultSpec& spec(Direction d) const {
    return d == Direction::kTx ? opts_.tx : opts_.rx;
  }
  const FaultOptions& options() const { return opts_; }
  // Changes one direction's faults (tests, experiments). Same thread as the
  // device's datapath.
  void set_spec(Direction d, const FaultSpec& s) {
    (d == Direction::kTx ? opts_.tx : opts_.rx) = s;
  }
  const FaultCounters& counters(Direction d) const {
    return counters_[static_cast<int>(d)];
  }
  std::string counters_text() const;

 private:
  double uniform(int dir);

  FaultOptions opts_;
  uint64_t rng_[2];
  uint32_t burst_left_[2] = {0, 0};
  uint64_t burst_end_ns_[2] = {0, 0};  // episode ends (now_ns given)
  FaultCounters counters_[2];
};

}  // namespace uccl::transport
