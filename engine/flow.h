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
#include "cc/recovery.h"
#include "engine/imm.h"
#include "engine/stats.h"
#include "engine/wire.h"
#include "transport/nic.h"
#include "uccl/endpoint.h"

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
constexpr uint32_t kRetxRing = kChunkRing;
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
  int32_t tag;
  uint64_t addr;  // local source
  uint64_t len;
  uint32_t lkey;
  uint64_t raddr;  // remote destination
  uint32_t rkey;
  uint8_t slot, buf;
  bool onesided;
  bool trunc;  // send to a too-small buffer: one empty chunk
  bool done;
  uint64_t rsize;         // size of the receive buffer it was matched to
  uint64_t next_off;      // bytes cut into chunks so far
  uint32_t chunks_sent;   // distinct chunks cut so far
  uint32_t chunks_total;  // valid once all_chunked
  uint32_t chunks_acked;
  bool all_chunked;
  uint64_t post_ns;
};

struct ChunkRec {
  uint32_t msg;  // TxMsg counter (index = msg % kMaxTxMsgs)
  uint32_t len;
  uint64_t off;
  uint64_t first_tx_ns;
  uint64_t last_tx_ns;
  uint16_t path;
  uint8_t retx;  // retransmissions so far
  bool acked;
  bool sacked;
  bool last;
  bool queued_retx;
  bool rtt_sampled;
  // Counted in the flow's (and its path's) bytes in flight. A chunk declared
  // lost leaves the pipe (RFC 6675 "pipe") until it is sent again, so
  // retransmissions obey the window like new data.
  bool in_pipe;
};

struct PathCc {
  std::unique_ptr<cc::CongestionControl> cc;
  uint64_t inflight = 0;
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
  uint32_t snd_una = 0;  // oldest unacknowledged CSN
  uint32_t snd_nxt = 0;  // next new CSN
  uint32_t retx[kRetxRing];
  uint32_t retx_head = 0, retx_tail = 0;
  // Congestion control: one entry per flow, or one per path.
  std::vector<PathCc> ccs;
  std::unique_ptr<cc::PathSelector> paths;
  // Reliability (UC mode).
  uint32_t dupacks = 0;
  cc::RtoEstimator rto{1000000, 100000000, 5000000};  // set per config
  cc::RttSampler rto_samples;  // feeds `rto` a round trip's largest RTT
  uint32_t rto_backoff = 0;
  // Resend chunk urgent_csn now, past window and pacing: the RTO's resend of
  // snd_una, or a tail loss probe (one chunk each, as TCP's loss window).
  bool rto_urgent = false;
  uint32_t urgent_csn = 0;
  bool tlp_sent = false;  // a tail loss probe is out (until progress)
  // F-RTO (RFC 5682): a first timeout resends only snd_una and waits for
  // the next ACK. One that shows a chunk sent before the timeout (and
  // never resent) delivered proves the timeout spurious (the peer or its
  // host was slow, nothing was lost): backoff and the RTO estimate are
  // corrected (Eifel) and nothing else is resent. Otherwise the loss is
  // real and recovery goes on as after any timeout.
  bool frto = false;
  uint64_t frto_ns = 0;   // when the timeout fired
  uint32_t frto_csn = 0;  // the chunk it resent
  // RACK's reordering window multiplier (RFC 8985 6.2): +1 per spurious
  // retransmission, back to 1 after 16 loss recoveries without one.
  uint32_t reo_wnd_mult = 1;
  uint32_t reo_wnd_persist = 0;
  uint64_t last_progress_ns = 0;
  // RACK (RFC 8985) per path: send time and RTT of the most recently sent
  // chunk delivered on each path (a UC QP keeps order, so a later chunk
  // delivered on the same path is evidence of loss; other paths' chunks
  // are not), and the minimum RTT for the reordering window.
  std::vector<uint64_t> rack_tx_ns, rack_rtt_ns;
  // The CSN of each of those chunks: an engine loop stamps every chunk it
  // sends with one clock reading, so the CSN orders chunks sent in one loop
  // (cc::rack_sent_before).
  std::vector<uint32_t> rack_csn;
  uint64_t min_rtt_ns = 0;
  uint32_t high_sacked = 0;  // one past the highest SACKed CSN
  uint64_t last_ack_ns = 0;
  uint64_t inflight = 0;
  uint64_t max_inflight = 0;
  // The engine's bytes sent and not yet acknowledged over all its flows
  // (its window, EngineConfig::window_bytes): a chunk counts from its first
  // transmission to its ACK, resends or not, since a chunk declared lost
  // may still sit in the peer's buffer.
  uint64_t* engine_unacked = nullptr;
  // cc=credit: the receiver's cumulative grant last seen, and bytes declared
  // lost whose resend the receiver has not been asked to pull yet.
  uint64_t credit_seen = 0;
  uint64_t pull_bytes = 0;
  // Statistics.
  Histogram rtt;
  uint64_t tx_bytes = 0, tx_chunks = 0;
  uint64_t fast_retx = 0, rto_retx = 0, tlp_retx = 0, rtos = 0, acks_rx = 0;
  // Timeouts that proved spurious, and retransmissions the original copy
  // of which was delivered (their ACK came back sooner than an RTT after
  // the resend could).
  uint64_t spurious_rtos = 0, spurious_retx = 0;
  // Sends matched with a receive descriptor; those that had to wait for one
  // (receiver-driven: the peer had not posted yet) and the total wait.
  uint64_t sends_matched = 0, sends_waited = 0, send_wait_ns = 0;
  uint64_t sends_eager = 0;  // sent eagerly (no descriptor yet)

  bool has_unacked() const { return snd_una != snd_nxt; }
  uint32_t outstanding() const { return snd_nxt - snd_una; }
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

struct RxChunkInfo {
  bool valid;
  bool last, trunc, onesided, eager;
  uint8_t slot, buf;
  uint32_t len;
};

struct RxFlow {
  RxSlot slots[kMaxRequestsPerFlow];
  // Receive windows, one per (slot, buffer), made on first use.
  std::unique_ptr<transport::MemoryWindow> windows[kMaxRequestsPerFlow]
                                                  [kMaxRecvsPerRequest];
  uint32_t rcv_cum = 0;  // every CSN below has arrived and been accounted
  RxChunkInfo ring[kChunkRing] = {};
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
  // ACK coalescing.
  uint32_t unacked = 0;
  uint64_t first_unacked_ns = 0;
  uint32_t trigger_csn = 0;
  uint64_t trigger_arrival_ns = 0;
  bool ack_now = false;  // a hole (ACK at once) or a duplicate (this loop)
  bool ack_due = false;  // a message completed: ACK in this loop
  // cc=credit: granted so far (cumulative) and the value last sent in an ACK.
  uint64_t credit_granted = 0;
  uint64_t credit_acked = 0;
  bool demand_started = false;  // cc=credit: first demand is speculative
  // Statistics.
  uint64_t rx_bytes = 0, rx_chunks = 0, duplicates = 0, acks_tx = 0;
  // Eager messages received, and those that arrived before their receive.
  uint64_t eager_rx = 0, eager_held = 0;

  RxChunkInfo& at(uint32_t csn) { return ring[csn & (kChunkRing - 1)]; }
  uint8_t* eager_slot(uint32_t k) const {
    return eager_mem.get() + size_t{k} * eager_slot_bytes;
  }
};

}  // namespace uccl::engine
