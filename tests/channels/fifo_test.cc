// The trigger FIFO driven by CPU threads through the producers' own code
// (device/fifo.h compiled for the host): layout, order, full ring, stalls.
#include "channels/fifo.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace uccl::channels {
namespace {

using device::decode_trigger;
using device::encode_trigger;
using device::fifo_push;
using device::Trigger;
using device::TriggerOp;

std::unique_ptr<TriggerFifo> make_fifo(uint32_t slots,
                                       uint64_t timeout_ns = 10000000000ull) {
  FifoConfig cfg;
  cfg.slots = slots;
  cfg.full_timeout_ns = timeout_ns;
  auto f = TriggerFifo::create(cfg);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

// A trigger naming its producer and sequence number (in arg and src_off).
Trigger tagged(uint32_t producer, uint64_t seq) {
  return encode_trigger(TriggerOp::kPut, producer, static_cast<uint32_t>(seq),
                        seq * 8 + 1, producer, seq, 7, seq << 4);
}

// Pops until `n` triggers came or `deadline` passed (the bounded loop every
// consumer test uses).
bool pop_n(TriggerFifo* f, size_t n, std::vector<Trigger>* out,
           std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  Trigger t;
  while (out->size() < n) {
    if (f->pop(&t)) {
      out->push_back(t);
    } else if (std::chrono::steady_clock::now() > deadline) {
      return false;
    } else {
      std::this_thread::yield();  // producers may share this core
    }
  }
  return true;
}

TEST(TriggerLayout, FieldsRoundTripAtTheirWidths) {
  const uint64_t max48 = device::kOffsetMask;
  const uint32_t max_mem = device::kMaxMemIds - 1;
  Trigger t = encode_trigger(TriggerOp::kPutWithSignal, 0xffff, device::kMaxArg,
                             max48, max_mem, max48, max_mem - 1, max48 - 1);
  auto f = decode_trigger(t);
  EXPECT_EQ(f.op, TriggerOp::kPutWithSignal);
  EXPECT_EQ(f.channel, 0xffffu);
  EXPECT_EQ(f.arg, device::kMaxArg);
  EXPECT_EQ(f.bytes, max48);
  EXPECT_EQ(f.src_mem, max_mem);
  EXPECT_EQ(f.src_off, max48);
  EXPECT_EQ(f.dst_mem, max_mem - 1);
  EXPECT_EQ(f.dst_off, max48 - 1);
  EXPECT_TRUE(device::trigger_well_formed(t));
  // Every word leaves bit 63 to the ring's phase, whatever the fields.
  for (int k = 0; k < 4; ++k) EXPECT_EQ(t.w[k] & device::kPhaseBit, 0u) << k;
}

TEST(TriggerLayout, MalformedTriggersAreToldApart) {
  Trigger t = encode_trigger(TriggerOp::kSignal, 1, 2, 0, 0, 0, 0, 0);
  ASSERT_TRUE(device::trigger_well_formed(t));
  Trigger bad = t;
  bad.w[0] = (bad.w[0] & ~0xffull) | 9;  // unknown op
  EXPECT_FALSE(device::trigger_well_formed(bad));
  bad = t;
  bad.w[0] |= 1ull << 24;  // reserved bits
  EXPECT_FALSE(device::trigger_well_formed(bad));
  bad = t;
  bad.w[1] |= 1ull << 50;  // bytes past 48 bits
  EXPECT_FALSE(device::trigger_well_formed(bad));
  for (int k = 0; k < 4; ++k) {  // a phase bit left in (a torn slot)
    bad = t;
    bad.w[k] |= device::kPhaseBit;
    EXPECT_FALSE(device::trigger_well_formed(bad)) << k;
  }
}

// The producer's four words reach the ring in any order (a GPU's relaxed
// PCIe writes): the consumer takes the slot only once every word carries
// this lap's phase, on the first lap (a zeroed ring) and on later ones
// (the previous lap's trigger still in the slot).
TEST(TriggerFifo, WordsMayArriveInAnyOrder) {
  auto f = make_fifo(2);
  ASSERT_NE(f, nullptr);
  device::Trigger* ring = f->handle().ring;
  Trigger got;
  for (uint64_t ticket = 0; ticket < 6; ++ticket) {
    // Tickets 0, 2, 4 are written by hand into slot 0, word by word;
    // 1, 3, 5 are pushed into slot 1 by the real producer.
    if (ticket % 2 == 1) {
      ASSERT_EQ(fifo_push(f->handle(), tagged(1, ticket)),
                static_cast<int64_t>(ticket));
      ASSERT_TRUE(f->pop(&got));
      EXPECT_EQ(decode_trigger(got).src_off, ticket);
      continue;
    }
    ASSERT_EQ(device::fifo_detail::claim(&f->handle().state->head), ticket);
    const Trigger want = tagged(2, ticket);
    const uint64_t phase = device::fifo_phase(ticket, 2);
    for (int k : {2, 0, 3}) {
      ring[0].w[k] = want.w[k] | phase;
      got.w[0] = got.w[1] = got.w[2] = got.w[3] = 0x5a5a;
      EXPECT_FALSE(f->pop(&got)) << "ticket " << ticket << " word " << k;
      for (int j = 0; j < 4; ++j) EXPECT_EQ(got.w[j], 0x5a5au);  // untouched
    }
    ring[0].w[1] = want.w[1] | phase;
    ASSERT_TRUE(f->pop(&got)) << ticket;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(got.w[k], want.w[k]) << ticket;
  }
  EXPECT_EQ(f->popped(), 6u);
}

TEST(TriggerFifo, RefusesSizesThatAreNotPowersOfTwo) {
  for (uint32_t slots : {0u, 1u, 3u, 100u, (1u << 24) + 1, 1u << 25}) {
    FifoConfig cfg;
    cfg.slots = slots;
    auto f = TriggerFifo::create(cfg);
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << slots;
  }
}

// One producer, many laps of a small ring: tickets count up and the
// consumer sees every trigger intact, in order.
TEST(TriggerFifo, OneProducerManyLapsInOrder) {
  auto f = make_fifo(8);
  ASSERT_NE(f, nullptr);
  constexpr uint64_t kN = 5000;
  std::vector<Trigger> got;
  std::thread consumer([&] { EXPECT_TRUE(pop_n(f.get(), kN, &got)); });
  const device::FifoHandle h = f->handle();
  for (uint64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(fifo_push(h, tagged(3, i)), static_cast<int64_t>(i));
  }
  consumer.join();
  ASSERT_EQ(got.size(), kN);
  for (uint64_t i = 0; i < kN; ++i) {
    const Trigger want = tagged(3, i);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(got[i].w[k], want.w[k]) << i;
  }
  EXPECT_EQ(f->popped(), kN);
  EXPECT_EQ(*f->claimed(), kN);
}

// Many producers through a ring far smaller than the load: each trigger
// is taken exactly once, in ticket order, each producer's in its own order.
TEST(TriggerFifo, ManyProducersLoseNothingAndTakeNothingTwice) {
  auto f = make_fifo(64);
  ASSERT_NE(f, nullptr);
  constexpr uint32_t kProducers = 8;
  constexpr uint64_t kEach = 20000;
  constexpr uint64_t kTotal = kProducers * kEach;
  // ticket -> (producer, seq), written by the producer that got the ticket.
  std::vector<std::atomic<uint64_t>> by_ticket(kTotal);
  std::vector<Trigger> got;
  std::thread consumer([&] { EXPECT_TRUE(pop_n(f.get(), kTotal, &got)); });
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      const device::FifoHandle h = f->handle();
      for (uint64_t i = 0; i < kEach; ++i) {
        // Both ways of publishing, as puts and signals mix in a channel.
        const int64_t ticket = fifo_push(
            h, tagged(p, i),
            i % 2 ? device::Publish::kRelaxed : device::Publish::kRelease);
        ASSERT_GE(ticket, 0);
        ASSERT_LT(static_cast<uint64_t>(ticket), kTotal);
        by_ticket[ticket].store((uint64_t{p} << 32) | i);
      }
    });
  }
  for (auto& t : producers) t.join();
  consumer.join();
  ASSERT_EQ(got.size(), kTotal);
  std::vector<uint64_t> next(kProducers, 0);
  for (uint64_t k = 0; k < kTotal; ++k) {
    auto fl = decode_trigger(got[k]);
    ASSERT_LT(fl.channel, kProducers);
    // In the producer's order: its k-th push is its k-th to arrive.
    ASSERT_EQ(fl.src_off, next[fl.channel]) << "producer " << fl.channel;
    ++next[fl.channel];
    // In ticket order: the k-th popped is the push that got ticket k.
    ASSERT_EQ(by_ticket[k].load(), (uint64_t{fl.channel} << 32) | fl.src_off);
    ASSERT_EQ(fl.dst_off, fl.src_off << 4);  // all four words of one push
  }
  for (uint32_t p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kEach);
}

// A producer that finds the ring full waits, without touching the slot
// whose trigger is still unread, until the consumer takes one.
TEST(TriggerFifo, AFullRingHoldsTheProducerUntilTheConsumerTakesOne) {
  auto f = make_fifo(4);
  ASSERT_NE(f, nullptr);
  const device::FifoHandle h = f->handle();
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(fifo_push(h, tagged(0, i)), i);
  std::atomic<int64_t> fifth{-2};
  std::thread producer([&] { fifth = fifo_push(h, tagged(0, 4)); });
  // Bounded wait until the fifth has claimed its ticket (then it waits).
  for (int i = 0; i < 100000 && *f->claimed() < 5; ++i)
    std::this_thread::yield();
  ASSERT_EQ(*f->claimed(), 5u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(fifth.load(), -2);  // still waiting for room
  std::vector<Trigger> got;
  ASSERT_TRUE(pop_n(f.get(), 1, &got));  // slot 0 still held trigger 0
  EXPECT_EQ(decode_trigger(got[0]).src_off, 0u);
  producer.join();
  EXPECT_EQ(fifth.load(), 4);
  ASSERT_TRUE(pop_n(f.get(), 5, &got));
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(decode_trigger(got[i]).src_off, i);
  EXPECT_EQ(f->error(), device::kFifoOk);
}

// A consumer that stops for good: the waiting producer gives up after the
// timeout, the FIFO is marked failed for the host, and later pushes fail
// at once even where a slot is free.
TEST(TriggerFifo, AConsumerGoneFailsTheFifoAfterTheTimeout) {
  auto f = make_fifo(4, 20000000);  // 20 ms
  ASSERT_NE(f, nullptr);
  const device::FifoHandle h = f->handle();
  for (uint64_t i = 0; i < 4; ++i) ASSERT_GE(fifo_push(h, tagged(0, i)), 0);
  EXPECT_EQ(f->error(), device::kFifoOk);
  EXPECT_EQ(fifo_push(h, tagged(0, 4)), device::kPushFailed);
  EXPECT_EQ(f->error(), device::kFifoFullTimedOut);
  Trigger t;
  ASSERT_TRUE(f->pop(&t));
  EXPECT_EQ(fifo_push(h, tagged(0, 5)), device::kPushFailed);
}

// A consumer that stalls now and then (a proxy busy elsewhere): producers
// wait out each stall and nothing is lost.
TEST(TriggerFifo, AStallingConsumerLosesNothing) {
  auto f = make_fifo(16);
  ASSERT_NE(f, nullptr);
  constexpr uint32_t kProducers = 4;
  constexpr uint64_t kEach = 2000;
  std::vector<Trigger> got;
  std::thread consumer([&] {
    Trigger t;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (got.size() < kProducers * kEach &&
           std::chrono::steady_clock::now() < deadline) {
      if (!f->pop(&t)) {
        std::this_thread::yield();
        continue;
      }
      got.push_back(t);
      if (got.size() % 500 == 0) {  // stall with the ring filling up
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  });
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint64_t i = 0; i < kEach; ++i) {
        ASSERT_GE(fifo_push(f->handle(), tagged(p, i)), 0);
      }
    });
  }
  for (auto& t : producers) t.join();
  consumer.join();
  ASSERT_EQ(got.size(), kProducers * kEach);
  std::vector<uint64_t> next(kProducers, 0);
  for (const Trigger& t : got) {
    auto fl = decode_trigger(t);
    ASSERT_EQ(fl.src_off, next[fl.channel]++);
  }
  EXPECT_EQ(f->error(), device::kFifoOk);
}

}  // namespace
}  // namespace uccl::channels
