// Hashed timing wheel: entries live in a fixed pool, each slot keeps its
// entries sorted by time; entries more than one revolution ahead wait in
// their slot until their time comes round.
#include "cc/pacer.h"

#include <algorithm>

namespace uccl::cc {

TimingWheel::TimingWheel(uint64_t slot_ns, uint32_t num_slots,
                         uint32_t capacity, uint64_t start_ns)
    : slot_ns_(std::max<uint64_t>(slot_ns, 1)),
      num_slots_(std::max<uint32_t>(num_slots, 1)),
      heads_(num_slots_, -1),
      pool_(capacity),
      cursor_(start_ns / slot_ns_) {
  for (uint32_t i = 0; i < capacity; ++i) {
    pool_[i].next = i + 1 < capacity ? static_cast<int32_t>(i + 1) : -1;
  }
  free_ = capacity ? 0 : -1;
}

bool TimingWheel::schedule(uint64_t id, uint64_t when_ns) {
  if (free_ < 0) return false;
  int32_t e = free_;
  free_ = pool_[e].next;
  // Past times go to the current slot so the next advance() fires them.
  uint64_t slot = std::max(slot_of(when_ns), cursor_);
  pool_[e].id = id;
  pool_[e].when = std::max(when_ns, cursor_ * slot_ns_);
  int32_t* link = &heads_[slot % num_slots_];
  while (*link >= 0 && pool_[*link].when <= pool_[e].when) {
    link = &pool_[*link].next;
  }
  pool_[e].next = *link;
  *link = e;
  ++size_;
  return true;
}

size_t TimingWheel::advance(uint64_t now_ns, uint64_t* out, size_t max) {
  size_t n = 0;
  const uint64_t last = slot_of(now_ns);
  while (cursor_ <= last && n < max) {
    int32_t& head = heads_[cursor_ % num_slots_];
    const uint64_t slot_end = (cursor_ + 1) * slot_ns_;
    // Sorted by time: entries of later revolutions (when >= slot_end) sit
    // behind this revolution's.
    while (head >= 0 && n < max && pool_[head].when < slot_end &&
           pool_[head].when <= now_ns) {
      int32_t e = head;
      out[n++] = pool_[e].id;
      head = pool_[e].next;
      pool_[e].next = free_;
      free_ = e;
      --size_;
    }
    if (n >= max) break;
    if (head >= 0 && pool_[head].when < slot_end) break;  // due later
    ++cursor_;
  }
  return n;
}

uint64_t TimingWheel::next_deadline() const {
  uint64_t best = UINT64_MAX;
  for (int32_t h : heads_) {
    if (h >= 0) best = std::min(best, pool_[h].when);
  }
  return best;
}

}  // namespace uccl::cc
