// Engine send path: matching sends to the peer's receive descriptors,
// cutting messages into chunks sprayed over paths under congestion control,
// and UC-mode reliability (SACK, fast retransmit, RTO with backoff).
#include <algorithm>
#include <cstring>

#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

using transport::SendWr;
using transport::Sge;
using transport::WcStatus;
using transport::WorkCompletion;
using transport::WrOpcode;

namespace {

PathCc& cc_for(TxFlow& tx, uint32_t path) {
  return tx.ccs.size() == 1 ? tx.ccs[0] : tx.ccs[path];
}

void pace(PathCc& pc, uint32_t bytes, uint64_t now) {
  pc.last_send_ns = now;
  pc.last_bytes = std::max<uint32_t>(bytes, 1);
}

void leave_pipe(TxFlow& tx, ChunkRec& ch) {
  if (!ch.in_pipe) return;
  ch.in_pipe = false;
  PathCc& pc = cc_for(tx, ch.path);
  pc.inflight -= std::min<uint64_t>(pc.inflight, ch.len);
  tx.inflight -= std::min<uint64_t>(tx.inflight, ch.len);
}

// A chunk of `len` bytes enters path `pc`'s pipe.
void enter_pipe(TxFlow& tx, PathCc& pc, ChunkRec& ch, uint32_t len,
                uint64_t now) {
  ch.in_pipe = true;
  pc.inflight += len;
  tx.inflight += len;
  pc.cc->on_send(now, len);
  pace(pc, len, now);
}

// Declares `csn` lost: it leaves the pipe and waits to be sent again.
void enqueue_retx(TxFlow& tx, uint32_t csn) {
  ChunkRec& ch = tx.chunk(csn);
  if (ch.queued_retx || tx.retx_tail - tx.retx_head >= kRetxRing) return;
  ch.queued_retx = true;
  tx.retx[tx.retx_tail++ % kRetxRing] = csn;
  leave_pipe(tx, ch);
  tx.pull_bytes += ch.len;
}

// The oldest posted receive (descriptor) with a free buffer of `tag`.
bool find_desc(TxFlow& tx, int32_t tag, Desc** d, uint32_t* b) {
  for (uint32_t i = tx.desc_head; i != tx.desc_tail; ++i) {
    Desc& x = tx.descs[i % kDescRing];
    for (uint32_t k = 0; k < x.n; ++k) {
      if (!(x.used_mask & (1u << k)) && x.bufs[k].tag == tag) {
        *d = &x;
        *b = k;
        return true;
      }
    }
  }
  return false;
}

// A send that found neither a receive nor an eager slot when it was taken.
void count_wait(TxFlow& tx, const PendingSend& p, uint64_t now) {
  if (!p.waited) return;
  ++tx.sends_waited;
  tx.send_wait_ns += now > p.post_ns ? now - p.post_ns : 0;
}

// Every chunk sent and acknowledged, and (eager) a receive assigned to it.
bool ready_to_complete(const TxMsg& m) {
  return m.all_chunked && m.chunks_acked == m.chunks_total && !m.done &&
         (!m.eager || m.paid);
}

// Drops descriptors whose buffers are all taken from the ring's head.
void retire_descs(TxFlow& tx) {
  while (tx.desc_head != tx.desc_tail) {
    Desc& h = tx.descs[tx.desc_head % kDescRing];
    if (h.used_mask != (1u << h.n) - 1) break;
    ++tx.desc_head;
  }
}

}  // namespace

void UcclRDMAEngine::match_sends(Conn* c, uint64_t now) {
  TxFlow& tx = c->tx;
  while (tx.pend_head != tx.pend_tail) {
    if (tx.msg_tail - tx.msg_head >= kMaxTxMsgs) return;
    PendingSend& p = tx.pending[tx.pend_head % kMaxPendingSends];
    Desc* d = nullptr;
    uint32_t b = 0;
    if (!find_desc(tx, p.tag, &d, &b)) {
      // No receive posted for it yet: write it eagerly, or wait.
      if (!send_eager(c, p, now)) return;
      ++tx.pend_head;
      continue;
    }
    d->used_mask |= 1u << b;
    TxMsg& m = tx.msg(tx.msg_tail++);
    m = TxMsg{};
    m.req = p.req;
    m.addr = p.addr;
    m.len = p.len;
    m.lkey = p.lkey;
    m.raddr = d->bufs[b].addr;
    m.rkey = d->bufs[b].rkey;
    m.rsize = d->bufs[b].size;
    m.slot = static_cast<uint8_t>(d->slot);
    m.buf = static_cast<uint8_t>(b);
    m.trunc = p.len > d->bufs[b].size;
    m.post_ns = now;
    ++tx.sends_matched;
    count_wait(tx, p, now);
    ++tx.pend_head;
    retire_descs(tx);
  }
}

bool UcclRDMAEngine::send_eager(Conn* c, const PendingSend& p, uint64_t now) {
  TxFlow& tx = c->tx;
  const uint64_t limit = std::min(cfg_.eager_bytes, tx.eager_peer_bytes);
  const uint32_t usable = tx.eager_free & ~tx.eager_busy;
  if (usable == 0 || p.len > limit || tx.owed_n >= kEagerSlots) return false;
  const uint32_t k = static_cast<uint32_t>(__builtin_ctz(usable));
  tx.eager_free &= ~(1u << k);
  tx.eager_busy |= 1u << k;
  tx.owed[tx.owed_n++] = tx.msg_tail;
  TxMsg& m = tx.msg(tx.msg_tail++);
  m = TxMsg{};
  m.req = p.req;
  m.eager = true;
  m.tag = p.tag;
  m.addr = p.addr;
  m.len = p.len;
  m.lkey = p.lkey;
  m.raddr = tx.eager_slots[k].addr;
  m.rkey = tx.eager_slots[k].rkey;
  m.slot = static_cast<uint8_t>(k);
  m.post_ns = now;
  tx.eager_hdr[k] =
      EagerHdr{kEagerMagic, p.tag, static_cast<uint32_t>(p.len), 0};
  if (__builtin_expect(wire_fault_.load(std::memory_order_relaxed) != 0, 0)) {
    damage_eager_header(&tx.eager_hdr[k]);
  }
  ++tx.sends_eager;
  count_wait(tx, p, now);
  trace("eager_tx", c->index, k, now);
  return true;
}

// Test hook (inject_wire_fault): the armed fault if it lies in [lo, hi],
// disarmed; else kNone (a fault of the other kind stays armed).
UcclRDMAEngine::WireFault UcclRDMAEngine::take_wire_fault(WireFault lo,
                                                          WireFault hi) {
  uint32_t f = wire_fault_.load(std::memory_order_acquire);
  if (f < static_cast<uint32_t>(lo) || f > static_cast<uint32_t>(hi) ||
      !wire_fault_.compare_exchange_strong(f, 0)) {
    return WireFault::kNone;
  }
  return static_cast<WireFault>(f);
}

// Test hook (inject_wire_fault): spoils one eager header.
void UcclRDMAEngine::damage_eager_header(EagerHdr* h) {
  switch (take_wire_fault(WireFault::kEagerBadMagic,
                          WireFault::kEagerLenShortOfChunk)) {
    case WireFault::kEagerBadMagic:
      h->magic ^= 1;
      break;
    case WireFault::kEagerLenPastChunk:
      h->len += 1;
      break;
    case WireFault::kEagerLenShortOfChunk:
      h->len -= 1;  // from 0 it wraps: malformed all the same
      break;
    default:
      break;
  }
}

// A descriptor arrived: the eager sends owed a buffer take theirs first, in
// send order (each the first free buffer of its tag), exactly as the
// receiver matched them (wire.h).
void UcclRDMAEngine::pay_owed(Conn* c) {
  TxFlow& tx = c->tx;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < tx.owed_n; ++i) {
    TxMsg& m = tx.msg(tx.owed[i]);
    Desc* d = nullptr;
    uint32_t b = 0;
    if (!find_desc(tx, m.tag, &d, &b)) {
      tx.owed[kept++] = tx.owed[i];
      continue;
    }
    d->used_mask |= 1u << b;
    m.paid = true;
    m.rsize = d->bufs[b].size;
    m.trunc = m.len > m.rsize;  // the receiver fails it too
    if (ready_to_complete(m)) complete_tx_msg(c, m);
  }
  tx.owed_n = kept;
  retire_descs(tx);
}

int UcclRDMAEngine::transmit(Conn* c, uint64_t now) {
  if (!c->established || c->failed) return 0;
  TxFlow& tx = c->tx;
  const uint32_t npaths = static_cast<uint32_t>(c->qps.size());
  int sent = 0;
  // cc=credit: ask the receiver to pull what we are about to resend (its
  // grants covered the first copies only).
  if (tx.pull_bytes && pacer_) {
    CtrlMsg pull;
    std::memset(&pull, 0, sizeof(pull));
    pull.type = static_cast<uint32_t>(CtrlType::kPullReq);
    pull.read_len = tx.pull_bytes;
    send_ctrl(c, pull);
    if (c->failed) return 0;
  }
  tx.pull_bytes = 0;
  // A path that may carry `len` bytes now: the power-of-two choice, else
  // any path with room in its queue, window (or credit) and pacing.
  auto pick_path = [&](uint32_t len, uint32_t* out) {
    // The engine's window first: the peer's host holds only so much.
    if (cfg_.window_bytes > 0 &&
        unacked_bytes_ + len > static_cast<uint64_t>(cfg_.window_bytes) &&
        unacked_bytes_ > 0) {
      return false;
    }
    const uint32_t first = tx.paths->choose();
    for (uint32_t k = 0; k < npaths; ++k) {
      const uint32_t p = (first + k) % npaths;
      PathCc& pc = cc_for(tx, p);
      if (c->qp_outstanding[p] >= cfg_.path_queue) continue;
      if (pc.cc->can_send(pc.inflight, len) && pc.paced_ok(now)) {
        *out = p;
        return true;
      }
    }
    return false;
  };
  // The RTO's resend of the oldest chunk, and a tail loss probe, go at once
  // whatever the window or pacing say (TCP's loss window of one segment; a
  // probe is not held by cwnd either): a controller that paces slower than
  // the RTO backs off would otherwise fail the flow.
  if (tx.rto_urgent) {
    ChunkRec& ch = tx.chunk(tx.urgent_csn);
    if (!tx.has_unacked() || csn_lt(tx.urgent_csn, tx.snd_una) ||
        !csn_lt(tx.urgent_csn, tx.snd_nxt) || ch.acked || !ch.queued_retx) {
      tx.rto_urgent = false;
    } else {
      for (uint32_t p = 0; p < npaths; ++p) {
        if (c->qp_outstanding[p] >= cfg_.path_queue) continue;
        if (!post_chunk(c, tx.urgent_csn, static_cast<uint16_t>(p), now)) {
          break;
        }
        tx.rto_urgent = false;
        ch.queued_retx = false;  // its entry in the ring is skipped
        enter_pipe(tx, cc_for(tx, p), ch, ch.len, now);
        ++sent;
        break;
      }
    }
  }
  // Retransmissions; lost chunks left the pipe, so they obey the window,
  // credit and pacing as new data does.
  while (tx.retx_head != tx.retx_tail &&
         sent < static_cast<int>(kChunksPerTransmit)) {
    const uint32_t csn = tx.retx[tx.retx_head % kRetxRing];
    ChunkRec& ch = tx.chunk(csn);
    if (csn_lt(csn, tx.snd_una) || ch.acked || !ch.queued_retx) {
      ch.queued_retx = false;
      ++tx.retx_head;
      continue;
    }
    uint32_t path;
    if (!pick_path(ch.len, &path)) break;
    if (!post_chunk(c, csn, static_cast<uint16_t>(path), now)) break;
    ch.queued_retx = false;
    ++tx.retx_head;
    enter_pipe(tx, cc_for(tx, path), ch, ch.len, now);
    ++sent;
  }
  // New chunks of the messages in order.
  while (sent < static_cast<int>(kChunksPerTransmit) &&
         tx.msg_chunk != tx.msg_tail) {
    if (tx.outstanding() >= kMaxChunksInFlight) break;
    TxMsg& m = tx.msg(tx.msg_chunk);
    // An eager message is one chunk: its header and the payload.
    const uint32_t len = m.eager
                             ? static_cast<uint32_t>(sizeof(EagerHdr) + m.len)
                         : m.trunc ? 0
                                   : static_cast<uint32_t>(std::min<uint64_t>(
                                         cfg_.chunk_bytes, m.len - m.next_off));
    uint32_t path;
    if (!pick_path(len, &path)) break;  // window, credit or pacing says wait
    const uint32_t csn = tx.snd_nxt;
    ChunkRec& ch = tx.chunk(csn);
    ch = ChunkRec{};
    ch.msg = tx.msg_chunk;
    ch.len = len;
    ch.off = m.next_off;
    ch.last = m.eager || m.trunc || m.next_off + len >= m.len;
    if (!post_chunk(c, csn, static_cast<uint16_t>(path), now)) break;
    ++tx.snd_nxt;
    m.next_off += len;
    ++m.chunks_sent;
    if (ch.last) {
      m.all_chunked = true;
      m.chunks_total = m.chunks_sent;
      ++tx.msg_chunk;
    }
    enter_pipe(tx, cc_for(tx, path), ch, len, now);
    *tx.engine_unacked += len;
    tx.max_inflight = std::max(tx.max_inflight, tx.inflight);
    ++sent;
  }
  return sent;
}

bool UcclRDMAEngine::post_chunk(Conn* c, uint32_t csn, uint16_t path,
                                uint64_t now) {
  TxFlow& tx = c->tx;
  ChunkRec& ch = tx.chunk(csn);
  TxMsg& m = tx.msg(ch.msg);
  if (c->qp_outstanding[path] >= cfg_.path_queue ||
      nic_queued_ >= cfg_.nic_queue) {
    return false;
  }
  Imm imm;
  imm.flow = c->peer_flow;
  imm.csn = csn;
  imm.slot = m.slot;
  imm.buf = m.buf;
  imm.last = ch.last;
  imm.trunc = m.trunc;
  imm.onesided = m.onesided;
  imm.eager = m.eager;
  Sge sge[2] = {{m.addr + ch.off, ch.len, m.lkey}, {}};
  SendWr wr;
  wr.opcode = WrOpcode::kWriteWithImm;
  wr.sg_list = sge;
  wr.num_sge = ch.len ? 1 : 0;
  if (m.eager) {  // header, then the payload from the application's buffer
    sge[0] = Sge{reinterpret_cast<uint64_t>(&tx.eager_hdr[m.slot]),
                 sizeof(EagerHdr), tx.eager_hdr_mr->lkey()};
    sge[1] = Sge{m.addr, static_cast<uint32_t>(m.len), m.lkey};
    wr.num_sge = m.len ? 2 : 1;
  }
  wr.imm_data = imm.encode();
  wr.remote_addr = m.raddr + ch.off;
  wr.rkey = m.rkey;
  // The receiver may have these bytes already (only the ACK was lost): a
  // software NIC verifies them before they land (SendWr::retransmit).
  const bool retx = ch.last_tx_ns != 0;
  wr.retransmit = retx;
  // A first transmission may go by reference (SendWr::by_reference): the
  // buffer stays ours until the chunk's ACK, and the peer reads its one
  // socket in order, so it has read that copy before it can ACK the chunk
  // from any copy. Resends are copied. Two-sided chunks only, whose receive
  // window the peer invalidates before it ACKs the last chunk, in case a
  // copy is read late anyway (transport/udp/wire.h, "Spliced payloads");
  // one-sided writes have no window, and eager messages are small.
  wr.by_reference = !retx && windows_ && !m.onesided && !m.eager;
  // UC: signal every kSignalEvery WRs to retire SQ slots. RC: every chunk,
  // its completion is its acknowledgement.
  const uint32_t unsig = c->qp_unsignaled[path] + 1;
  wr.signaled = cfg_.rc_mode || unsig >= kDataSignalEvery;
  const uint32_t batch = cfg_.rc_mode ? 1 : (wr.signaled ? unsig : 0);
  wr.wr_id = make_wr_id(WrKind::kData, c->index, path, batch, csn);
  Status st = c->qps[path]->post_send(&wr, nullptr);
  if (!st.ok()) {
    if (st.code() != StatusCode::kResourceExhausted) {
      fail_conn(c, st.with_context("posting a chunk"));
    }
    return false;
  }
  c->qp_unsignaled[path] = wr.signaled ? 0 : unsig;
  trace("chunk_tx", c->index, csn, now);
  if (!c->inflight && !cfg_.rc_mode) {  // its RTO is checked from now on
    c->inflight = true;
    inflight_.push_back(c->index);
    tx.last_progress_ns = now;  // nothing was out: no stale progress time
  }
  ++c->qp_outstanding[path];
  ++nic_queued_;
  if (retx) {
    ++ch.retx;
  } else {
    ch.first_tx_ns = now;
    tx.tx_bytes += ch.len;
    ++tx.tx_chunks;
  }
  ch.last_tx_ns = now;
  ch.path = path;
  trace(retx ? "retx" : "tx", c->index, csn, now);
  VLOG(kVlogChunk) << "conn " << c->index << (retx ? " retx" : " tx") << " csn "
                   << csn << " len " << ch.len << " path " << path;
  return true;
}

void UcclRDMAEngine::ack_chunk(Conn* c, uint32_t csn, uint64_t now) {
  TxFlow& tx = c->tx;
  ChunkRec& ch = tx.chunk(csn);
  if (ch.acked) return;
  ch.acked = true;
  leave_pipe(tx, ch);
  *tx.engine_unacked -= std::min<uint64_t>(*tx.engine_unacked, ch.len);
  TxMsg& m = tx.msg(ch.msg);
  ++m.chunks_acked;
  if (m.eager) tx.eager_busy &= ~(1u << m.slot);
  if (ready_to_complete(m)) complete_tx_msg(c, m);
  (void)now;
}

void UcclRDMAEngine::complete_tx_msg(Conn* c, TxMsg& m) {
  m.done = true;
  if (m.req) {
    RequestAccess::set_size(m.req, 0, m.trunc ? 0 : m.len);
    Status st;
    if (m.trunc) {
      st = Truncated("send of " + std::to_string(m.len) +
                     " bytes is larger than the receive buffer of " +
                     std::to_string(m.rsize) + " bytes");
    }
    c->rec->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    VLOG(kVlogRequest) << "conn " << c->index << " send of " << m.len
                       << " bytes done";
    trace_now("send_done", c->index, 0);
    RequestAccess::complete(m.req, std::move(st));
  }
  TxFlow& tx = c->tx;
  while (tx.msg_head != tx.msg_chunk && tx.msg(tx.msg_head).done) ++tx.msg_head;
}

void UcclRDMAEngine::on_rtt_sample(Conn* c, ChunkRec& ch, uint64_t rtt,
                                   uint64_t endpoint, uint64_t now) {
  (void)endpoint;
  TxFlow& tx = c->tx;
  tx.rtt.add(rtt);
  if (tx.min_rtt_ns == 0 || rtt < tx.min_rtt_ns) tx.min_rtt_ns = rtt;
  tx.paths->on_rtt(ch.path, rtt);
  tx.rto_samples.add(rtt, now, &tx.rto);  // cc/recovery.h
}

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
  ++tx.acks_rx;
  trace("ack_rx", c->index, a.cum_ack, now);
  VLOG(kVlogChunk) << "conn " << c->index << " got ack cum " << a.cum_ack
                   << " una " << tx.snd_una << " nxt " << tx.snd_nxt;
  if (a.credit_bytes > tx.credit_seen) {  // cumulative: ACKs may be lost
    tx.ccs[0].cc->on_credit(a.credit_bytes - tx.credit_seen);
    tx.credit_seen = a.credit_bytes;
  }
  // Acknowledgement (UC mode; RC acknowledges through send completions).
  uint32_t newly_bytes = 0, newly_chunks = 0;
  // Evidence against our own retransmissions: a chunk sent before a
  // pending F-RTO timeout and never resent was delivered (the longest such
  // delay), and resent chunks whose ACK came sooner than a resend could
  // bring one (so the original was delivered).
  uint64_t frto_delivered_ns = 0;
  bool frto_probe_delivered = false;
  uint32_t spurious = 0;
  auto ack = [&](uint32_t s) {
    ChunkRec& ch = tx.chunk(s);
    if (ch.acked) return;
    newly_bytes += ch.len;
    ++newly_chunks;
    const bool resend_delivered =
        ch.retx == 0 ||
        cc::rack_unambiguous(true, ch.last_tx_ns, tx.min_rtt_ns, now);
    if (tx.frto && s == tx.frto_csn && ch.retx > 0 && resend_delivered) {
      frto_probe_delivered = true;
    } else if (tx.frto && ch.first_tx_ns < tx.frto_ns &&
               (ch.retx == 0 || !resend_delivered)) {
      // Sent before the timeout, and this is its first copy (never resent,
      // or the resend could not have come back yet).
      frto_delivered_ns = std::max(frto_delivered_ns, now - ch.first_tx_ns);
    } else if (!resend_delivered) {
      ++spurious;
    }
    // RACK's clock advances only on unambiguous deliveries: an ACK for a
    // retransmitted chunk sooner than the min RTT is for an earlier copy
    // (RFC 8985, 6.2 step 2); taking it would declare everything sent on
    // this path before the retransmission lost.
    if (cc::rack_unambiguous(ch.retx > 0, ch.last_tx_ns, tx.min_rtt_ns, now) &&
        now > ch.last_tx_ns &&
        !cc::rack_sent_before(ch.last_tx_ns, s, tx.rack_tx_ns[ch.path],
                              tx.rack_csn[ch.path])) {
      tx.rack_tx_ns[ch.path] = ch.last_tx_ns;
      tx.rack_csn[ch.path] = s;
      tx.rack_rtt_ns[ch.path] = now - ch.last_tx_ns;
    }
    ack_chunk(c, s, now);
  };
  uint32_t highest = a.cum_ack;
  bool any_sack = false;
  bool advanced = false;
  if (!cfg_.rc_mode && !c->failed) {
    const uint32_t cum = a.cum_ack;
    if (csn_lt(tx.snd_una, cum) && !csn_lt(tx.snd_nxt, cum)) {
      advanced = true;
      for (uint32_t s = tx.snd_una; s != cum && !c->failed; ++s) ack(s);
      tx.snd_una = cum;
      tx.dupacks = 0;
      tx.rto_backoff = 0;
      tx.tlp_sent = false;
      tx.last_progress_ns = now;
    }
    for (int w = 0; w < kSackWords; ++w) {
      uint64_t bits = a.sack[w];
      while (bits) {
        const uint32_t s = cum + 1 + w * 64 + __builtin_ctzll(bits);
        bits &= bits - 1;
        if (!csn_lt(s, tx.snd_nxt)) break;
        any_sack = true;
        highest = s;
        if (csn_lt(tx.high_sacked, s + 1)) tx.high_sacked = s + 1;
        if (!csn_lt(s, tx.snd_una)) {
          tx.chunk(s).sacked = true;
          ack(s);
        }
      }
    }
    if (!advanced && any_sack && tx.has_unacked()) ++tx.dupacks;
    on_retx_evidence(c, frto_delivered_ns, frto_probe_delivered, spurious, now);
  }
  // RTT sample from the chunk that triggered this ACK (Karn: only chunks
  // sent once), decomposed into fabric and endpoint (receiver) delay.
  const uint32_t t = a.trigger_csn;
  if (csn_lt(t, tx.snd_nxt) && !csn_lt(t, tx.snd_nxt - kChunkRing)) {
    ChunkRec& ch = tx.chunk(t);
    if (ch.retx == 0 && ch.first_tx_ns && !ch.rtt_sampled &&
        now > ch.first_tx_ns) {
      ch.rtt_sampled = true;
      const uint64_t rtt = now - ch.first_tx_ns;
      const uint64_t endpoint = std::min<uint64_t>(a.rx_delay_ns, rtt);
      on_rtt_sample(c, ch, rtt, endpoint, now);
      cc::CcSample s;
      s.now_ns = now;
      s.rtt_ns = rtt;
      s.endpoint_delay_ns = endpoint;
      s.fabric_delay_ns = rtt - endpoint;
      s.acked_bytes = newly_bytes ? newly_bytes : ch.len;
      s.acked_packets = newly_chunks ? newly_chunks : 1;
      s.segment_bytes = ch.len;
      cc_for(tx, ch.path).cc->on_ack(s);
    }
  }
  if (cfg_.rc_mode || c->failed) return;
  tx.last_ack_ns = now;
  // Fast retransmit once the duplicate-ACK threshold is met; which holes
  // count as lost is decided by time (RACK), since sprayed paths reorder.
  (void)highest;
  if (any_sack && tx.dupacks >= cfg_.dup_ack_threshold) {
    if (detect_losses(c, now) > 0) {
      for (auto& pc : tx.ccs) pc.cc->on_loss(now, false);
      trace("fast_retx", c->index, tx.snd_una, now);
    }
  }
}

// What an ACK showed about our retransmissions (on_ack): a pending F-RTO
// timeout is resolved, spurious (an original sent before it was delivered,
// `frto_delivered_ns` after it was sent: undo the backoff, Eifel response)
// or real (the ACK moved nothing sent before it: recovery as after any
// timeout); `spurious` resends whose originals were delivered widen RACK's
// reordering window.
void UcclRDMAEngine::on_retx_evidence(Conn* c, uint64_t frto_delivered_ns,
                                      bool frto_probe_delivered,
                                      uint32_t spurious, uint64_t now) {
  TxFlow& tx = c->tx;
  if (tx.frto && frto_delivered_ns > 0) {
    tx.frto = false;
    ++tx.spurious_rtos;
    tx.rto_backoff = 0;
    tx.rto.on_spurious_timeout(frto_delivered_ns);
    trace("spurious_rto", c->index, tx.snd_una, now);
  } else if (frto_probe_delivered) {
    // The resend came back and nothing sent before the timeout did: the
    // loss is real. The resend, sent last, was delivered, so RACK finds
    // what else was lost (on each path, chunks sent before a delivered one
    // and not acknowledged within its RTT): chunks still queued behind the
    // resend are not declared lost, as RACK on RTO would.
    tx.frto = false;
    for (auto& pc : tx.ccs) pc.cc->on_loss(now, true);
    detect_losses(c, now);
  }
  if (spurious > 0) {
    tx.spurious_retx += spurious;
    tx.reo_wnd_mult = std::min<uint32_t>(tx.reo_wnd_mult + 1, 64);
    tx.reo_wnd_persist = 16;
  }
}

int UcclRDMAEngine::detect_losses(Conn* c, uint64_t now) {
  // RACK (RFC 8985): a hole is lost when a chunk sent after it was
  // delivered and it has been out for that chunk's RTT plus a reordering
  // window (min RTT / 4), so reordering of any depth in packets, and queues
  // that swell RTTs, do not cause spurious retransmissions.
  TxFlow& tx = c->tx;
  if (!csn_lt(tx.snd_una, tx.high_sacked)) return 0;
  const uint64_t reo_wnd = reorder_window(tx);
  int lost = 0;
  for (uint32_t s = tx.snd_una; csn_lt(s, tx.high_sacked); ++s) {
    ChunkRec& ch = tx.chunk(s);
    if (ch.acked || ch.queued_retx) continue;
    if (!cc::rack_lost(ch.last_tx_ns, s, tx.rack_tx_ns[ch.path],
                       tx.rack_csn[ch.path], tx.rack_rtt_ns[ch.path], reo_wnd,
                       now)) {
      continue;
    }
    enqueue_retx(tx, s);
    ++tx.fast_retx;
    ++lost;
  }
  // 16 recoveries without a spurious resend: the window goes back down.
  if (lost > 0 && tx.reo_wnd_persist > 0 && --tx.reo_wnd_persist == 0) {
    tx.reo_wnd_mult = 1;
  }
  return lost;
}

int UcclRDMAEngine::poll_send_cq(uint64_t now) {
  WorkCompletion wc[kPollBatch];
  int n = scq_->poll(kPollBatch, wc);
  for (int i = 0; i < n; ++i) {
    const WorkCompletion& w = wc[i];
    const WrKind kind = wr_kind(w.wr_id);
    if (kind == WrKind::kAck) continue;  // UD: nothing to retire
    Conn* c = conns_[wr_conn(w.wr_id)].get();
    if (c == nullptr) continue;
    activate(c);
    const bool flushed = w.status == WcStatus::kWrFlushError;
    if (w.status != WcStatus::kSuccess && !flushed && !c->failed) {
      fail_conn(c, RemoteError(std::string(kind == WrKind::kCtrl
                                               ? "control message failed: "
                                               : "data transfer failed: ") +
                               transport::wc_status_name(w.status)));
    }
    if (kind != WrKind::kData) continue;
    const uint32_t path = wr_path(w.wr_id);
    if (path < c->qp_outstanding.size()) {
      const uint32_t done =
          std::min<uint32_t>(c->qp_outstanding[path], wr_batch(w.wr_id));
      c->qp_outstanding[path] -= done;
      nic_queued_ -= std::min(nic_queued_, done);
    }
    if (cfg_.rc_mode && w.status == WcStatus::kSuccess && !c->failed) {
      TxFlow& tx = c->tx;
      ack_chunk(c, wr_csn(w.wr_id), now);
      while (tx.snd_una != tx.snd_nxt && tx.chunk(tx.snd_una).acked)
        ++tx.snd_una;
    }
  }
  return n;
}

void UcclRDMAEngine::timers(uint64_t now) {
  if (cfg_.stats_interval_s > 0 && now >= next_stats_ns_) {
    if (next_stats_ns_) log_stats(now);
    next_stats_ns_ = now + static_cast<uint64_t>(cfg_.stats_interval_s * 1e9);
  }
  // RTOs and tail-loss probes: only connections with chunks out. One whose
  // chunks are all acknowledged (or that failed) leaves the list.
  size_t keep = 0;
  for (size_t i = 0; i < inflight_.size(); ++i) {
    Conn* c = conns_[inflight_[i]].get();
    check_rto(c, now);
    if (!quiescent(*c)) activate(c);  // resends the RTO queued
    if (c->failed || !c->tx.has_unacked()) {
      c->inflight = false;
    } else {
      inflight_[keep++] = inflight_[i];
    }
  }
  timer_visits_ += inflight_.size();
  inflight_.resize(keep);
  if (now < next_liveness_ns_) return;
  next_liveness_ns_ = now + kLivenessIntervalNs;
  check_liveness();
  // Every live connection, at a slower pace: a safety net, so that work an
  // event failed to activate waits at most this long. It finds none unless
  // an activate() is missing (late_activations_ counts what it found).
  timer_visits_ += live_.size();
  for (size_t i = 0; i < live_.size(); ++i) {
    Conn* c = conns_[live_[i]].get();
    if (!c->active && !quiescent(*c)) {
      ++late_activations_;
      activate(c);
    }
  }
}

void UcclRDMAEngine::check_rto(Conn* c, uint64_t now) {
  TxFlow& tx = c->tx;
  if (c->failed || !tx.has_unacked()) {
    tx.last_progress_ns = now;
    return;
  }
  // ACKs stopped but SACKs showed holes: recover them without an RTO.
  if (detect_losses(c, now) > 0) {
    for (auto& pc : tx.ccs) pc.cc->on_loss(now, false);
  }
  const uint64_t rto = tx.rto.backed_off_ns(tx.rto_backoff);
  // The oldest unacknowledged chunk has been out for an RTO (counted from
  // its last transmission and from the last RTO), whatever other paths do.
  const uint64_t sent =
      std::max(tx.chunk(tx.snd_una).last_tx_ns, tx.last_progress_ns);
  if (now - sent < rto) {
    probe_tail(c, now, rto);
    return;
  }
  // Give up after max_retries consecutive RTOs without any progress.
  if (tx.rto_backoff >= cfg_.max_retries) {
    fail_conn(c, TimedOut("no acknowledgement after " +
                          std::to_string(tx.rto_backoff) +
                          " retransmission timeouts (peer unreachable?)"));
    return;
  }
  ++tx.rtos;
  if (tx.rto_backoff == 0) {
    // F-RTO (flow.h): a first timeout resends only the oldest chunk; the
    // next ACK says whether the timeout was spurious (on_ack).
    tx.frto = true;
    tx.frto_ns = now;
    tx.frto_csn = tx.snd_una;
    if (!tx.chunk(tx.snd_una).acked) {
      enqueue_retx(tx, tx.snd_una);
      ++tx.rto_retx;
    }
  } else {
    rto_recovery(c, now);
  }
  // The receiver may have completed the message and dropped our resends at
  // its NIC (the receive's window is gone): ask for an ACK reliably.
  CtrlMsg probe;
  std::memset(&probe, 0, sizeof(probe));
  probe.type = static_cast<uint32_t>(CtrlType::kAckReq);
  send_ctrl(c, probe);
  tx.rto_urgent = true;
  tx.urgent_csn = tx.snd_una;
  tx.dupacks = 0;
  tx.tlp_sent = false;
  ++tx.rto_backoff;
  tx.last_progress_ns = now;
  trace("rto", c->index, tx.snd_una, now);
  VLOG(kVlogChunk) << "conn " << c->index << " RTO, csn " << tx.snd_una
                   << " backoff " << tx.rto_backoff;
}

// A timeout that is a real loss (a second one in a row, or a first one the
// next ACK did not prove spurious): RACK on RTO (RFC 8985, 6.3), the oldest
// chunk and every chunk out for longer than an RTT plus the reordering
// window are lost (resending only the oldest recovers a lost window one RTO
// per chunk); they left the pipe, so the window paces their resending. The
// controllers take it as a timeout.
void UcclRDMAEngine::rto_recovery(Conn* c, uint64_t now) {
  TxFlow& tx = c->tx;
  tx.frto = false;
  const uint64_t reo_wnd = reorder_window(tx);
  for (uint32_t s = tx.snd_una; s != tx.snd_nxt; ++s) {
    ChunkRec& ch = tx.chunk(s);
    if (ch.acked || ch.queued_retx) continue;
    const uint64_t rtt = std::max(tx.rto.srtt_ns(), tx.rack_rtt_ns[ch.path]);
    if (cc::rto_lost(s == tx.snd_una, ch.last_tx_ns, rtt, reo_wnd, now)) {
      enqueue_retx(tx, s);
      ++tx.rto_retx;
    }
  }
  for (auto& pc : tx.ccs) pc.cc->on_loss(now, true);
}

uint64_t UcclRDMAEngine::reorder_window(const TxFlow& tx) {
  return cc::rack_reorder_window_ns(tx.min_rtt_ns, tx.reo_wnd_mult,
                                    tx.rto.srtt_ns());
}

// Tail loss probe (RFC 8985, 7): once nothing was sent or acknowledged for
// the probe timeout (cc/recovery.h), resend the newest unacknowledged chunk
// at once, past window and pacing as Linux sends its probe, and ask for an
// ACK. A lost tail has no later chunk whose delivery RACK could use, so
// without the probe only the RTO (5 ms floor on the software NIC) repairs
// it; the probe's ACK lets RACK's fast path repair it and any earlier holes.
// One probe per episode (until the cumulative ACK moves or an RTO fires).
void UcclRDMAEngine::probe_tail(Conn* c, uint64_t now, uint64_t rto) {
  TxFlow& tx = c->tx;
  if (!cfg_.tail_loss_probe || tx.tlp_sent || tx.rto_backoff > 0 ||
      tx.retx_head != tx.retx_tail) {
    return;  // probed already, backing off, or recovery is under way
  }
  const uint64_t pto = cc::tlp_timeout_ns(tx.rto.srtt_ns(), tx.rto.rttvar_ns(),
                                          cfg_.ack_delay_ns, rto);
  if (pto == 0) return;
  const uint64_t last =
      std::max(tx.last_ack_ns, tx.chunk(tx.snd_nxt - 1).last_tx_ns);
  if (now - last < pto) return;
  for (uint32_t s = tx.snd_nxt - 1;; --s) {
    ChunkRec& ch = tx.chunk(s);
    if (!ch.acked && !ch.queued_retx) {
      enqueue_retx(tx, s);
      tx.rto_urgent = true;  // one chunk past window and pacing, as Linux
      tx.urgent_csn = s;
      ++tx.tlp_retx;
      break;
    }
    if (s == tx.snd_una) break;
  }
  CtrlMsg probe;
  std::memset(&probe, 0, sizeof(probe));
  probe.type = static_cast<uint32_t>(CtrlType::kAckReq);
  send_ctrl(c, probe);
  tx.tlp_sent = true;
  trace("tlp", c->index, tx.snd_nxt - 1, now);
  VLOG(kVlogChunk) << "conn " << c->index << " tail loss probe, snd_nxt "
                   << tx.snd_nxt;
}

}  // namespace uccl::engine
