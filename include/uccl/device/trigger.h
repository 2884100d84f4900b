// The trigger: the fixed 32-byte command a GPU thread pushes into a channel's
// FIFO for the host proxy (put, signal, flush). Its one layout is here.
//
// Four little-endian 64-bit words:
//
//   w[0]  bits  0-7   op (TriggerOp, never 0)
//         bits  8-23  channel id (the channel table's index at the proxy)
//         bits 24-31  0
//         bits 32-62  arg: signal's semaphore id (31 bits)
//   w[1]  bits  0-47  bytes of a put (kMaxPutBytes at most)
//         bits 48-62  0
//   w[2]  bits  0-47  source offset in the source memory
//         bits 48-62  source memory id (the sender's registration table)
//   w[3]  bits  0-47  destination offset in the destination memory
//         bits 48-62  destination memory id (the peer's, as exchanged)
//   bit 63 of every word: 0 in an encoded trigger; in the ring, the slot's
//         phase, which tells the consumer that word has arrived
//         (device/fifo.h), so the words may arrive in any order.
//
// Compiled as CUDA device code and as host C++ (the proxy decodes with the
// same functions; CPU producers in the tests encode with them).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define UCCL_HD __host__ __device__ __forceinline__
#else
#define UCCL_HD inline
#endif

namespace uccl::device {

enum class TriggerOp : uint8_t {
  kNone = 0,  // an empty slot
  kPut = 1,
  kSignal = 2,
  kPutWithSignal = 3,
  kFlush = 4,
};

constexpr uint64_t kOffsetBits = 48;
constexpr uint64_t kOffsetMask = (uint64_t{1} << kOffsetBits) - 1;
constexpr uint64_t kMaxPutBytes = kOffsetMask;
constexpr uint32_t kMaxChannels = 1u << 16;
constexpr uint32_t kMaxMemIds = 1u << 15;
constexpr uint32_t kMaxArg = (1u << 31) - 1;
constexpr uint64_t kPhaseBit = uint64_t{1} << 63;

struct alignas(32) Trigger {
  uint64_t w[4];
};
static_assert(sizeof(Trigger) == 32, "a trigger is 32 bytes");
static_assert(alignof(Trigger) == 32, "a trigger never straddles a line");

// A trigger's fields, decoded.
struct TriggerFields {
  TriggerOp op;
  uint32_t channel;
  uint32_t arg;
  uint64_t bytes;
  uint32_t src_mem, dst_mem;
  uint64_t src_off, dst_off;
};

UCCL_HD Trigger encode_trigger(TriggerOp op, uint32_t channel, uint32_t arg,
                               uint64_t bytes, uint32_t src_mem,
                               uint64_t src_off, uint32_t dst_mem,
                               uint64_t dst_off) {
  Trigger t;
  t.w[0] = static_cast<uint64_t>(op) |
           (static_cast<uint64_t>(channel & 0xffff) << 8) |
           (static_cast<uint64_t>(arg & kMaxArg) << 32);
  t.w[1] = bytes & kOffsetMask;
  t.w[2] = (src_off & kOffsetMask) |
           (static_cast<uint64_t>(src_mem & (kMaxMemIds - 1)) << kOffsetBits);
  t.w[3] = (dst_off & kOffsetMask) |
           (static_cast<uint64_t>(dst_mem & (kMaxMemIds - 1)) << kOffsetBits);
  return t;
}

UCCL_HD TriggerFields decode_trigger(const Trigger& t) {
  TriggerFields f;
  f.op = static_cast<TriggerOp>(t.w[0] & 0xff);
  f.channel = static_cast<uint32_t>((t.w[0] >> 8) & 0xffff);
  f.arg = static_cast<uint32_t>(t.w[0] >> 32) & kMaxArg;
  f.bytes = t.w[1] & kOffsetMask;
  f.src_off = t.w[2] & kOffsetMask;
  f.src_mem = static_cast<uint32_t>(t.w[2] >> kOffsetBits) & (kMaxMemIds - 1);
  f.dst_off = t.w[3] & kOffsetMask;
  f.dst_mem = static_cast<uint32_t>(t.w[3] >> kOffsetBits) & (kMaxMemIds - 1);
  return f;
}

// Whether a decoded trigger is well-formed: a known op, reserved bits 0,
// and every field within its width (encode_trigger masks; a forged or torn
// trigger may not be).
UCCL_HD bool trigger_well_formed(const Trigger& t) {
  const uint64_t op = t.w[0] & 0xff;
  if (op == 0 || op > static_cast<uint64_t>(TriggerOp::kFlush)) return false;
  if ((t.w[0] >> 24) & 0xff) return false;
  for (int k = 0; k < 4; ++k) {
    if (t.w[k] & kPhaseBit) return false;
  }
  return (t.w[1] >> kOffsetBits) == 0;
}

}  // namespace uccl::device
