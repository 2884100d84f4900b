// libFuzzer target: the engine's wire formats a peer controls (engine/wire.h
// and engine/imm.h): a control SEND split into messages, each message's
// checks, an eager chunk's header, the 32-bit immediate, and the bounds an
// ACK's SACK bitmap is walked within.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/imm.h"
#include "engine/wire.h"

using namespace uccl;
using namespace uccl::engine;

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // an invariant the parsers promise broke
}

// What on_ctrl_batch() does with a SEND's bytes: every message taken lies
// inside the SEND, and one that passes ctrl_msg_problem() names at most
// kMaxRecvsPerRequest buffers and a valid slot (an inline message: a
// buffer index below that, and a payload that fits its record and the
// SEND).
void ctrl_batch(const uint8_t* p, uint32_t len) {
  uint32_t off = 0;
  while (off < len) {
    CtrlMsg m;
    const uint32_t used = parse_ctrl_msg(p + off, len - off, &m);
    if (used == 0) return;  // the connection fails here
    check(used >= offsetof(CtrlMsg, bufs) && used <= len - off);
    check(ctrl_entries(m) <= static_cast<uint64_t>(kMaxRecvsPerRequest));
    if (ctrl_msg_problem(m) == nullptr) {
      const auto t = static_cast<CtrlType>(m.type);
      if (t == CtrlType::kInline) {
        check(m.n < static_cast<uint32_t>(kMaxRecvsPerRequest));
        check(m.slot < Imm::kSlots && m.read_len <= kMaxInlineBytes);
        check(kCtrlHeaderBytes + m.read_len <= used);
      } else if (t != CtrlType::kAckReq && t != CtrlType::kPullReq) {
        check(m.n >= 1 && m.n <= static_cast<uint32_t>(kMaxRecvsPerRequest));
        check(m.slot < Imm::kSlots);
      }
    }
    off += used;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A control SEND is at most kCtrlBatchBytes (the receiver's buffer).
  ctrl_batch(data, static_cast<uint32_t>(
                       size < kCtrlBatchBytes ? size : kCtrlBatchBytes));
  if (size >= sizeof(EagerHdr) + 8) {
    EagerHdr h;
    std::memcpy(&h, data, sizeof(h));
    uint32_t len, slot_bytes;
    std::memcpy(&len, data + sizeof(h), 4);
    std::memcpy(&slot_bytes, data + sizeof(h) + 4, 4);
    if (eager_chunk_ok(h, len, slot_bytes)) {
      check(h.len + sizeof(EagerHdr) == len && len <= slot_bytes);
    }
  }
  if (size >= 4) {
    uint32_t v;
    std::memcpy(&v, data, 4);
    const Imm i = Imm::decode(v);
    check(i.flow < Imm::kMaxFlows && i.csn < Imm::kCsnSpace &&
          i.slot < Imm::kSlots && i.buf < Imm::kBufs);
    check(!(i.eager && (i.trunc || i.onesided)));
    // Every 32-bit value is the encoding of what it decodes to.
    check(i.encode() == v);
  }
  if (size >= sizeof(AckPacket)) {
    // The SACK walk of on_ack(): every bit names a CSN within kSackWords x
    // 64 of cum_ack, which the sender then bounds by snd_nxt.
    AckPacket a;
    std::memcpy(&a, data, sizeof(a));
    for (int w = 0; w < kSackWords; ++w) {
      uint64_t bits = a.sack[w];
      while (bits) {
        const uint32_t off = w * 64 + __builtin_ctzll(bits);
        bits &= bits - 1;
        check(off < static_cast<uint32_t>(kSackWords) * 64);
      }
    }
  }
  return 0;
}
