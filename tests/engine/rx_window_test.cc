// The receiver's chunk window (engine/rx_window.h), single-threaded with
// time passed in: in-order hand-off, holes and their SACK bitmap,
// duplicates, CSN extension across the immediate's wrap, ACK coalescing,
// the receiver delay each ACK reports.
#include "engine/rx_window.h"

#include <gtest/gtest.h>

#include <vector>

namespace uccl::engine {
namespace {

constexpr uint64_t kUs = 1000;

RxChunkInfo chunk(uint32_t len = 100, bool last = false) {
  RxChunkInfo c{};
  c.valid = true;
  c.last = last;
  c.len = len;
  return c;
}

// Arrives `csn` (its low immediate bits) at `now`; true if new.
bool arrive(RxWindow& w, uint32_t csn, uint64_t now, uint32_t* ext = nullptr) {
  uint32_t e = 0;
  const bool fresh =
      w.arrive(csn & (Imm::kCsnSpace - 1), chunk(), now, now, &e);
  if (ext) *ext = e;
  return fresh;
}

std::vector<uint32_t> drain(RxWindow& w) {
  std::vector<uint32_t> out;
  RxChunkInfo c;
  while (w.next_in_order(&c)) out.push_back(w.rcv_cum() - 1);
  return out;
}

TEST(RxWindow, InOrderChunksGoOnAtOnceAndAckEveryN) {
  RxWindow w;
  w.configure(4, 20 * kUs);
  for (uint32_t s = 0; s < 3; ++s) {
    ASSERT_TRUE(arrive(w, s, s * kUs));
    EXPECT_EQ(drain(w), std::vector<uint32_t>{s});
    EXPECT_FALSE(w.ack_at_once()) << s;  // no hole, fewer than 4
  }
  ASSERT_TRUE(arrive(w, 3, 3 * kUs));
  EXPECT_TRUE(w.ack_at_once());  // the 4th
  AckPacket a{};
  w.fill_ack(&a, 5 * kUs);
  EXPECT_EQ(a.cum_ack, 3u);  // 3 is held until drained
  drain(w);
  w.fill_ack(&a, 5 * kUs);
  EXPECT_EQ(a.cum_ack, 4u);
  EXPECT_EQ(a.trigger_csn, 3u);
  EXPECT_EQ(a.rx_delay_ns, 2 * kUs);  // arrived at 3 us, ACK at 5
  for (uint64_t word : a.sack) EXPECT_EQ(word, 0u);
  w.ack_sent();
  EXPECT_TRUE(w.quiet());
  EXPECT_EQ(w.rx_chunks(), 4u);
}

TEST(RxWindow, HolesAreSackedAndFilledInOrder) {
  RxWindow w;
  w.configure(100, 1000 * kUs);
  ASSERT_TRUE(arrive(w, 0, 0));
  drain(w);
  EXPECT_FALSE(w.ack_at_once());
  for (uint32_t s : {2u, 3u, 5u, 70u}) ASSERT_TRUE(arrive(w, s, kUs));
  EXPECT_TRUE(w.ack_at_once());  // a hole
  EXPECT_TRUE(drain(w).empty());
  AckPacket a{};
  w.fill_ack(&a, kUs);
  EXPECT_EQ(a.cum_ack, 1u);
  // Bit i is CSN cum + 1 + i: 2 -> 0, 3 -> 1, 5 -> 3, 70 -> 68.
  EXPECT_EQ(a.sack[0], (1ull << 0) | (1ull << 1) | (1ull << 3));
  EXPECT_EQ(a.sack[1], 1ull << (68 - 64));
  EXPECT_EQ(a.sack[2], 0u);
  ASSERT_TRUE(arrive(w, 1, 2 * kUs));
  EXPECT_EQ(drain(w), (std::vector<uint32_t>{1, 2, 3}));
  ASSERT_TRUE(arrive(w, 4, 2 * kUs));
  EXPECT_EQ(drain(w), (std::vector<uint32_t>{4, 5}));
  w.fill_ack(&a, 2 * kUs);
  EXPECT_EQ(a.cum_ack, 6u);
  EXPECT_EQ(a.sack[0], 1ull << 63);  // 70 is now bit 70 - 7 of the bitmap
  EXPECT_EQ(a.sack[1], 0u);
}

TEST(RxWindow, DuplicatesAreCountedAndAckedNotHandedOnAgain) {
  RxWindow w;
  w.configure(100, 1000 * kUs);
  ASSERT_TRUE(arrive(w, 0, 0));
  ASSERT_TRUE(arrive(w, 2, 0));
  drain(w);
  w.ack_sent();
  EXPECT_FALSE(arrive(w, 2, kUs));  // held already
  EXPECT_TRUE(w.ack_at_once());
  w.ack_sent();
  EXPECT_FALSE(arrive(w, 0, kUs));  // behind the cumulative point
  EXPECT_TRUE(w.ack_at_once());
  EXPECT_EQ(w.duplicates(), 2u);
  EXPECT_EQ(w.rx_chunks(), 2u);
  ASSERT_TRUE(arrive(w, 1, kUs));
  EXPECT_EQ(drain(w), (std::vector<uint32_t>{1, 2}));
}

// The ACK after a lost one: the sender resent (its RTO) and the resend
// arrived as a duplicate; that duplicate is the trigger, timed from its own
// arrival. Before, the ACK named the chunk that had arrived an RTO ago and
// said it waited here that long: the sender (which had never timed that
// chunk) took an RTO-long RTT sample and as much receiver delay, and
// Swift's endpoint window collapsed to a thousandth of a packet.
// What the engine's receive guard asks before the NIC places a copy:
// held and handed-on chunks are "here", the rest (holes, new ones) not, on
// either side of the immediate's wrap. A refused copy is answered as a
// duplicate: counted, ACKed at once, named as the ACK's trigger.
TEST(RxWindow, HoldsWhatArrivedAndARefusedCopyIsAckedAsADuplicate) {
  RxWindow w;
  w.configure(64, 1000 * kUs);
  const uint32_t base = Imm::kCsnSpace - 2;  // wraps after two chunks
  for (uint32_t s = 0; s < base; ++s) {
    ASSERT_TRUE(arrive(w, s, 0));
    drain(w);
  }
  w.ack_sent();
  ASSERT_TRUE(arrive(w, base, kUs));      // handed on
  ASSERT_TRUE(arrive(w, base + 3, kUs));  // held past a hole at +1, +2
  drain(w);
  w.ack_sent();
  const auto imm = [](uint32_t csn) { return csn & (Imm::kCsnSpace - 1); };
  EXPECT_TRUE(w.holds(imm(base - 1)));
  EXPECT_TRUE(w.holds(imm(base)));
  EXPECT_FALSE(w.holds(imm(base + 1)));  // the hole
  EXPECT_FALSE(w.holds(imm(base + 2)));  // the hole, after the wrap
  EXPECT_TRUE(w.holds(imm(base + 3)));   // held, after the wrap
  EXPECT_FALSE(w.holds(imm(base + 4)));  // new
  EXPECT_TRUE(w.holds(imm(base + 1 - kMaxChunksInFlight)));  // long gone
  EXPECT_FALSE(w.holds(imm(base + kMaxChunksInFlight)));     // within reach
  EXPECT_TRUE(w.quiet());
  const uint64_t dups = w.duplicates();
  w.refused(w.extend(imm(base + 3)), 9 * kUs);
  EXPECT_EQ(w.duplicates(), dups + 1);
  EXPECT_TRUE(w.ack_at_once());
  EXPECT_TRUE(w.should_ack(9 * kUs, false, false));
  AckPacket a{};
  w.fill_ack(&a, 9 * kUs);
  EXPECT_EQ(a.cum_ack, base + 1);
  EXPECT_EQ(a.trigger_csn, base + 3);
  EXPECT_EQ(a.sack[0], 0b10u);  // base + 3 = cum + 1 + 1
  // Nothing it refused was taken: the holes still fill and go on in order.
  ASSERT_TRUE(arrive(w, base + 1, 10 * kUs));
  ASSERT_TRUE(arrive(w, base + 2, 10 * kUs));
  EXPECT_EQ(drain(w), (std::vector<uint32_t>{base + 1, base + 2, base + 3}));
}

// A copy delayed while more than kMaxChunksInFlight newer chunks went on:
// its immediate's CSN has wrapped into the window, where holds() takes it
// for a chunk still to come. The whole CSN (holds_csn) tells it apart, and
// a refusal by it names the old chunk, not the one it aliases.
TEST(RxWindow, TheWholeCsnRefusesACopyFromBeforeTheWrap) {
  RxWindow w;
  w.configure(64, 1000 * kUs);
  const uint32_t old_csn = 5;
  const uint32_t cum = old_csn + Imm::kCsnSpace - 100;  // 1948 chunks on
  for (uint32_t s = 0; s < cum; ++s) {
    ASSERT_TRUE(arrive(w, s, 0));
    drain(w);
  }
  ASSERT_EQ(w.rcv_cum(), cum);
  w.ack_sent();
  const uint32_t imm = old_csn & (Imm::kCsnSpace - 1);
  EXPECT_EQ(w.extend(imm), old_csn + Imm::kCsnSpace) << "aliases ahead";
  EXPECT_FALSE(w.holds(imm)) << "the immediate alone takes it for new";
  EXPECT_TRUE(w.holds_csn(old_csn));
  EXPECT_FALSE(w.holds_csn(old_csn + Imm::kCsnSpace));  // the real one
  EXPECT_TRUE(w.holds_csn(cum - 1));                    // handed on
  EXPECT_FALSE(w.holds_csn(cum));                       // next
  EXPECT_TRUE(w.holds_csn(cum + kMaxChunksInFlight));   // never in flight
  w.refused(old_csn, kUs);
  AckPacket a{};
  w.fill_ack(&a, kUs);
  EXPECT_EQ(a.trigger_csn, old_csn);
  EXPECT_EQ(a.cum_ack, cum);
  EXPECT_EQ(a.sack[0], 0u);
  // The chunk it aliases still arrives as new and goes on in order.
  w.ack_sent();
  for (uint32_t s = cum; s <= old_csn + Imm::kCsnSpace; ++s) {
    ASSERT_TRUE(arrive(w, s, 2 * kUs)) << s;
  }
  EXPECT_EQ(drain(w).back(), old_csn + Imm::kCsnSpace);
}

TEST(RxWindow, AnAckAfterALostOneNamesTheResendNotTheOldChunk) {
  RxWindow w;
  w.configure(1, 1000 * kUs);
  uint32_t e = 0;
  ASSERT_TRUE(arrive(w, 0, 0, &e));  // CSN 0 at t = 0
  drain(w);
  AckPacket a{};
  w.fill_ack(&a, 1 * kUs);  // this ACK is lost on the way
  EXPECT_EQ(a.trigger_csn, 0u);
  EXPECT_EQ(a.rx_delay_ns, 1 * kUs);
  w.ack_sent();
  // 5 ms later the sender's RTO resends CSN 0: a duplicate.
  EXPECT_FALSE(arrive(w, 0, 5000 * kUs));
  w.fill_ack(&a, 5001 * kUs);
  EXPECT_EQ(a.trigger_csn, 0u);
  EXPECT_EQ(a.rx_delay_ns, 1 * kUs) << "timed from the resend's arrival";
  w.ack_sent();
  // A duplicate still held (ahead of the cumulative point) as well.
  ASSERT_TRUE(arrive(w, 2, 5002 * kUs));
  EXPECT_FALSE(arrive(w, 2, 9000 * kUs));
  w.fill_ack(&a, 9003 * kUs);
  EXPECT_EQ(a.trigger_csn, 2u);
  EXPECT_EQ(a.rx_delay_ns, 3 * kUs);
}

TEST(RxWindow, CsnsExtendAcrossTheImmediatesWrap) {
  // The immediate carries 11 bits; the window extends them against its
  // cumulative point, so a flow goes on past 2048 chunks.
  RxWindow w;
  w.configure(1, 0);
  const uint32_t n = Imm::kCsnSpace * 3 + 17;
  for (uint32_t s = 0; s < n; ++s) {
    uint32_t ext = 0;
    ASSERT_TRUE(arrive(w, s, s, &ext)) << s;
    ASSERT_EQ(ext, s);
    ASSERT_EQ(drain(w).size(), 1u);
  }
  EXPECT_EQ(w.rcv_cum(), n);
  // A chunk half the CSN space or more behind is a late duplicate, one
  // just ahead of a hole is new.
  EXPECT_FALSE(arrive(w, n - kMaxChunksInFlight, n));
  uint32_t ext = 0;
  EXPECT_TRUE(arrive(w, n + kMaxChunksInFlight - 1, n, &ext));
  EXPECT_EQ(ext, n + kMaxChunksInFlight - 1);
}

TEST(RxWindow, AcksCoalesceUntilTheDelayUnlessSomethingIsDue) {
  RxWindow w;
  w.configure(4, 20 * kUs);
  EXPECT_FALSE(w.should_ack(0, false, false));  // nothing to say
  EXPECT_TRUE(w.should_ack(0, false, true));    // fresh credit
  EXPECT_TRUE(w.should_ack(0, true, false));    // the peer asked
  ASSERT_TRUE(arrive(w, 0, 100 * kUs));
  drain(w);
  EXPECT_FALSE(w.should_ack(119 * kUs, false, false));
  EXPECT_TRUE(w.should_ack(120 * kUs, false, false));  // waited 20 us
  w.message_done();
  EXPECT_TRUE(w.should_ack(100 * kUs, false, false));  // a message is done
  w.ack_sent();
  EXPECT_FALSE(w.should_ack(200 * kUs, false, false));
}

// The ACK reports the trigger's whole time here and, apart, the part no
// queue caused (never more than the whole): the engine's coming back from
// idle before it got to the chunk, and its time from taking the chunk to
// the ACK. What is left is the chunk's wait for a busy engine.
TEST(RxWindow, AcksReportThePartOfTheReceiverDelayNoQueueCaused) {
  RxWindow w;
  uint32_t e = 0;
  const uint64_t t0 = 1000 * kUs;
  // Arrived at 0, engine back from idle at 25, took it at 30, ACK at 40.
  ASSERT_TRUE(w.arrive(0, chunk(), t0, t0 + 30 * kUs, &e, t0 + 25 * kUs));
  AckPacket a{};
  w.fill_ack(&a, t0 + 40 * kUs);
  EXPECT_EQ(a.rx_delay_ns, 40 * kUs);
  EXPECT_EQ(a.not_queued_ns, 35 * kUs) << "5 us in a queue";
  // Busy from before the arrival: the wait from 50 to 60 was a queue's.
  ASSERT_TRUE(
      w.arrive(1, chunk(), t0 + 50 * kUs, t0 + 60 * kUs, &e, t0 + 40 * kUs));
  w.fill_ack(&a, t0 + 70 * kUs);
  EXPECT_EQ(a.rx_delay_ns, 20 * kUs);
  EXPECT_EQ(a.not_queued_ns, 10 * kUs);
  // No time given for the engine's return, ACK as it is taken: all queue.
  ASSERT_TRUE(w.arrive(2, chunk(), t0 + 80 * kUs, t0 + 90 * kUs, &e));
  w.fill_ack(&a, t0 + 90 * kUs);
  EXPECT_EQ(a.rx_delay_ns, 10 * kUs);
  EXPECT_EQ(a.not_queued_ns, 0u);
}

// An ACK held for more chunks (or the chunk's own handling) is no queue:
// a lone chunk taken at once and acknowledged 20 us later (the ACK delay)
// reports all 20 us apart, so the endpoint window hears none of it.
TEST(RxWindow, AHeldAckIsNoEndpointQueue) {
  RxWindow w;
  uint32_t e = 0;
  const uint64_t t0 = 1000 * kUs;
  ASSERT_TRUE(w.arrive(0, chunk(), t0, t0, &e, t0));
  AckPacket a{};
  w.fill_ack(&a, t0 + 20 * kUs);
  EXPECT_EQ(a.rx_delay_ns, 20 * kUs);
  EXPECT_EQ(a.not_queued_ns, 20 * kUs);
}

}  // namespace
}  // namespace uccl::engine
