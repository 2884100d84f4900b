// The simulator's event queue: a calendar (bucketed timing wheel) with an
// overflow heap, popping events in exactly (time, insertion) order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <queue>
#include <vector>

namespace uccl::sim::detail {

struct Event {
  uint64_t t;
  uint64_t seq;  // insertion order: ties in time pop first-in first-out
  uint32_t type;
  uint32_t a;
  uint32_t b;
};
struct EventLater {
  bool operator()(const Event& x, const Event& y) const {
    return x.t != y.t ? x.t > y.t : x.seq > y.seq;
  }
};

// A binary heap over every pending event costs a cache miss per level once
// a large fabric keeps hundreds of thousands in flight. Here events fall
// into buckets of kBucketNs by time over a horizon of kBuckets buckets;
// only the bucket being drained is a heap (small), a bitmap finds the next
// non-empty bucket, and events past the horizon wait in an overflow heap
// until the wheel reaches them. Pop order equals a priority queue's on
// (t, seq), so runs stay bit-identical. Events never go before the
// bucket being drained (the simulator schedules at now or later).
class EventQueue {
 public:
  static constexpr uint64_t kBucketNs = 128;
  static constexpr uint32_t kBuckets = 1 << 16;  // 8.4 ms horizon
  static constexpr size_t kKeepCapacity = 256;   // events, per bucket

  EventQueue() : buckets_(kBuckets), bits_(kBuckets / 64, 0) {}

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  void push(const Event& e) {
    ++size_;
    const uint64_t slot = e.t / kBucketNs;
    if (slot >= cur_ + kBuckets) {
      overflow_.push(e);
      return;
    }
    const uint32_t i = index(std::max(slot, cur_));
    std::vector<Event>& b = buckets_[i];
    b.push_back(e);
    if (i == index(cur_) && heaped_) {
      std::push_heap(b.begin(), b.end(), EventLater());
    }
    bits_[i / 64] |= uint64_t{1} << (i % 64);
  }

  // The earliest event; the queue must not be empty.
  const Event& top() {
    settle();
    return buckets_[index(cur_)].front();
  }

  void pop() {
    settle();
    std::vector<Event>& b = buckets_[index(cur_)];
    std::pop_heap(b.begin(), b.end(), EventLater());
    b.pop_back();
    --size_;
  }

 private:
  uint32_t index(uint64_t slot) const {
    return static_cast<uint32_t>(slot % kBuckets);
  }

  // Makes the bucket at cur_ the non-empty one holding the earliest event,
  // arranged as a heap.
  void settle() {
    if (heaped_ && !buckets_[index(cur_)].empty()) return;
    for (;;) {
      const uint32_t i = index(cur_);
      if (!buckets_[i].empty()) {
        std::make_heap(buckets_[i].begin(), buckets_[i].end(), EventLater());
        heaped_ = true;
        return;
      }
      bits_[i / 64] &= ~(uint64_t{1} << (i % 64));
      // A burst can pile thousands of events into one bucket; keeping
      // every bucket's peak capacity would hold the whole burst's memory.
      if (buckets_[i].capacity() > kKeepCapacity) {
        std::vector<Event>().swap(buckets_[i]);
      }
      heaped_ = false;
      const uint64_t next = next_slot();
      cur_ = next;
      // Events the horizon now covers leave the overflow heap.
      while (!overflow_.empty() &&
             overflow_.top().t / kBucketNs < cur_ + kBuckets) {
        const Event& e = overflow_.top();
        const uint32_t j = index(e.t / kBucketNs);
        buckets_[j].push_back(e);
        bits_[j / 64] |= uint64_t{1} << (j % 64);
        overflow_.pop();
      }
    }
  }

  // The next slot after cur_ whose bucket is non-empty, or the overflow's
  // earliest when the wheel is empty.
  uint64_t next_slot() const {
    const uint32_t start = index(cur_ + 1);
    for (uint32_t n = 0; n <= kBuckets / 64; ++n) {
      const uint32_t w = (start / 64 + n) % (kBuckets / 64);
      uint64_t word = bits_[w];
      if (n == 0) word &= ~uint64_t{0} << (start % 64);
      if (word == 0) continue;
      const uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(word));
      return cur_ + 1 + (i - start + kBuckets) % kBuckets;
    }
    return overflow_.empty() ? cur_ + 1 : overflow_.top().t / kBucketNs;
  }

  std::vector<std::vector<Event>> buckets_;
  std::vector<uint64_t> bits_;  // non-empty buckets
  std::priority_queue<Event, std::vector<Event>, EventLater> overflow_;
  uint64_t cur_ = 0;  // the slot (time / kBucketNs) being drained
  bool heaped_ = false;
  size_t size_ = 0;
};

}  // namespace uccl::sim::detail
