// A hashed timing wheel for pacing: schedule ids at absolute times, fire
// them in time order, at most one slot late. Fixed capacity, no allocation
// after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uccl::cc {

class TimingWheel {
 public:
  // `slot_ns` granularity, `num_slots` per revolution, room for `capacity`
  // scheduled entries, time starts at `start_ns`.
  TimingWheel(uint64_t slot_ns, uint32_t num_slots, uint32_t capacity,
              uint64_t start_ns);

  // False when full. Times in the past fire at the next advance().
  bool schedule(uint64_t id, uint64_t when_ns);
  // Fires every entry due at or before `now_ns`, in time order (ties in
  // scheduling order), into out[0..max); returns how many. Entries that do
  // not fit stay scheduled.
  size_t advance(uint64_t now_ns, uint64_t* out, size_t max);

  size_t size() const { return size_; }
  uint64_t slot_ns() const { return slot_ns_; }
  // Earliest scheduled time, or UINT64_MAX when empty (O(slots)).
  uint64_t next_deadline() const;

 private:
  struct Entry {
    uint64_t id;
    uint64_t when;
    int32_t next;
  };
  uint64_t slot_of(uint64_t t) const { return t / slot_ns_; }

  uint64_t slot_ns_;
  uint32_t num_slots_;
  std::vector<int32_t> heads_;  // per slot: sorted list of entries
  std::vector<Entry> pool_;
  int32_t free_ = -1;
  size_t size_ = 0;
  uint64_t cursor_;  // absolute slot number processed next
};

}  // namespace uccl::cc
