// Per-connection state inside an engine: the transmit flow (matching,
// chunking, SACK/RTO reliability, CC) and the receive flow (slots, chunk
// accounting in CSN order, ACK coalescing). All fixed-size; no allocation
// on the datapath.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cc/cc.h"
#include "cc/path_selector.h"
#include "cc/scoreboard.h"
#include "engine/imm.h"
#include "engine/rx_window.h"
#include "engine/stats.h"
#include "engine/wire.h"
#include "transport/nic.h"
#include "uccl/types.h"

namespace uccl::engine {

constexpr uint32_t kMaxPendingSends = 256;  // posted sends not yet matched
constexpr uint32_t kMaxTxMsgs = 512;        // matched, being transmitted
constexpr uint32_t kDescRing = 64;          // peer's receive descriptors
constexpr uint32_t kChunkRing = kMaxChunksInFlight;
// Eager bounce slots each receiver keeps per connection (wire.h).
constexpr uint32_t kEagerSlots = 16;
static_assert(kEagerSlots <= Imm::kSlots, "an eager slot index fits imm.slot");
static_assert(kEagerSlots <= 32, "slot sets are 32-bit masks");
constexpr uint32_t kMaxEagerBytes = 64 << 10;  // payload, UCCL_EAGER_BYTES
constexpr uint32_t kMaxEagerSlotBytes = kMaxEagerBytes + 64;
static_assert((kChunkRing & (kChunkRing - 1)) == 0, "power of two");
static_assert(kDescRing >= static_cast<uint32_t>(kMaxRequestsPerFlow),
              "room for every receive the peer may post");

// Extended CSN comparisons (32-bit serial arithmetic).
inline bool csn_lt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}

struct PendingSend {
  Request* req;
  uint64_t addr;
  uint64_t len;
  uint32_t lkey;
  int32_t tag;
  uint64_t post_ns;  // when the engine took the send
  bool waited;       // no posted receive matched it when it was taken
};

// A peer receive (descriptor) waiting for our sends.
struct Desc {
  uint32_t slot;
  uint32_t n;
  uint32_t used_mask;  // buffers already matched
  RecvBuf bufs[kMaxRecvsPerRequest];
};

struct TxMsg {
  Request* req;  // nullptr: engine-internal (serving a peer's read)
  // Eager: one chunk into bounce slot `slot`; done once acked and paid
  // (a descriptor's buffer was assigned to it).
  bool eager;
  bool paid;
  // Inline: the whole message in control SEND number `ctrl_seq` (wire.h);
  // done when that SEND completes.
  bool is_inline;
  uint32_t ctrl_seq;
  int32_t tag;
  uint64_t addr;  // local source
  uint64_t len;
  uint32_t lkey;
  uint64_t raddr;  // remote destination
  uint32_t rkey;
  uint8_t slot, buf;
  bool onesided;
  bool notify;  // one-sided: its last chunk says so (the peer counts it)
  bool trunc;   // send to a too-small buffer: one empty chunk
  bool done;
  uint64_t rsize;         // size of the receive buffer it was matched to
  uint64_t next_off;      // bytes cut into chunks so far
  uint32_t chunks_sent;   // distinct chunks cut so far
  uint32_t chunks_total;  // valid once all_chunked
  uint32_t chunks_acked;
  bool all_chunked;
  uint64_t post_ns;
  uint32_t retx_chunks;  // resends of its chunks (RequestCc)
  // Resends of its chunks still inside the NIC. A resend reads the
  // application's buffer when the NIC sends it, which may be after the
  // first copy's ACK: the message completes (the buffer goes back to the
  // application, which may deregister or free it) once none is left.
  uint32_t resends_in_nic;
  uint64_t paths_mask;  // bit p: a chunk went on path p
};

// What a chunk carries (its recovery state is in TxFlow::sb).
struct ChunkRec {
  uint32_t msg;  // TxMsg counter (index = msg % kMaxTxMsgs)
  uint32_t len;
  uint64_t off;
  bool last;
  // From its first post to the end of the NIC round it left alone in, which
  // its delay sample leaves out (UcclRDMAEngine::time_lone_chunk); 0 else.
  uint32_t send_call_ns;
};

struct PathCc {
  std::unique_ptr<cc::CongestionControl> cc;
  // Pacing: the last send's time and size. The next may leave once the
  // controller's *current* gap for those bytes has passed, so a window that
  // grows (an ACK) shortens a wait that was set when it was small.
  uint64_t last_send_ns = 0;
  uint32_t last_bytes = 0;

  bool paced_ok(uint64_t now) const {
    return last_bytes == 0 ||
           now >= last_send_ns + cc->pacing_gap_ns(last_bytes);
  }
};

// A bounce slot the peer granted us (its kEagerGrant).
struct EagerSlotTx {
  uint64_t addr;
  uint32_t rkey;
};

struct TxFlow {
  PendingSend pending[kMaxPendingSends];
  // Eager: the peer's granted slots (bit i: slot i free for us), their
  // address and key, its payload limit (0: no grant seen), the headers
  // we send (registered, one per slot) and eager sends owed a buffer, in
  // send order (TxMsg counters).
  EagerSlotTx eager_slots[kEagerSlots] = {};
  uint32_t eager_free = 0;
  // Slots whose last message is not acknowledged yet: not reused before
  // (a resend must not carry a newer message's header).
  uint32_t eager_busy = 0;
  uint32_t eager_peer_bytes = 0;
  EagerHdr eager_hdr[kEagerSlots] = {};
  std::unique_ptr<transport::MemoryRegion> eager_hdr_mr;
  uint32_t owed[kEagerSlots];
  uint32_t owed_n = 0;
  uint32_t pend_head = 0, pend_tail = 0;
  Desc descs[kDescRing];
  uint32_t desc_head = 0, desc_tail = 0;
  TxMsg msgs[kMaxTxMsgs];
  uint32_t msg_head = 0;   // oldest not completed
  uint32_t msg_chunk = 0;  // next to cut into chunks
  uint32_t msg_tail = 0;
  ChunkRec chunks[kChunkRing];
  // Loss recovery (UC mode; RC uses its sequence numbers and pipe only):
  // SACK, RACK, F-RTO, tail loss probes and RTO, the same code the
  // simulator runs (cc/scoreboard.h).
  std::unique_ptr<cc::Scoreboard> sb;
  // Congestion control: one entry per flow, or one per path.
  std::vector<PathCc> ccs;
  std::unique_ptr<cc::PathSelector> paths;
  uint64_t max_inflight = 0;
  // The engine's bytes sent and not yet acknowledged over all its flows
  // (its window, EngineConfig::window_bytes): a chunk counts from its first
  // transmission to its ACK, resends or not, since a chunk declared lost
  // may still sit in the peer's buffer.
  uint64_t* engine_unacked = nullptr;
  // cc=credit: the receiver's cumulative grant last seen, when it last grew
  // or we last asked for it (probe_credit), and how often we asked.
  uint64_t credit_seen = 0;
  uint64_t credit_news_ns = 0;
  uint64_t credit_probes = 0;
  // Statistics.
  Histogram rtt;
  uint64_t last_rtt_ns = 0;  // the latest sample (RequestCc)
  uint32_t hops = 0;         // routers to the peer, from its latest ACK
  uint64_t tx_bytes = 0, tx_chunks = 0, acks_rx = 0;
  // Sends matched with a receive descriptor; those that had to wait for one
  // (receiver-driven: the peer had not posted yet) and the total wait.
  uint64_t sends_matched = 0, sends_waited = 0, send_wait_ns = 0;
  uint64_t sends_eager = 0;         // sent eagerly (no descriptor yet)
  uint64_t sends_inline = 0;        // sent whole in a control SEND
  uint32_t inline_outstanding = 0;  // of those, not yet completed

  bool has_unacked() const { return sb->has_unacked(); }
  ChunkRec& chunk(uint32_t csn) { return chunks[csn & (kChunkRing - 1)]; }
  TxMsg& msg(uint32_t i) { return msgs[i % kMaxTxMsgs]; }
};

struct RxBuf {
  uint64_t addr;
  uint64_t size;
  uint64_t received;
  int32_t tag;
  bool claimed;  // a message (its first chunk, or an eager one) took it
  bool done;
  bool trunc;
};

struct RxSlot {
  bool active = false;
  Request* req = nullptr;
  int n = 0;
  int done = 0;
  bool is_read = false;   // a read_async waiting for the peer's data
  uint64_t post_seq = 0;  // posting order (eager messages take the oldest)
  RxBuf bufs[kMaxRecvsPerRequest];

  // The first buffer of `tag` no message took yet, or -1.
  int free_buf(int32_t tag) const {
    for (int b = 0; b < n; ++b) {
      if (!bufs[b].claimed && bufs[b].tag == tag) return b;
    }
    return -1;
  }
};

// One of our bounce slots: granted to the peer, or holding an eager message
// (tag, payload bytes) until a receive takes it (RxFlow::held lists those).
struct EagerSlotRx {
  bool granted;
  int32_t tag;
  uint32_t len;
};

struct RxFlow {
  RxSlot slots[kMaxRequestsPerFlow];
  // Receive windows, one per (slot, buffer), made on first use.
  std::unique_ptr<transport::MemoryWindow> windows[kMaxRequestsPerFlow]
                                                  [kMaxRecvsPerRequest];
  // Arrivals in CSN order, duplicates, and when to ACK with what.
  RxWindow win;
  uint64_t next_post_seq = 0;
  // Eager bounce slots (kEagerSlots x slot_bytes, registered; empty when
  // eager is off), a window per slot, slots freed but not yet granted
  // again (bit mask), and held messages in CSN order.
  std::unique_ptr<uint8_t[]> eager_mem;
  uint32_t eager_slot_bytes = 0;  // header + payload
  std::unique_ptr<transport::MemoryRegion> eager_mr;
  std::unique_ptr<transport::MemoryWindow> eager_windows[kEagerSlots];
  uint32_t eager_rkeys[kEagerSlots] = {};
  EagerSlotRx eager[kEagerSlots] = {};
  uint32_t grant_pending = 0;
  uint8_t held[kEagerSlots];
  uint32_t held_n = 0;
  // cc=credit: granted so far (cumulative) and the value last sent in an ACK.
  uint64_t credit_granted = 0;
  uint64_t credit_acked = 0;
  bool demand_started = false;  // cc=credit: first demand is speculative
  // Statistics.
  uint64_t acks_tx = 0;
  // Eager messages received, and those that arrived before their receive.
  uint64_t eager_rx = 0, eager_held = 0;
  uint64_t inline_rx = 0;  // inline messages received (wire.h)

  uint8_t* eager_slot(uint32_t k) const {
    return eager_mem.get() + size_t{k} * eager_slot_bytes;
  }
};

}  // namespace uccl::engine
