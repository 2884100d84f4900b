// The simulator's measurements: periodic samples of rates and queues, the
// per-flow and summary metrics, and convergence after each phase change.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "cc/sim/sim_core.h"

namespace uccl::sim::detail {
namespace {

// Flow-size buckets for FCT slowdown (the x-axis of HPCC's and DCQCN's
// FCT figures, by decade): up to 10 KB, 100 KB, 1 MB, 10 MB, and beyond.
constexpr std::array<double, 5> kSizeBuckets = {10e3, 100e3, 1e6, 10e6, 1e300};
constexpr const char* kBucketNames[] = {"10k", "100k", "1m", "10m", "big"};

size_t size_bucket(uint64_t bytes) {
  size_t b = 0;
  while (b + 1 < kSizeBuckets.size() && bytes > kSizeBuckets[b]) ++b;
  return b;
}

// "slowdown_p95_100k": that percentile of the bucket's slowdowns.
std::string bucket_metric(size_t bucket, int pct) {
  return "slowdown_p" + std::to_string(pct) + "_" + kBucketNames[bucket];
}

}  // namespace

void Sim::sample() {
  const uint64_t period = static_cast<uint64_t>(c_.sample_us * 1000);
  for (Flow& f : flows_) {
    if (f.id >= c_.trace_flows) break;
    const bool active =
        f.started && !(f.finish_ns && f.delivered == f.delivered_at_sample);
    if (active) {
      // Per-path controllers: the flow's window and rate are their sums.
      double cw = 0, rate_bps = 0;
      for (const FlowCc& pc : f.ccs) {
        cw += pc.cc->cwnd_bytes();
        rate_bps += pc.cc->rate_bps();
      }
      fseries_.push_back(FlowSample{
          now_, f.id, (f.delivered - f.delivered_at_sample) * 8.0 / period,
          cw >= cc::kUnlimited ? -1 : cw, rate_bps / 1e9});
    }
    f.delivered_at_sample = f.delivered;
  }
  for (uint32_t p : switch_ports_) {
    if (ports_[p].max_q > 0) {
      qseries_.push_back(QueueSample{now_, p, ports_[p].q_bytes});
    }
  }
  // The Jain window's start: remember every flow's delivered bytes.
  const double ms = now_ / 1e6;
  if (c_.jain_from_ms >= 0) {
    for (Flow& f : flows_) {
      if (!f.win_started && ms >= c_.jain_from_ms) {
        f.win_started = true;
        f.win_start_bytes = f.delivered;
      }
      if (!f.win_ended && c_.jain_to_ms >= 0 && ms >= c_.jain_to_ms) {
        f.win_ended = true;
        f.win_end_bytes = f.delivered;
      }
    }
  }
}

// Per-flow results and the flow metrics: FCTs and slowdowns of finite
// flows, retransmissions, the completion of the workload, fairness in the
// Jain window.
Sim::FlowTotals Sim::summarize_flows(SimResult* r) {
  auto& m = r->metrics;
  std::vector<double> slow_all, slow_short, fct_us;
  std::array<std::vector<double>, kSizeBuckets.size()> slow_bucket;
  uint64_t first_start = kNever, last_finish = 0, total_bytes = 0;
  uint64_t total_pkts = 0, min_base = kNever;  // finite flows
  uint32_t unfinished = 0;
  uint64_t retx = 0, rtos = 0, tlps = 0;
  const double win_s = (c_.jain_to_ms - c_.jain_from_ms) / 1e3;
  std::vector<double> win_tput;
  for (Flow& f : flows_) {
    FlowResult fr;
    fr.spec = f.spec;
    fr.finish_ns = f.finish_ns;
    fr.delivered_bytes = f.delivered;
    fr.retx = f.retx;
    fr.rtos = f.sb->counters().rtos;
    fr.tlps = f.sb->counters().tlp_retx;
    retx += fr.retx;
    rtos += fr.rtos;
    tlps += fr.tlps;
    first_start = std::min(first_start, f.spec.start_ns);
    if (!f.unlimited) {
      fr.ideal_fct_ns = ideal_fct(f.spec);
      total_bytes += f.spec.bytes;
      total_pkts += wire_packets(f.spec.bytes);
      double slowest_bps;
      min_base = std::min(min_base, base_latency(f.spec, &slowest_bps));
      if (f.finish_ns) {
        last_finish = std::max(last_finish, f.finish_ns);
        const double fct = static_cast<double>(f.finish_ns - f.spec.start_ns);
        fct_us.push_back(fct / 1e3);
        const double sd = fct / static_cast<double>(fr.ideal_fct_ns);
        slow_all.push_back(sd);
        if (f.spec.bytes <= c_.short_flow_bytes) slow_short.push_back(sd);
        slow_bucket[size_bucket(f.spec.bytes)].push_back(sd);
      } else {
        ++unfinished;
      }
    }
    // Jain window: flows that started before it and had not stopped or
    // finished before its end.
    if (win_s > 0) {
      const uint64_t wf = static_cast<uint64_t>(c_.jain_from_ms * 1e6);
      const uint64_t wt = static_cast<uint64_t>(c_.jain_to_ms * 1e6);
      const bool alive = f.spec.start_ns <= wf &&
                         (f.unlimited ? f.spec.stop_ns >= wt
                                      : !f.finish_ns || f.finish_ns >= wt);
      fr.in_window = alive && f.win_started;
      if (fr.in_window) {
        const uint64_t e = f.win_ended ? f.win_end_bytes : f.delivered;
        fr.window_bytes = static_cast<double>(e - f.win_start_bytes);
        win_tput.push_back(fr.window_bytes * 8 / win_s / 1e9);
      }
    }
    r->flows.push_back(fr);
  }
  m["flows"] = static_cast<double>(flows_.size());
  m["unfinished_flows"] = unfinished;
  m["retransmissions"] = static_cast<double>(retx);
  m["rtos"] = static_cast<double>(rtos);
  m["tail_loss_probes"] = static_cast<double>(tlps);
  m["events"] = static_cast<double>(n_events_);
  m["wall_s"] = r->wall_s;
  m["events_per_s"] = r->wall_s > 0 ? n_events_ / r->wall_s : 0;
  m["sim_ms"] = r->end_ns / 1e6;
  if (!fct_us.empty()) {
    m["fct_p50_us"] = percentile(fct_us, 50);
    m["fct_p99_us"] = percentile(fct_us, 99);
    m["slowdown_p50"] = percentile(slow_all, 50);
    m["slowdown_p99"] = percentile(slow_all, 99);
  }
  if (!slow_short.empty()) {
    m["short_slowdown_p50"] = percentile(slow_short, 50);
    m["short_slowdown_p99"] = percentile(slow_short, 99);
  }
  for (size_t b = 0; b < kSizeBuckets.size(); ++b) {
    if (slow_bucket[b].empty()) continue;
    for (int p : {50, 95, 99}) {
      m[bucket_metric(b, p)] = percentile(slow_bucket[b], p);
    }
  }
  if (total_bytes > 0 && unfinished == 0 && last_finish > first_start) {
    // Completion of the whole finite workload against the ideal: all its
    // bytes through the busiest port (the bottleneck) at its line rate,
    // plus one unloaded flow's latency.
    m["completion_us"] = (last_finish - first_start) / 1e3;
  }
  if (!win_tput.empty()) {
    m["jain"] = jain_index(win_tput);
    double mn = win_tput[0], mx = win_tput[0], sum = 0;
    for (double x : win_tput) {
      mn = std::min(mn, x);
      mx = std::max(mx, x);
      sum += x;
    }
    m["window_tput_gbps"] = sum;
    m["window_min_over_max"] = mx > 0 ? mn / mx : 0;
  }
  FlowTotals t;
  t.first_start = first_start;
  t.total_bytes = total_bytes;
  t.total_pkts = total_pkts;
  t.min_base = min_base;
  return t;
}

// The port metrics: queues, drops and marks over the switch ports, and the
// bottleneck (returned: among ports within 0.1% of the most bytes sent, a
// chain of links carrying the same bytes, the one that queued most).
uint32_t Sim::summarize_ports(SimResult* r, uint64_t first_start) {
  auto& m = r->metrics;
  uint32_t busiest = switch_ports_.empty() ? 0 : switch_ports_[0];
  uint64_t top = 0;
  for (uint32_t p : switch_ports_) top = std::max(top, ports_[p].tx_bytes);
  uint64_t max_q = 0, drops = 0, marks = 0, trims = 0;
  for (uint32_t p : switch_ports_) {
    const Port& x = ports_[p];
    if (x.tx_bytes * 1000 >= top * 999 &&
        (ports_[busiest].tx_bytes * 1000 < top * 999 ||
         std::make_pair(x.q_integral, x.max_q) >
             std::make_pair(ports_[busiest].q_integral,
                            ports_[busiest].max_q))) {
      busiest = p;
    }
    max_q = std::max(max_q, ports_[p].max_q);
    drops += ports_[p].drops;
    marks += ports_[p].marks;
    trims += ports_[p].trims;
  }
  Port& b = ports_[busiest];
  b.q_integral += static_cast<double>(b.q_bytes) * (now_ - b.q_since);
  const uint64_t span = now_ > first_start ? now_ - first_start : 1;
  m["max_queue_kb"] = max_q / 1024.0;
  m["bottleneck_max_queue_kb"] = b.max_q / 1024.0;
  m["bottleneck_avg_queue_kb"] = b.q_integral / span / 1024.0;
  m["bottleneck_utilization"] = b.tx_bytes * 8e9 / b.rate_bps / span;
  m["drops"] = static_cast<double>(drops);
  uint32_t worst_drop = busiest;
  for (uint32_t p : switch_ports_) {
    if (ports_[p].drops > ports_[worst_drop].drops) worst_drop = p;
  }
  m["most_drops_port"] = worst_drop;
  m["ecn_marks"] = static_cast<double>(marks);
  if (c_.trim) m["trims"] = static_cast<double>(trims);
  m["bottleneck_port"] = busiest;
  if (pfc_xoff_) {
    // PAUSE frames sent, and the largest share of the run any one link
    // (hosts' included) spent paused.
    uint64_t pauses = 0;
    double most = 0;
    for (Port& x : ports_) {
      if (x.paused) x.paused_ns += now_ - x.paused_since, x.paused_since = now_;
      pauses += x.pauses;
      most = std::max(most, static_cast<double>(x.paused_ns) / span);
    }
    m["pfc_pauses"] = static_cast<double>(pauses);
    m["pfc_max_paused_frac"] = most;
  }
  return busiest;
}

void Sim::summarize(SimResult* r) {
  auto& m = r->metrics;
  r->port_names = port_names_;
  const FlowTotals t = summarize_flows(r);
  const uint64_t first_start = t.first_start;
  const uint64_t total_bytes = t.total_bytes, total_pkts = t.total_pkts;
  const uint64_t min_base = t.min_base;
  const uint32_t busiest = summarize_ports(r, first_start);
  Port& b = ports_[busiest];
  const uint64_t span = now_ > first_start ? now_ - first_start : 1;
  bool all_unlimited = flows_.size() <= c_.trace_flows;
  for (const Flow& f : flows_) all_unlimited &= f.unlimited;
  if (all_unlimited) {
    convergence(b.rate_bps * c_.mtu_bytes / (c_.mtu_bytes + c_.header_bytes),
                &m);
  }
  r->metrics["goodput_gbps"] = delivered_total_ * 8.0 / span;
  // Against a single bottleneck: meaningful on the dumbbell only.
  if (m.count("completion_us") && c_.topology == "dumbbell") {
    const double wire = static_cast<double>(total_bytes) +
                        static_cast<double>(total_pkts) * c_.header_bytes -
                        (c_.mtu_bytes + c_.header_bytes);
    const double ideal_ns = wire * 8e9 / b.rate_bps + min_base;
    m["completion_over_ideal"] = m["completion_us"] * 1e3 / ideal_ns;
  }
  // Last: convergence() above reads the flow series.
  r->flow_series = std::move(fseries_);
  r->queue_series = std::move(qseries_);
}

void Sim::convergence(double share_bps,
                      std::map<std::string, double>* m) const {
  // Phases start when a flow joins or leaves. A phase has converged from
  // the first sample after which every active flow stays within
  // converge_tolerance of an equal share of the bottleneck until the
  // phase ends; the convergence time is from the phase start to there.
  std::vector<uint64_t> cuts;
  for (const Flow& f : flows_) {
    cuts.push_back(f.spec.start_ns);
    if (f.spec.stop_ns < now_) cuts.push_back(f.spec.stop_ns);
  }
  cuts.push_back(now_);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::map<uint64_t, std::vector<std::pair<uint32_t, double>>> by_t;
  for (const FlowSample& s : fseries_)
    by_t[s.t_ns].push_back({s.flow, s.tput_gbps});
  const uint64_t period = static_cast<uint64_t>(c_.sample_us * 1000);
  double worst = 0, sum = 0;
  int phases = 0, unconverged = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const uint64_t e = cuts[i], next = cuts[i + 1];
    std::vector<uint8_t> active(flows_.size(), 0);
    int n = 0;
    for (const Flow& f : flows_) {
      if (f.spec.start_ns <= e && f.spec.stop_ns >= next) {
        active[f.id] = 1;
        ++n;
      }
    }
    if (n == 0) continue;
    const double fair_gbps = share_bps / n / 1e9;
    uint64_t since = kNever;  // start of the current in-tolerance run
    for (auto it = by_t.upper_bound(e + period);
         it != by_t.end() && it->first <= next; ++it) {
      bool ok = true;
      int seen = 0;
      for (const auto& [flow, g] : it->second) {
        if (!active[flow]) continue;
        ++seen;
        ok &= std::fabs(g - fair_gbps) <= c_.converge_tolerance * fair_gbps;
      }
      ok &= seen == n;
      if (!ok) {
        since = kNever;
      } else if (since == kNever) {
        since = it->first - period;
      }
    }
    ++phases;
    const double t_us = (since == kNever ? next - e : since - e) / 1e3;
    if (since == kNever) ++unconverged;
    worst = std::max(worst, t_us);
    sum += t_us;
  }
  if (phases == 0) return;
  (*m)["convergence_max_us"] = worst;
  (*m)["convergence_mean_us"] = sum / phases;
  (*m)["unconverged_phases"] = unconverged;
}

}  // namespace uccl::sim::detail

namespace uccl::sim {

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> kNames = {
      "flows", "unfinished_flows", "retransmissions", "rtos",
      "tail_loss_probes", "events", "wall_s", "events_per_s", "sim_ms",
      "fct_p50_us", "fct_p99_us", "slowdown_p50", "slowdown_p99",
      "short_slowdown_p50", "short_slowdown_p99",
      // FCT slowdown per flow
      // size (size_bucket)
      "slowdown_p50_10k", "slowdown_p95_10k", "slowdown_p99_10k",
      "slowdown_p50_100k", "slowdown_p95_100k", "slowdown_p99_100k",
      "slowdown_p50_1m", "slowdown_p95_1m", "slowdown_p99_1m",
      "slowdown_p50_10m", "slowdown_p95_10m", "slowdown_p99_10m",
      "slowdown_p50_big", "slowdown_p95_big", "slowdown_p99_big",
      "completion_us", "completion_over_ideal", "jain", "window_tput_gbps",
      "window_min_over_max", "max_queue_kb", "bottleneck_max_queue_kb",
      "bottleneck_avg_queue_kb", "bottleneck_utilization", "drops",
      "most_drops_port", "ecn_marks", "pfc_pauses", "trims",
      "pfc_max_paused_frac", "bottleneck_port", "goodput_gbps",
      "convergence_max_us", "convergence_mean_us", "unconverged_phases"};
  return kNames;
}

}  // namespace uccl::sim
