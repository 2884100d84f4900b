// The ECN and INT controllers' unit tests: DCTCP's alpha and once-per-RTT
// cut, DCQCN's CNP cut, alpha decay and increase stages, HPCC's
// utilization from telemetry and its additive/multiplicative steps.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cc/cc.h"
#include "cc/dcqcn.h"
#include "cc/dctcp.h"
#include "cc/hpcc.h"

namespace uccl::cc {
namespace {

constexpr double kLine = 100e9;
constexpr uint32_t kMss = 4096;
constexpr uint64_t kRttNs = 10000;  // 10 us

CcSample ack(uint64_t now_ns, bool ecn) {
  CcSample s;
  s.now_ns = now_ns;
  s.rtt_ns = kRttNs;
  s.acked_bytes = kMss;
  s.acked_packets = 1;
  s.ecn = ecn;
  return s;
}

TEST(DctcpTest, AlphaTracksTheMarkedFraction) {
  DctcpParams p;
  p.init_alpha = 0;
  p.max_cwnd = 20;  // hold the window: only alpha is under test
  Dctcp d(p, kMss);
  // Four ACKs per RTT window, one of them marked: F = 1/4 every window.
  uint64_t t = 0;
  for (int w = 0; w < 200; ++w) {
    for (int i = 0; i < 4; ++i) {
      t += kRttNs / 4;
      d.on_ack(ack(t, i == 0));
    }
  }
  EXPECT_NEAR(d.alpha(), 0.25, 0.01);
}

TEST(DctcpTest, CutsByHalfAlphaOncePerWindow) {
  DctcpParams p;  // alpha starts at 1: the first cut halves
  Dctcp d(p, kMss);
  d.on_ack(ack(1000, false));  // slow start: 10 -> 11 packets
  EXPECT_TRUE(d.in_slow_start());
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), 11);
  d.on_ack(ack(2000, true));
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), 5.5);
  EXPECT_FALSE(d.in_slow_start());
  d.on_ack(ack(3000, true));  // same window: no second cut
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), 5.5);
  // Unmarked ACKs: one packet per window's worth of ACKs.
  const double before = d.cwnd_pkts();
  d.on_ack(ack(4000, false));
  EXPECT_NEAR(d.cwnd_pkts(), before + 1 / before, 1e-12);
  // A new window (an RTT later) may cut again, with the updated alpha.
  d.on_ack(ack(1000 + 2 * kRttNs, true));
  EXPECT_LT(d.cwnd_pkts(), before);
  EXPECT_LT(d.alpha(), 1.0);  // that window had unmarked bytes
}

TEST(DctcpTest, LossesHalveOncePerRttAndTimeoutsReset) {
  DctcpParams p;
  Dctcp d(p, kMss);
  d.on_ack(ack(1000, false));  // 11 packets, srtt known
  d.on_loss(2000, false);
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), 5.5);
  d.on_loss(3000, false);  // same round trip: one congestion event
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), 5.5);
  d.on_loss(3000 + kRttNs, false);
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), 2.75);
  d.on_loss(4000 + kRttNs, true);
  EXPECT_DOUBLE_EQ(d.cwnd_pkts(), p.min_cwnd);
}

TEST(DcqcnTest, ACnpCutsByHalfAlphaAndCnpsArePaced) {
  DcqcnParams p;
  Dcqcn d(p, kLine, kMss);
  EXPECT_DOUBLE_EQ(d.rate_bps(), kLine);
  d.on_ack(ack(1000, false));  // timers start
  d.on_ack(ack(2000, true));   // alpha 1: the rate halves
  EXPECT_DOUBLE_EQ(d.rate_bps(), kLine / 2);
  EXPECT_DOUBLE_EQ(d.target_rate_bps(), kLine);
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0);   // (1-g) * 1 + g
  d.on_ack(ack(2000 + 49000, true));  // within 50 us: the same CNP
  EXPECT_EQ(d.cnps(), 1u);
  d.on_ack(ack(2000 + 50000, true));
  EXPECT_EQ(d.cnps(), 2u);
  EXPECT_LT(d.rate_bps(), kLine / 2);
}

TEST(DcqcnTest, AlphaDecaysWithoutCnps) {
  DcqcnParams p;
  Dcqcn d(p, kLine, kMss);
  d.on_ack(ack(0, false));
  // Ten alpha periods with no CNP: alpha = (1 - g)^10.
  d.on_ack(ack(10 * 55000 + 1, false));
  EXPECT_NEAR(d.alpha(), std::pow(1 - p.g, 10), 1e-12);
}

TEST(DcqcnTest, RecoversFastThenAdditivelyThenHyper) {
  DcqcnParams p;
  p.byte_counter_kb = 1e9;  // timer events only
  Dcqcn d(p, kLine, kMss);
  d.on_ack(ack(0, false));
  d.on_ack(ack(1, true));  // cut at t=1: rc = 50G, rt = 100G
  const double rt = d.target_rate_bps();
  double rc = d.rate_bps();
  // Fast recovery: each timer event before the F-th halves the distance
  // to rt (a stage counter below F, as ns-3's DCQCN counts them).
  for (int i = 1; i < p.fast_recovery_steps; ++i) {
    d.on_ack(ack(1 + i * 55000, false));
    rc = (rt + rc) / 2;
    EXPECT_NEAR(d.rate_bps(), rc, 1) << "step " << i;
    EXPECT_DOUBLE_EQ(d.target_rate_bps(), rt);
  }
  // Then the target itself moves: additive increase (byte stage < F),
  // here capped at line rate.
  d.on_ack(ack(1 + p.fast_recovery_steps * 55000, false));
  EXPECT_DOUBLE_EQ(d.target_rate_bps(), kLine);
  // From a lower cut the additive step is visible.
  Dcqcn e(p, kLine, kMss);
  e.on_ack(ack(0, false));
  e.on_ack(ack(1, true));
  e.on_ack(ack(1 + 50000, true));  // second cut: rt = 50G
  const double rt2 = e.target_rate_bps();
  // Four fast-recovery events, then two additive ones.
  for (int i = 1; i <= 6; ++i) e.on_ack(ack(1 + 50000 + i * 55000, false));
  EXPECT_NEAR(e.target_rate_bps(), rt2 + 2 * p.rate_ai_frac * kLine, 1);
}

TEST(DcqcnTest, TheByteCounterRaisesTheRateToo) {
  DcqcnParams p;
  p.byte_counter_kb = 64;
  p.increase_timer_us = 1e6;  // byte events only
  Dcqcn d(p, kLine, kMss);
  d.on_ack(ack(0, false));
  d.on_ack(ack(1, true));
  const double cut = d.rate_bps();
  d.on_send(2, 64 * 1024);
  EXPECT_NEAR(d.rate_bps(), (cut + kLine) / 2, 1);
}

// INT of one path: hop i sent tx[i] bytes by `ts` and holds q[i].
CcSample int_ack(uint64_t ts, std::vector<IntHop>* hops) {
  CcSample s = ack(ts, false);
  s.int_hops = hops->data();
  s.int_count = static_cast<uint32_t>(hops->size());
  return s;
}

TEST(HpccTest, ALoadedHopCutsTheWindowTowardsEta) {
  HpccParams p;
  p.base_rtt_us = 10;
  Hpcc h(p, kLine, kMss);
  const double bdp = kLine / 8 * 10e-6;  // 125 KB
  EXPECT_DOUBLE_EQ(h.cwnd_bytes(), bdp);
  EXPECT_TRUE(h.wants_int());
  // Two hops; the second runs at line rate with one BDP queued: U = 2.
  std::vector<IntHop> a = {{0, 0, 0, kLine}, {0, 0, 125000, kLine}};
  h.on_ack(int_ack(0, &a));
  const uint64_t t = 10000;  // one T later
  std::vector<IntHop> b = {{t, 62500, 0, kLine}, {t, 125000, 125000, kLine}};
  h.on_ack(int_ack(t, &b));
  EXPECT_NEAR(h.utilization(), 2.0, 1e-9);
  const double w_ai = bdp * (1 - p.eta) / p.expected_flows;
  EXPECT_NEAR(h.cwnd_bytes(), bdp / (2.0 / p.eta) + w_ai, 1e-6);
  EXPECT_EQ(h.stage(), 0);
}

TEST(HpccTest, RecordsFromAnotherSwitchGiveNoRate) {
  HpccParams p;
  p.base_rtt_us = 10;
  Hpcc h(p, kLine, kMss);
  std::vector<IntHop> a = {{0, 1000000, 0, kLine}};
  h.on_ack(int_ack(0, &a));
  // A later record whose byte counter is lower: another port's (a sprayed
  // flow's ACK over another path), not a wrapped-around rate.
  std::vector<IntHop> b = {{10000, 500, 0, kLine}};
  h.on_ack(int_ack(10000, &b));
  EXPECT_LT(h.utilization(), 1.0);
  EXPECT_DOUBLE_EQ(h.cwnd_bytes(), kLine / 8 * 10e-6);  // unchanged: one BDP
}

TEST(HpccTest, AnIdlePathGrowsAdditivelyThenMultiplicatively) {
  HpccParams p;
  p.base_rtt_us = 10;
  p.expected_flows = 1;
  Hpcc h(p, kLine, kMss);
  const double bdp = kLine / 8 * 10e-6;
  const double w_ai = bdp * (1 - p.eta);
  std::vector<IntHop> hop = {{0, 0, 0, kLine}};
  h.on_ack(int_ack(0, &hop));
  uint64_t t = 0, tx = 0;
  auto step = [&](double util, uint64_t q) {  // one T later
    t += 10000;
    tx += static_cast<uint64_t>(util * bdp);
    hop = {{t, tx, q, kLine}};
    h.on_ack(int_ack(t, &hop));
  };
  // Two BDPs queued at line rate (the smaller of two readings counts):
  // U = 2 + 1, the window falls to eta / U of itself.
  step(1.0, 250000);
  step(1.0, 250000);
  EXPECT_NEAR(h.utilization(), 3.0, 1e-9);
  EXPECT_NEAR(h.reference_window(), bdp / (3.0 / p.eta) + w_ai, 1e-6);
  // The link goes idle (20% used): additive steps, max_stage of them.
  for (int i = 1; i <= p.max_stage; ++i) {
    const double before = h.reference_window();
    step(0.2, 0);
    EXPECT_NEAR(h.utilization(), 0.2, 1e-9);
    EXPECT_NEAR(h.reference_window(), before + w_ai, 1e-6) << i;
    EXPECT_EQ(h.stage(), i);
  }
  // Then one multiplicative step towards eta (capped at one BDP).
  const double before = h.reference_window();
  step(0.2, 0);
  EXPECT_NEAR(h.reference_window(),
              std::min(bdp, before / (0.2 / p.eta) + w_ai), 1e-6);
  EXPECT_EQ(h.stage(), 0);
}

TEST(EcnIntCc, MakeCcKnowsThemAndRefusesBadParameters) {
  for (const char* name : {"dctcp", "dcqcn", "hpcc"}) {
    auto cc = make_cc(name, CcParams(), kMss, kLine);
    ASSERT_TRUE(cc.ok()) << name;
    EXPECT_STREQ((*cc)->name(), name);
  }
  EXPECT_FALSE(make_cc("dctcp", *CcParams::parse("g=0"), kMss, kLine).ok());
  EXPECT_FALSE(
      make_cc("dcqcn", *CcParams::parse("rate_ai_frac=0"), kMss, kLine).ok());
  EXPECT_FALSE(make_cc("hpcc", *CcParams::parse("eta=1"), kMss, kLine).ok());
  EXPECT_FALSE(make_cc("hpcc", *CcParams::parse("etta=0.9"), kMss, kLine).ok());
}

}  // namespace
}  // namespace uccl::cc
