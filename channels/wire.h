// What two channel proxies send each other: the descriptor they swap out
// of band before add_channel, and over their p2p connection a 32-byte
// header, then a put's payload. The one place these layouts live.
#pragma once

#include <cstdint>

#include "uccl/p2p.h"

namespace uccl::channels {

enum class MsgKind : uint8_t {
  kPut = 1,       // payload to dst_mem + dst_off; kSignalAfter may follow it
  kSignal = 2,    // raise semaphore `sem` once earlier puts have landed
                  // (kAfterLanded: once the writes its mark covers have)
  kFlush = 3,     // answer kFlushAck(ticket) once earlier puts have landed
  kFlushAck = 4,  // the sender's flush `ticket` is complete
};

constexpr uint8_t kSignalAfter = 1;  // flags: a put's last piece signals
// flags of a kSignal: a p2p::WriteMark of the writer's notifying writes so
// far follows the header (bytes_or_ticket: its size); raise the semaphore
// once they have all landed here (p2p::Endpoint::landed), not at once.
constexpr uint8_t kAfterLanded = 2;
constexpr uint32_t kMsgMagic = 0x43484e31;  // "CHN1"

struct MsgHdr {
  uint32_t magic;
  MsgKind kind;
  uint8_t flags;
  uint16_t reserved;  // 0 (a channel is its connection)
  uint32_t dst_mem;
  uint32_t sem;
  uint64_t dst_off;
  // A put's payload bytes, a flush's ticket, the size of a kAfterLanded
  // signal's mark.
  uint64_t bytes_or_ticket;
};
static_assert(sizeof(MsgHdr) == 32, "the header is 32 bytes on the wire");

// ChannelProxy::descriptor(): a DescHead, then one DescMem per registered
// memory, in id order.
constexpr uint32_t kDescMagic = 0x55434832;  // "UCH2"
struct DescHead {
  uint32_t magic;
  uint32_t num_semaphores;  // per channel, on the describing side
  uint32_t count;           // DescMem entries that follow
  uint32_t reserved;        // 0
};
static_assert(sizeof(DescHead) == 16, "the descriptor head is 16 bytes");

constexpr uint32_t kMemWritable = 1;  // flags: `region` may be written
struct DescMem {
  uint64_t len;
  uint32_t flags;     // kMemWritable, or 0 (reached by messages only)
  uint32_t reserved;  // 0
  // Host memory: the p2p region the peer's one-sided writes land in
  // (p2p::RegionDesc::to_bytes); zeros otherwise.
  uint8_t region[p2p::kRegionDescBytes];
};
static_assert(sizeof(DescMem) == 16 + p2p::kRegionDescBytes,
              "a memory entry is its length, flags and region, unpadded");

}  // namespace uccl::channels
