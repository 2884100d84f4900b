// The completion queue of the software NICs (udp/, null/): a ring of work
// completions; a poll drives its device unless the owner does; no locks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "transport/nic.h"

namespace uccl::transport::soft {

// Smallest power of two >= v (1 for 0), at most 2^31: ring capacities.
inline uint32_t round_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v && p < (1u << 31)) p <<= 1;
  return p;
}

class RingCq final : public CompletionQueue {
 public:
  RingCq(Device* dev, uint32_t cqe)
      : dev_(dev),
        ring_(round_pow2(std::max(cqe, 2u))),
        mask_(static_cast<uint32_t>(ring_.size()) - 1) {}

  // Progresses the device (receive, transmit, timers) unless its owner
  // drives it, then takes up to `max` completions, oldest first.
  int poll(int max, WorkCompletion* wc) override {
    if (!dev_->owner_driven()) dev_->progress();
    int n = 0;
    while (n < max && head_ != tail_) {
      wc[n++] = ring_[head_ & mask_];
      ++head_;
    }
    return n;
  }
  uint32_t capacity() const override { return mask_ + 1; }

  // The device side: room for n more, and adding one (false when full).
  bool has_space(uint32_t n = 1) const {
    return tail_ - head_ + n <= capacity();
  }
  bool push(const WorkCompletion& wc) {
    if (!has_space()) return false;
    ring_[tail_ & mask_] = wc;
    ++tail_;
    return true;
  }
  // Whether `q` is a RingCq of device `d` (create_qp's check).
  static bool of(const CompletionQueue* q, const Device* d) {
    auto* r = dynamic_cast<const RingCq*>(q);
    return r != nullptr && r->dev_ == d;
  }

 private:
  Device* dev_;
  std::vector<WorkCompletion> ring_;
  uint32_t mask_;
  uint32_t head_ = 0, tail_ = 0;
};

}  // namespace uccl::transport::soft
