// Engine eager receives: messages written into our bounce slots before
// their receive was posted, held or delivered in send order; slot grants.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

// An eager message, in CSN (send) order: the oldest posted receive with an
// untaken buffer of its tag takes it; with none, it waits in its slot for
// the next receive posted with that tag (wire.h).
void UcclRDMAEngine::on_eager(Conn* c, const RxChunkInfo& info) {
  RxFlow& rx = c->rx;
  const uint32_t k = info.slot;
  rx.win.message_done();
  EagerHdr h{};
  const bool granted = rx.eager_mem && k < kEagerSlots && rx.eager[k].granted;
  if (granted && info.len >= sizeof(EagerHdr)) {
    std::memcpy(&h, rx.eager_slot(k), sizeof(h));
  }
  if (!granted || !eager_chunk_ok(h, info.len, rx.eager_slot_bytes)) {
    ++protocol_errors_;
    fail_conn(c, ProtocolError("malformed eager message from peer (slot " +
                               std::to_string(k) + ", " +
                               std::to_string(info.len) + " bytes)"));
    return;
  }
  EagerSlotRx& e = rx.eager[k];
  e = EagerSlotRx{false, h.tag, h.len};
  ++rx.eager_rx;
  int slot = -1, buf = -1;
  for (int i = 0; i < kMaxRequestsPerFlow; ++i) {
    const RxSlot& s = rx.slots[i];
    if (!s.active || s.is_read ||
        (slot >= 0 && s.post_seq > rx.slots[slot].post_seq)) {
      continue;
    }
    const int b = s.free_buf(h.tag);
    if (b >= 0) {
      slot = i;
      buf = b;
    }
  }
  trace_now("eager_rx", c->index, k);
  if (slot < 0) {
    rx.held[rx.held_n++] = static_cast<uint8_t>(k);
    ++rx.eager_held;
    return;
  }
  deliver_eager(c, k, slot, buf);
}

// Copies held eager message `k` into buffer `buf` of receive `slot` (or
// fails that buffer as truncated) and frees its bounce slot.
void UcclRDMAEngine::deliver_eager(Conn* c, uint32_t k, int slot, int buf) {
  RxFlow& rx = c->rx;
  RxBuf& b = rx.slots[slot].bufs[buf];
  const EagerSlotRx& e = rx.eager[k];
  b.claimed = true;
  b.received = e.len;
  b.trunc = e.len > b.size;
  if (!b.trunc && e.len > 0) {
    std::memcpy(reinterpret_cast<void*>(b.addr),
                rx.eager_slot(k) + sizeof(EagerHdr), e.len);
  }
  free_eager_slot(c, k);
  finish_buf(c, slot, buf);
}

// A new window over bounce slot `k` (its key is the slot's rkey for one use).
Result<uint32_t> UcclRDMAEngine::bind_eager_slot(RxFlow& rx, uint32_t k) {
  return rx.eager_windows[k]->bind(
      *rx.eager_mr, reinterpret_cast<uint64_t>(rx.eager_slot(k)),
      rx.eager_slot_bytes,
      transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
}

// Slot `k` is empty again: a new window (late duplicates of its last use
// miss) and a grant with the next descriptor.
void UcclRDMAEngine::free_eager_slot(Conn* c, uint32_t k) {
  RxFlow& rx = c->rx;
  rx.eager[k] = EagerSlotRx{};
  if (rx.eager_windows[k]) {
    auto key = bind_eager_slot(rx, k);
    if (!key.ok()) {  // not granted again: the peer has one slot fewer
      VLOG(kVlogRequest) << "conn " << c->index << " eager slot " << k << ": "
                         << key.status();
      return;
    }
    rx.eager_rkeys[k] = *key;
  }
  rx.grant_pending |= 1u << k;
}

// Writes grants of freed slots into bufs[first..kMaxRecvsPerRequest) of a
// control message; returns how many.
uint32_t UcclRDMAEngine::add_grants(Conn* c, CtrlMsg* m, uint32_t first) {
  RxFlow& rx = c->rx;
  uint32_t g = 0;
  while (rx.grant_pending && first + g < kMaxRecvsPerRequest) {
    const uint32_t k = static_cast<uint32_t>(__builtin_ctz(rx.grant_pending));
    rx.grant_pending &= rx.grant_pending - 1;
    rx.eager[k].granted = true;
    m->bufs[first + g++] = RecvBuf{reinterpret_cast<uint64_t>(rx.eager_slot(k)),
                                   rx.eager_slot_bytes, rx.eager_rkeys[k],
                                   static_cast<int32_t>(k)};
  }
  return g;
}

// Grants what the descriptor just sent had no room for.
void UcclRDMAEngine::send_grants(Conn* c) {
  while (c->rx.grant_pending && !c->failed) {
    CtrlMsg g;
    std::memset(&g, 0, sizeof(g));
    g.type = static_cast<uint32_t>(CtrlType::kEagerGrant);
    g.n = add_grants(c, &g, 0);
    send_ctrl(c, g);
  }
}

// The peer's grants of its bounce slots (wire.h, kEagerGrant).
void UcclRDMAEngine::take_grants(Conn* c, const RecvBuf* g, uint32_t n) {
  TxFlow& tx = c->tx;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t k = static_cast<uint32_t>(g[i].tag);
    if (g[i].tag < 0 || k >= kEagerSlots || g[i].size < sizeof(EagerHdr) ||
        g[i].size > kMaxEagerSlotBytes || (tx.eager_free & (1u << k))) {
      ++protocol_errors_;
      fail_conn(c, ProtocolError("malformed eager grant from peer"));
      return;
    }
    tx.eager_slots[k] = EagerSlotTx{g[i].addr, g[i].rkey};
    tx.eager_free |= 1u << k;
    tx.eager_peer_bytes = static_cast<uint32_t>(g[i].size - sizeof(EagerHdr));
  }
  match_sends(c, clock_->now_ns());  // a waiting send may go now
}

}  // namespace uccl::engine
