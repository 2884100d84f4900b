// The simulator's internals shared by the sim*.cc files: packets, events,
// ports, flows and hosts, and the Sim class that runs them.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "cc/cc.h"
#include "cc/credit.h"
#include "cc/hpcc.h"
#include "cc/path_selector.h"
#include "cc/scoreboard.h"
#include "cc/sim/event_queue.h"
#include "cc/sim/sim.h"

namespace uccl::sim::detail {

inline constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
inline constexpr int32_t kNil = -1;
// A flow's packets outstanding at most (its scoreboard's ring).
inline constexpr uint32_t kMaxOutstanding = 16384;

enum class PktKind : uint8_t { kData, kAck, kCredit, kRts, kFin };

struct Packet {
  uint64_t sent_ns;  // data: this transmission; ACK: echoed
  uint64_t aux;      // credit: bytes; RTS: demand bytes; ACK: rx delay ns
  uint32_t flow;
  uint32_t seq;  // data: packet number; ACK: the data packet it acks
  uint32_t cum;  // ACK: every packet below has arrived
  uint32_t wire_bytes;
  uint32_t payload;
  uint32_t src, dst;  // hosts
  uint16_t path;      // ECMP entropy
  uint8_t hops;       // switches traversed (data; echoed in the ACK)
  PktKind kind;
  bool ecn : 1;
  bool first : 1;    // RTS: the flow's first demand
  bool unsched : 1;  // data sent on speculative credit (credit)
  bool trimmed : 1;  // data whose payload a switch cut; ACK: a NACK for it
  uint16_t frags;    // data: packets in its chunk
  int32_t next;
  uint32_t in_port;  // the link it last crossed (PFC's ingress accounting)
  // Host jitter: how long it waited in the host it reached (ns, saturated).
  uint32_t host_wait_ns;
};
static_assert(sizeof(Packet) == 64, "a packet fills one cache line");

enum EvType : uint32_t {
  kEvPortFree,
  kEvArrive,
  kEvHostWake,
  kEvFlowStart,
  kEvTimer,
  kEvPacer,
  kEvSample,
  kEvPfc,     // a PAUSE (b = 1) or RESUME (b = 0) reaches port a's sender
  kEvAckOut,  // the receiver host sends ACK packet a (rx_delay_us later)
};

struct Fifo {
  int32_t head = kNil, tail = kNil;
  bool empty() const { return head == kNil; }
};

struct Port {
  uint32_t from, to;  // nodes
  double rate_bps;
  uint64_t prop_ns;
  bool busy = false;
  Fifo ctrl, data;       // control packets go first and are never dropped
  uint64_t q_bytes = 0;  // data bytes queued
  uint64_t buf_bytes = 0, ecn_bytes = 0, ecn_max_bytes = 0;
  // Statistics.
  uint64_t max_q = 0, drops = 0, marks = 0, tx_bytes = 0, trims = 0;
  double q_integral = 0;  // byte-ns
  uint64_t q_since = 0;
  // PFC: `paused` stops this port's data (its receiver's ingress is over
  // XOFF); `ingress_bytes` are data bytes that came in over this link and
  // still sit in the receiving switch's queues.
  bool paused = false, pause_sent = false;
  uint64_t ingress_bytes = 0;
  uint64_t pauses = 0, paused_ns = 0, paused_since = 0;
};

// A congestion controller and the pacing state of what it sends.
struct FlowCc {
  std::unique_ptr<cc::CongestionControl> cc;
  uint64_t last_send_ns = 0;
  uint32_t last_bytes = 0;
};

struct Flow {
  FlowSpec spec;
  uint32_t id;
  bool started = false, unlimited = false, sender_done = false;
  uint32_t npkts = 0;  // finite flows
  // Loss recovery: the engine's (cc/scoreboard.h), a packet per sequence
  // number from 0, paths being ECMP entropies.
  std::unique_ptr<cc::Scoreboard> sb;
  // One controller for the flow, or one per path (cc_per_path, the
  // engine's UCCL_CC_PER_PATH): each then sees its own path's packets in
  // flight, RTTs and pacing, and every one hears the flow's losses.
  std::vector<FlowCc> ccs;
  std::unique_ptr<cc::PathSelector> paths;
  uint64_t timer_at = kNever;  // the scoreboard's timer event, if armed
  FlowCc& cc_of(uint32_t path) { return ccs.size() == 1 ? ccs[0] : ccs[path]; }
  uint64_t cc_inflight(uint32_t path) const {
    return ccs.size() == 1 ? sb->inflight() : sb->path_inflight(path);
  }
  uint64_t demand_sent = 0;  // credit: bytes requested so far
  double spec_left = 0;      // credit: speculative credit not yet used
  uint32_t rx_slot = 0;      // credit: its slot in the receiver's pacer
  // Receiver.
  // Chunks of several packets being reassembled, by sequence number mod
  // their count (a power of two, the scoreboard's window): the
  // transmission (send time) and packets seen; dead after a trimmed one.
  struct Reasm {
    uint32_t seq = UINT32_MAX;
    uint16_t got = 0;
    bool dead = false, ecn = false;
    uint64_t sent_ns = 0;
  };
  std::vector<Reasm> reasm;
  std::vector<uint8_t> got;
  uint32_t rcv_cum = 0;
  uint64_t delivered = 0, delivered_at_sample = 0;
  uint64_t finish_ns = 0;
  // Statistics.
  uint64_t retx = 0;  // resends
  uint64_t win_start_bytes = 0, win_end_bytes = 0;
  bool win_started = false, win_ended = false;
};

struct Host {
  uint32_t port;                   // its NIC
  std::vector<uint32_t> tx_flows;  // flows it sends, round-robin
  size_t rr = 0;
  uint64_t wake_at = 0;
  // Host jitter: when its receive path has handed over the last packet
  // (later packets wait behind it, as behind a descheduled thread).
  uint64_t rx_free_ns = 0;
  // Credit receiver: pull pacer over the flows it receives (only hosts
  // that receive have one), each flow by its slot here.
  std::unique_ptr<cc::PullPacer> pacer;
  // The chunk whose packets its NIC is sending (back to back, as a NIC
  // executes one message): the first packet, copied for the rest.
  uint32_t burst_left = 0;   // packets of it still to send
  uint32_t burst_bytes = 0;  // payload bytes still to send
  Packet burst{};
  std::vector<uint32_t> rx_flows;
  uint64_t pending_demand = 0;
  bool pacer_armed = false;
};

class Sim {
 public:
  // Keeps a reference to `c`, which must outlive it: no temporaries.
  explicit Sim(const SimConfig& c) : c_(c) {}
  explicit Sim(SimConfig&&) = delete;
  friend class SimTestPeer;  // tests/cc/sim_fabric_test.cc
  Status build();
  SimResult run();

 private:
  // Topology.
  uint32_t add_node() { return nodes_++; }
  void add_link(uint32_t a, uint32_t b, double gbps, double delay_us,
                const std::string& name_ab, const std::string& name_ba);
  void add_host_link(uint32_t h, uint32_t sw, const std::string& sw_name);
  void add_switch_link(uint32_t a, const char* kind_a, uint32_t ia, uint32_t b,
                       const char* kind_b, uint32_t ib, double gbps);
  Status build_routes();
  Status find_edges();
  Status build_route_tables();
  struct HopSet {  // equal-cost output ports
    const uint32_t* ports;
    uint32_t n;
  };
  HopSet hops_toward(uint32_t node, uint32_t dst_host) const;
  HopSet fat_tree_hops(uint32_t node, uint32_t dst_edge) const;
  uint32_t intern_hops(
      const std::vector<uint32_t>& hops,
      std::unordered_map<uint64_t, std::vector<uint32_t>>* by_hash);
  Status build_topology(double bneck_gbps, double fabric_gbps);
  Status build_fat_tree(double fabric_gbps);
  Status add_flow(uint32_t i, const cc::CcParams& params);
  uint32_t route(uint32_t node, const Packet& p) const;
  uint64_t ser_ns(uint64_t bytes, double rate_bps) const {
    return static_cast<uint64_t>(std::ceil(bytes * 8e9 / rate_bps));
  }
  // Unloaded FCT of `f`, and its parts: latency of one packet and its ACK
  // (the first packet's serialization included) and the slowest link.
  uint64_t ideal_fct(const FlowSpec& f) const;
  uint64_t base_latency(const FlowSpec& f, double* slowest_bps) const;

  // Events.
  void at(uint64_t t, uint32_t type, uint32_t a, uint32_t b = 0) {
    events_.push(Event{t, ev_seq_++, type, a, b});
  }
  int32_t alloc_pkt();
  void free_pkt(int32_t i) {
    pkts_[i].next = free_;
    free_ = i;
  }
  void push(Fifo& f, int32_t i);
  int32_t pop(Fifo& f);

  // Datapath.
  void enqueue(uint32_t port, int32_t pkt);
  bool ecn_mark(const Port& p);
  // Whether a data packet of `bytes` fits port p's queue (its own buffer,
  // or the switch's shared buffer under the dynamic threshold).
  bool admits(const Port& p, uint64_t bytes) const;
  // PFC (sim_pfc.cc): a data packet queued in / leaving a switch, and a
  // PAUSE/RESUME frame arriving at the port it names.
  void pfc_ingress(const Packet& k);
  void pfc_egress(const Packet& k);
  void pfc_frame(uint32_t port, bool pause);
  void record_int(const Port& p, int32_t pkt);
  void try_transmit(uint32_t port);
  void transmit(uint32_t port, int32_t pkt);
  // When a packet reaching host h's NIC at `t` is handed to its
  // transport: t, or later by the host's jitter (FIFO).
  uint64_t host_release(uint32_t h, uint64_t t);
  void arrive(uint32_t node, int32_t pkt);
  int32_t host_next_data(uint32_t host);
  void wake_host(uint32_t host, uint64_t t);
  void send_ctrl(uint32_t from_host, PktKind k, const Flow& f, uint64_t aux,
                 uint32_t dst, bool first = false);

  // Transport.
  // The path for f's next `bytes` (urgent: past window and pacing), or
  // false when no controller lets it leave now (*wake: pacing's time).
  bool pick_path(Flow& f, uint32_t bytes, bool urgent, uint32_t* path,
                 uint64_t* wake);
  void flow_start(Flow& f);
  void on_data(int32_t pkt);
  void on_ack(const Packet& a);
  void arm_timer(Flow& f, uint64_t not_before);
  void on_timer(Flow& f);
  void report_losses(Flow& f, const cc::LossReport& r);
  void request_more(Flow& f);
  void pacer_tick(uint32_t host);
  void arm_pacer(uint32_t host);
  // The flow is done: its receiver's pacer drops the demand left.
  void release_demand(const Flow& f);
  bool sender_finished(const Flow& f) const;
  void finish_sender(Flow& f);
  uint32_t payload_of(const Flow& f, uint32_t seq) const;
  // Packets on the wire for `bytes` of a flow's data (whole chunks, then
  // the rest's).
  uint64_t wire_packets(uint64_t bytes) const;
  // Whether data packet `pkt` completes its chunk (the receiver's
  // reassembly); the packet is freed when it does not.
  bool chunk_complete(Flow& f, int32_t pkt);

  void sample();
  void summarize(SimResult* r);
  struct FlowTotals {  // finite flows, for the workload's ideal
    uint64_t first_start = 0, total_bytes = 0, total_pkts = 0, min_base = 0;
  };
  FlowTotals summarize_flows(SimResult* r);
  uint32_t summarize_ports(SimResult* r, uint64_t first_start);
  void convergence(double share_bps, std::map<std::string, double>* m) const;

  const SimConfig& c_;
  uint64_t now_ = 0;
  uint64_t ev_seq_ = 0;
  EventQueue events_;
  uint64_t n_events_ = 0;
  std::vector<Packet> pkts_;
  int32_t free_ = kNil;

  uint32_t nodes_ = 0;
  uint32_t hosts_ = 0;
  std::vector<Port> ports_;
  std::vector<std::string> port_names_;
  std::vector<std::vector<uint32_t>> node_ports_;
  // Routes: a host's edge switch and the port down to it; per (switch,
  // destination edge) the id of its set of equal-cost output ports
  // (hop_ports_[set_off_[id] .. + set_cnt_[id]]).
  std::vector<uint32_t> edge_of_, down_port_;
  std::vector<uint32_t> edges_;       // switches with hosts
  std::vector<uint32_t> edge_index_;  // per switch; UINT32_MAX: no hosts
  std::vector<uint32_t> route_set_;   // tables (not for fat trees)
  std::vector<uint32_t> set_off_, set_cnt_, hop_ports_;
  struct FatTree {  // computed routes: the node ranges of each tier
    bool on = false;
    uint32_t half = 0, per_edge = 0, edge0 = 0, agg0 = 0, core0 = 0;
  } fat_;
  std::vector<Host> host_;
  std::vector<Flow> flows_;
  uint32_t finite_left_ = 0;
  double line_bps_ = 0;
  double cc_line_bps_ = 0;  // the rate controllers are told (cc_line_gbps)
  uint32_t chunk_ = 0;      // chunk_bytes in whole packets
  uint64_t stop_ns_ = kNever;
  std::vector<FlowSample> fseries_;
  std::vector<QueueSample> qseries_;
  std::vector<uint32_t> switch_ports_;  // ports leaving switches
  bool credit_ = false;
  // In-band telemetry, recorded only when the controller asks for it:
  // kMaxIntHops records per packet slot, and the ACK being handled's.
  static constexpr uint32_t kMaxIntHops = cc::Hpcc::kMaxHops;
  bool int_on_ = false;
  std::vector<cc::IntHop> int_;
  std::array<cc::IntHop, kMaxIntHops> int_ack_{};
  uint64_t ecn_seed_ = 0;     // RED marking draws
  uint64_t jitter_seed_ = 0;  // host jitter draws
  // shared_floor: one per (sender, receiver) host pair, src << 32 | dst.
  std::unordered_map<uint64_t, std::shared_ptr<cc::DelayFloor>> floors_;
  double jitter_mean_ns_ = 0;            // host_jitter_us; 0: none
  uint64_t pfc_xoff_ = 0, pfc_xon_ = 0;  // bytes; xoff 0: no PFC
  // Shared buffers: bytes each switch holds (0: per-port buffers), and
  // the data bytes queued at each node's ports.
  uint64_t shared_bytes_ = 0;
  std::vector<uint64_t> node_queued_;
  uint64_t delivered_total_ = 0;
  uint64_t unlimited_until_ = 0;  // latest stop of an unlimited flow

  bool done() const {
    return stop_ns_ == kNever ? finite_left_ == 0 && now_ >= unlimited_until_
                              : now_ >= stop_ns_;
  }
};

}  // namespace uccl::sim::detail
