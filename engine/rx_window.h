// The receiver's chunk window for one connection: CSNs in, duplicates and
// holes found, chunks handed on in CSN order, and when to ACK with what.
//
// Pure state (time passed in, no I/O, no allocation), so the engine's
// receive path (engine_rx.cc) and its single-threaded tests
// (tests/engine/rx_window_test.cc) run the same code. An immediate carries
// the low Imm::kCsnBits of a chunk's CSN; the window extends it against
// its cumulative point, which is why a sender keeps at most
// kMaxChunksInFlight (half the CSN space) unacknowledged.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/imm.h"
#include "engine/wire.h"

namespace uccl::engine {

// What a chunk's immediate and completion said about it.
struct RxChunkInfo {
  bool valid;
  bool last, trunc, onesided, eager;
  uint8_t slot, buf;
  uint32_t len;
};

class RxWindow {
 public:
  static constexpr uint32_t kRing = kMaxChunksInFlight;
  static_assert((kRing & (kRing - 1)) == 0, "power of two");

  // ACK coalescing: an ACK after `ack_every` new chunks, or once the first
  // unacknowledged one has waited `ack_delay_ns`; at once for a hole or a
  // duplicate, and in the loop that completed a message.
  void configure(uint32_t ack_every, uint64_t ack_delay_ns) {
    ack_every_ = ack_every;
    ack_delay_ns_ = ack_delay_ns;
  }

  // A chunk whose immediate carried `imm_csn`, arrived at `arrival_ns`
  // (the NIC's timestamp, else now): false for a duplicate (held already,
  // or behind the cumulative point; counted, and an ACK is due so a
  // sender whose ACK was lost learns), true with its extended CSN in
  // *csn. A chunk past a hole asks for an ACK at once. Either way the
  // chunk becomes the ACK's trigger: after a lost ACK, the next one names
  // the resend that drew it (which the sender does not time, by Karn's
  // rule), not a chunk that arrived an RTO ago, whose time here would read
  // as that much receiver delay and RTT.
  // `busy_from_ns` (>= arrival_ns): when the engine, idle until then, got
  // to it; the time between is reported apart (AckPacket::not_queued_ns),
  // and so is the time from `now`, when the engine took it, to the ACK.
  bool arrive(uint32_t imm_csn, const RxChunkInfo& info, uint64_t arrival_ns,
              uint64_t now, uint32_t* csn, uint64_t busy_from_ns = 0) {
    *csn = extend(imm_csn);
    if (holds(imm_csn)) return duplicate(*csn, arrival_ns, now, busy_from_ns);
    RxChunkInfo& slot = at(*csn);
    const uint32_t delta = *csn - rcv_cum_;
    slot = info;
    slot.valid = true;
    rx_bytes_ += info.len;
    ++rx_chunks_;
    if (delta != 0) ack_now_ = true;  // a hole: tell the sender now
    if (unacked_++ == 0) first_unacked_ns_ = now;
    set_trigger(*csn, arrival_ns, now, busy_from_ns);
    return true;
  }

  // The full CSN of `imm_csn`: within half the CSN space after the
  // cumulative point, else behind it.
  uint32_t extend(uint32_t imm_csn) const {
    const uint32_t delta = (imm_csn - rcv_cum_) & (Imm::kCsnSpace - 1);
    if (delta < kMaxChunksInFlight) return rcv_cum_ + delta;
    return rcv_cum_ - ((rcv_cum_ - imm_csn) & (Imm::kCsnSpace - 1));
  }
  // Whether the chunk whose immediate carried `imm_csn` is here already:
  // held, or behind the cumulative point (handed on). A copy of it must not
  // be placed again: once the sender's request completed on the ACK, the
  // bytes may have been rewritten (the engine's transport::RxGuard asks
  // this before the NIC places a fragment).
  bool holds(uint32_t imm_csn) const {
    const uint32_t delta = (imm_csn - rcv_cum_) & (Imm::kCsnSpace - 1);
    return delta >= kMaxChunksInFlight || at(rcv_cum_ + delta).valid;
  }
  // As holds(), for a chunk whose whole CSN is known (the software NIC
  // carries it beside the immediate, SendWr::guard_tag). It also tells what
  // the immediate's bits cannot: a copy from kMaxChunksInFlight or more
  // chunks back, whose wrapped CSN falls inside the window (holds() would
  // take it for a new chunk, place it on bytes since rewritten, and mark
  // that new chunk's place, so the real one is then refused as its copy),
  // and a CSN beyond any the sender may have in flight.
  bool holds_csn(uint32_t csn) const {
    return csn - rcv_cum_ >= kMaxChunksInFlight || at(csn).valid;
  }
  // A copy the NIC refused because holds() or holds_csn() said so: counted
  // and answered as a duplicate that arrived (an ACK at once, naming `csn`,
  // the whole CSN), so a sender whose ACK was lost still learns.
  void refused(uint32_t csn, uint64_t now) { duplicate(csn, now, now, now); }

  // The next chunk in CSN order, if it has arrived (the cumulative point
  // moves over it).
  bool next_in_order(RxChunkInfo* out) {
    RxChunkInfo& slot = at(rcv_cum_);
    if (!slot.valid) return false;
    *out = slot;
    slot.valid = false;
    ++rcv_cum_;
    return true;
  }

  // A message completed: ACK in this loop (its sender completes with it).
  void message_done() { ack_due_ = true; }

  // Right after an arrival: a hole or duplicate, or ack_every chunks.
  bool ack_at_once() const { return ack_now_ || unacked_ >= ack_every_; }
  // At the loop's pass or a timer: whether an ACK should go now (`force`:
  // asked for by the peer; `new_credit`: the ACK carries fresh credit).
  bool should_ack(uint64_t now, bool force, bool new_credit) const {
    const bool due = ack_now_ || ack_due_;
    if (unacked_ == 0 && !due && !new_credit && !force) return false;
    return force || due || new_credit || unacked_ >= ack_every_ ||
           now - first_unacked_ns_ >= ack_delay_ns_;
  }
  // The ACK's window fields: the cumulative point, the SACK bitmap of the
  // kSackWords * 64 CSNs after it (bit i: cum + 1 + i held), the chunk
  // that triggered it and how long it waited here.
  void fill_ack(AckPacket* a, uint64_t now) const {
    a->cum_ack = rcv_cum_;
    a->trigger_csn = trigger_csn_;
    std::memset(a->sack, 0, sizeof(a->sack));
    for (int i = 0; i < kSackWords * 64; ++i) {
      if (at(rcv_cum_ + 1 + i).valid) a->sack[i / 64] |= 1ull << (i % 64);
    }
    a->rx_delay_ns = now > trigger_arrival_ns_ ? now - trigger_arrival_ns_ : 0;
    const uint64_t since_taken =
        now > trigger_taken_ns_ ? now - trigger_taken_ns_ : 0;
    a->not_queued_ns = static_cast<uint32_t>(std::min<uint64_t>(
        {trigger_idle_ns_ + since_taken, a->rx_delay_ns, UINT32_MAX}));
  }
  void ack_sent() {
    unacked_ = 0;
    ack_now_ = false;
    ack_due_ = false;
  }

  // Nothing to acknowledge.
  bool quiet() const { return unacked_ == 0 && !ack_now_ && !ack_due_; }
  uint32_t rcv_cum() const { return rcv_cum_; }
  uint64_t rx_bytes() const { return rx_bytes_; }
  uint64_t rx_chunks() const { return rx_chunks_; }
  uint64_t duplicates() const { return duplicates_; }

 private:
  bool duplicate(uint32_t csn, uint64_t arrival_ns, uint64_t now,
                 uint64_t busy_from_ns) {
    ++duplicates_;
    ack_now_ = true;
    set_trigger(csn, arrival_ns, now, busy_from_ns);
    return false;
  }
  void set_trigger(uint32_t csn, uint64_t arrival_ns, uint64_t now,
                   uint64_t busy_from_ns) {
    trigger_csn_ = csn;
    trigger_arrival_ns_ = arrival_ns < now ? arrival_ns : now;
    trigger_taken_ns_ = now;
    const uint64_t busy = busy_from_ns < now ? busy_from_ns : now;
    trigger_idle_ns_ =
        busy > trigger_arrival_ns_ ? busy - trigger_arrival_ns_ : 0;
  }
  RxChunkInfo& at(uint32_t csn) { return ring_[csn & (kRing - 1)]; }
  const RxChunkInfo& at(uint32_t csn) const { return ring_[csn & (kRing - 1)]; }

  RxChunkInfo ring_[kRing] = {};
  uint32_t rcv_cum_ = 0;  // every CSN below has arrived and been handed on
  uint32_t ack_every_ = 4;
  uint64_t ack_delay_ns_ = 20000;
  uint32_t unacked_ = 0;
  uint64_t first_unacked_ns_ = 0;
  uint32_t trigger_csn_ = 0;
  uint64_t trigger_arrival_ns_ = 0;
  uint64_t trigger_idle_ns_ = 0;
  uint64_t trigger_taken_ns_ = 0;  // when the engine took the trigger
  bool ack_now_ = false;           // a hole or a duplicate: ACK at once
  bool ack_due_ = false;           // a message completed: ACK in this loop
  uint64_t rx_bytes_ = 0, rx_chunks_ = 0, duplicates_ = 0;
};

}  // namespace uccl::engine
