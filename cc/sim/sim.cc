// The simulator core: event queue, ports with drop-tail/ECN queues,
// BFS-built ECMP routing, host NICs that pull packets from flows, the
// sender/receiver transport (SACK, RACK, RTO, credit) and the metrics.
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
#include "util/random.h"

namespace uccl::sim {
namespace {

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr int32_t kNil = -1;
// A flow's packets outstanding at most (its scoreboard's ring).
constexpr uint32_t kMaxOutstanding = 16384;

enum class PktKind : uint8_t { kData, kAck, kCredit, kRts, kFin };

struct Packet {
  uint64_t sent_ns;  // data: this transmission; ACK: echoed
  uint64_t aux;      // credit: bytes; RTS: demand bytes
  uint32_t flow;
  uint32_t seq;  // data: packet number; ACK: the data packet it acks
  uint32_t cum;  // ACK: every packet below has arrived
  uint32_t wire_bytes;
  uint32_t payload;
  uint32_t src, dst;  // hosts
  uint16_t path;      // ECMP entropy
  uint8_t hops;       // switches traversed (data; echoed in the ACK)
  PktKind kind;
  bool ecn;
  bool first;    // RTS: the flow's first demand
  bool unsched;  // data sent on speculative credit (credit)
  int32_t next;
};

enum EvType : uint32_t {
  kEvPortFree,
  kEvArrive,
  kEvHostWake,
  kEvFlowStart,
  kEvTimer,
  kEvPacer,
  kEvSample,
};

struct Event {
  uint64_t t;
  uint64_t seq;
  uint32_t type;
  uint32_t a;
  uint32_t b;
};
struct EventLater {
  bool operator()(const Event& x, const Event& y) const {
    return x.t != y.t ? x.t > y.t : x.seq > y.seq;
  }
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
  uint64_t buf_bytes = 0, ecn_bytes = 0;
  // Statistics.
  uint64_t max_q = 0, drops = 0, marks = 0, tx_bytes = 0;
  double q_integral = 0;  // byte-ns
  uint64_t q_since = 0;
};

struct Flow {
  FlowSpec spec;
  uint32_t id;
  bool started = false, unlimited = false, sender_done = false;
  uint32_t npkts = 0;  // finite flows
  // Loss recovery: the engine's (cc/scoreboard.h), a packet per sequence
  // number from 0, paths being ECMP entropies.
  std::unique_ptr<cc::Scoreboard> sb;
  std::unique_ptr<cc::CongestionControl> cc;
  std::unique_ptr<cc::PathSelector> paths;
  uint64_t timer_at = kNever;  // the scoreboard's timer event, if armed
  uint64_t last_send_ns = 0;
  uint32_t last_bytes = 0;
  uint64_t demand_sent = 0;  // credit: bytes requested so far
  double spec_left = 0;      // credit: speculative credit not yet used
  // Receiver.
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
  // Credit receiver: pull pacer over the flows it receives.
  std::unique_ptr<cc::PullPacer> pacer;
  uint64_t pending_demand = 0;
  bool pacer_armed = false;
};

class Sim {
 public:
  explicit Sim(const SimConfig& c) : c_(c) {}
  Status build();
  SimResult run();

 private:
  // Topology.
  uint32_t add_node() { return nodes_++; }
  void add_link(uint32_t a, uint32_t b, double gbps, double delay_us,
                const std::string& name_ab, const std::string& name_ba);
  Status build_routes();
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
  void try_transmit(uint32_t port);
  void transmit(uint32_t port, int32_t pkt);
  void arrive(uint32_t node, int32_t pkt);
  int32_t host_next_data(uint32_t host);
  void wake_host(uint32_t host, uint64_t t);
  void send_ctrl(uint32_t from_host, PktKind k, const Flow& f, uint64_t aux,
                 uint32_t dst, bool first = false);

  // Transport.
  void flow_start(Flow& f);
  void on_data(int32_t pkt);
  void on_ack(const Packet& a);
  void arm_timer(Flow& f, uint64_t not_before);
  void on_timer(Flow& f);
  void report_losses(Flow& f, const cc::LossReport& r);
  void request_more(Flow& f);
  void pacer_tick(uint32_t host);
  void arm_pacer(uint32_t host);
  bool sender_finished(const Flow& f) const;
  void finish_sender(Flow& f);
  uint32_t payload_of(const Flow& f, uint32_t seq) const;

  void sample();
  void summarize(SimResult* r);
  void convergence(double share_bps, std::map<std::string, double>* m) const;

  const SimConfig& c_;
  uint64_t now_ = 0;
  uint64_t ev_seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, EventLater> events_;
  uint64_t n_events_ = 0;
  std::vector<Packet> pkts_;
  int32_t free_ = kNil;

  uint32_t nodes_ = 0;
  uint32_t hosts_ = 0;
  std::vector<Port> ports_;
  std::vector<std::string> port_names_;
  std::vector<std::vector<uint32_t>> node_ports_;
  // next_[node * hosts_ + dst]: equal-cost output ports (offset, count).
  std::vector<uint32_t> hop_off_, hop_cnt_, hop_ports_;
  std::vector<Host> host_;
  std::vector<Flow> flows_;
  uint32_t finite_left_ = 0;
  double line_bps_ = 0;
  uint64_t stop_ns_ = kNever;
  std::vector<FlowSample> fseries_;
  std::vector<QueueSample> qseries_;
  std::vector<uint32_t> switch_ports_;  // ports leaving switches
  bool credit_ = false;
  uint64_t delivered_total_ = 0;
  uint64_t unlimited_until_ = 0;  // latest stop of an unlimited flow

  bool done() const {
    return stop_ns_ == kNever ? finite_left_ == 0 && now_ >= unlimited_until_
                              : now_ >= stop_ns_;
  }
};

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
    node_ports_[p.from].push_back(static_cast<uint32_t>(ports_.size()));
    port_names_.push_back(dir ? name_ba : name_ab);
    ports_.push_back(p);
  }
}

Status Sim::build() {
  if (c_.host_gbps <= 0 || c_.link_delay_us < 0 || c_.buffer_kb <= 0 ||
      c_.mtu_bytes == 0 || c_.sample_us <= 0) {
    return InvalidArgument(
        "need host_gbps > 0, link_delay_us >= 0, buffer_kb > 0, "
        "mtu_bytes > 0, sample_us > 0");
  }
  if (c_.multipath != "single" && c_.multipath != "spray") {
    return InvalidArgument("multipath must be 'single' or 'spray', not '" +
                           c_.multipath + "'");
  }
  line_bps_ = c_.host_gbps * 1e9;
  const double bneck =
      c_.bottleneck_gbps > 0 ? c_.bottleneck_gbps : c_.host_gbps;
  const double fabric = c_.fabric_gbps > 0 ? c_.fabric_gbps : c_.host_gbps;
  auto host_delay = [&](uint32_t h) {
    return h < c_.host_delay_us.size() ? c_.host_delay_us[h] : c_.link_delay_us;
  };
  char n1[64], n2[64];
  if (c_.topology == "dumbbell") {
    if (c_.senders == 0 || c_.receivers == 0) {
      return InvalidArgument("dumbbell: need senders >= 1, receivers >= 1");
    }
    hosts_ = c_.senders + c_.receivers;
    nodes_ = hosts_;
    node_ports_.resize(hosts_ + 2);
    const uint32_t L = add_node(), R = add_node();
    for (uint32_t h = 0; h < hosts_; ++h) {
      const bool left = h < c_.senders;
      std::snprintf(n1, sizeof(n1), "host%u->%s", h, left ? "L" : "R");
      std::snprintf(n2, sizeof(n2), "%s->host%u", left ? "L" : "R", h);
      add_link(h, left ? L : R, c_.host_gbps, host_delay(h), n1, n2);
    }
    add_link(L, R, bneck, c_.link_delay_us, "L->R", "R->L");
  } else if (c_.topology == "leafspine") {
    if (c_.leaves == 0 || c_.spines == 0 || c_.hosts_per_leaf == 0) {
      return InvalidArgument("leafspine: need leaves, spines, hosts_per_leaf");
    }
    hosts_ = c_.leaves * c_.hosts_per_leaf;
    nodes_ = hosts_;
    node_ports_.resize(hosts_ + c_.leaves + c_.spines);
    const uint32_t leaf0 = nodes_;
    for (uint32_t l = 0; l < c_.leaves; ++l) add_node();
    const uint32_t spine0 = nodes_;
    for (uint32_t s = 0; s < c_.spines; ++s) add_node();
    for (uint32_t h = 0; h < hosts_; ++h) {
      const uint32_t l = h / c_.hosts_per_leaf;
      std::snprintf(n1, sizeof(n1), "host%u->leaf%u", h, l);
      std::snprintf(n2, sizeof(n2), "leaf%u->host%u", l, h);
      add_link(h, leaf0 + l, c_.host_gbps, host_delay(h), n1, n2);
    }
    for (uint32_t l = 0; l < c_.leaves; ++l) {
      for (uint32_t s = 0; s < c_.spines; ++s) {
        std::snprintf(n1, sizeof(n1), "leaf%u->spine%u", l, s);
        std::snprintf(n2, sizeof(n2), "spine%u->leaf%u", s, l);
        add_link(leaf0 + l, spine0 + s, fabric, c_.link_delay_us, n1, n2);
      }
    }
  } else {
    return InvalidArgument("topology must be 'dumbbell' or 'leafspine', not '" +
                           c_.topology + "'");
  }
  for (uint32_t p = 0; p < ports_.size(); ++p) {
    if (ports_[p].from >= hosts_) switch_ports_.push_back(p);
  }
  UCCL_RETURN_IF_ERROR(build_routes());

  // Congestion control: check the name and parameters once.
  UCCL_ASSIGN_OR_RETURN(cc::CcParams params, cc::CcParams::parse(c_.cc_params));
  UCCL_RETURN_IF_ERROR(
      cc::make_cc(c_.cc, params, c_.mtu_bytes, line_bps_).status());
  credit_ = c_.cc == "credit";

  host_.resize(hosts_);
  for (uint32_t h = 0; h < hosts_; ++h) host_[h].port = node_ports_[h][0];
  if (c_.flows.empty()) return InvalidArgument("the workload has no flows");
  flows_.resize(c_.flows.size());
  for (uint32_t i = 0; i < c_.flows.size(); ++i) {
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
    f.npkts = f.unlimited ? 0
                          : static_cast<uint32_t>((s.bytes + c_.mtu_bytes - 1) /
                                                  c_.mtu_bytes);
    if (!f.unlimited) {
      f.got.resize(f.npkts);
      ++finite_left_;
    }
    UCCL_ASSIGN_OR_RETURN(f.cc,
                          cc::make_cc(c_.cc, params, c_.mtu_bytes, line_bps_));
    f.paths = std::make_unique<cc::PathSelector>(
        c_.multipath == "spray" ? std::max<uint32_t>(c_.paths, 1) : 1,
        mix64(c_.seed ^ (i * 0x1234567ull)));
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
    sc.ack_delay_ns = 0;  // the receiver ACKs every packet at once
    f.sb = std::make_unique<cc::Scoreboard>(sc);
    host_[s.src].tx_flows.push_back(i);
    at(s.start_ns, kEvFlowStart, i);
  }
  if (credit_) {
    UCCL_ASSIGN_OR_RETURN(cc::CreditParams cp,
                          cc::CreditSender::params_from(params));
    // The pacer grants payload bytes: its rate leaves room for headers.
    const double payload_bps =
        line_bps_ * c_.mtu_bytes / (c_.mtu_bytes + c_.header_bytes);
    for (uint32_t h = 0; h < hosts_; ++h) {
      host_[h].pacer = std::make_unique<cc::PullPacer>(
          cp, payload_bps, static_cast<uint32_t>(flows_.size()), 0);
    }
  }
  if (c_.duration_ms > 0)
    stop_ns_ = static_cast<uint64_t>(c_.duration_ms * 1e6);
  pkts_.reserve(1 << 16);
  at(0, kEvSample, 0);
  return Status::OK();
}

Status Sim::build_routes() {
  // BFS from every host over the graph; a node's next hops towards host d
  // are the ports to neighbours one step closer (equal-cost multipath).
  std::vector<uint32_t> dist(nodes_);
  hop_off_.assign(static_cast<size_t>(nodes_) * hosts_, 0);
  hop_cnt_.assign(static_cast<size_t>(nodes_) * hosts_, 0);
  std::vector<uint32_t> q;
  for (uint32_t d = 0; d < hosts_; ++d) {
    std::fill(dist.begin(), dist.end(), UINT32_MAX);
    dist[d] = 0;
    q.assign(1, d);
    for (size_t i = 0; i < q.size(); ++i) {
      const uint32_t n = q[i];
      // Hosts do not forward: only the destination expands from a host.
      if (n < hosts_ && n != d) continue;
      for (uint32_t p : node_ports_[n]) {
        const uint32_t m = ports_[p].to;
        if (dist[m] == UINT32_MAX) {
          dist[m] = dist[n] + 1;
          q.push_back(m);
        }
      }
    }
    for (uint32_t n = 0; n < nodes_; ++n) {
      const size_t k = static_cast<size_t>(n) * hosts_ + d;
      hop_off_[k] = static_cast<uint32_t>(hop_ports_.size());
      if (n == d || dist[n] == UINT32_MAX) continue;
      for (uint32_t p : node_ports_[n]) {
        const uint32_t m = ports_[p].to;
        if (dist[m] + 1 == dist[n] && (m >= hosts_ || m == d)) {
          hop_ports_.push_back(p);
        }
      }
      hop_cnt_[k] = static_cast<uint32_t>(hop_ports_.size()) - hop_off_[k];
      if (hop_cnt_[k] == 0) return Internal("routing: no next hop");
    }
  }
  return Status::OK();
}

uint32_t Sim::route(uint32_t node, const Packet& p) const {
  const size_t k = static_cast<size_t>(node) * hosts_ + p.dst;
  const uint32_t n = hop_cnt_[k];
  if (n == 1) return hop_ports_[hop_off_[k]];
  // ECMP: hash of the flow's 5-tuple stand-in (flow, direction) and the
  // entropy value, salted per switch.
  const uint64_t h = mix64((static_cast<uint64_t>(p.flow) << 20) ^
                           (static_cast<uint64_t>(p.path) << 4) ^
                           (p.kind == PktKind::kData ? 0 : 1) ^
                           (static_cast<uint64_t>(node) << 40) ^ c_.seed);
  return hop_ports_[hop_off_[k] + h % n];
}

uint64_t Sim::ideal_fct(const FlowSpec& f) const {
  double slowest = 0;
  const uint64_t base = base_latency(f, &slowest);
  const uint64_t pk = (f.bytes + c_.mtu_bytes - 1) / c_.mtu_bytes;
  const uint64_t wire = f.bytes + pk * c_.header_bytes;
  // Store and forward: the first packet's way, then the rest at the
  // slowest link's rate.
  const uint64_t first =
      std::min<uint64_t>(wire, c_.mtu_bytes + c_.header_bytes);
  return base + ser_ns(wire - first, slowest);
}

uint64_t Sim::base_latency(const FlowSpec& f, double* slowest_bps) const {
  // Unloaded, as the receiver sees it (FCT ends when the last byte
  // arrives): the path's propagation plus one packet's serialization per
  // link.
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
    t += pt.prop_ns + ser_ns(c_.mtu_bytes + c_.header_bytes, pt.rate_bps);
    slowest = std::min(slowest, pt.rate_bps);
    node = pt.to;
  }
  *slowest_bps = slowest;
  return t;
}

int32_t Sim::alloc_pkt() {
  if (free_ == kNil) {
    pkts_.emplace_back();
    return static_cast<int32_t>(pkts_.size() - 1);
  }
  int32_t i = free_;
  free_ = pkts_[i].next;
  return i;
}

void Sim::push(Fifo& f, int32_t i) {
  pkts_[i].next = kNil;
  if (f.tail == kNil) {
    f.head = f.tail = i;
  } else {
    pkts_[f.tail].next = i;
    f.tail = i;
  }
}

int32_t Sim::pop(Fifo& f) {
  int32_t i = f.head;
  f.head = pkts_[i].next;
  if (f.head == kNil) f.tail = kNil;
  return i;
}

void Sim::enqueue(uint32_t port, int32_t pkt) {
  Port& p = ports_[port];
  Packet& k = pkts_[pkt];
  if (k.kind != PktKind::kData) {
    push(p.ctrl, pkt);
  } else {
    if (p.q_bytes + k.wire_bytes > p.buf_bytes && p.from >= hosts_) {
      ++p.drops;  // drop-tail
      free_pkt(pkt);
      return;
    }
    if (p.ecn_bytes > 0 && p.q_bytes >= p.ecn_bytes) {
      k.ecn = true;
      ++p.marks;
    }
    p.q_integral += static_cast<double>(p.q_bytes) * (now_ - p.q_since);
    p.q_since = now_;
    p.q_bytes += k.wire_bytes;
    p.max_q = std::max(p.max_q, p.q_bytes);
    push(p.data, pkt);
  }
  if (!p.busy) try_transmit(port);
}

void Sim::try_transmit(uint32_t port) {
  Port& p = ports_[port];
  if (p.busy) return;
  int32_t pkt = kNil;
  if (!p.ctrl.empty()) {
    pkt = pop(p.ctrl);
  } else if (!p.data.empty()) {
    pkt = pop(p.data);
    p.q_integral += static_cast<double>(p.q_bytes) * (now_ - p.q_since);
    p.q_since = now_;
    p.q_bytes -= pkts_[pkt].wire_bytes;
  } else if (p.from < hosts_) {
    pkt = host_next_data(p.from);
  }
  if (pkt != kNil) transmit(port, pkt);
}

void Sim::transmit(uint32_t port, int32_t pkt) {
  Port& p = ports_[port];
  p.busy = true;
  const uint64_t ser = ser_ns(pkts_[pkt].wire_bytes, p.rate_bps);
  p.tx_bytes += pkts_[pkt].wire_bytes;
  at(now_ + ser, kEvPortFree, port);
  at(now_ + ser + p.prop_ns, kEvArrive, p.to, static_cast<uint32_t>(pkt));
}

void Sim::arrive(uint32_t node, int32_t pkt) {
  if (node >= hosts_) {
    if (pkts_[pkt].kind == PktKind::kData) ++pkts_[pkt].hops;
    enqueue(route(node, pkts_[pkt]), pkt);
    return;
  }
  if (pkts_[pkt].kind == PktKind::kData) {
    on_data(pkt);  // turns the packet into the ACK
    return;
  }
  // Handlers may allocate packets (the pool may move): work on a copy.
  const Packet k = pkts_[pkt];
  free_pkt(pkt);
  Flow& f = flows_[k.flow];
  switch (k.kind) {
    case PktKind::kData:  // handled above
      break;
    case PktKind::kAck:
      on_ack(k);
      break;
    case PktKind::kCredit:
      f.cc->on_credit(k.aux);
      wake_host(f.spec.src, now_);
      break;
    case PktKind::kRts: {
      Host& h = host_[node];
      if (h.pacer && !f.finish_ns) {
        const uint64_t before = h.pacer->demand(f.id);
        h.pacer->add_demand(f.id, k.aux, k.first);
        h.pending_demand += h.pacer->demand(f.id) - before;
        arm_pacer(node);
      }
      break;
    }
    case PktKind::kFin: {
      Host& h = host_[node];
      if (h.pacer) {
        h.pending_demand -= std::min(h.pending_demand, h.pacer->demand(f.id));
        h.pacer->remove_flow(f.id);
      }
      break;
    }
  }
}

void Sim::wake_host(uint32_t host, uint64_t t) {
  Host& h = host_[host];
  if (t <= now_) {
    try_transmit(h.port);
    return;
  }
  if (h.wake_at > now_ && h.wake_at <= t) return;  // an earlier one is set
  h.wake_at = t;
  at(t, kEvHostWake, host);
}

uint32_t Sim::payload_of(const Flow& f, uint32_t seq) const {
  if (f.unlimited || seq + 1 < f.npkts) return c_.mtu_bytes;
  return static_cast<uint32_t>(f.spec.bytes - uint64_t{seq} * c_.mtu_bytes);
}

int32_t Sim::host_next_data(uint32_t host) {
  Host& h = host_[host];
  const size_t n = h.tx_flows.size();
  uint64_t wake = kNever;
  for (size_t i = 0; i < n; ++i) {
    Flow& f = flows_[h.tx_flows[(h.rr + i) % n]];
    if (!f.started || f.sender_done) continue;
    cc::Scoreboard& sb = *f.sb;
    // The timeout's or probe's resend goes past window and pacing (not
    // with credit: the receiver's grants pace every byte).
    uint32_t seq = 0;
    const bool urgent = !credit_ && sb.urgent(&seq);
    const bool retx = urgent || sb.next_resend(&seq);
    const bool more_new =
        !sb.full() && (f.unlimited ? now_ < f.spec.stop_ns && now_ < stop_ns_
                                   : sb.snd_nxt() < f.npkts);
    if (!retx && !more_new) continue;
    if (!retx) seq = sb.snd_nxt();
    const uint32_t bytes = payload_of(f, seq);
    if (!urgent) {
      if (!f.cc->can_send(sb.inflight(), bytes)) continue;  // ACK/credit wakes
      if (f.last_bytes) {
        const uint64_t ready =
            f.last_send_ns + f.cc->pacing_gap_ns(f.last_bytes);
        if (now_ < ready) {
          wake = std::min(wake, ready);
          continue;
        }
      }
    }
    // Send `seq`.
    h.rr = (h.rr + i + 1) % n;
    const uint16_t path = static_cast<uint16_t>(f.paths->choose());
    if (retx) {
      sb.resent(seq, path, now_);
      ++f.retx;
    } else {
      sb.send_new(path, bytes, now_);
      if (f.unlimited) f.got.push_back(0);
    }
    f.cc->on_send(now_, bytes);
    f.last_send_ns = now_;
    f.last_bytes = bytes;
    const int32_t i_pkt = alloc_pkt();
    Packet& p = pkts_[i_pkt];
    p = Packet{};
    p.kind = PktKind::kData;
    p.flow = f.id;
    p.seq = seq;
    p.payload = bytes;
    p.wire_bytes = bytes + c_.header_bytes;
    p.src = f.spec.src;
    p.dst = f.spec.dst;
    p.path = path;
    p.sent_ns = now_;
    p.unsched = f.spec_left > 0;
    f.spec_left -= bytes;
    if (credit_ && f.unlimited) request_more(f);
    arm_timer(f, now_);
    return i_pkt;
  }
  if (wake != kNever) wake_host(host, wake);
  return kNil;
}

void Sim::send_ctrl(uint32_t from_host, PktKind k, const Flow& f, uint64_t aux,
                    uint32_t dst, bool first) {
  const int32_t i = alloc_pkt();
  Packet& p = pkts_[i];
  p = Packet{};
  p.kind = k;
  p.flow = f.id;
  p.src = from_host;
  p.dst = dst;
  p.aux = aux;
  p.first = first;
  p.wire_bytes = c_.ctrl_bytes;
  enqueue(host_[from_host].port, i);
}

void Sim::flow_start(Flow& f) {
  f.started = true;
  f.sb->note_idle(now_);
  if (credit_) {
    f.spec_left = f.cc->cwnd_bytes();  // the speculative credit
    // Request-to-send with the demand; the first spec bytes go on
    // speculative credit.
    const uint64_t d = f.unlimited ? 0 : f.spec.bytes;
    if (d > 0) {
      f.demand_sent = d;
      send_ctrl(f.spec.src, PktKind::kRts, f, d, f.spec.dst, true);
    } else {
      request_more(f);
    }
  }
  wake_host(f.spec.src, now_);
}

void Sim::request_more(Flow& f) {
  // Unlimited flows ask for credit ahead in 256 KiB steps.
  constexpr uint64_t kStep = 256 << 10;
  const uint64_t sent = uint64_t{f.sb->snd_nxt()} * c_.mtu_bytes;
  if (f.demand_sent > sent + kStep) return;
  if (now_ >= f.spec.stop_ns || now_ >= stop_ns_) return;
  const bool first = f.demand_sent == 0;
  f.demand_sent += 2 * kStep;
  send_ctrl(f.spec.src, PktKind::kRts, f, 2 * kStep, f.spec.dst, first);
}

void Sim::on_data(int32_t pkt) {
  Packet& k = pkts_[pkt];
  Flow& f = flows_[k.flow];
  if (k.seq >= f.got.size()) f.got.resize(k.seq + 1);  // unlimited flows
  Host& rx = host_[f.spec.dst];
  if (k.unsched && rx.pacer) rx.pacer->charge_unscheduled(k.payload);
  const bool fresh = !f.got[k.seq];
  if (fresh) {
    f.got[k.seq] = 1;
    f.delivered += k.payload;
    delivered_total_ += k.payload;
    while (f.rcv_cum < f.got.size() && f.got[f.rcv_cum]) ++f.rcv_cum;
    if (!f.unlimited && !f.finish_ns && f.rcv_cum == f.npkts) {
      f.finish_ns = now_;
      --finite_left_;
      Host& h = host_[f.spec.dst];
      if (h.pacer) {
        h.pending_demand -= std::min(h.pending_demand, h.pacer->demand(f.id));
        h.pacer->remove_flow(f.id);
      }
    }
  }
  // The same packet turns into the ACK: per-packet selective ACK with the
  // cumulative point, echoing send time, hops and the ECN mark.
  k.kind = PktKind::kAck;
  k.cum = f.rcv_cum;
  std::swap(k.src, k.dst);
  k.wire_bytes = c_.ctrl_bytes;
  enqueue(host_[k.src].port, pkt);
}

void Sim::on_ack(const Packet& a) {
  Flow& f = flows_[a.flow];
  cc::Scoreboard& sb = *f.sb;
  if (f.sender_done || !cc::Scoreboard::before(a.seq, sb.snd_nxt())) return;
  // The cumulative point, and the packet the ACK is for when beyond it.
  cc::AckOutcome o;
  auto none = [](uint32_t, const cc::SegRec&) {};
  sb.ack_cumulative(a.cum, now_, &o, none);
  if (a.seq >= a.cum) sb.ack_selective(a.seq, now_, &o, none);
  const uint64_t rtt = sb.take_rtt_sample(a.seq, now_);  // Karn
  if (rtt != 0) {
    f.paths->on_rtt(sb.seg(a.seq).path, rtt);
    cc::CcSample s;
    s.now_ns = now_;
    s.rtt_ns = rtt;
    s.endpoint_delay_ns = 0;
    s.fabric_delay_ns = rtt;
    s.acked_bytes = o.newly_bytes ? o.newly_bytes : payload_of(f, a.seq);
    s.acked_packets = o.newly_packets ? o.newly_packets : 1;
    s.hops = a.hops;
    s.segment_bytes = payload_of(f, a.seq);
    s.ecn = a.ecn;
    f.cc->on_ack(s);
  }
  report_losses(f, sb.finish_ack(o, now_));
  if (sender_finished(f)) {
    finish_sender(f);
    return;
  }
  arm_timer(f, now_);
  wake_host(f.spec.src, now_);
}

// The controller hears what the scoreboard declared lost; with credit, the
// receiver is asked to grant the resends.
void Sim::report_losses(Flow& f, const cc::LossReport& r) {
  if (r.fast_lost > 0) f.cc->on_loss(now_, false);
  if (r.timeout) f.cc->on_loss(now_, true);
  const uint64_t lost = f.sb->take_lost_bytes();
  if (credit_ && lost) {
    send_ctrl(f.spec.src, PktKind::kRts, f, lost, f.spec.dst);
  }
}

// One timer event per flow, at the scoreboard's next deadline (RACK's
// reordering timer, the probe or the RTO); an earlier deadline supersedes
// a later pending event, which then finds timer_at changed and does
// nothing.
void Sim::arm_timer(Flow& f, uint64_t not_before) {
  const uint64_t t = f.sb->next_timer_ns();
  if (t == kNever) return;
  const uint64_t when = std::max(t, not_before);
  if (f.timer_at != kNever && f.timer_at > now_ && f.timer_at <= when) return;
  f.timer_at = when;
  at(when, kEvTimer, f.id);
}

void Sim::on_timer(Flow& f) {
  f.timer_at = kNever;
  if (f.sender_done) return;
  const cc::TimerOutcome t = f.sb->on_timer(now_);
  report_losses(f, t.losses);
  // A deadline that found nothing to do must not fire again at once.
  arm_timer(f, now_ + 1000);
  if (t.losses.fast_lost > 0 || t.action != cc::TimerAction::kNone) {
    wake_host(f.spec.src, now_);
  }
}

bool Sim::sender_finished(const Flow& f) const {
  if (f.sb->has_unacked()) return false;
  if (!f.unlimited) return f.sb->snd_nxt() == f.npkts;
  return now_ >= f.spec.stop_ns || now_ >= stop_ns_;
}

void Sim::finish_sender(Flow& f) {
  f.sender_done = true;
  if (credit_) send_ctrl(f.spec.src, PktKind::kFin, f, 0, f.spec.dst);
}

void Sim::arm_pacer(uint32_t host) {
  Host& h = host_[host];
  if (h.pacer_armed || h.pending_demand == 0) return;
  h.pacer_armed = true;
  at(now_, kEvPacer, host);
}

void Sim::pacer_tick(uint32_t host) {
  Host& h = host_[host];
  h.pacer_armed = false;
  cc::PullPacer::Grant g[64];
  const int n = h.pacer->poll(now_, g, 64);
  for (int i = 0; i < n; ++i) {
    h.pending_demand -= std::min<uint64_t>(h.pending_demand, g[i].bytes);
    const Flow& f = flows_[g[i].flow];
    send_ctrl(host, PktKind::kCredit, f, g[i].bytes, f.spec.src);
  }
  if (h.pending_demand > 0) {
    // Next grant's worth of tokens: one MTU at the pull rate.
    h.pacer_armed = true;
    at(now_ + ser_ns(c_.mtu_bytes, line_bps_), kEvPacer, host);
  }
}

void Sim::sample() {
  const uint64_t period = static_cast<uint64_t>(c_.sample_us * 1000);
  for (Flow& f : flows_) {
    if (f.id >= c_.trace_flows) break;
    const bool active =
        f.started && !(f.finish_ns && f.delivered == f.delivered_at_sample);
    if (active) {
      const double cw = f.cc->cwnd_bytes();
      fseries_.push_back(FlowSample{
          now_, f.id, (f.delivered - f.delivered_at_sample) * 8.0 / period,
          cw >= cc::kUnlimited ? -1 : cw, f.cc->rate_bps() / 1e9});
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

void Sim::summarize(SimResult* r) {
  auto& m = r->metrics;
  r->port_names = port_names_;
  r->flow_series = std::move(fseries_);
  r->queue_series = std::move(qseries_);
  // Flows.
  std::vector<double> slow_all, slow_short, fct_us;
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
      total_pkts += f.npkts;
      double slowest_bps;
      min_base = std::min(min_base, base_latency(f.spec, &slowest_bps));
      if (f.finish_ns) {
        last_finish = std::max(last_finish, f.finish_ns);
        const double fct = static_cast<double>(f.finish_ns - f.spec.start_ns);
        fct_us.push_back(fct / 1e3);
        const double sd = fct / static_cast<double>(fr.ideal_fct_ns);
        slow_all.push_back(sd);
        if (f.spec.bytes <= c_.short_flow_bytes) slow_short.push_back(sd);
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
  // Ports: the busiest switch port is the bottleneck.
  // Among ports within 0.1% of the most bytes sent (a chain of links
  // carries the same bytes), the one that queued most.
  uint32_t busiest = switch_ports_.empty() ? 0 : switch_ports_[0];
  uint64_t top = 0;
  for (uint32_t p : switch_ports_) top = std::max(top, ports_[p].tx_bytes);
  uint64_t max_q = 0, drops = 0, marks = 0;
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
  m["bottleneck_port"] = busiest;
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

}  // namespace

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

Result<SimResult> run(const SimConfig& cfg) {
  Sim s(cfg);
  UCCL_RETURN_IF_ERROR(s.build());
  return s.run();
}

}  // namespace uccl::sim
