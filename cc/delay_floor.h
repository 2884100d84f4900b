// The smallest fabric delay the flows between two hosts have seen, shared by
// their controllers, each controller's view of it, and the table by peer.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace uccl::cc {

// A delay-based controller that learns its target from the smallest delay
// it has seen (Swift's target_from_min_delay) cannot tell a queue other
// flows hold from distance: a flow that starts behind one takes it as its
// floor, aims above the others and takes the link while they back off.
// Flows to the same peer cross the same fabric, so they share one floor:
// the lowest any of them measured, usually from the first samples before
// any queue. Flows of one peer may live on several engine threads, so the
// floor is one atomic, lowered by compare-and-swap and never raised.
class DelayFloor {
 public:
  static constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();

  // Lowers the floor to `delay_ns` if that is below it.
  void observe(uint64_t delay_ns) {
    uint64_t cur = floor_ns_.load(std::memory_order_relaxed);
    while (delay_ns < cur && !floor_ns_.compare_exchange_weak(
                                 cur, delay_ns, std::memory_order_relaxed)) {
    }
  }
  // kNone until a delay was observed.
  uint64_t floor_ns() const {
    return floor_ns_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> floor_ns_{kNone};
};

// A controller's floor: the smallest delay it sampled, or, once it shares
// its peer's DelayFloor, that floor (to which what it sampled before is
// added). Swift's target and TIMELY's thresholds count from it.
class LearnedFloor {
 public:
  void observe(double delay_us) {
    if (own_us_ < 0 || delay_us < own_us_) own_us_ = delay_us;
    if (shared_) shared_->observe(static_cast<uint64_t>(delay_us * 1000));
  }
  void share(std::shared_ptr<DelayFloor> floor) {
    shared_ = std::move(floor);
    if (shared_ && own_us_ >= 0) {
      shared_->observe(static_cast<uint64_t>(own_us_ * 1000));
    }
  }
  // Microseconds; -1 before any sample.
  double us() const {
    if (!shared_) return own_us_;
    const uint64_t ns = shared_->floor_ns();
    return ns == DelayFloor::kNone ? -1 : ns / 1000.0;
  }

 private:
  double own_us_ = -1;
  std::shared_ptr<DelayFloor> shared_;
};

// One floor per peer (any byte string that names the peer host, e.g. its
// address), created on first use. Called when connections are set up, not
// on the data path, so a mutex guards the map.
class DelayFloorTable {
 public:
  std::shared_ptr<DelayFloor> get(const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<DelayFloor>& f = floors_[peer];
    if (!f) f = std::make_shared<DelayFloor>();
    return f;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return floors_.size();
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<DelayFloor>> floors_;
};

}  // namespace uccl::cc
