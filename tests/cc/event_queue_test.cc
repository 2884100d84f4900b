// The simulator's calendar event queue against a binary heap: the same
// events, pushed and popped interleaved, come out in the same order.
#include "cc/sim/event_queue.h"

#include <gtest/gtest.h>

#include <queue>
#include <vector>

#include "util/random.h"

namespace uccl::sim::detail {
namespace {

using Heap = std::priority_queue<Event, std::vector<Event>, EventLater>;

// Pushes events at now + a delay drawn from `delays` (now = the last popped
// event's time, as the simulator schedules) and pops in between; every pop
// must match the heap's.
void run_against_heap(const std::vector<uint64_t>& delays, uint64_t seed,
                      int ops) {
  EventQueue q;
  Heap ref;
  uint64_t now = 0, seq = 0;
  for (int i = 0; i < ops; ++i) {
    const bool push = ref.empty() || splitmix64(&seed) % 3 != 0;
    if (push) {
      const int n = 1 + static_cast<int>(splitmix64(&seed) % 3);
      for (int k = 0; k < n; ++k) {
        const uint64_t d = delays[splitmix64(&seed) % delays.size()];
        const Event e{now + d, seq++, static_cast<uint32_t>(k), 0, 0};
        q.push(e);
        ref.push(e);
      }
    } else {
      ASSERT_FALSE(q.empty());
      const Event want = ref.top();
      const Event got = q.top();
      ASSERT_EQ(got.t, want.t) << "op " << i;
      ASSERT_EQ(got.seq, want.seq) << "op " << i;
      q.pop();
      ref.pop();
      now = got.t;
    }
    ASSERT_EQ(q.size(), ref.size());
  }
  while (!ref.empty()) {
    ASSERT_EQ(q.top().seq, ref.top().seq);
    q.pop();
    ref.pop();
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, PopsInTimeThenInsertionOrder) {
  // Ties (delay 0 and equal delays), within a bucket, across buckets.
  run_against_heap({0, 0, 1, 5, 127, 128, 129, 1000, 4096}, 1, 20000);
}

TEST(EventQueue, EventsPastTheHorizonWaitAndComeBackInOrder) {
  const uint64_t horizon = EventQueue::kBucketNs * EventQueue::kBuckets;
  run_against_heap({0, 300, horizon - 1, horizon, horizon + 1, 3 * horizon,
                    10 * horizon + 77},
                   2, 20000);
}

TEST(EventQueue, SparseTimersSkipEmptyBuckets) {
  // Millisecond-scale timers between bursts: the bitmap finds the next
  // bucket across many empty ones and wraps around the wheel.
  run_against_heap({1, 50000, 1000000, 5000000, 8000000}, 3, 20000);
}

TEST(EventQueue, AnEventAtNowJoinsTheBucketBeingDrained) {
  EventQueue q;
  q.push(Event{1000, 0, 0, 0, 0});
  q.push(Event{1010, 1, 0, 0, 0});
  EXPECT_EQ(q.top().seq, 0u);
  q.pop();
  // Now = 1000: an event at 1000 goes before the one at 1010.
  q.push(Event{1000, 2, 0, 0, 0});
  EXPECT_EQ(q.top().seq, 2u);
  q.pop();
  EXPECT_EQ(q.top().seq, 1u);
  q.pop();
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace uccl::sim::detail
