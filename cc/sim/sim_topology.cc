// The simulator's topologies (dumbbell, leaf-spine, k-ary fat tree) and
// their ECMP routes, kept per (switch, destination edge switch).
#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "cc/sim/sim_core.h"
#include "util/random.h"

namespace uccl::sim::detail {

void Sim::add_link(uint32_t a, uint32_t b, double gbps, double delay_us,
                   const std::string& name_ab, const std::string& name_ba) {
  for (int dir = 0; dir < 2; ++dir) {
    Port p;
    p.from = dir ? b : a;
    p.to = dir ? a : b;
    p.rate_bps = gbps * 1e9;
    p.prop_ns = static_cast<uint64_t>(delay_us * 1000);
    p.buf_bytes = static_cast<uint64_t>(c_.buffer_kb * 1024);
    p.ecn_bytes = static_cast<uint64_t>(c_.ecn_kb * 1024);
    p.ecn_max_bytes = static_cast<uint64_t>(c_.ecn_kmax_kb * 1024);
    node_ports_[p.from].push_back(static_cast<uint32_t>(ports_.size()));
    port_names_.push_back(dir ? name_ba : name_ab);
    ports_.push_back(p);
  }
}

// Host h's access link to switch `sw`, named `sw_name` ("L", "leaf3").
void Sim::add_host_link(uint32_t h, uint32_t sw, const std::string& sw_name) {
  const double delay =
      c_.host_delay_us.empty() ? c_.link_delay_us : c_.host_delay_us[h];
  const std::string host = "host" + std::to_string(h);
  add_link(h, sw, c_.host_gbps, delay, host + "->" + sw_name,
           sw_name + "->" + host);
}

void Sim::add_switch_link(uint32_t a, const char* kind_a, uint32_t ia,
                          uint32_t b, const char* kind_b, uint32_t ib,
                          double gbps) {
  char ab[64], ba[64];
  std::snprintf(ab, sizeof(ab), "%s%u->%s%u", kind_a, ia, kind_b, ib);
  std::snprintf(ba, sizeof(ba), "%s%u->%s%u", kind_b, ib, kind_a, ia);
  add_link(a, b, gbps, c_.link_delay_us, ab, ba);
}

// Hosts first, then switches: a dumbbell (L, R), a leaf-spine, or a k-ary
// fat tree (k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
// switches; aggregation switch i of a pod links to cores i*k/2..i*k/2+k/2-1).
Status Sim::build_topology(double bneck, double fabric) {
  UCCL_RETURN_IF_ERROR(check_host_delays(c_));
  hosts_ = host_count(c_);
  nodes_ = hosts_;
  if (c_.topology == "dumbbell") {
    if (c_.senders == 0 || c_.receivers == 0) {
      return InvalidArgument("dumbbell: need senders >= 1, receivers >= 1");
    }
    node_ports_.resize(hosts_ + 2);
    const uint32_t L = add_node(), R = add_node();
    for (uint32_t h = 0; h < hosts_; ++h) {
      const bool left = h < c_.senders;
      add_host_link(h, left ? L : R, left ? "L" : "R");
    }
    add_link(L, R, bneck, c_.link_delay_us, "L->R", "R->L");
  } else if (c_.topology == "leafspine") {
    if (c_.leaves == 0 || c_.spines == 0 || c_.hosts_per_leaf == 0) {
      return InvalidArgument("leafspine: need leaves, spines, hosts_per_leaf");
    }
    node_ports_.resize(hosts_ + c_.leaves + c_.spines);
    const uint32_t leaf0 = nodes_;
    for (uint32_t l = 0; l < c_.leaves; ++l) add_node();
    const uint32_t spine0 = nodes_;
    for (uint32_t s = 0; s < c_.spines; ++s) add_node();
    for (uint32_t h = 0; h < hosts_; ++h) {
      const uint32_t l = h / c_.hosts_per_leaf;
      add_host_link(h, leaf0 + l, "leaf" + std::to_string(l));
    }
    for (uint32_t l = 0; l < c_.leaves; ++l) {
      for (uint32_t s = 0; s < c_.spines; ++s) {
        add_switch_link(leaf0 + l, "leaf", l, spine0 + s, "spine", s, fabric);
      }
    }
  } else if (c_.topology == "fattree") {
    UCCL_RETURN_IF_ERROR(build_fat_tree(fabric));
  } else {
    return InvalidArgument(
        "topology must be 'dumbbell', 'leafspine' or 'fattree', not '" +
        c_.topology + "'");
  }
  return Status::OK();
}

Status Sim::build_fat_tree(double fabric) {
  const uint32_t k = c_.fattree_k;
  if (k < 2 || k % 2 != 0 || k > 256) {
    return InvalidArgument("fattree: fattree_k must be even, 2..256");
  }
  const uint32_t half = k / 2;
  const uint32_t per_edge = c_.hosts_per_edge ? c_.hosts_per_edge : half;
  const uint32_t edges = k * half, cores = half * half;
  node_ports_.resize(static_cast<size_t>(hosts_) + 2 * edges + cores);
  const uint32_t edge0 = nodes_;
  for (uint32_t i = 0; i < edges; ++i) add_node();
  const uint32_t agg0 = nodes_;
  for (uint32_t i = 0; i < edges; ++i) add_node();
  const uint32_t core0 = nodes_;
  for (uint32_t i = 0; i < cores; ++i) add_node();
  fat_ = FatTree{true, half, per_edge, edge0, agg0, core0};
  for (uint32_t h = 0; h < hosts_; ++h) {
    add_host_link(h, edge0 + h / per_edge,
                  "edge" + std::to_string(h / per_edge));
  }
  for (uint32_t pod = 0; pod < k; ++pod) {
    for (uint32_t e = 0; e < half; ++e) {
      for (uint32_t a = 0; a < half; ++a) {
        const uint32_t ei = pod * half + e, ai = pod * half + a;
        add_switch_link(edge0 + ei, "edge", ei, agg0 + ai, "agg", ai, fabric);
      }
    }
    for (uint32_t a = 0; a < half; ++a) {
      for (uint32_t c = 0; c < half; ++c) {
        const uint32_t ai = pod * half + a, ci = a * half + c;
        add_switch_link(agg0 + ai, "agg", ai, core0 + ci, "core", ci, fabric);
      }
    }
  }
  return Status::OK();
}

// Every host hangs off one switch (its edge), so a route only depends on
// the switch a packet is at and its destination's edge; the edge itself
// sends down the host's link. A fat tree's routes are computed from its
// structure (no table: setup and memory stay linear in hosts); other
// topologies get tables from a BFS over the switches from each edge, per
// (switch, edge) rather than per (node, host), identical next-hop sets
// stored once.
Status Sim::build_routes() {
  UCCL_RETURN_IF_ERROR(find_edges());
  return fat_.on ? Status::OK() : build_route_tables();
}

Status Sim::find_edges() {
  const uint32_t nsw = nodes_ - hosts_;
  edge_of_.resize(hosts_);
  down_port_.resize(hosts_);
  std::vector<uint32_t> edge_index(nsw, UINT32_MAX);
  std::vector<uint32_t> edges;
  for (uint32_t h = 0; h < hosts_; ++h) {
    if (node_ports_[h].size() != 1) return Internal("routing: host links");
    const uint32_t up = node_ports_[h][0];
    const uint32_t sw = ports_[up].to;
    edge_of_[h] = sw;
    down_port_[h] = up + 1;  // add_link's reverse direction
    if (edge_index[sw - hosts_] == UINT32_MAX) {
      edge_index[sw - hosts_] = static_cast<uint32_t>(edges.size());
      edges.push_back(sw);
    }
  }
  edge_index_ = std::move(edge_index);
  edges_ = std::move(edges);
  return Status::OK();
}

Status Sim::build_route_tables() {
  const uint32_t nsw = nodes_ - hosts_;
  const uint32_t n_edges = static_cast<uint32_t>(edges_.size());
  const std::vector<uint32_t>& edges = edges_;
  route_set_.assign(static_cast<size_t>(nsw) * n_edges, 0);
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_hash;
  std::vector<uint32_t> dist(nsw), q, hops;
  for (uint32_t e = 0; e < n_edges; ++e) {
    std::fill(dist.begin(), dist.end(), UINT32_MAX);
    dist[edges[e] - hosts_] = 0;
    q.assign(1, edges[e]);
    for (size_t i = 0; i < q.size(); ++i) {
      for (uint32_t p : node_ports_[q[i]]) {
        const uint32_t m = ports_[p].to;
        if (m < hosts_ || dist[m - hosts_] != UINT32_MAX) continue;
        dist[m - hosts_] = dist[q[i] - hosts_] + 1;
        q.push_back(m);
      }
    }
    for (uint32_t s = 0; s < nsw; ++s) {
      if (s + hosts_ == edges[e]) continue;
      if (dist[s] == UINT32_MAX)
        return InvalidArgument("routing: disconnected");
      hops.clear();
      for (uint32_t p : node_ports_[s + hosts_]) {
        const uint32_t m = ports_[p].to;
        if (m >= hosts_ && dist[m - hosts_] + 1 == dist[s]) hops.push_back(p);
      }
      route_set_[static_cast<size_t>(s) * n_edges + e] =
          intern_hops(hops, &by_hash);
    }
  }
  return Status::OK();
}

uint32_t Sim::intern_hops(
    const std::vector<uint32_t>& hops,
    std::unordered_map<uint64_t, std::vector<uint32_t>>* by_hash) {
  uint64_t h = hops.size();
  for (uint32_t p : hops) h = mix64(h ^ p);
  for (uint32_t id : (*by_hash)[h]) {
    if (set_cnt_[id] == hops.size() &&
        std::equal(hops.begin(), hops.end(),
                   hop_ports_.begin() + set_off_[id])) {
      return id;
    }
  }
  const uint32_t id = static_cast<uint32_t>(set_off_.size());
  set_off_.push_back(static_cast<uint32_t>(hop_ports_.size()));
  set_cnt_.push_back(static_cast<uint32_t>(hops.size()));
  hop_ports_.insert(hop_ports_.end(), hops.begin(), hops.end());
  (*by_hash)[h].push_back(id);
  return id;
}

Sim::HopSet Sim::hops_toward(uint32_t node, uint32_t dst) const {
  const uint32_t edge = edge_of_[dst];
  if (node == edge) return {&down_port_[dst], 1};
  if (fat_.on) return fat_tree_hops(node, edge);
  const uint32_t set =
      route_set_[static_cast<size_t>(node - hosts_) * edges_.size() +
                 edge_index_[edge - hosts_]];
  return {&hop_ports_[set_off_[set]], set_cnt_[set]};
}

// A fat tree's switches list their ports in build order: an edge switch its
// hosts then its pod's k/2 aggregation switches; an aggregation switch its
// pod's k/2 edges then its k/2 cores; a core one aggregation switch per pod.
// Up while the destination's edge is in another pod (or, at an edge, is
// another edge), then down.
Sim::HopSet Sim::fat_tree_hops(uint32_t node, uint32_t dst_edge) const {
  const uint32_t* ports = node_ports_[node].data();
  const uint32_t dst_pod = (dst_edge - fat_.edge0) / fat_.half;
  if (node < fat_.agg0) return {ports + fat_.per_edge, fat_.half};  // edge
  if (node < fat_.core0) {                                          // agg
    const uint32_t pod = (node - fat_.agg0) / fat_.half;
    if (pod == dst_pod) return {ports + (dst_edge - fat_.edge0) % fat_.half, 1};
    return {ports + fat_.half, fat_.half};
  }
  return {ports + dst_pod, 1};  // core
}

uint32_t Sim::route(uint32_t node, const Packet& p) const {
  const HopSet s = hops_toward(node, p.dst);
  if (s.n == 1) return s.ports[0];
  // ECMP: hash of the flow's 5-tuple stand-in (flow, direction) and the
  // entropy value, salted per switch.
  const uint64_t h = mix64((static_cast<uint64_t>(p.flow) << 20) ^
                           (static_cast<uint64_t>(p.path) << 4) ^
                           (p.kind == PktKind::kData ? 0 : 1) ^
                           (static_cast<uint64_t>(node) << 40) ^ c_.seed);
  return s.ports[h % s.n];
}

}  // namespace uccl::sim::detail
