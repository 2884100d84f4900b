// Simulator tests: the shared loss-recovery rules, TIMELY's per-segment
// updates and the pull pacer's charge, then end-to-end runs (ideal FCT,
// every byte delivered once under drops, determinism, ECMP vs spraying,
// credit incast) and the metrics a run sets.
#include "cc/sim/sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "cc/credit.h"
#include "cc/recovery.h"
#include "cc/sim/config.h"
#include "cc/timely.h"
#include "tests/cc/sim_test_util.h"

namespace uccl::sim {
namespace {

TEST(Recovery, RtoFollowsRfc6298WithFloorAndBackoff) {
  cc::RtoEstimator r(1000, 1000000, 50000);
  EXPECT_EQ(r.rto_ns(), 50000u);  // before any sample
  r.on_rtt(10000);
  EXPECT_EQ(r.srtt_ns(), 10000u);
  EXPECT_EQ(r.rttvar_ns(), 5000u);
  EXPECT_EQ(r.rto_ns(), 10000u + 4 * 5000u);
  // Steady samples shrink rttvar; the RTO stops at 1.5 x srtt.
  for (int i = 0; i < 100; ++i) r.on_rtt(10000);
  EXPECT_EQ(r.rto_ns(), 15000u);
  EXPECT_EQ(r.backed_off_ns(1), 30000u);
  EXPECT_EQ(r.backed_off_ns(30), 1000000u);  // capped at max
  cc::RtoEstimator lo(20000, 100000, 50000);
  lo.on_rtt(100);
  EXPECT_EQ(lo.rto_ns(), 20000u);  // clamped to min
}

// Eifel response (RFC 4015): a timeout proved spurious by a delivery
// `rtt` after sending raises srtt to it and rttvar to half of it, so the
// next timer waits srtt + 4 x rttvar = 3 x rtt; normal samples then bring
// it back down. Values from the RFC's formulas, not the implementation.
TEST(Recovery, SpuriousTimeoutRaisesTheTimerToThreeTimesTheDelay) {
  cc::RtoEstimator r(1000, 1000000, 50000);
  for (int i = 0; i < 100; ++i) r.on_rtt(10000);  // rto 15 us (1.5 srtt)
  r.on_spurious_timeout(40000);
  EXPECT_EQ(r.srtt_ns(), 40000u);
  EXPECT_EQ(r.rttvar_ns(), 20000u);
  EXPECT_EQ(r.rto_ns(), 40000u + 4 * 20000u);
  // A shorter delay than what the estimator holds changes nothing.
  r.on_spurious_timeout(1000);
  EXPECT_EQ(r.rto_ns(), 120000u);
  // Clamped like any estimate.
  r.on_spurious_timeout(900000);
  EXPECT_EQ(r.rto_ns(), 1000000u);
  // Samples smooth it back: srtt 7/8 + 1/8 sample, rttvar 3/4 + 1/4 error.
  cc::RtoEstimator e(1000, 1000000, 50000);
  e.on_rtt(10000);
  e.on_spurious_timeout(40000);
  e.on_rtt(10000);
  EXPECT_EQ(e.srtt_ns(), (7 * 40000u + 10000u) / 8);
  EXPECT_EQ(e.rttvar_ns(), (3 * 20000u + 30000u) / 4);
}

// One sample per round trip, the largest: ACKs of 10 us with one of 50 us
// among them give the estimator 10, then 50 when the round trip ends, and
// the 10 us ACKs that follow within the next round trip do not shrink the
// timer again (per-ACK samples would cut rttvar by a quarter each).
TEST(Recovery, RttSamplerFeedsEachRoundTripsLargestSample) {
  cc::RtoEstimator r(1000, 10000000, 50000);
  cc::RttSampler s;
  s.add(10000, 0, &r);  // the first sample goes in at once
  EXPECT_EQ(r.srtt_ns(), 10000u);
  uint64_t now = 1000;
  for (int i = 0; i < 8; ++i, now += 1000) s.add(10000, now, &r);
  s.add(50000, now, &r);  // still within the round trip: held
  EXPECT_EQ(r.srtt_ns(), 10000u);
  s.add(10000, 10000, &r);  // the round trip ends: its largest goes in
  EXPECT_EQ(r.srtt_ns(), (7 * 10000u + 50000u) / 8);
  EXPECT_EQ(r.rttvar_ns(), (3 * 5000u + 40000u) / 4);
  const uint64_t rto = r.rto_ns();
  EXPECT_EQ(rto, (7 * 10000u + 50000u) / 8 + 4 * ((3 * 5000u + 40000u) / 4));
  for (int i = 0; i < 9; ++i) s.add(10000, 10000 + 1000 * i, &r);
  EXPECT_EQ(r.rto_ns(), rto);
}

// RACK's reordering window grows in quarters of the min RTT with the
// multiplier (RFC 8985 6.2), and never past srtt.
TEST(Recovery, ReorderWindowGrowsWithSpuriousRetransmissionsUpToSrtt) {
  EXPECT_EQ(cc::rack_reorder_window_ns(400000, 1), 100000u);
  EXPECT_EQ(cc::rack_reorder_window_ns(400000, 3), 300000u);
  EXPECT_EQ(cc::rack_reorder_window_ns(400000, 8, 500000), 500000u);
  EXPECT_EQ(cc::rack_reorder_window_ns(40000, 2, 500000), 20000u);  // floor
}

TEST(Recovery, TailLossProbeTimeoutFollowsSrttAndVarianceBelowTheRto) {
  EXPECT_EQ(cc::tlp_timeout_ns(0, 0, 20000, 5000000), 0u);  // no sample
  // Steady RTTs: 2 x srtt + ACK delay.
  EXPECT_EQ(cc::tlp_timeout_ns(10000, 1000, 20000, 5000000), 40000u);
  // Swinging RTTs: srtt + 4 x rttvar when that is longer.
  EXPECT_EQ(cc::tlp_timeout_ns(10000, 5000, 20000, 5000000), 50000u);
  EXPECT_EQ(cc::tlp_timeout_ns(3000000, 0, 20000, 5000000), 5000000u);  // RTO
}

TEST(Recovery, RackDeclaresLossOnlyAfterALaterDeliveryAndItsRtt) {
  const uint64_t reo = cc::rack_reorder_window_ns(40000);
  EXPECT_EQ(reo, 20000u);                                  // floor
  EXPECT_EQ(cc::rack_reorder_window_ns(400000), 100000u);  // min_rtt / 4
  // Nothing delivered after it: never lost by RACK.
  EXPECT_FALSE(cc::rack_lost(1000, 0, 0, reo, 10000000));
  EXPECT_FALSE(cc::rack_lost(5000, 4000, 30000, reo, 10000000));
  // Delivered later packet sent at 2000 with RTT 30 us: lost after
  // 30 + 20 us from its own send.
  EXPECT_FALSE(cc::rack_lost(1000, 2000, 30000, reo, 1000 + 49999));
  EXPECT_TRUE(cc::rack_lost(1000, 2000, 30000, reo, 1000 + 50000));
  // Packets stamped with one clock reading are ordered by sequence number
  // (serial arithmetic across the wrap): the earlier one is lost once the
  // later one's RTT plus the window have passed; the later one never is.
  EXPECT_TRUE(cc::rack_sent_before(1000, 7, 1000, 8));
  EXPECT_FALSE(cc::rack_sent_before(1000, 8, 1000, 7));
  EXPECT_TRUE(cc::rack_sent_before(1000, 0xfffffffe, 1000, 1));
  EXPECT_TRUE(cc::rack_lost(1000, 7, 1000, 8, 30000, reo, 1000 + 50000));
  EXPECT_FALSE(cc::rack_lost(1000, 8, 1000, 7, 30000, reo, 1000 + 50000));
  EXPECT_FALSE(cc::rack_lost(1000, 7, 1000, 8, 30000, reo, 1000 + 49999));
  // A retransmission acked sooner than the min RTT is ambiguous.
  EXPECT_FALSE(cc::rack_unambiguous(true, 1000, 10000, 5000));
  EXPECT_TRUE(cc::rack_unambiguous(true, 1000, 10000, 11000));
  EXPECT_TRUE(cc::rack_unambiguous(false, 1000, 10000, 2000));
}

TEST(Timely, SegmentBytesUpdatesOncePerSegment) {
  cc::TimelyParams p;
  p.thresholds_from_min_rtt = 0;
  p.segment_bytes = 65536;
  p.init_rate_bps = 10e9;
  cc::Timely t(p, false, 100e9, 4096);
  cc::CcSample s;
  s.rtt_ns = 10000;  // below T_low: increase
  s.acked_bytes = 4096;
  s.acked_packets = 1;
  for (int i = 0; i < 15; ++i) {
    s.now_ns += 1000;
    t.on_ack(s);
    EXPECT_DOUBLE_EQ(t.rate_bps(), 10e9) << "ack " << i;
  }
  s.now_ns += 1000;
  t.on_ack(s);  // the 16th 4 KB ACK completes a 64 KB segment
  EXPECT_DOUBLE_EQ(t.rate_bps(), 10e9 + p.add_rate_bps);
}

TEST(PullPacer, UnscheduledArrivalsUseTokens) {
  cc::CreditParams p;
  p.grant_bytes = 4096;
  p.bucket_us = 0;
  p.rate_frac = 1;
  const double rate = 8e9;  // 1 byte/ns
  cc::PullPacer a(p, rate, 1, 0), b(p, rate, 1, 0);
  a.add_demand(0, 1 << 20, false);
  b.add_demand(0, 1 << 20, false);
  b.charge_unscheduled(40960);  // ten packets came in unsolicited
  cc::PullPacer::Grant g[64];
  uint64_t ga = 0, gb = 0;
  for (uint64_t t = 1000; t <= 100000; t += 1000) {
    for (int i = 0, n = a.poll(t, g, 64); i < n; ++i) ga += g[i].bytes;
    for (int i = 0, n = b.poll(t, g, 64); i < n; ++i) gb += g[i].bytes;
  }
  EXPECT_LE(ga, 100000u + 2 * 4096u);  // line rate over 100 us, + bucket
  EXPECT_GE(ga, 100000u - 4096u);
  EXPECT_NEAR(static_cast<double>(ga - gb), 40960.0, 4096.0);
}

TEST(Sim, ReceiverDelayIsEndpointDelayForSwiftsEndpointWindow) {
  // ACKs held 200 us at the receiver: above Swift's 100 us endpoint
  // target, its endpoint window shrinks and the flow slows down; with a
  // target above the delay the same flow runs free. The fabric window sees
  // the RTT without that delay either way.
  auto goodput = [](double target_us) {
    SimConfig c = dumbbell(1, "swift");
    c.rx_delay_us = 200;
    // A window for the 200 us RTT from the start (one BDP ~ 630 packets).
    c.cc_params = "init_cwnd=800,max_cwnd=2000,endpoint_target_us=" +
                  std::to_string(target_us);
    c.duration_ms = 20;
    c.flows.push_back(FlowSpec{0, 1, 0, 0, 0});
    auto r = run(c);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->metrics.at("goodput_gbps") : 0.0;
  };
  const double held = goodput(100), free = goodput(1000);
  EXPECT_GT(free, 50);
  EXPECT_LT(held, 0.5 * free);
  SimConfig bad = dumbbell(1, "none");
  bad.rx_delay_us = -1;
  bad.flows.push_back(FlowSpec{0, 1, 4096, 0, 0});
  EXPECT_FALSE(run(bad).ok());
}

TEST(Sim, SingleFlowCompletesAtItsIdealTime) {
  SimConfig c = dumbbell(1, "none");
  c.flows.push_back(FlowSpec{0, 1, 1000000, 0, 0});
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  const FlowResult& f = r->flows[0];
  ASSERT_GT(f.finish_ns, 0u);
  EXPECT_EQ(f.delivered_bytes, 1000000u);
  // No contention: the FCT is store-and-forward's, computed here, not
  // taken from the simulator. Three links (host -> L -> R -> host), 1 us
  // each at 100 Gb/s; 245 packets of 4096 B payload + 64 B header (the
  // last 576 + 64). The first packet crosses all three links (propagation
  // plus its own serialization on each), the rest follow back to back at
  // the line rate.
  const double ser_ns_per_byte = 8.0 / 100.0;  // 100 Gb/s
  const double wire_bytes = 1000000.0 + 245 * 64;
  const double first_bytes = 4096 + 64;
  const double want_ns = 3 * (1000 + first_bytes * ser_ns_per_byte) +
                         (wire_bytes - first_bytes) * ser_ns_per_byte;
  EXPECT_NEAR(static_cast<double>(f.finish_ns), want_ns, 100.0);
  EXPECT_NEAR(static_cast<double>(f.ideal_fct_ns), want_ns, 100.0);
  EXPECT_EQ(r->metrics.at("drops"), 0);
  EXPECT_EQ(r->metrics.at("retransmissions"), 0);
}

TEST(Sim, DropsAreRecoveredAndEveryByteArrivesOnce) {
  // No congestion control into a small buffer: drop-tail losses that the
  // engine's SACK/RACK/RTO rules must repair.
  SimConfig c = dumbbell(4, "none");
  c.buffer_kb = 64;
  c.rto_min_us = 200;
  c.rto_init_us = 200;
  for (uint32_t i = 0; i < 4; ++i) {
    c.flows.push_back(FlowSpec{i, 4, 500000 + i * 1234, 0, 0});
  }
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->metrics.at("drops"), 0);
  EXPECT_GT(r->metrics.at("retransmissions"), 0);
  EXPECT_EQ(r->metrics.at("unfinished_flows"), 0);
  for (const FlowResult& f : r->flows) {
    EXPECT_EQ(f.delivered_bytes, f.spec.bytes);  // counted once per byte
    EXPECT_GT(f.finish_ns, 0u);
  }
  EXPECT_LE(r->metrics.at("max_queue_kb"), 64.0);
}

TEST(Sim, TailLossProbesRepairTailsBeforeTheRto) {
  // An incast into a small buffer drops a flow's last packet, which no
  // later packet can reveal (RACK repairs any loss that a later delivery
  // on its path reveals, a delivered resend included); the probe (the
  // engine's UCCL_TLP) repairs it at ~2 srtt instead of the RTO. Same run
  // without it for comparison.
  SimConfig c = dumbbell(16, "swift");
  c.buffer_kb = 128;
  for (uint32_t i = 0; i < 16; ++i) {
    c.flows.push_back(FlowSpec{i, 16, 64000, 0, 0});
  }
  auto with = run(c);
  c.tlp = false;
  auto without = run(c);
  ASSERT_TRUE(with.ok() && without.ok());
  for (const auto* r : {&*with, &*without}) {
    EXPECT_EQ(r->metrics.at("unfinished_flows"), 0);
    for (const FlowResult& f : r->flows) {
      EXPECT_EQ(f.delivered_bytes, f.spec.bytes);
    }
  }
  for (const char* k : {"drops", "rtos", "tail_loss_probes", "retransmissions",
                        "completion_us"})
    if (with->metrics.count(k))
      printf("%s with=%g without=%g\n", k, with->metrics.at(k),
             without->metrics.at(k));
  EXPECT_GT(without->metrics.at("rtos"), 0) << "the case must lose tails";
  EXPECT_EQ(without->metrics.at("tail_loss_probes"), 0);
  EXPECT_GT(with->metrics.at("tail_loss_probes"), 0);
  EXPECT_LT(with->metrics.at("rtos"), without->metrics.at("rtos"));
  EXPECT_LT(with->metrics.at("completion_us"),
            without->metrics.at("completion_us"));
}

TEST(Sim, SameSeedSameResult) {
  SimConfig c = dumbbell(8, "swift");
  for (uint32_t i = 0; i < 8; ++i) {
    c.flows.push_back(FlowSpec{i, 8, 300000, i * 7000ull, 0});
  }
  auto a = run(c), b = run(c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->events, b->events);
  for (const auto& [k, v] : a->metrics) {
    if (k == "wall_s" || k == "events_per_s") continue;
    EXPECT_EQ(v, b->metrics.at(k)) << k;
  }
}

TEST(Sim, CreditIncastKeepsTheQueueNearEmpty) {
  SimConfig c = dumbbell(16, "credit");
  c.cc_params = "grant_bytes=4096,bucket_us=0,spec_bytes=4096";
  for (uint32_t i = 0; i < 16; ++i) {
    c.flows.push_back(FlowSpec{i, 16, 400000, 0, 0});
  }
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.at("drops"), 0);
  EXPECT_EQ(r->metrics.at("unfinished_flows"), 0);
  // Grants at line rate: at most the speculative packets and a grant or two
  // queue up (16 x 4 KB + slack), where a window protocol would queue more.
  EXPECT_LE(r->metrics.at("bottleneck_max_queue_kb"), 100.0);
  EXPECT_LE(r->metrics.at("completion_over_ideal"), 1.05);
}

TEST(Sim, SwiftSharesFairlyAtSteadyState) {
  SimConfig c = dumbbell(4, "swift");
  c.cc_params = "target_from_min_delay=0";
  c.duration_ms = 6;
  c.jain_from_ms = 4;
  c.jain_to_ms = 6;
  for (uint32_t i = 0; i < 4; ++i) c.flows.push_back(FlowSpec{i, 4, 0, 0, 0});
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->metrics.at("jain"), 0.99);
  EXPECT_GE(r->metrics.at("window_tput_gbps"), 90.0);
}

TEST(Sim, ConvergenceIsMeasuredFromTheFlowSeries) {
  // Credit converges within tens of microseconds of each join; the metric
  // reads the per-flow series, which must still be there when it runs.
  SimConfig c = dumbbell(2, "credit");
  c.duration_ms = 3;
  c.flows.push_back(FlowSpec{0, 2, 0, 0, 3000000});
  c.flows.push_back(FlowSpec{1, 2, 0, 1000000, 3000000});
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->metrics.count("unconverged_phases"));
  EXPECT_EQ(r->metrics.at("unconverged_phases"), 0);
  EXPECT_LT(r->metrics.at("convergence_max_us"), 200.0);
  EXPECT_FALSE(r->flow_series.empty()) << "the series still reach the result";
}

TEST(Sim, SprayingAvoidsEcmpCollisions) {
  SimConfig c;
  c.chunk_bytes = c.mtu_bytes;  // a packet per chunk, as the papers
  c.topology = "leafspine";
  c.leaves = 4;
  c.spines = 4;
  c.hosts_per_leaf = 4;
  c.cc = "swift";
  c.cc_params = "target_from_min_delay=0";
  c.paths = 16;
  c.progress = false;
  c.seed = 3;
  // Each host of leaf l sends to the same-index host of leaf l+1.
  for (uint32_t h = 0; h < 16; ++h) {
    c.flows.push_back(FlowSpec{h, (h + 4) % 16, 2000000, 0, 0});
  }
  c.multipath = "single";
  auto single = run(c);
  c.multipath = "spray";
  auto spray = run(c);
  ASSERT_TRUE(single.ok() && spray.ok());
  EXPECT_EQ(spray->metrics.at("unfinished_flows"), 0);
  EXPECT_LT(spray->metrics.at("completion_us") * 1.2,
            single->metrics.at("completion_us"));
}

TEST(Sim, BadConfigsAreRefused) {
  SimConfig c = dumbbell(2, "swift");
  EXPECT_EQ(run(c).status().code(), StatusCode::kInvalidArgument);  // no flows
  c.flows.push_back(FlowSpec{0, 7, 1000, 0, 0});                    // no host 7
  EXPECT_EQ(run(c).status().code(), StatusCode::kInvalidArgument);
  c.flows[0].dst = 2;
  c.cc = "cubic";
  EXPECT_EQ(run(c).status().code(), StatusCode::kInvalidArgument);
  c.cc = "swift";
  c.cc_params = "not_a_knob=1";
  EXPECT_EQ(run(c).status().code(), StatusCode::kInvalidArgument);
  c.cc_params = "";
  c.topology = "torus";
  EXPECT_EQ(run(c).status().code(), StatusCode::kInvalidArgument);
}

TEST(Metrics, JainAndPercentile) {
  EXPECT_DOUBLE_EQ(jain_index({5, 5, 5, 5}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index({1, 0, 0, 0}), 0.25);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90), 9);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 100), 3);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(Metrics, EveryMetricARunSetsIsListed) {
  // metric_names() validates checks before a run: it must hold whatever a
  // run can produce (this run sets every optional group).
  SimConfig c = dumbbell(2, "credit");
  c.duration_ms = 3;
  c.flows.push_back(FlowSpec{0, 2, 50000, 0, 0});
  c.flows.push_back(FlowSpec{1, 2, 0, 1000000, 3000000});
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& names = metric_names();
  for (const auto& [k, v] : r->metrics) {
    EXPECT_NE(std::find(names.begin(), names.end(), k), names.end()) << k;
  }
  EXPECT_GT(r->metrics.size(), 20u);
}

}  // namespace
}  // namespace uccl::sim
