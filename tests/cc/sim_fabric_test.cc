// The simulator's fabric and hosts: fat-tree routes equal the BFS tables'
// and are shortest; PFC makes an incast lossless and its pauses spread hop
// by hop to the senders; RED marks with its ramp; INT records every switch
// hop; per-path controllers, host jitter and shared delay floors behave as
// the engine's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cc/sim/sim_core.h"

namespace uccl::sim::detail {

class SimTestPeer {
 public:
  // Every (switch, destination host) next-hop set, as ports.
  static std::vector<std::vector<uint32_t>> all_hops(const Sim& s) {
    std::vector<std::vector<uint32_t>> out;
    for (uint32_t node = s.hosts_; node < s.nodes_; ++node) {
      for (uint32_t d = 0; d < s.hosts_; ++d) {
        const Sim::HopSet h = s.hops_toward(node, d);
        out.emplace_back(h.ports, h.ports + h.n);
      }
    }
    return out;
  }
  // Switches to tables from the BFS, as any other topology.
  static Status use_tables(Sim* s) {
    s->fat_.on = false;
    return s->build_route_tables();
  }
  // Switches on the way from `src` to `dst` following the first next hop.
  static int path_switches(const Sim& s, uint32_t src, uint32_t dst) {
    uint32_t node = s.ports_[s.node_ports_[src][0]].to;
    int n = 1;
    while (node != dst && n < 16) {
      node = s.ports_[s.hops_toward(node, dst).ports[0]].to;
      n += node != dst;
    }
    return node == dst ? n : -1;
  }
  static uint32_t hosts(const Sim& s) { return s.hosts_; }
  // PAUSE frames that reached the sender of the link named `name`.
  static uint64_t pauses(const Sim& s, const std::string& name) {
    for (size_t p = 0; p < s.port_names_.size(); ++p) {
      if (s.port_names_[p] == name) return s.ports_[p].pauses;
    }
    ADD_FAILURE() << "no port " << name;
    return 0;
  }
  static bool mark(Sim* s, uint64_t q, uint64_t kmin, uint64_t kmax) {
    Port p;
    p.q_bytes = q;
    p.ecn_bytes = kmin;
    p.ecn_max_bytes = kmax;
    return s->ecn_mark(p);
  }
  // Hop `hop`'s INT record in packet slot `pkt`.
  static const cc::IntHop& int_hop(const Sim& s, size_t pkt, uint32_t hop) {
    return s.int_[pkt * Sim::kMaxIntHops + hop];
  }
  static size_t packet_slots(const Sim& s) { return s.pkts_.size(); }
  static const Flow& flow(const Sim& s, uint32_t i) { return s.flows_[i]; }
  static uint64_t host_release(Sim* s, uint32_t h, uint64_t t) {
    return s->host_release(h, t);
  }
};

namespace {

SimConfig fat_tree(uint32_t k, uint32_t per_edge) {
  SimConfig c;
  c.chunk_bytes = c.mtu_bytes;  // a packet per chunk, as the papers
  c.topology = "fattree";
  c.fattree_k = k;
  c.hosts_per_edge = per_edge;
  c.flows.push_back(FlowSpec{0, 1, 4096, 0, 0});
  return c;
}

TEST(SimRoutes, FatTreeComputedHopsEqualTheBfsTables) {
  for (uint32_t k : {2u, 4u, 6u, 8u}) {
    for (uint32_t per_edge : {0u, 1u, 5u}) {
      SimConfig c = fat_tree(k, per_edge);
      Sim computed(c);
      ASSERT_TRUE(computed.build().ok()) << k;
      Sim tables(c);
      ASSERT_TRUE(tables.build().ok());
      ASSERT_TRUE(SimTestPeer::use_tables(&tables).ok());
      const auto a = SimTestPeer::all_hops(computed);
      const auto b = SimTestPeer::all_hops(tables);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i], b[i])
            << "k=" << k << " per_edge=" << per_edge << " entry " << i;
      }
    }
  }
}

TEST(SimRoutes, FatTreePathsClimbOnlyAsHighAsNeeded) {
  SimConfig c = fat_tree(4, 0);  // 16 hosts, 2 per edge, 4 per pod
  Sim s(c);
  ASSERT_TRUE(s.build().ok());
  ASSERT_EQ(SimTestPeer::hosts(s), 16u);
  EXPECT_EQ(SimTestPeer::path_switches(s, 0, 1), 1);   // same edge
  EXPECT_EQ(SimTestPeer::path_switches(s, 0, 2), 3);   // same pod
  EXPECT_EQ(SimTestPeer::path_switches(s, 0, 15), 5);  // across the core
}

TEST(SimRoutes, BadFatTreesAreRefused) {
  for (uint32_t k : {0u, 3u, 258u}) {
    const SimConfig c = fat_tree(k, 0);  // a Sim keeps a reference to it
    Sim s(c);
    EXPECT_FALSE(s.build().ok()) << k;
  }
}

SimConfig incast(uint32_t senders) {
  SimConfig c;
  c.chunk_bytes = c.mtu_bytes;  // a packet per chunk, as the papers
  c.senders = senders;
  c.receivers = 1;
  c.cc = "none";
  c.buffer_kb = 256;
  c.progress = false;
  for (uint32_t i = 0; i < senders; ++i) {
    c.flows.push_back(FlowSpec{i, senders, 512 * 1024, 0, 0});
  }
  return c;
}

TEST(SimPfc, AnIncastWithoutCongestionControlIsLossless) {
  SimConfig c = incast(8);
  auto lossy = run(c);
  ASSERT_TRUE(lossy.ok());
  EXPECT_GT(lossy->metrics.at("drops"), 0);
  EXPECT_EQ(lossy->metrics.count("pfc_pauses"), 0u);
  c.pfc_xoff_kb = 64;
  c.pfc_xon_kb = 32;
  auto pfc = run(c);
  ASSERT_TRUE(pfc.ok());
  EXPECT_EQ(pfc->metrics.at("drops"), 0);
  EXPECT_EQ(pfc->metrics.at("unfinished_flows"), 0);
  EXPECT_EQ(pfc->metrics.at("retransmissions"), 0);
  EXPECT_GE(pfc->metrics.at("pfc_pauses"), 8);  // every sender's link
  EXPECT_LT(pfc->metrics.at("completion_over_ideal"), 1.01);
  // The queue exceeds the drop-tail buffer instead: bounded by 8 XOFFs.
  EXPECT_GT(pfc->metrics.at("bottleneck_max_queue_kb"), 256);
  EXPECT_LT(pfc->metrics.at("bottleneck_max_queue_kb"), 8 * (64 + 40));
}

TEST(SimPfc, PausesSpreadHopByHopToTheSenders) {
  // Hosts 0-3 under leaf 0 send to host 4 under leaf 1 through one spine:
  // leaf1->host4 is the bottleneck; its backlog pauses spine->leaf1, the
  // spine's backlog pauses leaf0->spine, leaf 0's pauses the senders.
  SimConfig c;
  c.chunk_bytes = c.mtu_bytes;  // a packet per chunk, as the papers
  c.topology = "leafspine";
  c.leaves = 2;
  c.spines = 1;
  c.hosts_per_leaf = 4;
  c.fabric_gbps = 400;  // fast uplinks: the receiver's downlink is the
                        // only bottleneck
  c.cc = "none";
  c.pfc_xoff_kb = 64;
  c.pfc_xon_kb = 32;
  c.progress = false;
  for (uint32_t i = 0; i < 4; ++i) {
    c.flows.push_back(FlowSpec{i, 4, 1 << 20, 0, 0});
  }
  Sim s(c);
  ASSERT_TRUE(s.build().ok());
  const SimResult r = s.run();
  EXPECT_EQ(r.metrics.at("drops"), 0);
  EXPECT_EQ(r.metrics.at("unfinished_flows"), 0);
  EXPECT_GT(SimTestPeer::pauses(s, "spine0->leaf1"), 0u);
  EXPECT_GT(SimTestPeer::pauses(s, "leaf0->spine0"), 0u);
  for (int h = 0; h < 4; ++h) {
    EXPECT_GT(SimTestPeer::pauses(s, "host" + std::to_string(h) + "->leaf0"),
              0u)
        << h;
  }
  // The receiver's downlink has no switch after it: never paused.
  EXPECT_EQ(SimTestPeer::pauses(s, "leaf1->host4"), 0u);
}

TEST(SimPfc, BadThresholdsAreRefused) {
  SimConfig c = incast(2);
  c.pfc_xoff_kb = 64;
  c.pfc_xon_kb = 64;
  EXPECT_FALSE(run(c).ok());
}

TEST(SimSharedBuffer, ADynamicThresholdLeavesRoomForOtherPorts) {
  // One congested port in a switch with a shared buffer B: it may hold
  // alpha x (B - its own queue), so B alpha / (1 + alpha), give or take the
  // packet that is admitted against the free space before it.
  for (double alpha : {1.0, 3.0}) {
    SimConfig c = incast(8);
    c.buffer_kb = 64;  // ignored: the shared buffer applies
    c.shared_buffer_kb = 512;
    c.dt_alpha = alpha;
    auto r = run(c);
    ASSERT_TRUE(r.ok()) << r.status();
    const double bound = 512 * alpha / (1 + alpha);
    const double packet_kb = (c.mtu_bytes + c.header_bytes) / 1024.0;
    EXPECT_LE(r->metrics.at("bottleneck_max_queue_kb"), bound + packet_kb)
        << alpha;
    EXPECT_GT(r->metrics.at("bottleneck_max_queue_kb"), bound - 5) << alpha;
    EXPECT_GT(r->metrics.at("drops"), 0) << alpha;
    EXPECT_EQ(r->metrics.at("unfinished_flows"), 0) << alpha;
  }
  SimConfig bad = incast(2);
  bad.shared_buffer_kb = 512;
  bad.dt_alpha = 0;
  EXPECT_FALSE(run(bad).ok());
}

TEST(SimTrim, TrimmedPacketsAreNackedAndResentWithoutTimeouts) {
  SimConfig c = incast(8);
  auto dropped = run(c);
  ASSERT_TRUE(dropped.ok());
  EXPECT_GT(dropped->metrics.at("drops"), 0);
  c.trim = true;
  auto trimmed = run(c);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status();
  const auto& m = trimmed->metrics;
  EXPECT_EQ(m.at("drops"), 0);
  EXPECT_GT(m.at("trims"), 0);
  EXPECT_EQ(m.at("unfinished_flows"), 0);
  // Each trim is resent once, at once: no timeouts, no probes needed.
  EXPECT_EQ(m.at("retransmissions"), m.at("trims"));
  EXPECT_EQ(m.at("rtos"), 0);
  EXPECT_LT(m.at("completion_us"), dropped->metrics.at("completion_us"));
}

TEST(SimEcn, RedMarksOnItsRampAndAlwaysAboveKmax) {
  SimConfig c = incast(2);
  c.ecn_pmax = 0.2;
  Sim s(c);
  ASSERT_TRUE(s.build().ok());
  EXPECT_FALSE(SimTestPeer::mark(&s, 99, 100, 500));
  EXPECT_TRUE(SimTestPeer::mark(&s, 500, 100, 500));
  EXPECT_TRUE(SimTestPeer::mark(&s, 100, 100, 0));  // step at K
  int marked = 0;
  for (int i = 0; i < 100000; ++i)
    marked += SimTestPeer::mark(&s, 300, 100, 500);
  EXPECT_NEAR(marked / 100000.0, 0.1, 0.005);  // halfway up: pmax / 2
}

TEST(SimInt, EverySwitchHopIsRecordedForHpcc) {
  SimConfig c = incast(2);
  c.cc = "hpcc";
  Sim s(c);
  ASSERT_TRUE(s.build().ok());
  const SimResult r = s.run();
  EXPECT_EQ(r.metrics.at("unfinished_flows"), 0);
  // Dumbbell: L's port to R, then R's port to the receiver, both at the
  // host rate, stamped in order.
  ASSERT_GT(SimTestPeer::packet_slots(s), 0u);
  const cc::IntHop& a = SimTestPeer::int_hop(s, 0, 0);
  const cc::IntHop& b = SimTestPeer::int_hop(s, 0, 1);
  EXPECT_EQ(a.rate_bps, c.host_gbps * 1e9);
  EXPECT_EQ(b.rate_bps, c.host_gbps * 1e9);
  EXPECT_GT(a.ts_ns, 0u);
  EXPECT_GT(b.ts_ns, a.ts_ns);
  EXPECT_GT(b.tx_bytes, 0u);
}

SimConfig sprayed_swift(bool per_path) {
  SimConfig c = incast(1);
  c.cc = "swift";
  c.multipath = "spray";
  c.paths = 4;
  c.cc_per_path = per_path;
  c.flows[0].bytes = 4 << 20;
  return c;
}

TEST(SimPerPath, EachPathsControllerHearsItsOwnAcks) {
  const SimConfig c = sprayed_swift(true);
  Sim s(c);
  ASSERT_TRUE(s.build().ok());
  const SimResult r = s.run();
  EXPECT_EQ(r.metrics.at("unfinished_flows"), 0);
  const Flow& f = SimTestPeer::flow(s, 0);
  ASSERT_EQ(f.ccs.size(), 4u);
  // A controller that heard no ACK would still hold its first window.
  auto fresh = cc::make_cc("swift", {}, c.mtu_bytes, c.host_gbps * 1e9);
  ASSERT_TRUE(fresh.ok());
  for (const FlowCc& pc : f.ccs) {
    EXPECT_NE(pc.cc->cwnd_bytes(), (*fresh)->cwnd_bytes());
    EXPECT_GT(pc.last_bytes, 0u);  // and each sent
  }
  const SimConfig c1 = sprayed_swift(false);  // Sim keeps a reference
  Sim one(c1);
  ASSERT_TRUE(one.build().ok());
  const SimResult r1 = one.run();
  EXPECT_EQ(SimTestPeer::flow(one, 0).ccs.size(), 1u);
  // The flow's window is the sum of its paths': four first windows.
  ASSERT_FALSE(r.flow_series.empty());
  ASSERT_FALSE(r1.flow_series.empty());
  EXPECT_DOUBLE_EQ(r.flow_series[0].cwnd_bytes,
                   4 * r1.flow_series[0].cwnd_bytes);
}

TEST(SimPerPath, CreditAndBadValuesAreRefused) {
  SimConfig c = sprayed_swift(true);
  c.cc = "credit";
  EXPECT_FALSE(run(c).ok());  // the engine refuses it too
  SimConfig j = incast(1);
  j.host_jitter_us = -1;
  EXPECT_FALSE(run(j).ok());
}

TEST(SimHostJitter, ReleasesKeepOrderAndAddTheMeanDelay) {
  SimConfig c = incast(1);
  c.host_jitter_us = 10;
  Sim a(c), b(c);
  ASSERT_TRUE(a.build().ok());
  ASSERT_TRUE(b.build().ok());
  constexpr int kN = 20000;
  double sum_ns = 0;
  uint64_t last = 0;
  for (int i = 0; i < kN; ++i) {
    const uint64_t t = uint64_t{1000000} * i;  // far apart: no queueing
    const uint64_t ra = SimTestPeer::host_release(&a, 1, t);
    EXPECT_EQ(ra, SimTestPeer::host_release(&b, 1, t));  // seeded
    ASSERT_GE(ra, t);
    sum_ns += static_cast<double>(ra - t);
    last = ra;
  }
  EXPECT_NEAR(sum_ns / kN, 10000, 300);  // exponential, mean 10 us
  // Back-to-back arrivals leave in order: never before the previous one.
  uint64_t prev = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t r = SimTestPeer::host_release(&a, 1, last + i);
    ASSERT_GE(r, prev);
    prev = r;
  }
}

TEST(SimHostJitter, DelaysEveryPacketItsHostReceives) {
  SimConfig c = incast(1);
  c.flows[0].bytes = 4096;  // one packet and its ACK
  auto quiet = run(c);
  c.host_jitter_us = 50;
  auto jittery = run(c);
  ASSERT_TRUE(quiet.ok());
  ASSERT_TRUE(jittery.ok());
  // The packet waits in the receiving host before it counts as arrived.
  EXPECT_GT(jittery->flows[0].finish_ns, quiet->flows[0].finish_ns);
  EXPECT_GT(jittery->metrics.at("completion_us"),
            quiet->metrics.at("completion_us"));
}

// Four Swift flows between the same two hosts start together: those whose
// first samples already find the others' packets queued take that queue
// for distance and aim above the rest. Sharing the floor between the
// flows of one host pair, as the engine does, makes them fair.
TEST(SimSharedFloor, FlowsOfOneHostPairAimAtOneFloor) {
  SimConfig c = incast(1);
  c.cc = "swift";
  c.bottleneck_gbps = 10;
  c.buffer_kb = 512;
  c.flows.assign(4, FlowSpec{0, 1, 0, 0, 0});
  c.duration_ms = 20;
  c.jain_from_ms = 10;
  c.jain_to_ms = 20;
  c.sample_us = 100;
  auto shared = run(c);
  c.shared_floor = false;
  auto apart = run(c);
  ASSERT_TRUE(shared.ok());
  ASSERT_TRUE(apart.ok());
  EXPECT_GT(shared->metrics.at("jain"), 0.99);
  EXPECT_LT(apart->metrics.at("jain"), 0.8);
  EXPECT_GT(shared->metrics.at("window_tput_gbps"), 9);
}

}  // namespace
}  // namespace uccl::sim::detail
