// engine/channel.h's CommandRing: FIFO order, full-ring back-pressure, the
// bytes each command type keeps, and exactly-once delivery from many threads.
#include "engine/channel.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace uccl::engine {
namespace {

Command send_cmd(uint32_t conn, uint64_t seq) {
  Command c{};
  c.type = CmdType::kSend;
  c.conn = conn;
  c.addr = 0x1000 + seq;
  c.len = seq * 3;
  c.lkey = static_cast<uint32_t>(seq ^ 0xA5A5);
  c.tag = static_cast<int32_t>(seq % 1000);
  c.req = reinterpret_cast<Request*>(static_cast<uintptr_t>(seq * 8 + 8));
  return c;
}

TEST(CommandRing, FifoFullAndWrapAround) {
  CommandRing<8> ring;
  EXPECT_EQ(ring.front(), nullptr);
  uint64_t pushed = 0, popped = 0;
  for (int round = 0; round < 200; ++round) {
    // Fill it: the ninth push finds it full and leaves it as it was.
    while (ring.try_push(send_cmd(1, pushed))) ++pushed;
    ASSERT_EQ(pushed - popped, 8u);
    EXPECT_FALSE(ring.try_push(send_cmd(1, 999999)));
    // Take a varying number out, in order.
    const int take = 1 + round % 8;
    for (int k = 0; k < take; ++k) {
      const Command* c = ring.front();
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(ring.front(), c);  // stays put until pop()
      EXPECT_EQ(c->type, CmdType::kSend);
      EXPECT_EQ(c->addr, 0x1000 + popped);
      EXPECT_EQ(c->len, popped * 3);
      EXPECT_EQ(c->lkey, static_cast<uint32_t>(popped ^ 0xA5A5));
      EXPECT_EQ(c->tag, static_cast<int32_t>(popped % 1000));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c->req), popped * 8 + 8);
      ring.pop();
      ++popped;
    }
  }
  Command out;
  while (ring.pop(&out)) {
    EXPECT_EQ(out.addr, 0x1000 + popped);
    ++popped;
  }
  EXPECT_EQ(popped, pushed);
  EXPECT_GT(pushed, 800u);  // wrapped the 8 slots many times
  EXPECT_EQ(ring.front(), nullptr);
}

TEST(CommandRing, ReceiveKeepsItsBuffersAndOtherTypesTheirFields) {
  CommandRing<4> ring;
  Command r{};
  r.type = CmdType::kRecv;
  r.conn = 7;
  r.n = 3;
  for (int k = 0; k < kMaxRecvsPerRequest; ++k) {
    r.bufs[k] = CmdBuf{0x5000u + k, 100u + k, nullptr, 40 + k, 0};
  }
  EXPECT_EQ(command_bytes(r), offsetof(Command, bufs) + 3 * sizeof(CmdBuf));
  Command q{};
  q.type = CmdType::kQuery;
  q.query = reinterpret_cast<Query*>(uintptr_t{0x7770});
  q.remote_addr = 0xABCDEF;
  q.remote_key = 99;
  EXPECT_EQ(command_bytes(q), offsetof(Command, bufs));
  ASSERT_TRUE(ring.try_push(r));
  ASSERT_TRUE(ring.try_push(q));
  Command out;
  ASSERT_TRUE(ring.pop(&out));
  EXPECT_EQ(out.type, CmdType::kRecv);
  EXPECT_EQ(out.conn, 7u);
  ASSERT_EQ(out.n, 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(out.bufs[k].addr, 0x5000u + k);
    EXPECT_EQ(out.bufs[k].size, 100u + k);
    EXPECT_EQ(out.bufs[k].tag, 40 + k);
  }
  ASSERT_TRUE(ring.pop(&out));
  EXPECT_EQ(out.type, CmdType::kQuery);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(out.query), 0x7770u);
  EXPECT_EQ(out.remote_addr, 0xABCDEFu);
  EXPECT_EQ(out.remote_key, 99u);
  EXPECT_FALSE(ring.pop(&out));
}

// Four producers race for a small ring (it is full often); the consumer
// sees every command exactly once, each producer's in the order pushed.
TEST(CommandRing, ManyProducersOneConsumerExactlyOnceInOrder) {
  constexpr int kProducers = 4;
  constexpr uint64_t kEach = 50000;
  CommandRing<64> ring;
  std::atomic<bool> give_up{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kEach && !give_up.load();) {
        if (ring.try_push(send_cmd(static_cast<uint32_t>(p), i))) {
          ++i;
        } else {
          sched_yield();
        }
      }
    });
  }
  std::vector<uint64_t> next(kProducers, 0);
  uint64_t got = 0, bad = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (got < kProducers * kEach) {
    const Command* c = ring.front();
    if (c == nullptr) {
      if (std::chrono::steady_clock::now() > deadline) break;
      sched_yield();
      continue;
    }
    const uint32_t p = c->conn;
    if (p >= kProducers || c->addr != 0x1000 + next[p] ||
        c->len != next[p] * 3) {
      ++bad;
    } else {
      ++next[p];
    }
    ring.pop();
    ++got;
  }
  give_up.store(true);
  for (auto& t : producers) t.join();
  EXPECT_EQ(got, kProducers * kEach) << "timed out";
  EXPECT_EQ(bad, 0u);
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kEach) << p;
  EXPECT_EQ(ring.front(), nullptr);
}

}  // namespace
}  // namespace uccl::engine
