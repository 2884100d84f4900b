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

void pace(PathCc& pc, uint32_t bytes, uint64_t now) {
  pc.last_send_ns = now;
  pc.last_bytes = std::max<uint32_t>(bytes, 1);
}

// The bytes in path `p`'s pipe as its controller sees them: the path's
// own, or the flow's where one controller serves every path.
uint64_t cc_inflight(const TxFlow& tx, uint32_t p) {
  return tx.ccs.size() == 1 ? tx.sb->inflight() : tx.sb->path_inflight(p);
}

// A chunk of `len` bytes left on path `p`: its controller and pacer hear.
void on_sent(TxFlow& tx, uint32_t p, uint32_t len, uint64_t now) {
  PathCc& pc = cc_for(tx, p);
  pc.cc->on_send(now, len);
  pace(pc, len, now);
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
  return !m.is_inline && m.all_chunked && m.chunks_acked == m.chunks_total &&
         !m.done && (!m.eager || m.paid) && m.resends_in_nic == 0;
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
    if (inline_fits(c, p, d->bufs[b])) {
      const PendingSend taken = p;
      ++tx.pend_head;  // taken before its SEND may fail the connection
      count_wait(tx, taken, now);
      send_inline(c, taken, *d, b, now);
      if (c->failed) return;
      retire_descs(tx);
      continue;
    }
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
  // (Off means off: an empty send too waits for its receive.)
  if (cfg_.eager_bytes == 0 || usable == 0 || p.len > limit ||
      tx.owed_n >= kEagerSlots) {
    return false;
  }
  // Not past an inline message the receiver may not have taken yet: it
  // would give this one the buffer that message names (wire.h).
  if (tx.inline_outstanding) return false;
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
  cc::Scoreboard& sb = *tx.sb;
  const uint32_t npaths = static_cast<uint32_t>(c->qps.size());
  int sent = 0;
  // cc=credit: ask the receiver to pull what we are about to resend (its
  // grants covered the first copies only).
  const uint64_t lost = sb.take_lost_bytes();
  if (lost && pacer_) {
    CtrlMsg pull;
    std::memset(&pull, 0, sizeof(pull));
    pull.type = static_cast<uint32_t>(CtrlType::kPullReq);
    pull.read_len = lost;
    send_ctrl(c, pull);
    if (c->failed) return 0;
  }
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
      if (pc.cc->can_send(cc_inflight(tx, p), len) && pc.paced_ok(now)) {
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
  uint32_t csn;
  if (sb.urgent(&csn)) {
    for (uint32_t p = 0; p < npaths; ++p) {
      if (c->qp_outstanding[p] >= cfg_.path_queue) continue;
      if (!post_chunk(c, csn, static_cast<uint16_t>(p), true, now)) break;
      sb.resent(csn, static_cast<uint16_t>(p), now);
      on_sent(tx, p, tx.chunk(csn).len, now);
      ++sent;
      break;
    }
  }
  // Resends; lost chunks left the pipe, so they obey the window, credit
  // and pacing as new data does.
  while (sent < static_cast<int>(kChunksPerTransmit) && sb.next_resend(&csn)) {
    const uint32_t len = tx.chunk(csn).len;
    uint32_t path;
    if (!pick_path(len, &path)) break;
    if (!post_chunk(c, csn, static_cast<uint16_t>(path), true, now)) break;
    sb.resent(csn, static_cast<uint16_t>(path), now);
    on_sent(tx, path, len, now);
    ++sent;
  }
  // New chunks of the messages in order.
  while (sent < static_cast<int>(kChunksPerTransmit) &&
         tx.msg_chunk != tx.msg_tail) {
    if (sb.full()) break;
    TxMsg& m = tx.msg(tx.msg_chunk);
    // An eager message is one chunk: its header and the payload.
    const uint32_t len = m.eager
                             ? static_cast<uint32_t>(sizeof(EagerHdr) + m.len)
                         : m.trunc ? 0
                                   : static_cast<uint32_t>(std::min<uint64_t>(
                                         cfg_.chunk_bytes, m.len - m.next_off));
    uint32_t path;
    if (!pick_path(len, &path)) break;  // window, credit or pacing says wait
    csn = sb.snd_nxt();
    ChunkRec& ch = tx.chunk(csn);
    ch = ChunkRec{};
    ch.msg = tx.msg_chunk;
    ch.len = len;
    ch.off = m.next_off;
    ch.last = m.eager || m.trunc || m.next_off + len >= m.len;
    if (!post_chunk(c, csn, static_cast<uint16_t>(path), false, now)) break;
    sb.send_new(static_cast<uint16_t>(path), len, now);
    m.next_off += len;
    ++m.chunks_sent;
    if (ch.last) {
      m.all_chunked = true;
      m.chunks_total = m.chunks_sent;
      ++tx.msg_chunk;
    }
    on_sent(tx, path, len, now);
    *tx.engine_unacked += len;
    tx.max_inflight = std::max(tx.max_inflight, sb.inflight());
    ++sent;
  }
  return sent;
}

bool UcclRDMAEngine::post_chunk(Conn* c, uint32_t csn, uint16_t path, bool retx,
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
  // One-sided chunks complete no message: `last` marks the end of a write
  // the peer counts (Imm).
  imm.last = ch.last && (!m.onesided || m.notify);
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
  // The whole CSN beside the immediate's 11 bits: the peer's guard refuses
  // a copy delayed past the CSN space's wrap by it (RxWindow::holds_csn).
  wr.tagged = true;
  wr.guard_tag = csn;
  if (__builtin_expect(wire_fault_.load(std::memory_order_relaxed) != 0, 0) &&
      take_wire_fault(WireFault::kChunkTagContradicts,
                      WireFault::kChunkTagContradicts) != WireFault::kNone) {
    wr.guard_tag ^= 1;  // test hook: a tag no peer engine sends
  }
  wr.remote_addr = m.raddr + ch.off;
  wr.rkey = m.rkey;
  // The receiver may have these bytes already (only the ACK was lost): a
  // software NIC verifies them before they land (SendWr::retransmit).
  wr.retransmit = retx;
  // A first transmission may go by reference (SendWr::payload_stable): the
  // buffer stays ours until the chunk's ACK, and the peer reads its one
  // socket in order, so it has read that copy before it can ACK the chunk
  // from any copy. Resends are copied. Two-sided chunks only, whose receive
  // window the peer invalidates before it ACKs the last chunk, in case a
  // copy is read late anyway (transport/udp/wire.h, "Spliced payloads");
  // one-sided writes have no window, and eager messages are small.
  wr.payload_stable = !retx && windows_ && !m.onesided && !m.eager;
  // UC: signal every kSignalEvery WRs to retire SQ slots. RC: every chunk,
  // its completion is its acknowledgement.
  // A resend is counted on its message until its completion (TxMsg::
  // resends_in_nic), which then names the message, not the chunk: the
  // chunk's record may be reused by then, the message's may not.
  const bool counted = retx && !cfg_.rc_mode;
  const uint32_t unsig = c->qp_unsignaled[path] + 1;
  wr.signaled = cfg_.rc_mode || counted || unsig >= kDataSignalEvery;
  const uint32_t batch = cfg_.rc_mode ? 1 : (wr.signaled ? unsig : 0);
  wr.wr_id = counted
                 ? make_wr_id(WrKind::kResend, c->index, path, batch, ch.msg)
                 : make_wr_id(WrKind::kData, c->index, path, batch, csn);
  Status st = c->qps[path]->post_send(&wr, nullptr);
  if (!st.ok()) {
    if (st.code() != StatusCode::kResourceExhausted) {
      fail_conn(c, st.with_context("posting a chunk"));
    }
    return false;
  }
  c->qp_unsignaled[path] = wr.signaled ? 0 : unsig;
  ++round_.chunks;
  if (!retx) {
    round_.fresh = true;
    round_.conn = c->index;
    round_.csn = csn;
    round_.posted_ns = now;
  }
  trace("chunk_tx", c->index, csn, now);
  if (!c->inflight && !cfg_.rc_mode) {  // its RTO is checked from now on
    c->inflight = true;
    inflight_.push_back(c->index);
    tx.sb->note_idle(now);  // nothing was out: no stale progress time
  }
  ++c->qp_outstanding[path];
  ++nic_queued_;
  if (counted) ++m.resends_in_nic;
  if (!retx) {
    tx.tx_bytes += ch.len;
    ++tx.tx_chunks;
  } else {
    ++m.retx_chunks;
  }
  m.paths_mask |= uint64_t{1} << (path % 64);
  trace(retx ? "retx" : "tx", c->index, csn, now);
  VLOG(kVlogChunk) << "conn " << c->index << (retx ? " retx" : " tx") << " csn "
                   << csn << " len " << ch.len << " path " << path;
  if (__builtin_expect(wire_fault_.load(std::memory_order_relaxed) != 0, 0) &&
      !retx && ch.last &&
      take_wire_fault(WireFault::kResendLastChunk,
                      WireFault::kResendLastChunk) != WireFault::kNone) {
    (void)post_chunk(c, csn, path, true, now);  // test hook: a spurious resend
  }
  return true;
}

// A resend of message `msg` (its counter) left the NIC, or was flushed.
void UcclRDMAEngine::resend_left_nic(Conn* c, uint32_t msg) {
  TxFlow& tx = c->tx;
  // A message's slot is reused only once it completed, which waits for
  // this: anything else is not ours (a connection that failed and reset).
  if (c->failed || csn_lt(msg, tx.msg_head) || !csn_lt(msg, tx.msg_tail)) {
    return;
  }
  TxMsg& m = tx.msg(msg);
  if (m.resends_in_nic > 0) --m.resends_in_nic;
  if (ready_to_complete(m)) complete_tx_msg(c, m);
}

// The scoreboard saw `csn` acknowledged for the first time.
void UcclRDMAEngine::ack_chunk(Conn* c, uint32_t csn) {
  TxFlow& tx = c->tx;
  ChunkRec& ch = tx.chunk(csn);
  *tx.engine_unacked -= std::min<uint64_t>(*tx.engine_unacked, ch.len);
  TxMsg& m = tx.msg(ch.msg);
  ++m.chunks_acked;
  if (m.eager) tx.eager_busy &= ~(1u << m.slot);
  if (ready_to_complete(m)) complete_tx_msg(c, m);
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
    RequestCc& cc = RequestAccess::cc(m.req);
    fill_cc(c, &cc);
    cc.retransmits = m.retx_chunks;
    cc.paths = static_cast<uint32_t>(__builtin_popcountll(m.paths_mask));
    VLOG(kVlogRequest) << "conn " << c->index << " send of " << m.len
                       << " bytes done";
    trace_now("send_done", c->index, 0);
    RequestAccess::complete(m.req, std::move(st));
  }
  TxFlow& tx = c->tx;
  while (tx.msg_head != tx.msg_chunk && tx.msg(tx.msg_head).done) ++tx.msg_head;
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
    if (kind == WrKind::kCtrl && w.status == WcStatus::kSuccess &&
        c->tx.inline_outstanding && !c->failed) {
      complete_inline(c, wr_csn(w.wr_id));
    }
    if (kind != WrKind::kData && kind != WrKind::kResend) continue;
    const uint32_t path = wr_path(w.wr_id);
    if (path < c->qp_outstanding.size()) {
      const uint32_t done =
          std::min<uint32_t>(c->qp_outstanding[path], wr_batch(w.wr_id));
      c->qp_outstanding[path] -= done;
      nic_queued_ -= std::min(nic_queued_, done);
    }
    if (kind == WrKind::kResend) {
      resend_left_nic(c, wr_csn(w.wr_id));
      continue;
    }
    if (cfg_.rc_mode && w.status == WcStatus::kSuccess && !c->failed) {
      c->tx.sb->ack_delivered(
          wr_csn(w.wr_id), now,
          [&](uint32_t s, const cc::SegRec&) { ack_chunk(c, s); });
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
    if (pacer_) probe_credit(c, now);
  }
}

// The scoreboard's timers (cc/scoreboard.h): RACK for holes the ACKs
// stopped reporting, the tail loss probe, the RTO (F-RTO on a first one),
// and giving up after max_retries timeouts without progress.
void UcclRDMAEngine::check_rto(Conn* c, uint64_t now) {
  TxFlow& tx = c->tx;
  if (c->failed) return;
  const cc::TimerOutcome t = tx.sb->on_timer(now);
  report_losses(c, t.losses, now);
  if (t.action == cc::TimerAction::kNone) return;
  if (t.action == cc::TimerAction::kFail) {
    fail_conn(c, TimedOut("no acknowledgement after " +
                          std::to_string(tx.sb->rto_backoff()) +
                          " retransmission timeouts (peer unreachable?)"));
    return;
  }
  // Ask for an ACK reliably: after a timeout the receiver may have
  // completed the message and dropped our resends at its NIC (the
  // receive's window is gone); a probe's ACK lets RACK repair the tail.
  request_ack(c);
  const bool rto = t.action == cc::TimerAction::kTimeout;
  trace(rto ? "rto" : "tlp", c->index,
        rto ? tx.sb->snd_una() : tx.sb->snd_nxt() - 1, now);
  VLOG(kVlogChunk) << "conn " << c->index << (rto ? " RTO" : " tail probe")
                   << ", una " << tx.sb->snd_una() << " backoff "
                   << tx.sb->rto_backoff();
}

}  // namespace uccl::engine
