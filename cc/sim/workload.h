// ccsim workloads: the flows an experiment's pattern generates (static,
// incast, staircase, long+short bursts, Poisson with a flow-size CDF,
// permutation), and flow-size CDFs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cc/sim/sim.h"
#include "uccl/status.h"

namespace uccl::sim {

// Workload keys of an experiment file, collected before the flows are
// generated (cc/sim/README.md documents them).
struct Workload {
  std::string pattern = "none";
  double flow_bytes = 1 << 20;
  uint32_t incast_senders = 0;  // 0 = every sender
  uint32_t staircase_flows = 4;
  double staircase_step_ms = 1;
  double load = 0.5;
  std::string cdf = "websearch";
  double poisson_ms = 5;
  uint32_t max_flows = 100000;
  // Host ranges, inclusive; unset: every host.
  std::optional<std::pair<uint32_t, uint32_t>> poisson_src, poisson_dst;
  uint32_t burst_flows = 8;
  double burst_bytes = 64 << 10;
  double burst_interval_us = 200;
  uint32_t bursts = 20;
  double long_stop_ms = 0;  // 0 = duration_ms
  std::vector<FlowSpec> explicit_flows;
};

// Appends the workload's flows to c->flows (explicit `flow =` lines last).
Status generate(SimConfig* c, const Workload& w);

// Flow-size CDF points (bytes, cumulative fraction 0..1): "websearch"
// (DCTCP, SIGCOMM'10), "fb_hadoop" (Roy et al., SIGCOMM'15), or a file of
// "bytes cdf" lines (cdf in 0..1 or 0..100).
Result<std::vector<std::pair<double, double>>> load_cdf(
    const std::string& name);
// Inverse-transform sample with linear interpolation; u in [0, 1).
double sample_cdf(const std::vector<std::pair<double, double>>& cdf, double u);
double cdf_mean(const std::vector<std::pair<double, double>>& cdf);

}  // namespace uccl::sim
