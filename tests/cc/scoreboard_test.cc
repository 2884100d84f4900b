// Loss-recovery scoreboard tests (cc/scoreboard.h), single-threaded with
// time passed in: loss patterns in, resends and timer decisions out.
#include "cc/scoreboard.h"

#include <gtest/gtest.h>

#include <map>
#include <queue>
#include <set>
#include <utility>
#include <vector>

namespace uccl::cc {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint32_t kLen = 1000;

// A copy of a packet the link loses: `copy` 0 is the original, 1 the first
// resend, and so on.
struct Drop {
  uint32_t seq;
  uint32_t copy;
};

struct Scenario {
  const char* name;
  uint32_t packets;
  std::vector<uint64_t> path_delay_us;  // one way, each direction
  std::vector<Drop> drops;
  // Expected.
  std::vector<uint32_t> resends;  // in the order they leave
  uint64_t fast_retx, tlp_retx, rto_retx, rtos;
};

struct Outcome {
  std::vector<uint32_t> resends;
  RecoveryCounters counters;
  uint32_t cc_fast_events = 0, cc_timeouts = 0;
  uint64_t spurious = 0;
  bool all_acked = false;
};

// A sender with no congestion window, paths of fixed delays that keep
// order, and a receiver that ACKs every arrival at once with its
// cumulative point and the packet that arrived (the simulator's ACKs).
// Packet i leaves at i us on path i % paths; timers run exactly at
// next_timer_ns(), as the simulator runs them.
class Harness {
 public:
  explicit Harness(const Scenario& s) : s_(s) {
    ScoreboardConfig cfg;
    cfg.paths = static_cast<uint32_t>(s.path_delay_us.size());
    sb_ = std::make_unique<Scoreboard>(cfg);
    for (const Drop& d : s.drops) drops_.insert({d.seq, d.copy});
  }

  Outcome run() {
    for (uint32_t i = 0; i < s_.packets; ++i) {
      events_.push({i * kUs, kSend, i});
    }
    for (int step = 0; step < 100000 && !done(); ++step) {
      const uint64_t timer = sb_->next_timer_ns();
      if (!events_.empty() && events_.top().t <= timer) {
        const Event e = events_.top();
        events_.pop();
        now_ = e.t;
        if (e.kind == kSend) send_new(e.seq);
        if (e.kind == kArrive) arrive(e.seq);
        if (e.kind == kAck) ack(e.seq, e.cum);
      } else if (timer != UINT64_MAX) {
        now_ = timer;
        const TimerOutcome t = sb_->on_timer(now_);
        out_.cc_fast_events += t.losses.fast_lost > 0;
        out_.cc_timeouts += t.losses.timeout;
        if (t.action == TimerAction::kFail) break;
      } else {
        break;
      }
      send_resends();
    }
    out_.counters = sb_->counters();
    out_.all_acked = done();
    return out_;
  }

 private:
  enum Kind { kSend, kArrive, kAck };
  struct Event {
    uint64_t t;
    Kind kind;
    uint32_t seq;
    uint32_t cum = 0;
    bool operator>(const Event& o) const {
      return t != o.t ? t > o.t : seq > o.seq;
    }
  };

  bool done() const { return sent_ == s_.packets && !sb_->has_unacked(); }
  uint64_t delay(uint32_t path) const { return s_.path_delay_us[path] * kUs; }
  uint16_t path_of(uint32_t seq) const {
    return static_cast<uint16_t>(seq % s_.path_delay_us.size());
  }

  void transmit(uint32_t seq, uint16_t path) {
    const uint32_t copy = copies_[seq]++;
    if (drops_.count({seq, copy})) return;
    events_.push({now_ + delay(path), kArrive, seq});
  }
  void send_new(uint32_t seq) {
    const uint16_t path = path_of(seq);
    EXPECT_EQ(sb_->send_new(path, kLen, now_), seq);
    ++sent_;
    transmit(seq, path);
  }
  void send_resends() {
    uint32_t seq;
    while (sb_->urgent(&seq) || sb_->next_resend(&seq)) {
      const uint16_t path = path_of(seq);
      sb_->resent(seq, path, now_);
      out_.resends.push_back(seq);
      transmit(seq, path);
    }
  }
  void arrive(uint32_t seq) {
    got_.insert(seq);
    while (got_.count(cum_)) ++cum_;
    events_.push({now_ + delay(path_of(seq)), kAck, seq, cum_});
  }
  void ack(uint32_t seq, uint32_t cum) {
    AckOutcome o;
    auto none = [](uint32_t, const SegRec&) {};
    sb_->ack_cumulative(cum, now_, &o, none);
    if (seq >= cum) sb_->ack_selective(seq, now_, &o, none);
    sb_->take_rtt_sample(seq, now_);
    const LossReport r = sb_->finish_ack(o, now_);
    out_.cc_fast_events += r.fast_lost > 0;
    out_.cc_timeouts += r.timeout;
  }

  const Scenario& s_;
  std::unique_ptr<Scoreboard> sb_;
  std::set<std::pair<uint32_t, uint32_t>> drops_;
  std::map<uint32_t, uint32_t> copies_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::set<uint32_t> got_;
  uint32_t cum_ = 0, sent_ = 0;
  uint64_t now_ = 0;
  Outcome out_;
};

// With 10 us each way, the first RTT sample is 20 us: srtt 20 us, rttvar
// 10 us, so the probe timeout is max(2 srtt, srtt + 4 rttvar) = 60 us after
// the last ACK, RACK's reordering window its 20 us floor, and the RTO its
// 5 ms initial value until a sample, then the 1 ms floor.
const Scenario kScenarios[] = {
    // Nothing lost: nothing resent, no timer acts.
    {"no_loss", 10, {10}, {}, {}, 0, 0, 0, 0},
    // A hole: packets sent after it are delivered on its path, so RACK
    // declares it lost once out for their RTT plus the window (3 + 20 + 20
    // us), before any probe or timeout.
    {"middle_hole", 10, {10}, {{3, 0}}, {3}, 1, 0, 0, 0},
    // The last packet: nothing later shows the loss, so the probe resends
    // it 60 us after the last ACK.
    {"lost_tail", 10, {10}, {{9, 0}}, {9}, 0, 1, 0, 0},
    // Two paths: seq 9's delivery (path 1) says nothing about seq 8 (path
    // 0), so the probe repairs it, not RACK; on one path RACK does.
    {"tail_two_paths", 10, {10, 10}, {{8, 0}}, {8}, 0, 1, 0, 0},
    {"tail_one_path", 10, {10}, {{8, 0}}, {8}, 1, 0, 0, 0},
    // A hole whose resend is lost too: the resend is the newest packet
    // out, so the probe resends it again.
    {"resend_lost", 10, {10}, {{3, 0}, {3, 1}}, {3, 3}, 1, 1, 0, 0},
    // Path 1 is three times slower: its packets arrive after path 0's
    // later ones, which is reordering, not loss.
    {"slow_path", 10, {10, 30}, {}, {}, 0, 0, 0, 0},
    // The whole window: no ACK, no RTT sample, no probe; the 5 ms timeout
    // resends the oldest (F-RTO), and when only that resend comes back the
    // loss is real: RACK takes every packet sent before it.
    {"whole_window",
     10,
     {10},
     {{0, 0},
      {1, 0},
      {2, 0},
      {3, 0},
      {4, 0},
      {5, 0},
      {6, 0},
      {7, 0},
      {8, 0},
      {9, 0}},
     {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
     9,
     0,
     1,
     1},
};

class ScoreboardScenario : public ::testing::TestWithParam<Scenario> {};

TEST_P(ScoreboardScenario, ResendsWhatWasLostByTheExpectedMechanism) {
  const Scenario& s = GetParam();
  const Outcome o = Harness(s).run();
  EXPECT_TRUE(o.all_acked);
  EXPECT_EQ(o.resends, s.resends);
  EXPECT_EQ(o.counters.fast_retx, s.fast_retx);
  EXPECT_EQ(o.counters.tlp_retx, s.tlp_retx);
  EXPECT_EQ(o.counters.rto_retx, s.rto_retx);
  EXPECT_EQ(o.counters.rtos, s.rtos);
  EXPECT_EQ(o.counters.spurious_retx, 0u);
  EXPECT_EQ(o.counters.spurious_rtos, 0u);
  // The controllers hear of a fast loss when RACK found one, and of a
  // timeout only once it proved real.
  EXPECT_EQ(o.cc_fast_events > 0, s.fast_retx > 0 && s.rtos == 0);
  EXPECT_EQ(o.cc_timeouts, s.rtos);
}

INSTANTIATE_TEST_SUITE_P(Table, ScoreboardScenario,
                         ::testing::ValuesIn(kScenarios),
                         [](const ::testing::TestParamInfo<Scenario>& i) {
                           return i.param.name;
                         });

auto ignore = [](uint32_t, const SegRec&) {};

// Sends `n` packets on path 0 at `t`.
void send(Scoreboard& sb, int n, uint64_t t) {
  for (int i = 0; i < n; ++i) sb.send_new(0, kLen, t);
}

TEST(Scoreboard, SpuriousTimeoutIsUndone) {
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 4, 0);
  EXPECT_EQ(sb.next_timer_ns(), 5000 * kUs);  // the initial RTO
  TimerOutcome t = sb.on_timer(5000 * kUs);
  EXPECT_EQ(t.action, TimerAction::kTimeout);
  EXPECT_FALSE(t.losses.timeout);  // F-RTO: not yet
  uint32_t seq = 99;
  ASSERT_TRUE(sb.urgent(&seq));
  EXPECT_EQ(seq, 0u);
  sb.resent(0, 0, 5000 * kUs);
  EXPECT_EQ(sb.rto_backoff(), 1u);
  // The originals of 0 and 1 were only slow: their ACK arrives 1 us later.
  AckOutcome o;
  sb.ack_cumulative(2, 5001 * kUs, &o, ignore);
  const LossReport r = sb.finish_ack(o, 5001 * kUs);
  EXPECT_FALSE(r.timeout);
  EXPECT_EQ(sb.counters().spurious_rtos, 1u);
  EXPECT_EQ(sb.rto_backoff(), 0u);
  EXPECT_GE(sb.rto().srtt_ns(), 5001 * kUs);  // Eifel: the delay it saw
  EXPECT_FALSE(sb.next_resend(&seq));         // 2 and 3 are not resent
  EXPECT_EQ(sb.counters().rto_retx, 1u);
}

TEST(Scoreboard, ResendSoonerThanTheMinRttIsARealLoss) {
  // The min RTT was measured in a queue (30 us); after a timeout the
  // resend crosses the drained path in 20 us. Its ACK proves nothing
  // spurious (it may be the resend's), so the loss is real and RACK takes
  // every packet sent before the resend.
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 1, 0);
  AckOutcome first;
  sb.ack_cumulative(1, 30 * kUs, &first, ignore);
  sb.take_rtt_sample(0, 30 * kUs);
  sb.finish_ack(first, 30 * kUs);
  send(sb, 4, 40 * kUs);  // 1..4, all lost
  uint32_t seq;
  // The probe first (4 again, lost again), then the timeout.
  uint64_t t = sb.next_timer_ns();
  ASSERT_EQ(sb.on_timer(t).action, TimerAction::kProbe);
  ASSERT_TRUE(sb.urgent(&seq));
  EXPECT_EQ(seq, 4u);
  sb.resent(seq, 0, t);
  t = sb.next_timer_ns();
  ASSERT_EQ(sb.on_timer(t).action, TimerAction::kTimeout);
  ASSERT_TRUE(sb.urgent(&seq));
  EXPECT_EQ(seq, 1u);
  sb.resent(1, 0, t);
  AckOutcome a;
  sb.ack_cumulative(2, t + 20 * kUs, &a, ignore);
  const LossReport r = sb.finish_ack(a, t + 20 * kUs);
  EXPECT_TRUE(r.timeout);
  EXPECT_EQ(sb.counters().spurious_rtos, 0u);
  std::vector<uint32_t> queued;
  while (sb.next_resend(&seq)) {
    queued.push_back(seq);
    sb.resent(seq, 0, t + 20 * kUs);
  }
  EXPECT_EQ(queued, (std::vector<uint32_t>{2, 3, 4}));
}

TEST(Scoreboard, ProbeAckedSoonerThanAQueuedMinRttStillMovesRack) {
  // The min RTT was measured in a queue (8 us); the probe crosses the
  // drained path in 7 us. Its ACK is the probe's, so RACK's clock moves to
  // it and the hole sent before it is lost at once, not at the RTO.
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 3, 0);  // 0, 1, 2
  AckOutcome a;
  sb.ack_cumulative(1, 8 * kUs, &a, ignore);
  sb.take_rtt_sample(0, 8 * kUs);
  sb.finish_ack(a, 8 * kUs);
  uint64_t t = sb.next_timer_ns();  // 1 and 2 lost: the probe
  ASSERT_EQ(sb.on_timer(t).action, TimerAction::kProbe);
  uint32_t seq;
  ASSERT_TRUE(sb.urgent(&seq));
  EXPECT_EQ(seq, 2u);
  sb.resent(seq, 0, t);
  AckOutcome p;
  sb.ack_selective(2, t + 7 * kUs, &p, ignore);
  sb.finish_ack(p, t + 7 * kUs);
  // 1 was sent before the probe and has been out longer than the probe's
  // RTT plus the reordering window (0 + 7 + 20 us): due now.
  EXPECT_EQ(sb.next_timer_ns(), 27 * kUs);
  EXPECT_EQ(sb.on_timer(t + 7 * kUs).losses.fast_lost, 1u);
}

TEST(Scoreboard, TimeoutsBackOffThenFail) {
  ScoreboardConfig cfg;
  cfg.max_retries = 3;
  Scoreboard sb(cfg);
  send(sb, 1, 0);
  std::vector<uint64_t> fired;
  std::vector<bool> real;
  for (int i = 0; i < 10; ++i) {
    const uint64_t t = sb.next_timer_ns();
    const TimerOutcome o = sb.on_timer(t);
    if (o.action == TimerAction::kFail) {
      fired.push_back(t);
      break;
    }
    ASSERT_EQ(o.action, TimerAction::kTimeout);
    fired.push_back(t);
    real.push_back(o.losses.timeout);
    uint32_t seq;
    ASSERT_TRUE(sb.urgent(&seq));
    sb.resent(seq, 0, t);
  }
  // 5 ms, then 10, 20 and 40 ms later (doubling), the last one failing.
  const std::vector<uint64_t> want = {5000 * kUs, 15000 * kUs, 35000 * kUs,
                                      75000 * kUs};
  EXPECT_EQ(fired, want);
  EXPECT_EQ(real, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(sb.counters().rtos, 3u);
}

TEST(Scoreboard, SpuriousResendWidensTheReorderingWindow) {
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 4, 0);
  AckOutcome o;
  for (uint32_t s = 1; s <= 3; ++s) sb.ack_selective(s, 20 * kUs, &o, ignore);
  sb.take_rtt_sample(1, 20 * kUs);
  EXPECT_EQ(sb.finish_ack(o, 20 * kUs).fast_lost, 0u);  // not out long yet
  // Three duplicate ACKs need three ACKs.
  for (int i = 0; i < 2; ++i) {
    AckOutcome d;
    sb.ack_selective(3, 21 * kUs, &d, ignore);
    sb.finish_ack(d, 21 * kUs);
  }
  EXPECT_EQ(sb.dupacks(), 3u);
  const uint64_t t = sb.next_timer_ns();
  EXPECT_EQ(t, 20 * kUs + 20 * kUs);  // sent at 0: RTT 20 + window 20
  EXPECT_EQ(sb.on_timer(t).losses.fast_lost, 1u);
  uint32_t seq;
  ASSERT_TRUE(sb.next_resend(&seq));
  sb.resent(seq, 0, t);
  // The original's ACK comes 5 us after the resend: sooner than any RTT.
  AckOutcome late;
  sb.ack_cumulative(4, t + 5 * kUs, &late, ignore);
  sb.finish_ack(late, t + 5 * kUs);
  EXPECT_EQ(sb.counters().spurious_retx, 1u);
  EXPECT_EQ(sb.reorder_mult(), 2u);
}

TEST(Scoreboard, PacketsSentInOneLoopAreOrderedBySequence) {
  // One clock reading for a whole batch: the later sequence number was
  // sent later, so its delivery makes the earlier one lost.
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 3, 0);
  AckOutcome o;
  sb.ack_selective(2, 20 * kUs, &o, ignore);
  sb.take_rtt_sample(2, 20 * kUs);
  sb.finish_ack(o, 20 * kUs);
  EXPECT_EQ(sb.next_timer_ns(), 20 * kUs + 20 * kUs);
  EXPECT_EQ(sb.on_timer(40 * kUs - 1).losses.fast_lost, 0u);
  EXPECT_EQ(sb.on_timer(40 * kUs).losses.fast_lost, 2u);  // 0 and 1
}

TEST(Scoreboard, KarnNoSampleFromResends) {
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 2, 0);
  sb.on_timer(5000 * kUs);  // timeout: 0 queued
  uint32_t seq;
  ASSERT_TRUE(sb.urgent(&seq));
  sb.resent(seq, 0, 5000 * kUs);
  EXPECT_EQ(sb.take_rtt_sample(0, 5010 * kUs), 0u);
  EXPECT_EQ(sb.take_rtt_sample(1, 5010 * kUs), 5010 * kUs);
  EXPECT_EQ(sb.take_rtt_sample(1, 5020 * kUs), 0u);  // once per packet
  EXPECT_EQ(sb.min_rtt_ns(), 5010 * kUs);
}

TEST(Scoreboard, ANackDeclaresThatTransmissionLostAtOnce) {
  Scoreboard sb(ScoreboardConfig{});
  send(sb, 3, 0);  // 0, 1, 2 sent at 0 us
  const uint64_t inflight = sb.inflight();
  // The receiver got 1's header only: lost now, no RACK wait.
  EXPECT_TRUE(sb.nack(1, 0));
  EXPECT_EQ(sb.counters().nack_retx, 1u);
  EXPECT_LT(sb.inflight(), inflight);  // it left the pipe
  uint32_t seq = 99;
  ASSERT_TRUE(sb.next_resend(&seq));
  EXPECT_EQ(seq, 1u);
  EXPECT_FALSE(sb.nack(1, 0));  // already waiting to be resent
  sb.resent(1, 0, 30 * kUs);
  // A NACK of the first copy (sent at 0) says nothing about the resend.
  EXPECT_FALSE(sb.nack(1, 0));
  EXPECT_TRUE(sb.nack(1, 30 * kUs));
  // Acknowledged, or never sent: ignored.
  AckOutcome o;
  sb.ack_cumulative(1, 40 * kUs, &o, ignore);
  EXPECT_FALSE(sb.nack(0, 0));
  EXPECT_FALSE(sb.nack(7, 0));
  EXPECT_EQ(sb.counters().nack_retx, 2u);
}

TEST(Scoreboard, PipeAndCapacity) {
  ScoreboardConfig cfg;
  cfg.capacity = 4;
  cfg.paths = 2;
  Scoreboard sb(cfg);
  for (uint16_t i = 0; i < 4; ++i) sb.send_new(i % 2, 100 + i, 0);
  EXPECT_TRUE(sb.full());
  EXPECT_EQ(sb.inflight(), 100u + 101 + 102 + 103);
  EXPECT_EQ(sb.path_inflight(0), 100u + 102);
  EXPECT_EQ(sb.path_inflight(1), 101u + 103);
  std::vector<uint32_t> acked;
  AckOutcome o;
  sb.ack_cumulative(1, 10 * kUs, &o,
                    [&](uint32_t s, const SegRec&) { acked.push_back(s); });
  EXPECT_EQ(acked, std::vector<uint32_t>{0});
  EXPECT_EQ(o.newly_bytes, 100u);
  EXPECT_FALSE(sb.full());
  EXPECT_EQ(sb.path_inflight(0), 102u);
  // A timeout declares the oldest lost: it leaves the pipe, its bytes are
  // counted for the receiver to grant again (cc=credit), once.
  sb.on_timer(10 * kUs + 5000 * kUs);
  EXPECT_EQ(sb.path_inflight(1), 103u);
  EXPECT_EQ(sb.take_lost_bytes(), 101u);
  EXPECT_EQ(sb.take_lost_bytes(), 0u);
  // An ACK beyond what was sent changes nothing.
  AckOutcome bad;
  sb.ack_cumulative(9, 11 * kUs, &bad, ignore);
  sb.ack_selective(7, 11 * kUs, &bad, ignore);
  EXPECT_EQ(bad.newly_packets, 0u);
  EXPECT_EQ(sb.snd_una(), 1u);
}

TEST(Scoreboard, SequenceNumbersWrap) {
  // Serial arithmetic: a flow whose numbers wrap past 2^32 recovers as any.
  ScoreboardConfig cfg;
  cfg.first_seq = 0xFFFFFFFEu;
  Scoreboard sb(cfg);
  send(sb, 6, 0);  // 0xFFFFFFFE .. 3
  EXPECT_EQ(sb.snd_nxt(), 4u);
  EXPECT_EQ(sb.outstanding(), 6u);
  AckOutcome o;
  for (uint32_t s : {1u, 2u, 3u}) sb.ack_selective(s, 20 * kUs, &o, ignore);
  sb.ack_cumulative(0xFFFFFFFFu, 20 * kUs, &o, ignore);
  sb.take_rtt_sample(3, 20 * kUs);
  sb.finish_ack(o, 20 * kUs);
  EXPECT_EQ(sb.snd_una(), 0xFFFFFFFFu);
  // 0xFFFFFFFF and 0 are holes below delivered packets: lost together.
  EXPECT_EQ(sb.on_timer(40 * kUs).losses.fast_lost, 2u);
  uint32_t seq;
  ASSERT_TRUE(sb.next_resend(&seq));
  EXPECT_EQ(seq, 0xFFFFFFFFu);
  sb.resent(seq, 0, 40 * kUs);
  ASSERT_TRUE(sb.next_resend(&seq));
  EXPECT_EQ(seq, 0u);
}

}  // namespace
}  // namespace uccl::cc
