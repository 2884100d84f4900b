// The simulator core: building a run (flows, controllers, pacers), the
// event loop, and the entry point (topology, network, transport, metrics:
// sim_*.cc).
#include "cc/sim/sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <queue>

#include "cc/cc.h"
#include "cc/credit.h"
#include "cc/path_selector.h"
#include "cc/scoreboard.h"
#include "cc/sim/sim_core.h"
#include "util/random.h"

namespace uccl::sim {
namespace detail {

Status Sim::build() {
  if (c_.host_gbps <= 0 || c_.link_delay_us < 0 || c_.buffer_kb <= 0 ||
      c_.mtu_bytes == 0 || c_.sample_us <= 0) {
    return InvalidArgument(
        "need host_gbps > 0, link_delay_us >= 0, buffer_kb > 0, "
        "mtu_bytes > 0, sample_us > 0");
  }
  if (c_.chunk_bytes < c_.mtu_bytes ||
      c_.chunk_bytes / c_.mtu_bytes > UINT16_MAX) {
    return InvalidArgument("need mtu_bytes <= chunk_bytes <= 65535 packets");
  }
  chunk_ = c_.chunk_bytes - c_.chunk_bytes % c_.mtu_bytes;  // as the engine
  if (c_.multipath != "single" && c_.multipath != "spray") {
    return InvalidArgument("multipath must be 'single' or 'spray', not '" +
                           c_.multipath + "'");
  }
  line_bps_ = c_.host_gbps * 1e9;
  if (c_.cc_line_gbps < 0 || c_.rx_delay_us < 0) {
    return InvalidArgument("need cc_line_gbps >= 0, rx_delay_us >= 0");
  }
  cc_line_bps_ = c_.cc_line_gbps > 0 ? c_.cc_line_gbps * 1e9 : line_bps_;
  const double bneck =
      c_.bottleneck_gbps > 0 ? c_.bottleneck_gbps : c_.host_gbps;
  const double fabric = c_.fabric_gbps > 0 ? c_.fabric_gbps : c_.host_gbps;
  UCCL_RETURN_IF_ERROR(build_topology(bneck, fabric));
  for (uint32_t p = 0; p < ports_.size(); ++p) {
    if (ports_[p].from >= hosts_) switch_ports_.push_back(p);
  }
  UCCL_RETURN_IF_ERROR(build_routes());

  // Congestion control: check the name and parameters once.
  UCCL_ASSIGN_OR_RETURN(cc::CcParams params, cc::CcParams::parse(c_.cc_params));
  UCCL_ASSIGN_OR_RETURN(auto probe,
                        cc::make_cc(c_.cc, params, chunk_, cc_line_bps_));
  credit_ = c_.cc == "credit";
  if (credit_ && c_.cc_per_path) {  // as the engine refuses it
    return InvalidArgument("cc=credit is per flow; cc_per_path must be 0");
  }
  if (c_.host_jitter_us < 0) {
    return InvalidArgument("need host_jitter_us >= 0");
  }
  jitter_mean_ns_ = c_.host_jitter_us * 1000;
  jitter_seed_ = mix64(c_.seed ^ 0x717E4);
  int_on_ = probe->wants_int();
  ecn_seed_ = mix64(c_.seed ^ 0xEC11);
  if (c_.shared_buffer_kb < 0 || c_.dt_alpha <= 0) {
    return InvalidArgument("need shared_buffer_kb >= 0, dt_alpha > 0");
  }
  shared_bytes_ = static_cast<uint64_t>(c_.shared_buffer_kb * 1024);
  node_queued_.assign(nodes_, 0);
  if (c_.pfc_xoff_kb > 0) {
    if (c_.pfc_xon_kb <= 0 || c_.pfc_xon_kb >= c_.pfc_xoff_kb) {
      return InvalidArgument("pfc: need 0 < pfc_xon_kb < pfc_xoff_kb");
    }
    pfc_xoff_ = static_cast<uint64_t>(c_.pfc_xoff_kb * 1024);
    pfc_xon_ = static_cast<uint64_t>(c_.pfc_xon_kb * 1024);
  }
  if (c_.ecn_kb < 0 || c_.ecn_kmax_kb < 0 || c_.ecn_pmax < 0 ||
      c_.ecn_pmax > 1) {
    return InvalidArgument(
        "need ecn_kb >= 0, ecn_kmax_kb >= 0, 0 <= ecn_pmax <= 1");
  }

  host_.resize(hosts_);
  for (uint32_t h = 0; h < hosts_; ++h) host_[h].port = node_ports_[h][0];
  if (c_.flows.empty()) return InvalidArgument("the workload has no flows");
  flows_.resize(c_.flows.size());
  for (uint32_t i = 0; i < c_.flows.size(); ++i) {
    UCCL_RETURN_IF_ERROR(add_flow(i, params));
  }
  if (credit_) {
    UCCL_ASSIGN_OR_RETURN(cc::CreditParams cp,
                          cc::CreditSender::params_from(params));
    // The pacer grants payload bytes: its rate leaves room for headers.
    const double payload_bps = cc::PullPacer::payload_rate_bps(
        cc_line_bps_, c_.mtu_bytes, c_.header_bytes);
    for (Host& h : host_) {
      if (h.rx_flows.empty()) continue;
      h.pacer = std::make_unique<cc::PullPacer>(
          cp, payload_bps, static_cast<uint32_t>(h.rx_flows.size()), 0);
    }
  }
  if (c_.duration_ms > 0)
    stop_ns_ = static_cast<uint64_t>(c_.duration_ms * 1e6);
  pkts_.reserve(1 << 16);
  at(0, kEvSample, 0);
  return Status::OK();
}

// Flow i of the workload: its checks, controller, path selector and the
// engine's loss-recovery scoreboard.
Status Sim::add_flow(uint32_t i, const cc::CcParams& params) {
  const FlowSpec& s = c_.flows[i];
  if (s.src >= hosts_ || s.dst >= hosts_ || s.src == s.dst) {
    return InvalidArgument("flow " + std::to_string(i) + ": hosts " +
                           std::to_string(s.src) + "->" +
                           std::to_string(s.dst) + " invalid (topology has " +
                           std::to_string(hosts_) + " hosts)");
  }
  if (s.bytes == 0 && s.stop_ns == 0 && c_.duration_ms <= 0) {
    return InvalidArgument("flow " + std::to_string(i) +
                           ": unlimited flow needs a stop time or "
                           "duration_ms");
  }
  Flow& f = flows_[i];
  f.spec = s;
  f.id = i;
  f.unlimited = s.bytes == 0;
  if (f.unlimited && s.stop_ns == 0) {
    f.spec.stop_ns = static_cast<uint64_t>(c_.duration_ms * 1e6);
  }
  if (f.unlimited)
    unlimited_until_ = std::max(unlimited_until_, f.spec.stop_ns);
  f.npkts =
      f.unlimited ? 0 : static_cast<uint32_t>((s.bytes + chunk_ - 1) / chunk_);
  if (!f.unlimited) {
    f.got.resize(f.npkts);
    ++finite_left_;
  }
  f.paths = std::make_unique<cc::PathSelector>(
      c_.multipath == "spray" ? std::max<uint32_t>(c_.paths, 1) : 1,
      mix64(c_.seed ^ (i * 0x1234567ull)));
  f.ccs.resize(c_.cc_per_path ? f.paths->size() : 1);
  std::shared_ptr<cc::DelayFloor> floor;
  if (c_.shared_floor) {
    auto& slot = floors_[uint64_t{s.src} << 32 | s.dst];
    if (!slot) slot = std::make_shared<cc::DelayFloor>();
    floor = slot;
  }
  for (FlowCc& pc : f.ccs) {
    UCCL_ASSIGN_OR_RETURN(pc.cc,
                          cc::make_cc(c_.cc, params, chunk_, cc_line_bps_));
    if (floor) pc.cc->share_delay_floor(floor);
  }
  cc::ScoreboardConfig sc;
  // Packets out at most: the whole flow, up to kMaxOutstanding.
  sc.capacity = 64;
  while (sc.capacity < kMaxOutstanding &&
         (f.unlimited || sc.capacity < f.npkts)) {
    sc.capacity *= 2;
  }
  sc.paths = f.paths->size();
  sc.rto_min_ns = static_cast<uint64_t>(c_.rto_min_us * 1000);
  sc.rto_max_ns = static_cast<uint64_t>(c_.rto_max_us * 1000);
  sc.rto_init_ns = static_cast<uint64_t>(c_.rto_init_us * 1000);
  sc.max_retries = std::numeric_limits<uint32_t>::max();  // never gives up
  sc.dup_ack_threshold = c_.dupack_threshold;
  sc.tail_loss_probe = c_.tlp;
  // The receiver's ACK delay, which the tail loss probe waits out.
  sc.ack_delay_ns = static_cast<uint64_t>(c_.rx_delay_us * 1000);
  f.sb = std::make_unique<cc::Scoreboard>(sc);
  if (chunk_ > c_.mtu_bytes) f.reasm.resize(sc.capacity);
  host_[s.src].tx_flows.push_back(i);
  f.rx_slot = static_cast<uint32_t>(host_[s.dst].rx_flows.size());
  host_[s.dst].rx_flows.push_back(i);
  at(s.start_ns, kEvFlowStart, i);
  return Status::OK();
}

uint64_t Sim::ideal_fct(const FlowSpec& f) const {
  double slowest = 0;
  const uint64_t base = base_latency(f, &slowest);
  const uint64_t wire = f.bytes + wire_packets(f.bytes) * c_.header_bytes;
  // Store and forward: the first packet's way, then the rest at the
  // slowest link's rate.
  const uint64_t first =
      std::min<uint64_t>(wire, c_.mtu_bytes + c_.header_bytes);
  return base + ser_ns(wire - first, slowest);
}

uint64_t Sim::wire_packets(uint64_t bytes) const {
  const uint64_t per_chunk = chunk_ / c_.mtu_bytes;
  const uint64_t rest = bytes % chunk_;
  return bytes / chunk_ * per_chunk + (rest + c_.mtu_bytes - 1) / c_.mtu_bytes;
}

uint64_t Sim::base_latency(const FlowSpec& f, double* slowest_bps) const {
  // Unloaded, as the receiver sees it (FCT ends when the last byte
  // arrives): the path's propagation plus the first packet's serialization
  // per link (a flow smaller than a packet sends a smaller one: counting a
  // full one made its slowdown read below 1).
  const uint64_t first_bytes =
      f.bytes > 0 ? std::min<uint64_t>(f.bytes, c_.mtu_bytes) + c_.header_bytes
                  : c_.mtu_bytes + c_.header_bytes;
  Packet p{};
  p.flow = 0;
  p.kind = PktKind::kData;
  p.src = f.src;
  p.dst = f.dst;
  uint64_t t = 0;
  double slowest = line_bps_;
  uint32_t node = f.src;
  uint32_t guard = 0;
  while (node != f.dst && guard++ < 64) {
    const uint32_t port = node < hosts_ ? host_[node].port : route(node, p);
    const Port& pt = ports_[port];
    t += pt.prop_ns + ser_ns(first_bytes, pt.rate_bps);
    slowest = std::min(slowest, pt.rate_bps);
    node = pt.to;
  }
  *slowest_bps = slowest;
  return t;
}

SimResult Sim::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  auto last_report = wall0;
  const uint64_t period = static_cast<uint64_t>(c_.sample_us * 1000);
  const uint64_t max_ns = static_cast<uint64_t>(c_.max_sim_ms * 1e6);
  uint64_t end = 0;
  while (!events_.empty()) {
    const Event e = events_.top();
    events_.pop();
    now_ = e.t;
    if (now_ > max_ns) break;
    ++n_events_;
    switch (e.type) {
      case kEvPortFree:
        ports_[e.a].busy = false;
        try_transmit(e.a);
        break;
      case kEvArrive:
        arrive(e.a, static_cast<int32_t>(e.b));
        break;
      case kEvHostWake:
        if (host_[e.a].wake_at == now_) try_transmit(host_[e.a].port);
        break;
      case kEvFlowStart:
        flow_start(flows_[e.a]);
        break;
      case kEvTimer:
        if (flows_[e.a].timer_at == now_) on_timer(flows_[e.a]);
        break;
      case kEvPacer:
        pacer_tick(e.a);
        break;
      case kEvPfc:
        pfc_frame(e.a, e.b != 0);
        break;
      case kEvAckOut:
        enqueue(host_[pkts_[e.a].src].port, static_cast<int32_t>(e.a));
        break;
      case kEvSample: {
        sample();
        if (!done()) at(now_ + period, kEvSample, 0);
        break;
      }
    }
    end = now_;
    if (done()) break;
    if ((n_events_ & 0xFFFF) == 0 && c_.progress) {
      const auto w = std::chrono::steady_clock::now();
      if (w - last_report > std::chrono::seconds(2)) {
        last_report = w;
        const double s = std::chrono::duration<double>(w - wall0).count();
        uint32_t done = 0;
        for (const Flow& f : flows_) done += f.finish_ns != 0;
        std::fprintf(stderr,
                     "ccsim %s: t=%.3f ms, %.1fM events (%.1fM/s), flows "
                     "finished %u/%zu\n",
                     c_.name.c_str(), now_ / 1e6, n_events_ / 1e6,
                     n_events_ / 1e6 / s, done, flows_.size());
      }
    }
  }
  now_ = end;
  SimResult r;
  r.events = n_events_;
  r.end_ns = end;
  r.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0)
          .count();
  summarize(&r);
  return r;
}

}  // namespace detail

double jain_index(const std::vector<double>& x) {
  if (x.empty()) return 0;
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 > 0 ? s * s / (x.size() * s2) : 0;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * v.size());
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

uint32_t host_count(const SimConfig& c) {
  if (c.topology == "dumbbell") return c.senders + c.receivers;
  if (c.topology == "leafspine") return c.leaves * c.hosts_per_leaf;
  if (c.topology == "fattree") {
    const uint64_t half = c.fattree_k / 2;
    const uint64_t n =
        c.fattree_k * half * (c.hosts_per_edge ? c.hosts_per_edge : half);
    return n > (1u << 24) ? 0 : static_cast<uint32_t>(n);
  }
  return 0;
}

Status check_host_delays(const SimConfig& c) {
  const uint32_t hosts = host_count(c);
  if (c.host_delay_us.empty() || hosts == 0 ||
      c.host_delay_us.size() == hosts) {
    return Status::OK();
  }
  return InvalidArgument(
      "host_delay_us lists " + std::to_string(c.host_delay_us.size()) +
      " delays for " + std::to_string(hosts) + " hosts (give one per host)");
}

Result<SimResult> run(const SimConfig& cfg) {
  detail::Sim s(cfg);
  UCCL_RETURN_IF_ERROR(s.build());
  return s.run();
}

}  // namespace uccl::sim
