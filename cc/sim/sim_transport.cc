// The simulator's transport: senders pull packets under CC and pacing,
// receivers ACK each one, the engine's scoreboard recovers, credit asks.

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cc/sim/sim_core.h"

namespace uccl::sim::detail {

uint32_t Sim::payload_of(const Flow& f, uint32_t seq) const {
  if (f.unlimited || seq + 1 < f.npkts) return chunk_;
  return static_cast<uint32_t>(f.spec.bytes - uint64_t{seq} * chunk_);
}

bool Sim::pick_path(Flow& f, uint32_t bytes, bool urgent, uint32_t* path,
                    uint64_t* wake) {
  // Whether controller pc lets `bytes` leave on path p now; a pacing wait
  // lowers *wake.
  auto allowed = [&](FlowCc& pc, uint32_t p) {
    if (!pc.cc->can_send(f.cc_inflight(p), bytes)) return false;  // ACK wakes
    if (pc.last_bytes == 0) return true;
    const uint64_t ready =
        pc.last_send_ns + pc.cc->pacing_gap_ns(pc.last_bytes);
    if (now_ >= ready) return true;
    *wake = std::min(*wake, ready);
    return false;
  };
  if (f.ccs.size() == 1) {  // the flow's controller, then any path
    if (!urgent && !allowed(f.ccs[0], 0)) return false;
    *path = f.paths->choose();
    return true;
  }
  // One controller per path (the engine's pick_path): from the
  // power-of-two choice, the first path whose controller has room.
  const uint32_t np = f.paths->size();
  const uint32_t first = f.paths->choose();
  for (uint32_t k = 0; k < np; ++k) {
    const uint32_t p = (first + k) % np;
    if (urgent || allowed(f.ccs[p], p)) {
      *path = p;
      return true;
    }
  }
  return false;
}

int32_t Sim::host_next_data(uint32_t host) {
  Host& h = host_[host];
  if (h.burst_left > 0) {  // the rest of the chunk, back to back
    const int32_t i_pkt = alloc_pkt();
    Packet& p = pkts_[i_pkt];
    p = h.burst;
    p.payload = std::min(h.burst_bytes, c_.mtu_bytes);
    p.wire_bytes = p.payload + c_.header_bytes;
    h.burst_bytes -= p.payload;
    --h.burst_left;
    return i_pkt;
  }
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
    uint32_t path = 0;
    if (!pick_path(f, bytes, urgent, &path, &wake)) continue;
    // Send `seq`.
    h.rr = (h.rr + i + 1) % n;
    if (retx) {
      sb.resent(seq, static_cast<uint16_t>(path), now_);
      ++f.retx;
    } else {
      sb.send_new(static_cast<uint16_t>(path), bytes, now_);
      if (f.unlimited) f.got.push_back(0);
    }
    FlowCc& pc = f.cc_of(path);
    pc.cc->on_send(now_, bytes);
    pc.last_send_ns = now_;
    pc.last_bytes = bytes;
    const int32_t i_pkt = alloc_pkt();
    Packet& p = pkts_[i_pkt];
    p = Packet{};
    p.kind = PktKind::kData;
    p.flow = f.id;
    p.seq = seq;
    p.frags = static_cast<uint16_t>((bytes + c_.mtu_bytes - 1) / c_.mtu_bytes);
    p.payload = std::min(bytes, c_.mtu_bytes);
    p.wire_bytes = p.payload + c_.header_bytes;
    p.src = f.spec.src;
    p.dst = f.spec.dst;
    p.path = static_cast<uint16_t>(path);
    p.sent_ns = now_;
    p.unsched = f.spec_left > 0;
    f.spec_left -= bytes;
    if (p.frags > 1) {  // the chunk's other packets follow this one
      h.burst = p;
      h.burst_left = p.frags - 1u;
      h.burst_bytes = bytes - p.payload;
    }
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
    f.spec_left = f.ccs[0].cc->cwnd_bytes();  // the speculative credit
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
  const uint64_t sent = uint64_t{f.sb->snd_nxt()} * chunk_;
  if (f.demand_sent > sent + kStep) return;
  if (now_ >= f.spec.stop_ns || now_ >= stop_ns_) return;
  const bool first = f.demand_sent == 0;
  f.demand_sent += 2 * kStep;
  send_ctrl(f.spec.src, PktKind::kRts, f, 2 * kStep, f.spec.dst, first);
}

bool Sim::chunk_complete(Flow& f, int32_t pkt) {
  Packet& k = pkts_[pkt];
  if (k.frags <= 1) return true;
  Flow::Reasm& r = f.reasm[k.seq & (f.reasm.size() - 1)];
  const bool older =
      r.seq != UINT32_MAX &&
      (k.seq < r.seq || (k.seq == r.seq && k.sent_ns < r.sent_ns));
  if (older) {  // a packet of a transmission superseded here: dropped
    free_pkt(pkt);
    return false;
  }
  if (k.seq != r.seq || k.sent_ns != r.sent_ns)
    r = Flow::Reasm{k.seq, 0, false, false, k.sent_ns};
  if (r.dead) {  // its transmission was lost (trimmed) and NACKed once
    free_pkt(pkt);
    return false;
  }
  if (k.trimmed) {  // the first trimmed packet NACKs the chunk
    r.dead = true;
    return true;
  }
  r.ecn |= k.ecn;
  if (++r.got < k.frags) {
    free_pkt(pkt);
    return false;
  }
  // The chunk's last packet stands for it: its bytes, any packet's mark.
  k.payload = payload_of(f, k.seq);
  k.ecn = r.ecn;
  r.dead = true;  // a stray duplicate of this transmission is not counted
  return true;
}

void Sim::on_data(int32_t pkt) {
  Flow& f = flows_[pkts_[pkt].flow];
  if (pkts_[pkt].seq >= f.got.size()) f.got.resize(pkts_[pkt].seq + 1);
  Host& rx = host_[f.spec.dst];
  if (pkts_[pkt].unsched && rx.pacer && !pkts_[pkt].trimmed) {
    rx.pacer->charge_unscheduled(pkts_[pkt].payload);
  }
  if (!chunk_complete(f, pkt)) return;
  Packet& k = pkts_[pkt];
  const bool fresh = !k.trimmed && !f.got[k.seq];
  if (fresh) {
    f.got[k.seq] = 1;
    f.delivered += k.payload;
    delivered_total_ += k.payload;
    while (f.rcv_cum < f.got.size() && f.got[f.rcv_cum]) ++f.rcv_cum;
    if (!f.unlimited && !f.finish_ns && f.rcv_cum == f.npkts) {
      f.finish_ns = now_;
      --finite_left_;
      release_demand(f);
    }
  }
  // The same packet turns into the ACK: per-packet selective ACK with the
  // cumulative point, echoing send time, hops and the ECN mark; a trimmed
  // one into a NACK (`trimmed` stays set).
  k.kind = PktKind::kAck;
  k.cum = f.rcv_cum;
  std::swap(k.src, k.dst);
  k.wire_bytes = c_.ctrl_bytes;
  // The receiver's time, from the packet's arrival at its NIC: its wait
  // in this host (host jitter) and the ACK delay.
  const uint64_t hold = static_cast<uint64_t>(c_.rx_delay_us * 1000);
  k.aux = hold + k.host_wait_ns;
  if (hold > 0) {
    at(now_ + hold, kEvAckOut, static_cast<uint32_t>(pkt));
    return;
  }
  enqueue(host_[k.src].port, pkt);
}

void Sim::on_ack(const Packet& a) {
  Flow& f = flows_[a.flow];
  cc::Scoreboard& sb = *f.sb;
  if (f.sender_done || !cc::Scoreboard::before(a.seq, sb.snd_nxt())) return;
  if (a.trimmed) {
    // A NACK: that transmission is lost, resend it now (with credit, the
    // receiver is asked to grant it again).
    cc::AckOutcome o;
    sb.ack_cumulative(a.cum, now_, &o, [](uint32_t, const cc::SegRec&) {});
    cc::LossReport r;
    r.fast_lost = sb.nack(a.seq, a.sent_ns) ? 1 : 0;
    report_losses(f, r);
    arm_timer(f, now_);
    wake_host(f.spec.src, now_);
    return;
  }
  // The cumulative point, and the packet the ACK is for when beyond it.
  cc::AckOutcome o;
  auto none = [](uint32_t, const cc::SegRec&) {};
  sb.ack_cumulative(a.cum, now_, &o, none);
  if (a.seq >= a.cum) sb.ack_selective(a.seq, now_, &o, none);
  const uint64_t rtt = sb.take_rtt_sample(a.seq, now_);  // Karn
  if (rtt != 0) {
    const uint16_t path = sb.seg(a.seq).path;
    f.paths->on_rtt(path, rtt);
    // As the engine's controllers hear it: up to the ACK's arrival at the
    // NIC (not its wait in this host), the receiver's time as endpoint
    // delay.
    cc::CcSample s;
    s.now_ns = now_;
    s.rtt_ns = rtt - std::min<uint64_t>(a.host_wait_ns, rtt);
    s.endpoint_delay_ns = std::min(a.aux, s.rtt_ns);
    s.fabric_delay_ns = s.rtt_ns - s.endpoint_delay_ns;
    s.delay_split = true;
    s.acked_bytes = o.newly_bytes ? o.newly_bytes : payload_of(f, a.seq);
    s.acked_packets = o.newly_packets ? o.newly_packets : 1;
    s.hops = a.hops;
    s.segment_bytes = payload_of(f, a.seq);
    s.ecn = a.ecn;
    if (int_on_) {
      s.int_hops = int_ack_.data();
      s.int_count = std::min<uint32_t>(a.hops, kMaxIntHops);
    }
    f.cc_of(path).cc->on_ack(s);
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
  for (FlowCc& pc : f.ccs) {
    if (r.fast_lost > 0) pc.cc->on_loss(now_, false);
    if (r.timeout) pc.cc->on_loss(now_, true);
  }
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

}  // namespace uccl::sim::detail
