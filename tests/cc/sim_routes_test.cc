// The simulator's routes: a fat tree's computed next hops equal the BFS
// tables' for every switch and destination, and paths are shortest.
#include <gtest/gtest.h>

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
};

namespace {

SimConfig fat_tree(uint32_t k, uint32_t per_edge) {
  SimConfig c;
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
    Sim s(fat_tree(k, 0));
    EXPECT_FALSE(s.build().ok()) << k;
  }
}

}  // namespace
}  // namespace uccl::sim::detail
