// What two channel proxies send each other over their p2p connection: a
// 32-byte header, then a put's payload. The one place this layout lives.
#pragma once

#include <cstdint>

namespace uccl::channels {

enum class MsgKind : uint8_t {
  kPut = 1,       // payload to dst_mem + dst_off; kSignalAfter may follow it
  kSignal = 2,    // raise semaphore `sem` once earlier puts have landed
  kFlush = 3,     // answer kFlushAck(ticket) once earlier puts have landed
  kFlushAck = 4,  // the sender's flush `ticket` is complete
};

constexpr uint8_t kSignalAfter = 1;         // flags: a put's last piece signals
constexpr uint32_t kMsgMagic = 0x43484e31;  // "CHN1"

struct MsgHdr {
  uint32_t magic;
  MsgKind kind;
  uint8_t flags;
  uint16_t reserved;  // 0 (a channel is its connection)
  uint32_t dst_mem;
  uint32_t sem;
  uint64_t dst_off;
  uint64_t bytes_or_ticket;  // a put's payload bytes, a flush's ticket
};
static_assert(sizeof(MsgHdr) == 32, "the header is 32 bytes on the wire");

}  // namespace uccl::channels
