// The 32-bit immediate carried by every data chunk (RDMA_WRITE_WITH_IMM):
// flow id, chunk sequence number, request slot, buffer, flags. One layout,
// checked by static_asserts; the limits it implies are enforced elsewhere.
#pragma once

#include <cstdint>

#include "uccl/types.h"

namespace uccl::engine {

// bits 31..22  flow    receiver's flow id (10 bits: 1024 flows per engine)
// bits 21..11  csn     chunk sequence number mod 2048 (11 bits)
// bits 10..6   slot    receiver request slot (5 bits: 32 per flow)
// bits  5..3   buf     buffer within a grouped receive (3 bits: 8)
// bit   2      last    last chunk of a message; one-sided: last chunk of a
//                      write the receiver counts (write_async's notify)
// bit   1      trunc   message did not fit: the receive fails (0 bytes)
// bit   0      oneside one-sided WRITE chunk: acknowledge, no message
// bits 1..0 both set (no message is both truncated and one-sided): an eager
// message, one chunk into the receiver's bounce slot `slot` (wire.h,
// EagerHdr); `buf` is 0 and `last` is set.
struct Imm {
  static constexpr int kFlowBits = 10, kCsnBits = 11, kSlotBits = 5,
                       kBufBits = 3;
  static constexpr int kFlowShift = 22, kCsnShift = 11, kSlotShift = 6,
                       kBufShift = 3;
  static constexpr uint32_t kLast = 1u << 2, kTrunc = 1u << 1,
                            kOneSided = 1u << 0;
  static constexpr uint32_t kMaxFlows = 1u << kFlowBits;
  static constexpr uint32_t kCsnSpace = 1u << kCsnBits;
  static constexpr uint32_t kSlots = 1u << kSlotBits;
  static constexpr uint32_t kBufs = 1u << kBufBits;

  static constexpr uint32_t kEager = kTrunc | kOneSided;

  uint32_t flow = 0, csn = 0, slot = 0, buf = 0;
  bool last = false, trunc = false, onesided = false;
  bool eager = false;  // encoded as trunc | onesided; excludes both

  uint32_t encode() const {
    return (flow << kFlowShift) | ((csn & (kCsnSpace - 1)) << kCsnShift) |
           (slot << kSlotShift) | (buf << kBufShift) | (last ? kLast : 0) |
           (eager ? kEager : (trunc ? kTrunc : 0) | (onesided ? kOneSided : 0));
  }
  static Imm decode(uint32_t v) {
    Imm i;
    i.flow = v >> kFlowShift;
    i.csn = (v >> kCsnShift) & (kCsnSpace - 1);
    i.slot = (v >> kSlotShift) & (kSlots - 1);
    i.buf = (v >> kBufShift) & (kBufs - 1);
    i.last = v & kLast;
    i.eager = (v & kEager) == kEager;
    i.trunc = !i.eager && (v & kTrunc);
    i.onesided = !i.eager && (v & kOneSided);
    return i;
  }
};

static_assert(Imm::kFlowBits + Imm::kCsnBits + Imm::kSlotBits + Imm::kBufBits +
                      3 ==
                  32,
              "immediate layout fills 32 bits");
static_assert(Imm::kFlowShift == Imm::kCsnShift + Imm::kCsnBits, "layout");
static_assert(Imm::kCsnShift == Imm::kSlotShift + Imm::kSlotBits, "layout");
static_assert(Imm::kSlotShift == Imm::kBufShift + Imm::kBufBits, "layout");
static_assert(Imm::kSlots == static_cast<uint32_t>(kMaxRequestsPerFlow),
              "one slot per outstanding receive");
static_assert(Imm::kBufs == static_cast<uint32_t>(kMaxRecvsPerRequest),
              "one buffer index per grouped receive");

// At most this many chunks unacknowledged per flow: half the CSN space, so
// the receiver can tell a new CSN from a late duplicate.
constexpr uint32_t kMaxChunksInFlight = Imm::kCsnSpace / 2;
static_assert(kMaxChunksInFlight * 2 == Imm::kCsnSpace, "window vs CSN space");

}  // namespace uccl::engine
