// Engine inline sends: a small message whose receive descriptor is known
// travels whole in the connection's control SEND (wire.h, "Inline messages").
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

// One datagram instead of a chunk, its ACK and the control SEND that
// follows anyway: only for a message that fits, to a peer whose receive
// buffers the engine may copy into (it offers eager slots), and only on a
// connection with nothing outstanding, so inline messages never overtake a
// chunked one (completions stay in send order).
bool UcclRDMAEngine::inline_fits(const Conn* c, const PendingSend& p,
                                 const RecvBuf& b) const {
  const TxFlow& tx = c->tx;
  return cfg_.inline_bytes > 0 && p.len <= cfg_.inline_bytes &&
         p.len <= tx.eager_peer_bytes && p.len <= b.size &&
         tx.msg_head == tx.msg_tail;
}

void UcclRDMAEngine::send_inline(Conn* c, const PendingSend& p, const Desc& d,
                                 uint32_t buf, uint64_t now) {
  TxFlow& tx = c->tx;
  const uint32_t idx = tx.msg_tail++;
  tx.msg_chunk = tx.msg_tail;  // nothing of it is cut into chunks
  TxMsg& m = tx.msg(idx);
  m = TxMsg{};
  m.req = p.req;
  m.is_inline = true;
  m.tag = p.tag;
  m.addr = p.addr;
  m.len = p.len;
  m.rsize = d.bufs[buf].size;
  m.slot = static_cast<uint8_t>(d.slot);
  m.buf = static_cast<uint8_t>(buf);
  m.all_chunked = true;
  m.post_ns = now;
  CtrlMsg h;  // its header goes out, the payload after it
  std::memset(&h, 0, kCtrlHeaderBytes);
  h.type = static_cast<uint32_t>(CtrlType::kInline);
  h.slot = d.slot;
  h.n = buf;
  h.read_len = p.len;
  const uint32_t len = static_cast<uint32_t>(ctrl_record_bytes(h));
  if (__builtin_expect(wire_fault_.load(std::memory_order_relaxed) != 0, 0)) {
    damage_inline(&h);  // its length on the wire stays the original's
  }
  alignas(8) uint8_t rec[kCtrlBatchBytes];
  std::memcpy(rec, &h, kCtrlHeaderBytes);
  if (p.len) {
    std::memcpy(rec + kCtrlHeaderBytes, reinterpret_cast<const void*>(p.addr),
                p.len);
  }
  std::memset(rec + kCtrlHeaderBytes + p.len, 0,
              len - kCtrlHeaderBytes - p.len);
  ++tx.inline_outstanding;
  ++tx.sends_inline;
  ++tx.sends_matched;
  append_ctrl(c, rec, len);  // may send the SENDs before it (or fail c)
  m.ctrl_seq = c->ctrl_posted + 1;
  c->ctrl_signal = true;
  trace("inline_tx", c->index, d.slot, now);
}

// Control SEND number `ctrl_seq` completed (RC: every earlier one too): the
// inline messages it and those carried are delivered.
void UcclRDMAEngine::complete_inline(Conn* c, uint32_t ctrl_seq) {
  TxFlow& tx = c->tx;
  const uint32_t head = tx.msg_head, tail = tx.msg_tail;
  for (uint32_t i = head; i != tail && tx.inline_outstanding; ++i) {
    TxMsg& m = tx.msg(i);
    if (!m.is_inline || m.done ||
        static_cast<int32_t>(ctrl_seq - m.ctrl_seq) < 0) {
      continue;
    }
    --tx.inline_outstanding;
    complete_tx_msg(c, m);
  }
  // A send held back from going eager while these were out may go now.
  match_sends(c, clock_->now_ns());
}

// An inline message for buffer m.n of receive m.slot: it must name a
// posted two-sided receive's untaken buffer that holds it, else the peer
// is broken and the connection fails (counted).
void UcclRDMAEngine::on_inline(Conn* c, const CtrlMsg& m,
                               const uint8_t* payload) {
  RxFlow& rx = c->rx;
  const char* problem = ctrl_msg_problem(m);
  RxSlot* s = problem ? nullptr : &rx.slots[m.slot];
  if (!problem &&
      (!s->active || s->is_read || m.n >= static_cast<uint32_t>(s->n))) {
    problem = "inline message for no posted receive";
  } else if (!problem && (s->bufs[m.n].claimed || s->bufs[m.n].done)) {
    problem = "inline message for a buffer already taken";
  } else if (!problem && m.read_len > s->bufs[m.n].size) {
    problem = "inline message larger than its receive buffer";
  }
  if (problem) {
    ++protocol_errors_;
    fail_conn(c, ProtocolError(std::string(problem) + " from peer"));
    return;
  }
  RxBuf& b = s->bufs[m.n];
  if (m.read_len) {
    std::memcpy(reinterpret_cast<void*>(b.addr), payload, m.read_len);
  }
  b.received = m.read_len;
  b.trunc = false;
  ++rx.inline_rx;
  trace_now("inline_rx", c->index, m.slot);
  finish_buf(c, static_cast<int>(m.slot), static_cast<int>(m.n));
}

}  // namespace uccl::engine
