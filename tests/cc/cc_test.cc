// Congestion-control unit tests. Each asserts a property the papers state:
// TIMELY's regions and HAI, patched TIMELY's weighting, Swift's once-per-RTT
// decrease, flow-scaled target, fractional pacing and RTO reset, the credit
// pacer's line-rate bound, the timing wheel's order, power of two choices.
#include "cc/cc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "cc/credit.h"
#include "cc/delay_floor.h"
#include "cc/pacer.h"
#include "cc/path_selector.h"
#include "cc/swift.h"
#include "cc/timely.h"

namespace uccl::cc {
namespace {

constexpr double kLine = 100e9;
constexpr uint32_t kMss = 4096;

// The paper's absolute thresholds (the properties below are the paper's).
TimelyParams paper_timely() {
  TimelyParams p;
  p.thresholds_from_min_rtt = 0;
  return p;
}

CcSample rtt_sample(uint64_t now_ns, double rtt_us) {
  CcSample s;
  s.now_ns = now_ns;
  s.rtt_ns = static_cast<uint64_t>(rtt_us * 1000);
  s.acked_bytes = kMss;
  s.acked_packets = 1;
  return s;
}

TEST(TimelyTest, IncreasesAdditivelyBelowTlow) {
  TimelyParams p = paper_timely();
  Timely t(p, false, kLine, kMss);
  t.set_rate_for_testing(10e9);
  t.on_ack(rtt_sample(1000, 30));
  EXPECT_DOUBLE_EQ(t.rate_bps(), 10e9 + p.add_rate_bps);
  t.on_ack(rtt_sample(2000, 40));  // gradient up, but still below Tlow
  EXPECT_DOUBLE_EQ(t.rate_bps(), 10e9 + 2 * p.add_rate_bps);
}

TEST(TimelyTest, DecreasesAboveThighByThighOverRtt) {
  TimelyParams p = paper_timely();
  Timely t(p, false, kLine, kMss);
  t.set_rate_for_testing(10e9);
  t.on_ack(rtt_sample(1000, 1000));  // 2x Thigh
  EXPECT_DOUBLE_EQ(t.rate_bps(), 10e9 * (1 - p.beta * (1 - 500.0 / 1000.0)));
}

// A sample whose parts were measured (delay_split) and whose fabric part
// is 0: the receiver's time was the whole round trip. TIMELY hears 0, not
// the round trip (which is mostly that receiver time).
TEST(TimelyTest, AMeasuredFabricDelayOfZeroIsZero) {
  TimelyParams p = paper_timely();
  Timely t(p, false, kLine, kMss);
  t.set_rate_for_testing(10e9);
  CcSample s = rtt_sample(1000, 1000);  // 2x Thigh, all of it the receiver's
  s.delay_split = true;
  s.endpoint_delay_ns = s.rtt_ns;
  s.fabric_delay_ns = 0;
  t.on_ack(s);
  EXPECT_DOUBLE_EQ(t.rate_bps(), 10e9 + p.add_rate_bps);
}

TEST(TimelyTest, GradientDecidesBetweenThresholds) {
  TimelyParams p = paper_timely();
  Timely t(p, false, kLine, kMss);
  t.set_rate_for_testing(10e9);
  t.on_ack(rtt_sample(1000, 100));
  double r0 = t.rate_bps();  // first sample: zero gradient -> increase
  EXPECT_DOUBLE_EQ(r0, 10e9 + p.add_rate_bps);
  t.on_ack(rtt_sample(2000, 110));  // rising RTT: multiplicative decrease
  double g = p.ewma_alpha * 10 / p.min_rtt_us;
  EXPECT_NEAR(t.rate_bps(), r0 * (1 - p.beta * g), 1);
  EXPECT_LT(t.rate_bps(), r0);
}

TEST(TimelyTest, EntersHaiAfterNNegativeGradients) {
  TimelyParams p = paper_timely();
  Timely t(p, false, kLine, kMss);
  t.set_rate_for_testing(5e9);
  double rtt = 400;
  // The first sample has gradient 0, which counts as non-positive.
  for (int k = 1; k < p.hai_threshold; ++k) {
    double before = t.rate_bps();
    t.on_ack(rtt_sample(k * 1000, rtt));
    rtt -= 10;
    EXPECT_FALSE(t.in_hai()) << k;
    EXPECT_DOUBLE_EQ(t.rate_bps(), before + p.add_rate_bps);
  }
  double before = t.rate_bps();
  t.on_ack(rtt_sample(10000, rtt));
  EXPECT_TRUE(t.in_hai());
  EXPECT_DOUBLE_EQ(t.rate_bps(), before + p.hai_factor * p.add_rate_bps);
  // A rising RTT ends HAI.
  t.on_ack(rtt_sample(11000, rtt + 50));
  EXPECT_FALSE(t.in_hai());
  EXPECT_LT(t.rate_bps(), before + p.hai_factor * p.add_rate_bps);
}

TEST(TimelyTest, RespectsRateBounds) {
  TimelyParams p = paper_timely();
  p.min_rate_bps = 1e9;
  Timely t(p, false, kLine, kMss);
  EXPECT_DOUBLE_EQ(t.rate_bps(), kLine);  // starts at line rate
  for (int i = 0; i < 10; ++i) t.on_ack(rtt_sample(i, 10));
  EXPECT_DOUBLE_EQ(t.rate_bps(), kLine) << "never above line rate";
  for (int i = 0; i < 200; ++i) t.on_ack(rtt_sample(i, 100000));
  EXPECT_DOUBLE_EQ(t.rate_bps(), 1e9) << "never below min rate";
}

TEST(TimelyPatchedTest, WeightingFunctionOfTheGradient) {
  TimelyParams p = paper_timely();
  // Strongly falling RTT (g <= -1/4): w = 0, rate -> delta + rate... i.e.
  // additive increase by delta.
  Timely t(p, true, kLine, kMss);
  t.set_rate_for_testing(10e9);
  t.on_ack(rtt_sample(0, 400));
  t.set_rate_for_testing(10e9);
  t.on_ack(rtt_sample(1, 300));  // diff -100*0.875 / 20 = -4.4
  EXPECT_NEAR(t.rate_bps(), 10e9 + p.add_rate_bps, 1);
  // Strongly rising RTT (g >= 1/4): w = 1, pure decrease towards rtt_ref.
  Timely u(p, true, kLine, kMss);
  u.on_ack(rtt_sample(0, 300));
  u.set_rate_for_testing(10e9);
  u.on_ack(rtt_sample(1, 400));
  EXPECT_NEAR(u.rate_bps(), 10e9 * (1 - p.beta * (1 - 300.0 / 400)), 1);
}

// Patched TIMELY between the clamps of w(g): g = alpha x diff / minRTT,
// w = 2g + 1/2, rate' = delta (1 - w) + rate (1 - beta w (1 - rtt_ref /
// rtt)) (Zhu et al., CoNEXT'16, eq. 4-5), computed here from the formula.
TEST(TimelyPatchedTest, WeightedUpdateInsideTheClamps) {
  TimelyParams p = paper_timely();
  for (double diff : {-3.0, -1.0, 1.0, 3.0}) {
    Timely t(p, true, kLine, kMss);
    t.on_ack(rtt_sample(0, 300));  // first sample: the gradient's origin
    t.set_rate_for_testing(10e9);
    const double rtt = 300 + diff;
    t.on_ack(rtt_sample(1, rtt));
    const double g = p.ewma_alpha * diff / p.min_rtt_us;
    ASSERT_GT(g, -0.25);
    ASSERT_LT(g, 0.25);
    const double w = 2 * g + 0.5;
    const double want = p.add_rate_bps * (1 - w) +
                        10e9 * (1 - p.beta * w * (1 - p.rtt_ref_us / rtt));
    EXPECT_NEAR(t.rate_bps(), want, 1) << "diff " << diff;
  }
}

TEST(TimelyPatchedTest, UniqueFixedPointAtReferenceRtt) {
  TimelyParams p = paper_timely();
  // With a flat RTT (g = 0, w = 1/2): below rtt_ref rates rise, above they
  // fall, at rtt_ref they settle at delta/(beta*...)-independent equality:
  // two flows at different rates see the same RTT and move towards each
  // other (the fairness the original lacks).
  Timely a(p, true, kLine, kMss), b(p, true, kLine, kMss);
  a.set_rate_for_testing(20e9);
  b.set_rate_for_testing(2e9);
  double gap0 = 18e9;
  for (int i = 0; i < 2000; ++i) {
    a.on_ack(rtt_sample(i, 400));
    b.on_ack(rtt_sample(i, 400));
  }
  EXPECT_LT(std::abs(a.rate_bps() - b.rate_bps()), 0.01 * gap0);
  // The original keeps any split when the gradient is zero: both add delta.
  Timely c(p, false, kLine, kMss), d(p, false, kLine, kMss);
  c.set_rate_for_testing(20e9);
  d.set_rate_for_testing(2e9);
  for (int i = 0; i < 100; ++i) {
    c.on_ack(rtt_sample(i, 400));
    d.on_ack(rtt_sample(i, 400));
  }
  EXPECT_NEAR(c.rate_bps() - d.rate_bps(), gap0, 1);
}

SwiftParams swift_params() {
  SwiftParams p;
  p.base_target_us = 20;
  p.fs_range_us = 20;
  p.hop_scale_us = 2;
  p.target_from_min_delay = 0;  // the paper's absolute target
  return p;
}

TEST(SwiftTest, AdditiveIncreaseBelowTarget) {
  Swift s(swift_params(), kMss);
  double w0 = s.cwnd_pkts();
  s.on_ack(rtt_sample(1000, 5));
  EXPECT_NEAR(s.cwnd_pkts(), w0 + 1.0 / w0, 1e-9);
}

TEST(SwiftTest, DecreasesAtMostOncePerRtt) {
  Swift s(swift_params(), kMss);
  s.on_ack(rtt_sample(0, 10));  // srtt = 10 us
  double w0 = s.cwnd_pkts();
  s.on_ack(rtt_sample(100000, 200));  // far above target: decrease
  double w1 = s.cwnd_pkts();
  EXPECT_LT(w1, w0);
  EXPECT_GE(w1, w0 * (1 - 0.5) - 1e-9) << "bounded by max_mdf";
  // More high-delay ACKs within one RTT (srtt is now ~34 us): no decrease.
  for (int i = 1; i <= 5; ++i) {
    s.on_ack(rtt_sample(100000 + i * 1000, 200));
    EXPECT_DOUBLE_EQ(s.cwnd_pkts(), w1) << "second decrease within an RTT";
  }
  // After an RTT has passed: decreases again.
  s.on_ack(rtt_sample(100000 + 2 * s.srtt_ns(), 200));
  EXPECT_LT(s.cwnd_pkts(), w1);
}

TEST(SwiftTest, TargetGrowsAsWindowShrinksAndWithHops) {
  SwiftParams p = swift_params();
  Swift s(p, kMss);
  double t_big = s.target_delay_us(0);  // cwnd 10
  for (int i = 0; i < 20; ++i) s.on_loss(i * 1000000ull, false);
  ASSERT_LT(s.cwnd_pkts(), 1);
  double t_small = s.target_delay_us(0);
  EXPECT_GT(t_small, t_big);
  EXPECT_LE(t_small, p.base_target_us + p.fs_range_us + 1e-9);
  EXPECT_DOUBLE_EQ(s.target_delay_us(3) - s.target_delay_us(0),
                   3 * p.hop_scale_us);
}

// Swift's multiplicative decrease (Algorithm 1) where max_mdf does not
// clamp it: cwnd x (1 - beta (delay - target) / delay), the target here
// exactly base + hops x h + fs(cwnd) from Section 3.3, computed in the test.
TEST(SwiftTest, DecreaseFollowsThePapersFormulaBelowTheClamp) {
  SwiftParams p = swift_params();  // base 20 us, h 2 us, fs_range 20 us
  Swift s(p, kMss);
  const double w0 = s.fabric_cwnd();  // init_cwnd 10
  // fs(cwnd) = alpha / sqrt(cwnd) + beta', zero at fs_max_cwnd (100) and
  // fs_range at fs_min_cwnd (0.1).
  const double alpha =
      p.fs_range_us / (1 / std::sqrt(p.fs_min_cwnd) - 1 / std::sqrt(100.0));
  const double fs = alpha / std::sqrt(w0) - alpha / std::sqrt(100.0);
  const double target = p.base_target_us + 0 * p.hop_scale_us + fs;
  ASSERT_GT(fs, 0);
  ASSERT_LT(fs, p.fs_range_us);
  // 1.25 x target: 1 - 0.8 x 0.2 = 0.84 > 1 - max_mdf. Whole nanoseconds,
  // as samples carry them.
  const double delay = std::floor(target * 1250) / 1000;
  s.on_ack(rtt_sample(1000000, delay));
  EXPECT_NEAR(s.fabric_cwnd(), w0 * (1 - p.beta * (delay - target) / delay),
              1e-9);
}

// The flow-scaled target at windows between the clamps, and per hop.
TEST(SwiftTest, TargetIsFlowScaledBySqrtOfTheWindowAndHopScaled) {
  SwiftParams p = swift_params();
  const double alpha =
      p.fs_range_us / (1 / std::sqrt(p.fs_min_cwnd) - 1 / std::sqrt(100.0));
  for (double w : {0.5, 2.0, 10.0, 40.0}) {
    p.init_cwnd = w;
    Swift s(p, kMss);
    const double fs = alpha / std::sqrt(w) - alpha / std::sqrt(100.0);
    EXPECT_NEAR(s.target_delay_us(0), p.base_target_us + fs, 1e-9) << w;
    EXPECT_NEAR(s.target_delay_us(4), p.base_target_us + 4 * 2 + fs, 1e-9) << w;
  }
}

TEST(SwiftTest, PacesBelowOnePacket) {
  SwiftParams p = swift_params();
  p.init_cwnd = 0.25;
  p.min_cwnd = 0.01;
  Swift s(p, kMss);
  s.on_ack(rtt_sample(0, 1000));  // srtt 1 ms; above target: decrease
  double w = s.cwnd_pkts();
  ASSERT_LT(w, 1);
  // One packet every RTT / cwnd.
  EXPECT_NEAR(static_cast<double>(s.pacing_gap_ns(kMss)), s.srtt_ns() / w, 2.0);
  EXPECT_TRUE(s.can_send(0, kMss)) << "one packet may always be in flight";
  EXPECT_FALSE(s.can_send(kMss, kMss));
  Swift big(swift_params(), kMss);
  EXPECT_EQ(big.pacing_gap_ns(kMss), 0u) << "no pacing at cwnd >= 1";
}

TEST(SwiftTest, ResetsAfterRepeatedTimeouts) {
  SwiftParams p = swift_params();
  Swift s(p, kMss);
  for (int i = 1; i < p.retx_reset_threshold; ++i) {
    s.on_loss(i * 10000000ull, true);
    EXPECT_GT(s.cwnd_pkts(), p.min_cwnd);
  }
  s.on_loss(100000000ull, true);
  EXPECT_DOUBLE_EQ(s.cwnd_pkts(), p.min_cwnd);
  // An ACK clears the count.
  s.on_ack(rtt_sample(200000000ull, 5));
  EXPECT_EQ(s.retransmit_count(), 0);
}

// TIMELY's RTT leaves out the segment's serialization at line rate, and by
// default the host delay floor (smallest RTT seen).
TEST(TimelyTest, SerializationAndHostFloorAreNotQueueing) {
  TimelyParams p = paper_timely();
  const uint32_t seg = 65536;
  Timely t(p, false, 1e9, seg);  // 64 KiB at 1 Gb/s: 524 us on the wire
  t.set_rate_for_testing(0.5e9);
  CcSample s = rtt_sample(1000, 524.288 + 30);
  s.segment_bytes = seg;
  t.on_ack(s);
  EXPECT_DOUBLE_EQ(t.rate_bps(), 0.5e9 + p.add_rate_bps) << "30 us < T_low";

  TimelyParams f;  // default: thresholds count from the smallest RTT
  Timely u(f, false, kLine, kMss);
  u.set_rate_for_testing(10e9);
  u.on_ack(rtt_sample(1000, 300));  // the host floor: no queue
  u.on_ack(rtt_sample(2000, 320));  // 20 us above it: below T_low
  EXPECT_DOUBLE_EQ(u.rate_bps(), 10e9 + 2 * f.add_rate_bps);
  u.on_ack(rtt_sample(3000, 300 + 1000));  // 1000 us above: > T_high
  EXPECT_NEAR(u.rate_bps(),
              (10e9 + 2 * f.add_rate_bps) * (1 - f.beta * (1 - 500.0 / 1000)),
              1);
  // The window still covers the whole RTT.
  EXPECT_GE(u.cwnd_bytes(), u.rate_bps() / 8 * 1300e-6 * f.window_rtts - 1);
}

// The target Swift applies adds the delay floor and room for our packets.
TEST(SwiftTest, TargetCountsFromFloorAndLeavesRoomForPackets) {
  SwiftParams p = swift_params();
  p.target_from_min_delay = 1;
  p.target_queue_pkts = 2;
  const uint32_t seg = 65536;
  Swift s(p, seg, 1e9);  // a 64 KiB packet is 524 us at 1 Gb/s
  const double room = 2 * 524.288;
  EXPECT_NEAR(s.effective_target_us(0), s.target_delay_us(0) + room, 1e-6);
  CcSample a = rtt_sample(1000, 524.288 + 150);  // 150 us of host delay
  a.segment_bytes = seg;
  s.on_ack(a);
  EXPECT_NEAR(s.effective_target_us(0), s.target_delay_us(0) + room + 150,
              1e-6);
  // One other packet of ours ahead in the queue (524 us) is no congestion.
  const double w = s.fabric_cwnd();
  CcSample b = rtt_sample(2000, 524.288 + 150 + 524.288);
  b.segment_bytes = seg;
  s.on_ack(b);
  EXPECT_GT(s.fabric_cwnd(), w);
}

// As for TIMELY: a measured fabric delay of 0 leaves the fabric window
// growing, however long the receiver held the packet.
TEST(SwiftTest, AMeasuredFabricDelayOfZeroIsZero) {
  SwiftParams p = swift_params();
  p.endpoint_target_us = 1000;  // the endpoint window is not under test
  Swift s(p, kMss);
  const double w0 = s.fabric_cwnd();
  CcSample x = rtt_sample(1000, 300);
  x.delay_split = true;
  x.endpoint_delay_ns = x.rtt_ns;
  x.fabric_delay_ns = 0;
  s.on_ack(x);
  EXPECT_NEAR(s.fabric_cwnd(), w0 + 1.0 / w0, 1e-9);
}

TEST(SwiftTest, EndpointWindowSeesOnlyEndpointDelay) {
  SwiftParams p = swift_params();
  p.endpoint_target_us = 50;
  Swift s(p, kMss);
  CcSample x = rtt_sample(0, 300);
  x.endpoint_delay_ns = 290000;  // receiver host is the bottleneck
  x.fabric_delay_ns = 10000;
  x.delay_split = true;
  s.on_ack(x);
  EXPECT_GT(s.fabric_cwnd(), p.init_cwnd) << "fabric is fine";
  EXPECT_LT(s.endpoint_cwnd(), p.init_cwnd) << "endpoint is not";
  EXPECT_DOUBLE_EQ(s.cwnd_pkts(), s.endpoint_cwnd());
}

// A flow that starts behind a queue other flows hold sees only queued
// samples: on its own it takes the queue as its floor and aims above
// them. Sharing the floor with the flows to the same peer gives it theirs.
TEST(SwiftTest, FlowsToOnePeerAimAtTheSharedFloor) {
  SwiftParams p = swift_params();
  p.target_from_min_delay = 1;
  auto floor = std::make_shared<DelayFloor>();
  Swift first(p, kMss), late(p, kMss), alone(p, kMss);
  first.share_delay_floor(floor);
  first.on_ack(rtt_sample(1000, 10));  // before any queue: 10 us
  late.share_delay_floor(floor);
  late.on_ack(rtt_sample(2000, 60));  // behind 50 us of queue
  alone.on_ack(rtt_sample(2000, 60));
  EXPECT_NEAR(late.effective_target_us(0) - late.target_delay_us(0), 10, 1e-6);
  EXPECT_NEAR(alone.effective_target_us(0) - alone.target_delay_us(0), 60,
              1e-6);
  // So the late flow backs off from the queue instead of growing into it.
  const double w = late.fabric_cwnd();
  late.on_ack(rtt_sample(100000, 60));
  EXPECT_LT(late.fabric_cwnd(), w);
  // A floor seen before joining counts: the table's floor drops to it.
  auto other = std::make_shared<DelayFloor>();
  other->observe(30000);
  alone.share_delay_floor(other);
  EXPECT_EQ(other->floor_ns(), 30000u) << "60 us does not raise it";
  Swift early(p, kMss);
  early.on_ack(rtt_sample(1000, 5));
  early.share_delay_floor(other);
  EXPECT_EQ(other->floor_ns(), 5000u);
  EXPECT_NE(late.state().find("floor_us=10.0"), std::string::npos)
      << late.state();
}

// TIMELY with thresholds from the smallest RTT seen has the same trap:
// a flow whose first RTTs include others' queue counts only what is above
// them, and sees no congestion. With the peer's floor shared it does.
TEST(TimelyTest, ThresholdsCountFromTheSharedFloor) {
  TimelyParams p = paper_timely();
  p.thresholds_from_min_rtt = 1;
  auto floor = std::make_shared<DelayFloor>();
  Timely first(p, true, kLine, kMss), late(p, true, kLine, kMss),
      alone(p, true, kLine, kMss);
  first.share_delay_floor(floor);
  first.on_ack(rtt_sample(1000, 10));
  late.share_delay_floor(floor);
  for (Timely* t : {&late, &alone}) {
    t->set_rate_for_testing(10e9);
    t->on_ack(rtt_sample(2000, 1010));  // behind 1 ms of queue: 2x T_high
  }
  EXPECT_LT(late.rate_bps(), 10e9) << "1000 us above the floor: decrease";
  EXPECT_GE(alone.rate_bps(), 10e9) << "its own floor: nothing above it";
}

// Flows of one peer on several engine threads lower one floor at once:
// it ends at the smallest delay any of them observed, and a table hands
// every connection to one peer the same floor.
TEST(DelayFloorTest, ConcurrentObserversKeepTheMinimum) {
  DelayFloorTable table;
  auto f = table.get("10.0.0.2");
  EXPECT_EQ(table.get("10.0.0.2"), f);
  EXPECT_NE(table.get("10.0.0.3"), f);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(f->floor_ns(), DelayFloor::kNone);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&f, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 100000; ++i) f->observe(1000 + rng() % 1000000);
      f->observe(100 + t);  // thread 0's 100 is the smallest
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(f->floor_ns(), 100u);
}

TEST(CreditTest, PullPacerNeverExceedsLineRate) {
  CreditParams p;
  p.grant_bytes = 16384;
  const double rate = 10e9;  // 1.25 bytes/ns
  PullPacer pacer(p, rate, 64, 0);
  std::mt19937_64 rng(5);
  uint64_t granted = 0;
  PullPacer::Grant g[16];
  for (uint64_t t = 0; t < 2000000; t += 1000 + rng() % 3000) {
    if (rng() % 4 == 0) pacer.add_demand(rng() % 64, rng() % 200000, false);
    int n = pacer.poll(t, g, 16);
    for (int i = 0; i < n; ++i) granted += g[i].bytes;
    ASSERT_LE(static_cast<double>(granted),
              rate / 8e9 * t + pacer.bucket_bytes())
        << "at " << t << " ns";
  }
  EXPECT_GT(granted, 0u);
}

// Granted payload plus each packet's headers fills the line exactly: the
// engine's software NIC (8,896-byte packets, 104 bytes of headers) and
// the simulator's packets alike.
TEST(CreditTest, PayloadRateLeavesRoomForHeaders) {
  const double line = 1e9;
  const double r = PullPacer::payload_rate_bps(line, 8896, 104);
  EXPECT_NEAR(r, 1e9 * 8896 / 9000, 1);
  // Packets of r's payload and their headers take the whole line.
  EXPECT_NEAR(r / 8896 * 9000, line, 1);
  EXPECT_EQ(PullPacer::payload_rate_bps(line, 0, 104), line);  // unknown
}

// A late poll may grant up to the bucket (200 us of line rate by default,
// at least two grants) at once, and no more.
TEST(CreditTest, BucketBoundsTheBurstAfterALatePoll) {
  CreditParams p;
  p.grant_bytes = 10000;
  PullPacer pacer(p, 10e9, 4, 0);  // 200 us at 10 Gb/s = 250 KB
  EXPECT_DOUBLE_EQ(pacer.bucket_bytes(), 250000);
  pacer.add_demand(0, 10000000, false);
  PullPacer::Grant g[64];
  int n = pacer.poll(10000000, g, 64);  // 10 ms late
  uint64_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes += g[i].bytes;
  EXPECT_EQ(bytes, 250000u);
  CreditParams q;
  q.grant_bytes = 65536;
  PullPacer slow(q, 1e9, 4, 0);  // 200 us at 1 Gb/s is less than 2 grants
  EXPECT_DOUBLE_EQ(slow.bucket_bytes(), 2 * 65536);
}

TEST(CreditTest, SpeculativeCreditForNewFlowsAndRoundRobin) {
  CreditParams p;
  p.spec_bytes = 30000;
  p.grant_bytes = 10000;
  PullPacer pacer(p, 100e9, 4, 0);
  pacer.add_demand(1, 100000, true);
  EXPECT_EQ(pacer.demand(1), 70000u) << "first spec bytes need no grant";
  pacer.add_demand(2, 100000, true);
  PullPacer::Grant g[8];
  std::vector<uint32_t> order;
  for (uint64_t t = 1000; order.size() < 6; t += 1000) {
    int n = pacer.poll(t, g, 8);
    for (int i = 0; i < n; ++i) order.push_back(g[i].flow);
  }
  for (size_t i = 1; i < order.size(); ++i) EXPECT_NE(order[i], order[i - 1]);
  CreditSender s(p, 100e9);
  EXPECT_TRUE(s.can_send(0, 30000));
  s.on_send(0, 30000);
  EXPECT_FALSE(s.can_send(0, 1)) << "no credit, no sending";
  s.on_credit(10000);
  EXPECT_TRUE(s.can_send(0, 10000));
}

TEST(TimingWheelTest, FiresInOrderWithBoundedError) {
  const uint64_t slot = 1000;  // 1 us
  TimingWheel w(slot, 256, 20000, 0);
  std::mt19937_64 rng(1);
  std::vector<uint64_t> when(10000);
  for (size_t i = 0; i < when.size(); ++i) {
    when[i] = rng() % 5000000;  // up to ~20 revolutions ahead
    ASSERT_TRUE(w.schedule(i, when[i]));
  }
  uint64_t fired[64];
  uint64_t last_when = 0;
  size_t total = 0;
  for (uint64_t now = 0; now <= 5000000 + slot; now += 700) {
    size_t n = w.advance(now, fired, 64);
    while (n > 0) {
      for (size_t i = 0; i < n; ++i) {
        uint64_t t = when[fired[i]];
        ASSERT_LE(t, now) << "fired early";
        ASSERT_LT(now - t, 700 + slot) << "fired late";
        ASSERT_GE(t, last_when) << "out of order";
        last_when = t;
        ++total;
      }
      n = w.advance(now, fired, 64);
    }
  }
  EXPECT_EQ(total, when.size());
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimingWheelTest, CapacityAndPastTimes) {
  TimingWheel w(100, 8, 2, 10000);
  EXPECT_TRUE(w.schedule(1, 5));  // in the past: fires next advance
  EXPECT_TRUE(w.schedule(2, 20000));
  EXPECT_FALSE(w.schedule(3, 30000)) << "full";
  uint64_t out[4];
  EXPECT_EQ(w.advance(10000, out, 4), 1u);
  EXPECT_EQ(out[0], 1u);
  EXPECT_EQ(w.next_deadline(), 20000u);
}

TEST(PathSelectorTest, PowerOfTwoChoicesAvoidsTheSlowestPath) {
  PathSelector ps(4, 42);
  for (uint32_t p = 0; p < 4; ++p) ps.on_rtt(p, 10000 + p * 1000);
  ps.on_rtt(3, 1000000);  // path 3 is congested
  std::vector<int> count(4);
  for (int i = 0; i < 10000; ++i) ++count[ps.choose()];
  EXPECT_EQ(count[3], 0) << "the worst path loses every comparison";
  EXPECT_GT(count[0], count[2]) << "faster paths are chosen more";
  // Unsampled paths (srtt 0) are tried before measured ones.
  PathSelector fresh(2, 1);
  fresh.on_rtt(0, 5000);
  EXPECT_EQ(fresh.choose(), 1u);
}

TEST(FactoryTest, NamesParamsAndErrors) {
  for (const char* n :
       {"none", "timely", "timely_patched", "swift", "credit"}) {
    auto cc = make_cc(n, CcParams(), kMss, kLine);
    ASSERT_TRUE(cc.ok()) << n << ": " << cc.status();
    EXPECT_STREQ((*cc)->name(), n);
  }
  EXPECT_EQ(make_cc("cubic", CcParams(), kMss, kLine).status().code(),
            StatusCode::kInvalidArgument);
  auto p = CcParams::parse("t_low_us=20, t_high_us=400");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(make_cc("timely", *p, kMss, kLine).ok());
  auto typo = make_cc("timely", *CcParams::parse("t_lo_us=20"), kMss, kLine);
  EXPECT_NE(typo.status().message().find("t_lo_us"), std::string::npos);
  auto bad = make_cc("swift", *CcParams::parse("max_mdf=1.5"), kMss, kLine);
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(CcParams::parse("beta").ok());
  EXPECT_FALSE(CcParams::parse("beta=abc").ok());
}

}  // namespace
}  // namespace uccl::cc
