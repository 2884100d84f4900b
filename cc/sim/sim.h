// ccsim: a discrete-event, packet-level network simulator that runs the
// cc/ congestion controllers and the engine's loss-recovery rules.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl::sim {

// One flow of the workload. Hosts are numbered as the topology says
// (cc/sim/README.md): dumbbell senders 0..S-1 then receivers S..S+R-1;
// leaf-spine host h sits under leaf h / hosts_per_leaf; fat tree host h
// under edge switch h / hosts_per_edge (pod-major).
struct FlowSpec {
  uint32_t src = 0, dst = 0;
  uint64_t bytes = 0;  // payload; 0 = unlimited until stop_ns
  uint64_t start_ns = 0;
  uint64_t stop_ns = 0;  // unlimited flows stop sending new data here
};

// Everything a run needs; filled from a config file (cc/sim/config.h).
struct SimConfig {
  std::string name = "sim";
  // Topology: "dumbbell" (senders on switch L, receivers on switch R, one
  // L->R bottleneck link), "leafspine" (two tiers, ECMP) or "fattree"
  // (three tiers, ECMP).
  std::string topology = "dumbbell";
  uint32_t senders = 2, receivers = 1;                  // dumbbell
  uint32_t leaves = 4, spines = 4, hosts_per_leaf = 4;  // leafspine
  // "fattree": k pods of k/2 edge and k/2 aggregation switches, (k/2)^2
  // cores; hosts_per_edge 0 = k/2 (full bisection), more oversubscribes.
  uint32_t fattree_k = 4, hosts_per_edge = 0;
  double host_gbps = 100;  // host NIC and access links
  // The line rate controllers and credit pacers are told (the engine's
  // --link_gbps: a bottleneck slower than the NIC); 0 = host_gbps.
  double cc_line_gbps = 0;
  double bottleneck_gbps = 0;         // dumbbell L->R; 0 = host_gbps
  double fabric_gbps = 0;             // leaf<->spine; 0 = host_gbps
  double link_delay_us = 1;           // propagation of every link, one way
  std::vector<double> host_delay_us;  // per host access link (RTT classes)
  double buffer_kb = 1024;            // per switch output port, data packets
  // Shared buffer (0 = none, each port has buffer_kb): each switch holds
  // shared_buffer_kb for all its ports, and a port may queue at most
  // dt_alpha x (the buffer left free) (Choudhury-Hahne dynamic threshold).
  double shared_buffer_kb = 0;
  double dt_alpha = 1;
  // Packet trimming (NDP, EQDS): a data packet the queue cannot take loses
  // its payload instead of being dropped; its header goes on in the
  // priority (control) queue and the receiver NACKs it.
  bool trim = false;
  double ecn_kb = 0;  // mark data above this queue (0 = no ECN)
  // RED-style marking (DCQCN): with ecn_kmax_kb > ecn_kb, the probability
  // rises linearly from 0 at ecn_kb to ecn_pmax at ecn_kmax_kb, and is 1
  // above; 0 keeps the step at ecn_kb (DCTCP).
  double ecn_kmax_kb = 0;
  double ecn_pmax = 0.01;
  // PFC (lossless fabric): pause a link when the data it brought into a
  // switch exceeds pfc_xoff_kb, resume below pfc_xon_kb; 0 = no PFC
  // (drop-tail at buffer_kb).
  double pfc_xoff_kb = 0, pfc_xon_kb = 0;
  // A flow's data goes in chunks, the unit its controller, scoreboard and
  // ACKs count (the engine's chunk: one RDMA message, UCCL_CHUNK_KB's 64
  // KiB), each sent back to back as packets of at most mtu_bytes payload
  // (RoCE's 4096-byte MTU); as on a UC queue pair, a chunk that loses a
  // packet is lost whole. chunk_bytes is rounded down to whole packets;
  // chunk_bytes = mtu_bytes is one packet per chunk (the papers' model).
  uint32_t mtu_bytes = 4096;
  uint32_t chunk_bytes = 65536;
  uint32_t header_bytes = 64;  // per data packet on the wire
  uint32_t ctrl_bytes = 64;    // ACK / credit / request packets
  // Receiver host delay: each data packet's ACK leaves this long after it
  // arrived (the engine's receive path and ACK coalescing), and reports it
  // as the endpoint delay (Swift's endpoint window; the fabric delay is
  // the RTT without it). 0: ACK at once.
  double rx_delay_us = 0;
  // "single": one ECMP path per flow; "spray": every packet picks one of
  // `paths` entropy values by power of two choices on path RTTs.
  std::string multipath = "single";
  uint32_t paths = 8;
  // One controller per path instead of per flow (the engine's
  // UCCL_CC_PER_PATH, default off): with spraying, each path's controller
  // sees that path's RTTs and packets in flight; not with credit.
  bool cc_per_path = false;
  // The controllers of the flows between the same two hosts share the
  // floor they learn their target from (Swift's target_from_min_delay,
  // TIMELY's thresholds_from_min_rtt; cc/delay_floor.h), as the engine's flows
  // to one peer do (UCCL_CC_SHARED_FLOOR, default on).
  bool shared_floor = true;
  // Host scheduling delay: each packet reaching a host waits an extra
  // exponentially distributed time of this mean before its transport sees
  // it, in order (a busy engine thread delays what is behind it). As the
  // engine reports it with NIC timestamps: the receiver's wait is
  // endpoint delay; an ACK's wait at its sender is left out of the
  // sample. 0: none.
  double host_jitter_us = 0;
  // Congestion control (cc/cc.h names) and its parameters.
  std::string cc = "swift";
  std::string cc_params;
  // Loss recovery (engine defaults, UCCL_RTO_* knobs).
  // The engine's rules; its timer values (UCCL_RTO_*_US) except the initial
  // RTO, which is the minimum here (the engine's 5 ms covers handshakes over
  // the software NIC, which the simulator does not have).
  double rto_min_us = 1000, rto_max_us = 100000, rto_init_us = 1000;
  uint32_t dupack_threshold = 3;
  // Tail loss probe (the engine's UCCL_TLP): after 2 x srtt without an ACK
  // or a transmission, resend the newest unacknowledged packet.
  bool tlp = true;
  // Run control.
  std::vector<FlowSpec> flows;
  double duration_ms = 0;  // 0: until every finite flow completes
  double max_sim_ms = 10000;
  double sample_us = 10;                      // time-series period
  uint32_t trace_flows = 64;                  // flows with per-flow time series
  double jain_from_ms = -1, jain_to_ms = -1;  // steady-state window
  double short_flow_bytes = 100000;  // "short" for slowdown percentiles
  double converge_tolerance = 0.2;   // within 20% of the fair share
  uint64_t seed = 1;
  bool progress = true;  // stderr progress lines on long runs
};

// Per-flow outcome.
struct FlowResult {
  FlowSpec spec;
  uint64_t finish_ns = 0;  // receiver has every byte; 0 = not finished
  uint64_t delivered_bytes = 0;
  uint64_t ideal_fct_ns = 0;
  uint64_t retx = 0, rtos = 0, tlps = 0;
  double window_bytes = 0;  // delivered inside the Jain window
  bool in_window = false;   // active over the whole Jain window
};

// One time-series row: a flow's delivery rate and controller state.
struct FlowSample {
  uint64_t t_ns;
  uint32_t flow;
  double tput_gbps;
  double cwnd_bytes;  // -1 when unlimited
  double rate_gbps;
};
struct QueueSample {
  uint64_t t_ns;
  uint32_t port;
  uint64_t bytes;
};

struct SimResult {
  std::vector<FlowResult> flows;
  std::vector<FlowSample> flow_series;
  std::vector<QueueSample> queue_series;
  std::vector<std::string> port_names;    // index = QueueSample::port
  std::map<std::string, double> metrics;  // summary (cc/sim/README.md)
  uint64_t events = 0;
  double wall_s = 0;
  uint64_t end_ns = 0;
};

// Runs one simulation. Errors: bad topology/workload (InvalidArgument),
// unknown congestion control or parameters.
Result<SimResult> run(const SimConfig& cfg);

// Every name SimResult::metrics may hold (a run sets those that apply), so
// an experiment's checks are validated before anything runs.
const std::vector<std::string>& metric_names();

// Hosts of the configured topology (0 for an unknown one).
uint32_t host_count(const SimConfig& cfg);
// host_delay_us gives one delay per host or none (a short list is an error,
// not padded).
Status check_host_delays(const SimConfig& cfg);

// Jain's fairness index of `x` (1 = equal shares).
double jain_index(const std::vector<double>& x);
// The p-th percentile (0..100) of `v` by nearest rank; 0 when empty.
double percentile(std::vector<double> v, double p);

}  // namespace uccl::sim
