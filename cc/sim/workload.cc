// ccsim workloads: each pattern's flows (hosts numbered as the topology
// says) and the flow-size CDFs Poisson arrivals draw from.
#include "cc/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

#include "util/random.h"
#include "util/strings.h"

namespace uccl::sim {
namespace {

// Hosts under one edge (leaf) switch; the dumbbell's count as one each, so
// a permutation only keeps a host from sending to itself there.
uint32_t hosts_per_edge_switch(const SimConfig& c) {
  if (c.topology == "leafspine") return c.hosts_per_leaf;
  if (c.topology == "fattree") {
    return c.hosts_per_edge ? c.hosts_per_edge : c.fattree_k / 2;
  }
  return 1;
}

// Poisson arrivals of flows whose sizes follow the workload's CDF, between
// the given host ranges, until poisson_ms or max_flows.
Status generate_poisson(SimConfig* c, const Workload& w, uint32_t hosts,
                        uint64_t* seed) {
  UCCL_ASSIGN_OR_RETURN(auto cdf, load_cdf(w.cdf));
  std::pair<uint32_t, uint32_t> src{0, hosts - 1}, dst{0, hosts - 1};
  if (w.poisson_src) src = *w.poisson_src;
  if (w.poisson_dst) dst = *w.poisson_dst;
  if (src.second >= hosts || dst.second >= hosts ||
      (src.first == src.second && dst.first == dst.second &&
       src.first == dst.first) ||
      w.load <= 0) {
    return InvalidArgument(
        "poisson: host ranges outside the topology, or "
        "load <= 0");
  }
  // Arrival rate so that each source offers `load` of its line rate.
  const uint32_t nsrc = src.second - src.first + 1;
  const double mean = cdf_mean(cdf);
  const double per_s = w.load * c->host_gbps * 1e9 / 8 / mean * nsrc;
  const uint64_t end = static_cast<uint64_t>(w.poisson_ms * 1e6);
  double t = 0;
  while (c->flows.size() < w.max_flows) {
    t += -std::log(1 - uniform01(seed)) / per_s * 1e9;
    if (t >= end) break;
    FlowSpec f;
    f.src = src.first + splitmix64(seed) % nsrc;
    do {
      f.dst = dst.first + splitmix64(seed) % (dst.second - dst.first + 1);
    } while (f.dst == f.src);
    f.bytes = std::max<uint64_t>(
        1, static_cast<uint64_t>(sample_cdf(cdf, uniform01(seed))));
    f.start_ns = static_cast<uint64_t>(t);
    c->flows.push_back(f);
  }
  return Status::OK();
}

Status generate_permutation(SimConfig* c, uint32_t hosts, uint64_t fb,
                            uint64_t* seed) {
  // Every host sends flow_bytes to a distinct host; on a leaf-spine or fat
  // tree, never one under its own edge switch (the traffic must cross the
  // fabric).
  std::vector<uint32_t> p(hosts);
  const uint32_t per_leaf = hosts_per_edge_switch(*c);
  auto valid = [&](uint32_t i) { return p[i] / per_leaf != i / per_leaf; };
  // Small fabrics: shuffle until one is valid. Large ones (where a valid
  // shuffle is exponentially unlikely): one shuffle, then each host that
  // sends under its own edge swaps destinations with a random host for
  // which the swap is valid too.
  const int tries = hosts <= 1024 ? 10000 : 1;
  bool ok = false;
  for (int t = 0; t < tries && !ok; ++t) {
    std::iota(p.begin(), p.end(), 0);
    for (uint32_t i = hosts - 1; i > 0; --i) {
      std::swap(p[i], p[splitmix64(seed) % (i + 1)]);
    }
    ok = true;
    for (uint32_t i = 0; i < hosts && ok; ++i) ok = valid(i);
  }
  for (uint32_t i = 0; i < hosts && !ok; ++i) {
    for (uint32_t t = 0; t < 64 * hosts && !valid(i); ++t) {
      const uint32_t j = splitmix64(seed) % hosts;
      std::swap(p[i], p[j]);
      if (!valid(i) || !valid(j)) std::swap(p[i], p[j]);
    }
  }
  for (uint32_t i = 0; i < hosts; ++i) {
    if (!valid(i)) return InvalidArgument("permutation: no valid assignment");
  }
  for (uint32_t i = 0; i < hosts; ++i) {
    c->flows.push_back(FlowSpec{i, p[i], fb, 0, 0});
  }
  return Status::OK();
}

}  // namespace

Status generate(SimConfig* c, const Workload& w) {
  const uint64_t fb = static_cast<uint64_t>(w.flow_bytes);
  const uint64_t dur_ns = static_cast<uint64_t>(c->duration_ms * 1e6);
  const uint32_t hosts = host_count(*c);
  if (hosts == 0) {
    return InvalidArgument("topology '" + c->topology +
                           "': unknown, or no hosts (dumbbell, leafspine, "
                           "fattree)");
  }
  uint64_t seed = c->seed * 0x2545F4914F6CDD1Dull + 7;
  if (w.pattern == "none") {
  } else if (w.pattern == "incast") {
    // Dumbbell: senders 0..n-1 to the first receiver; other topologies:
    // hosts 1..n to host 0.
    const bool dumbbell = c->topology == "dumbbell";
    const uint32_t most = dumbbell ? c->senders : hosts - 1;
    const uint32_t n = w.incast_senders ? w.incast_senders : most;
    if (n > most || hosts < 2) {
      return InvalidArgument("incast_senders > " + std::to_string(most) +
                             " (the senders the topology has)");
    }
    for (uint32_t i = 0; i < n; ++i) {
      c->flows.push_back(dumbbell ? FlowSpec{i, c->senders, fb, 0, 0}
                                  : FlowSpec{i + 1, 0, fb, 0, 0});
    }
  } else if (w.pattern == "staircase") {
    // Flow i joins at i*step and leaves at (n+i)*step: 1,2,..,n,..,2,1.
    const uint32_t n = w.staircase_flows;
    if (c->topology != "dumbbell" || n > c->senders || n == 0) {
      return InvalidArgument(
          "staircase: dumbbell with senders >= staircase_flows");
    }
    const uint64_t step = static_cast<uint64_t>(w.staircase_step_ms * 1e6);
    for (uint32_t i = 0; i < n; ++i) {
      c->flows.push_back(FlowSpec{i, c->senders, 0, i * step, (n + i) * step});
    }
  } else if (w.pattern == "long_short") {
    // One unlimited flow from sender 0 and bursts of short flows from the
    // other senders, all to the first receiver.
    if (c->topology != "dumbbell" || c->senders < 2) {
      return InvalidArgument("long_short: dumbbell with senders >= 2");
    }
    const uint64_t stop = w.long_stop_ms > 0
                              ? static_cast<uint64_t>(w.long_stop_ms * 1e6)
                              : dur_ns;
    if (stop == 0) return InvalidArgument("long_short: set duration_ms");
    c->flows.push_back(FlowSpec{0, c->senders, 0, 0, stop});
    uint32_t next = 1;
    for (uint32_t b = 0; b < w.bursts; ++b) {
      const uint64_t t =
          static_cast<uint64_t>((b + 1) * w.burst_interval_us * 1000);
      for (uint32_t i = 0; i < w.burst_flows; ++i) {
        c->flows.push_back(FlowSpec{
            next, c->senders, static_cast<uint64_t>(w.burst_bytes), t, 0});
        next = next + 1 < c->senders ? next + 1 : 1;
      }
    }
  } else if (w.pattern == "poisson") {
    UCCL_RETURN_IF_ERROR(generate_poisson(c, w, hosts, &seed));
  } else if (w.pattern == "permutation") {
    UCCL_RETURN_IF_ERROR(generate_permutation(c, hosts, fb, &seed));
  } else {
    return InvalidArgument("unknown pattern '" + w.pattern +
                           "' (none, incast, staircase, long_short, poisson, "
                           "permutation)");
  }
  for (FlowSpec f : w.explicit_flows) {
    c->flows.push_back(f);
  }
  return Status::OK();
}

Result<std::vector<std::pair<double, double>>> load_cdf(
    const std::string& name) {
  // Points as published with the HPCC simulator's traffic generator:
  // WebSearch from DCTCP (Alizadeh et al., SIGCOMM'10, Figure 4), FB_Hadoop
  // from Roy et al. ("Inside the Social Network's (Datacenter) Network",
  // SIGCOMM'15).
  static const std::vector<std::pair<double, double>> kWebSearch = {
      {0, 0},         {10000, .15},   {20000, .20},    {30000, .30},
      {50000, .40},   {80000, .53},   {200000, .60},   {1000000, .70},
      {2000000, .80}, {5000000, .90}, {10000000, .97}, {30000000, 1}};
  static const std::vector<std::pair<double, double>> kFbHadoop = {
      {0, 0},        {100, .01},      {200, .02},     {300, .05},
      {350, .15},    {400, .20},      {500, .30},     {600, .40},
      {700, .50},    {1000, .60},     {2000, .67},    {7000, .70},
      {30000, .72},  {50000, .82},    {80000, .87},   {120000, .90},
      {300000, .95}, {1000000, .975}, {2000000, .99}, {10000000, 1}};
  if (name == "websearch") return kWebSearch;
  if (name == "fb_hadoop") return kFbHadoop;
  std::ifstream in(name);
  if (!in) {
    return NotFound("cdf '" + name +
                    "': not websearch, fb_hadoop or a readable file");
  }
  std::vector<std::pair<double, double>> pts;
  double b, p;
  while (in >> b >> p) pts.push_back({b, p});
  if (pts.size() < 2) return InvalidArgument("cdf '" + name + "': < 2 points");
  const double scale = pts.back().second > 1.0 ? 100.0 : 1.0;
  for (size_t i = 0; i < pts.size(); ++i) {
    pts[i].second /= scale;
    if (i && (pts[i].first < pts[i - 1].first ||
              pts[i].second < pts[i - 1].second)) {
      return InvalidArgument("cdf '" + name + "': not monotonic");
    }
  }
  if (std::fabs(pts.back().second - 1) > 1e-9) {
    return InvalidArgument("cdf '" + name + "': does not end at 1 (100)");
  }
  return pts;
}

double sample_cdf(const std::vector<std::pair<double, double>>& cdf, double u) {
  for (size_t i = 1; i < cdf.size(); ++i) {
    if (u < cdf[i].second || i + 1 == cdf.size()) {
      const double p0 = cdf[i - 1].second, p1 = cdf[i].second;
      const double f = p1 > p0 ? (u - p0) / (p1 - p0) : 1;
      return cdf[i - 1].first +
             std::clamp(f, 0.0, 1.0) * (cdf[i].first - cdf[i - 1].first);
    }
  }
  return cdf.back().first;
}

double cdf_mean(const std::vector<std::pair<double, double>>& cdf) {
  double m = 0;
  for (size_t i = 1; i < cdf.size(); ++i) {
    m += (cdf[i].second - cdf[i - 1].second) *
         (cdf[i].first + cdf[i - 1].first) / 2;
  }
  return m;
}

}  // namespace uccl::sim
