// Monotonic time for everything that keeps time (timers, RTT, pacing). Code
// takes a Clock* so tests can drive time by hand with ManualClock.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace uccl {

// Nanoseconds since an arbitrary fixed point (CLOCK_MONOTONIC).
inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
  uint64_t now_us() const { return now_ns() / 1000; }
};

// The real monotonic clock. Use SystemClock::get() rather than constructing.
class SystemClock final : public Clock {
 public:
  uint64_t now_ns() const override { return monotonic_ns(); }
  static SystemClock* get() {
    // Never destroyed: engine threads of a process-lifetime object (the
    // NCCL plugin) may still read it while static destructors run at exit.
    static SystemClock* clock = new SystemClock;
    return clock;
  }
};

// A clock that only moves when told to. Safe to read from other threads.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(uint64_t start_ns = 1000000000ull) : now_(start_ns) {}
  uint64_t now_ns() const override {
    return now_.load(std::memory_order_acquire);
  }
  void set_ns(uint64_t t) { now_.store(t, std::memory_order_release); }
  void advance_ns(uint64_t d) { now_.fetch_add(d, std::memory_order_acq_rel); }
  void advance_us(uint64_t d) { advance_ns(d * 1000); }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace uccl
