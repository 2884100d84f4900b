// Engine: the sender's side of an engine ACK: the scoreboard's
// acknowledgements (UC mode), the delay sample its controller hears, losses.
#include <algorithm>
#include <cstdint>

#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

void UcclRDMAEngine::on_ack(const AckPacket& a,
                            const transport::WorkCompletion& w,
                            const uint8_t* grh, uint64_t now) {
  Conn* c = a.flow_id < conns_.size() ? conns_[a.flow_id].get() : nullptr;
  if (c == nullptr || !c->established || a.nonce_lo != c->nonce_lo ||
      !ud_source_is(w, grh, c->peer_ud_qpn,
                    c->peer_ah ? &c->peer_ah->address() : nullptr)) {
    ++protocol_errors_;
    return;
  }
  if (c->failed) return;
  activate(c);
  TxFlow& tx = c->tx;
  cc::Scoreboard& sb = *tx.sb;
  ++tx.acks_rx;
  trace("ack_rx", c->index, a.cum_ack, now);
  VLOG(kVlogChunk) << "conn " << c->index << " got ack cum " << a.cum_ack
                   << " una " << sb.snd_una() << " nxt " << sb.snd_nxt();
  if (a.credit_bytes > tx.credit_seen) {  // cumulative: ACKs may be lost
    tx.ccs[0].cc->on_credit(a.credit_bytes - tx.credit_seen);
    tx.credit_seen = a.credit_bytes;
    tx.credit_news_ns = now;
  }
  // Acknowledgement (UC mode; RC acknowledges through send completions):
  // the cumulative point, then each SACKed chunk beyond it.
  cc::AckOutcome o;
  const uint64_t spurious_rtos = sb.counters().spurious_rtos;
  if (!cfg_.rc_mode) {
    auto acked = [&](uint32_t s, const cc::SegRec&) { ack_chunk(c, s); };
    sb.ack_cumulative(a.cum_ack, now, &o, acked);
    for (int k = 0; k < kSackWords; ++k) {
      uint64_t bits = a.sack[k];
      while (bits) {
        const uint32_t s = a.cum_ack + 1 + k * 64 + __builtin_ctzll(bits);
        bits &= bits - 1;
        if (!cc::Scoreboard::before(s, sb.snd_nxt())) break;
        sb.ack_selective(s, now, &o, acked);
      }
    }
  }
  // Routers on the way, from the hop limit the ACK arrived with (paths
  // are symmetric in hop count in Clos fabrics; 0 where the NIC does not
  // report it).
  tx.hops = transport::hops_from_hop_limit(transport::grh_hop_limit(grh));
  sample_delay(c, a, w, o, now);
  if (cfg_.rc_mode || c->failed) return;
  // Duplicate ACKs, the F-RTO verdict, and RACK once enough duplicates came.
  const cc::LossReport r = sb.finish_ack(o, now);
  if (sb.counters().spurious_rtos != spurious_rtos) {
    trace("spurious_rto", c->index, sb.snd_una(), now);
  }
  report_losses(c, r, now);
}

// Tells the controllers what the scoreboard declared lost.
void UcclRDMAEngine::report_losses(Conn* c, const cc::LossReport& r,
                                   uint64_t now) {
  if (r.timeout) {
    for (auto& pc : c->tx.ccs) pc.cc->on_loss(now, true);
  }
  if (r.fast_lost > 0) {
    for (auto& pc : c->tx.ccs) pc.cc->on_loss(now, false);
    trace("fast_retx", c->index, c->tx.sb->snd_una(), now);
  }
}

// The RTT sample of the chunk that triggered `a` (Karn: only chunks sent
// once), as its controller hears it. As Swift measures it with NIC
// timestamps: the round trip up to the ACK's arrival at this host (where
// the NIC stamps arrivals; not the wait for this engine to get to it),
// split into endpoint delay (the chunk's wait for the receiver's engine:
// its time there less the engine's coming back from idle and its time
// from taking the chunk to the ACK, which no queue caused) and fabric
// delay (the rest, less the chunk's own send call where it left alone in
// its NIC round: ChunkRec::send_call_ns).
void UcclRDMAEngine::sample_delay(Conn* c, const AckPacket& a,
                                  const transport::WorkCompletion& w,
                                  const cc::AckOutcome& o, uint64_t now) {
  TxFlow& tx = c->tx;
  cc::Scoreboard& sb = *tx.sb;
  const uint32_t t = a.trigger_csn;
  const uint64_t rtt = sb.take_rtt_sample(t, now);
  if (rtt == 0) return;
  const cc::SegRec& seg = sb.seg(t);
  const uint64_t wire_rtt = rtt - std::min(rtt, now - arrived_ns(w, now));
  const uint64_t remote = std::min<uint64_t>(a.rx_delay_ns, wire_rtt);
  const uint64_t endpoint =
      remote - std::min<uint64_t>(a.not_queued_ns, remote);
  const uint64_t rest = wire_rtt - remote;
  tx.rtt.add(rtt);
  tx.last_rtt_ns = rtt;
  tx.paths->on_rtt(seg.path, rtt);
  cc::CcSample s;
  s.now_ns = now;
  s.fabric_delay_ns = rest - std::min<uint64_t>(tx.chunk(t).send_call_ns, rest);
  s.endpoint_delay_ns = endpoint;
  s.rtt_ns = rest + endpoint;
  s.delay_split = true;
  s.acked_bytes = o.newly_bytes ? o.newly_bytes : seg.len;
  s.acked_packets = o.newly_packets ? o.newly_packets : 1;
  s.segment_bytes = seg.len;
  s.hops = tx.hops;
  cc_for(tx, seg.path).cc->on_ack(s);
}

// After the loop's NIC round. A software NIC sends in the engine's own
// flush call, and a chunk's delay sample starts at its post (the loop's
// clock): the round's work before it, and its own send call, would count
// as the fabric's. That call
// is the host's stack, tens of microseconds when it runs cold (the first
// send after milliseconds of quiet), and a paced flow, whose sends are that
// far apart, hears it in every sample: a delay-based controller at its
// floor would read it as congestion forever. A NIC's transmit timestamp
// leaves it out; here a chunk that left alone in its round is timed from
// the round's end instead, when the call has handed it to the kernel. In a
// round of several chunks that moment is not one chunk's, so those keep
// their post time (they are not sparse sends anyway).
void UcclRDMAEngine::time_lone_chunk() {
  if (round_.chunks == 1 && round_.fresh && cfg_.drive_nic &&
      round_.conn < conns_.size() && conns_[round_.conn]) {
    const uint64_t end = clock_->now_ns();
    const uint64_t call = end > round_.posted_ns ? end - round_.posted_ns : 0;
    conns_[round_.conn]->tx.chunk(round_.csn).send_call_ns =
        static_cast<uint32_t>(std::min<uint64_t>(call, UINT32_MAX));
  }
  round_ = NicRound{};
}

}  // namespace uccl::engine
