// Engine control messages: one SEND per loop and connection carrying
// descriptors, grants and ACK and pull requests, and their parsing.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

using transport::SendWr;
using transport::Sge;
using transport::WrOpcode;

// Control messages of one loop leave together: appended here, sent as one
// SEND by flush_ctrl() in the loop's pass over the connections (wire.h).
void UcclRDMAEngine::send_ctrl(Conn* c, const CtrlMsg& m) {
  const uint32_t len = static_cast<uint32_t>(ctrl_record_bytes(m));
  const CtrlMsg* out = &m;
  CtrlMsg damaged;
  if (__builtin_expect(wire_fault_.load(std::memory_order_relaxed) != 0, 0) &&
      m.type == static_cast<uint32_t>(CtrlType::kRecvDesc)) {
    damaged = m;
    damage_descriptor(&damaged);
    out = &damaged;
  }
  append_ctrl(c, out, len);
  trace_now("ctrl_tx", c->index, m.slot);
}

// Appends `len` bytes (one message) to the loop's control SEND, sending
// what it holds first where they would not fit the peer's buffer.
void UcclRDMAEngine::append_ctrl(Conn* c, const void* msg, uint32_t len) {
  if (c->ctrl_out_len + len > ctrl_batch_bytes_) flush_ctrl(c);
  std::memcpy(c->ctrl_out + c->ctrl_out_len, msg, len);
  c->ctrl_out_len += len;
  activate(c);
}

void UcclRDMAEngine::flush_ctrl(Conn* c) {
  if (c->ctrl_out_len == 0) return;
  const uint32_t len = c->ctrl_out_len;
  c->ctrl_out_len = 0;
  const bool inline_msgs = c->ctrl_signal;
  c->ctrl_signal = false;
  if (c->failed) return;
  Sge sge{reinterpret_cast<uint64_t>(c->ctrl_out), len, 0};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.inline_data = true;
  wr.signaled = ++c->ctrl_unsignaled >= kSignalEvery || inline_msgs;
  wr.wr_id = make_wr_id(WrKind::kCtrl, c->index, 0,
                        wr.signaled ? c->ctrl_unsignaled : 0, ++c->ctrl_posted);
  if (wr.signaled) c->ctrl_unsignaled = 0;
  Status st = c->ctrl->post_send(&wr, nullptr);
  if (!st.ok()) {
    fail_conn(c, st.with_context("posting control messages"));
    return;
  }
  ++ctrl_sends_;
}

// One control SEND: one or more messages back to back (wire.h).
void UcclRDMAEngine::on_ctrl_batch(Conn* c, const uint8_t* p, uint32_t len) {
  uint32_t off = 0;
  while (off < len && !c->failed) {
    CtrlMsg m;
    const uint32_t used = parse_ctrl_msg(p + off, len - off, &m);
    if (used == 0) {
      ++protocol_errors_;
      fail_conn(c, ProtocolError("malformed control message from peer"));
      return;
    }
    if (m.type == static_cast<uint32_t>(CtrlType::kInline)) {
      on_inline(c, m, p + off + kCtrlHeaderBytes);
    } else {
      on_ctrl_msg(c, m);
    }
    off += used;
  }
}

// Asks the peer for an ACK now, on the reliable control QP (kAckReq): its
// answer carries the window and every grant so far.
void UcclRDMAEngine::request_ack(Conn* c) {
  CtrlMsg m;
  std::memset(&m, 0, sizeof(m));
  m.type = static_cast<uint32_t>(CtrlType::kAckReq);
  send_ctrl(c, m);
}

// A grant travels in the receiver's ACKs (cumulative), over the UD QP, which
// may lose them. While chunks are out, their RTO asks for an ACK reliably
// (check_rto); a sender with nothing in flight that waits for credit has no
// timer, and if the ACK with its last grant was lost the receiver, having
// granted all it was asked for, sends no other: both wait forever. So such
// a sender asks (kAckReq, on the reliable control QP) once per liveness
// interval; the answer carries every grant so far.
void UcclRDMAEngine::probe_credit(Conn* c, uint64_t now) {
  TxFlow& tx = c->tx;
  if (!c->established || c->failed || tx.has_unacked()) return;
  if (tx.msg_chunk == tx.msg_tail && !tx.sb->resend_pending()) return;
  if (now - tx.credit_news_ns < kLivenessIntervalNs) return;
  tx.credit_news_ns = now;
  ++tx.credit_probes;
  request_ack(c);
  trace("credit_probe", c->index, tx.sb->snd_nxt(), now);
}

// One record of a batch, its length already checked by on_ctrl_batch().
void UcclRDMAEngine::on_ctrl_msg(Conn* c, const CtrlMsg& m) {
  if (m.type == static_cast<uint32_t>(CtrlType::kAckReq)) {
    maybe_send_ack(c, clock_->now_ns(), true);
    return;
  }
  if (m.type == static_cast<uint32_t>(CtrlType::kPullReq)) {
    // Bounded by what could be in flight, so a peer cannot inflate the
    // demand (and take every other flow's share of the pull pacer).
    const uint64_t cap = uint64_t{kMaxChunksInFlight} * cfg_.chunk_bytes * 2;
    if (pacer_ && m.read_len > 0) {
      pacer_->add_demand(c->index, std::min(m.read_len, cap), false);
    }
    return;
  }
  if (const char* problem = ctrl_msg_problem(m)) {
    ++protocol_errors_;
    fail_conn(c, ProtocolError(std::string(problem) + " (type " +
                               std::to_string(m.type) + ") from peer"));
    return;
  }
  TxFlow& tx = c->tx;
  if (m.type == static_cast<uint32_t>(CtrlType::kRecvDesc)) {
    if (tx.desc_tail - tx.desc_head >= kDescRing) {
      ++protocol_errors_;
      fail_conn(c, ProtocolError("peer posted more receives than allowed"));
      return;
    }
    trace_now("desc_rx", c->index, m.slot);
    Desc& d = tx.descs[tx.desc_tail++ % kDescRing];
    d.slot = m.slot;
    d.n = m.n;
    d.used_mask = 0;
    std::copy(m.bufs, m.bufs + m.n, d.bufs);
    pay_owed(c);
    match_sends(c, clock_->now_ns());
    if (m.region) take_grants(c, m.bufs + m.n, m.region);
    return;
  }
  if (m.type == static_cast<uint32_t>(CtrlType::kEagerGrant)) {
    take_grants(c, m.bufs, m.n);
    return;
  }
  // kReadReq (ctrl_msg_problem() refused other types: both sides run the
  // same protocol version, so a type we do not know is a broken peer, not
  // a newer one). Serve a read: send our region's bytes into the peer's slot.
  TxMsg& t = tx.msg(tx.msg_tail++);
  t = TxMsg{};
  t.slot = static_cast<uint8_t>(m.slot);
  t.buf = 0;
  t.raddr = m.bufs[0].addr;
  t.rkey = m.bufs[0].rkey;
  t.post_ns = clock_->now_ns();
  const Region* r = m.region < kMaxRegions ? &regions_[m.region] : nullptr;
  const bool ok = r && r->valid.load(std::memory_order_acquire) &&
                  m.read_addr >= r->addr && m.read_len <= r->len &&
                  m.read_addr - r->addr <= r->len - m.read_len &&
                  m.read_len <= m.bufs[0].size;
  if (ok) {
    t.addr = m.read_addr;
    t.len = m.read_len;
    t.lkey = r->lkeys[cfg_.index];
  } else {
    t.trunc = true;  // refuse: the reader's request fails
  }
}

}  // namespace uccl::engine
