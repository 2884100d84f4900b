// BusyMeter: splits an engine thread's wall time into busy and idle from the
// clock reading each loop already takes (no extra reads on the hot path).
#pragma once

#include <cstdint>

namespace uccl::engine {

// The interval between two consecutive loop readings is busy when the loop
// that ran in it did work (completions, commands, transmits, or packets the
// device sent) or when the device took packets off the wire just before the
// second reading. Idle loops (polls that found nothing, yields, sleeps) count
// as idle. Loop counts alone mislead: under load a busy loop can last
// hundreds of microseconds and an empty one well under one, so an engine
// with 90% empty loops may still be busy most of the time.
class BusyMeter {
 public:
  // The first reading (engine start).
  void start(uint64_t now_ns) {
    mark_ns_ = now_ns;
    start_ns_ = now_ns;
    pending_ = false;
  }
  // A loop's reading; `io` says the device moved packets since the last one.
  // A reading behind the last one (a hand-driven test clock) is ignored.
  void tick(uint64_t now_ns, bool io) {
    if (now_ns < mark_ns_) return;
    if (pending_ || io) busy_ns_ += now_ns - mark_ns_;
    mark_ns_ = now_ns;
    pending_ = false;
  }
  // The loop running since the last reading did work.
  void mark_busy() { pending_ = true; }

  uint64_t busy_ns() const { return busy_ns_; }
  // Wall time covered so far (start to the last reading).
  uint64_t run_ns() const { return mark_ns_ - start_ns_; }

 private:
  uint64_t start_ns_ = 0;
  uint64_t mark_ns_ = 0;
  uint64_t busy_ns_ = 0;
  bool pending_ = false;
};

}  // namespace uccl::engine
