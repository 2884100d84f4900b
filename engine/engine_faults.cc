// Engine test hooks (inject_wire_fault): the malformed eager headers,
// descriptors and inline messages a buggy or hostile peer would write.
#include "engine/engine.h"
#include "engine/engine_internal.h"

namespace uccl::engine {

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

// Test hook (inject_wire_fault): spoils a copy of one outgoing descriptor
// (its length on the wire stays that of the original).
void UcclRDMAEngine::damage_descriptor(CtrlMsg* m) {
  switch (
      take_wire_fault(WireFault::kDescNoBuffers, WireFault::kDescUnknownType)) {
    case WireFault::kDescNoBuffers:
      m->n = 0;
      break;
    case WireFault::kDescEntriesWrap:
      m->region = UINT32_MAX;  // n + region: 2^32 or more, not a small count
      break;
    case WireFault::kDescBadSlot:
      m->slot = Imm::kSlots;
      break;
    case WireFault::kDescUnknownType:
      m->type = 99;
      break;
    default:
      break;
  }
}

// Test hook (inject_wire_fault): spoils one inline message's header.
void UcclRDMAEngine::damage_inline(CtrlMsg* h) {
  switch (
      take_wire_fault(WireFault::kInlineBadBuf, WireFault::kInlineOverLength)) {
    case WireFault::kInlineBadBuf:
      h->n = kMaxRecvsPerRequest - 1;
      break;
    case WireFault::kInlineNoRecv:
      h->slot = (h->slot + 1) % Imm::kSlots;
      break;
    case WireFault::kInlineOverLength:
      h->read_len = kMaxInlineBytes + 8;
      break;
    default:
      break;
  }
}

}  // namespace uccl::engine
