// The simulator's network: packet pool, drop-tail/ECN port queues,
// serialization, arrivals and forwarding, host wake-ups and receiver pacers.

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cc/sim/sim_core.h"
#include "util/random.h"

namespace uccl::sim::detail {

int32_t Sim::alloc_pkt() {
  if (free_ == kNil) {
    pkts_.emplace_back();
    if (int_on_) int_.resize(pkts_.size() * kMaxIntHops);
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
  if (k.kind != PktKind::kData || k.trimmed) {
    push(p.ctrl, pkt);
  } else {
    // Drop-tail, or trim to the header; a lossless (PFC) switch never
    // drops: its ingress pauses bound the queue instead.
    if (p.from >= hosts_ && pfc_xoff_ == 0 && !admits(p, k.wire_bytes)) {
      if (!c_.trim) {
        ++p.drops;
        free_pkt(pkt);
        return;
      }
      ++p.trims;
      k.trimmed = true;
      k.wire_bytes = c_.header_bytes;
      push(p.ctrl, pkt);
      if (!p.busy) try_transmit(port);
      return;
    }
    node_queued_[p.from] += k.wire_bytes;
    if (pfc_xoff_ && p.from >= hosts_) pfc_ingress(k);
    if (p.ecn_bytes > 0 && ecn_mark(p)) {
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

bool Sim::admits(const Port& p, uint64_t bytes) const {
  if (shared_bytes_ == 0) return p.q_bytes + bytes <= p.buf_bytes;
  const uint64_t used = node_queued_[p.from];
  if (used + bytes > shared_bytes_) return false;
  return p.q_bytes + bytes <= c_.dt_alpha * (shared_bytes_ - used);
}

// Step marking at ecn_bytes, or RED between ecn_bytes and ecn_max_bytes
// (the queue the packet finds on arrival).
bool Sim::ecn_mark(const Port& p) {
  if (p.q_bytes < p.ecn_bytes) return false;
  if (p.ecn_max_bytes <= p.ecn_bytes || p.q_bytes >= p.ecn_max_bytes) {
    return true;
  }
  const double prob = c_.ecn_pmax * (p.q_bytes - p.ecn_bytes) /
                      static_cast<double>(p.ecn_max_bytes - p.ecn_bytes);
  return uniform01(&ecn_seed_) < prob;
}

// The switch port's telemetry into the data packet leaving it (its queue
// after the packet left, bytes sent including it).
void Sim::record_int(const Port& p, int32_t pkt) {
  const Packet& k = pkts_[pkt];
  if (k.hops == 0 || k.hops > kMaxIntHops) return;
  cc::IntHop& h = int_[static_cast<size_t>(pkt) * kMaxIntHops + k.hops - 1];
  h.ts_ns = now_;
  h.tx_bytes = p.tx_bytes;
  h.qlen_bytes = p.q_bytes;
  h.rate_bps = p.rate_bps;
}

void Sim::try_transmit(uint32_t port) {
  Port& p = ports_[port];
  if (p.busy) return;
  int32_t pkt = kNil;
  if (!p.ctrl.empty()) {
    pkt = pop(p.ctrl);
  } else if (p.paused) {
    return;  // PFC: control packets only
  } else if (!p.data.empty()) {
    pkt = pop(p.data);
    p.q_integral += static_cast<double>(p.q_bytes) * (now_ - p.q_since);
    p.q_since = now_;
    p.q_bytes -= pkts_[pkt].wire_bytes;
    node_queued_[p.from] -= pkts_[pkt].wire_bytes;
    if (pfc_xoff_ && p.from >= hosts_) pfc_egress(pkts_[pkt]);
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
  if (int_on_ && p.from >= hosts_ && pkts_[pkt].kind == PktKind::kData) {
    record_int(p, pkt);
  }
  pkts_[pkt].in_port = port;
  at(now_ + ser, kEvPortFree, port);
  const uint64_t t = now_ + ser + p.prop_ns;
  uint64_t release = t;
  if (jitter_mean_ns_ > 0 && p.to < hosts_) release = host_release(p.to, t);
  pkts_[pkt].host_wait_ns =
      static_cast<uint32_t>(std::min<uint64_t>(release - t, UINT32_MAX));
  at(release, kEvArrive, p.to, static_cast<uint32_t>(pkt));
}

uint64_t Sim::host_release(uint32_t h, uint64_t t) {
  // Exponential draw; packets reach a host in order (one access link), so
  // the max keeps its receive path first-in first-out.
  const double x = -std::log(1 - uniform01(&jitter_seed_)) * jitter_mean_ns_;
  Host& host = host_[h];
  host.rx_free_ns = std::max(host.rx_free_ns, t + static_cast<uint64_t>(x));
  return host.rx_free_ns;
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
  if (int_on_ && k.kind == PktKind::kAck) {
    const size_t n = std::min<size_t>(k.hops, kMaxIntHops);
    std::copy_n(int_.begin() + static_cast<size_t>(pkt) * kMaxIntHops, n,
                int_ack_.begin());
  }
  free_pkt(pkt);
  Flow& f = flows_[k.flow];
  switch (k.kind) {
    case PktKind::kData:  // handled above
      break;
    case PktKind::kAck:
      on_ack(k);
      break;
    case PktKind::kCredit:
      f.ccs[0].cc->on_credit(k.aux);
      wake_host(f.spec.src, now_);
      break;
    case PktKind::kRts: {
      Host& h = host_[node];
      if (h.pacer && !f.finish_ns) {
        const uint64_t before = h.pacer->demand(f.rx_slot);
        h.pacer->add_demand(f.rx_slot, k.aux, k.first);
        h.pending_demand += h.pacer->demand(f.rx_slot) - before;
        arm_pacer(node);
      }
      break;
    }
    case PktKind::kFin:
      release_demand(f);
      break;
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

void Sim::arm_pacer(uint32_t host) {
  Host& h = host_[host];
  if (h.pacer_armed || h.pending_demand == 0) return;
  h.pacer_armed = true;
  at(now_, kEvPacer, host);
}

void Sim::release_demand(const Flow& f) {
  Host& h = host_[f.spec.dst];
  if (!h.pacer) return;
  h.pending_demand -= std::min(h.pending_demand, h.pacer->demand(f.rx_slot));
  h.pacer->remove_flow(f.rx_slot);
}

void Sim::pacer_tick(uint32_t host) {
  Host& h = host_[host];
  h.pacer_armed = false;
  cc::PullPacer::Grant g[64];
  const int n = h.pacer->poll(now_, g, 64);
  for (int i = 0; i < n; ++i) {
    h.pending_demand -= std::min<uint64_t>(h.pending_demand, g[i].bytes);
    const Flow& f = flows_[h.rx_flows[g[i].flow]];
    send_ctrl(host, PktKind::kCredit, f, g[i].bytes, f.spec.src);
  }
  if (h.pending_demand > 0) {
    // Next grant's worth of tokens: one MTU at the pull rate.
    h.pacer_armed = true;
    at(now_ + ser_ns(c_.mtu_bytes, cc_line_bps_), kEvPacer, host);
  }
}

}  // namespace uccl::sim::detail
