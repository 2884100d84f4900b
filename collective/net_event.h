// The NetPlugin profiler event the UCCL net plugin emits per message (net
// type UCCL, version 1): its layout, shared with profiler/, which decodes it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uccl::ncclabi {

// A NetPlugin event's id: bits 16-31 the net type, 0-15 its version. NCCL
// defines IB (1) and Socket (2); UCCL takes 0x55 ('U'), far from both.
constexpr int64_t kNetTypeUccl = int64_t{0x55} << 16;
constexpr int64_t kNetUcclVersion = 1;
constexpr int64_t kNetTypeMask = int64_t{0xffff} << 16;
constexpr uint8_t kUcclNetMessage = 1;

// One isend or irecv. The plugin passes it at the event's start (op,
// connection, bytes posted) and again, filled in, in an Update just before
// the Stop: bytes moved, status, and what the engines saw of the
// message's connections (uccl::RequestCc added up over its parts).
// Profilers copy it; it is not valid after the callback returns.
struct UcclNetEventV1 {
  uint8_t type;          // kUcclNetMessage
  uint8_t op;            // 0 send, 1 receive
  uint16_t parts;        // UCCL connections (stripes) the message went over
  uint32_t conn;         // the first connection's id (low 32 bits)
  uint64_t bytes;        // start: posted (receive: buffer size); update: moved
  uint32_t done;         // 1 in the update
  int32_t status;        // update: 0 ok, else the ncclResult_t test() returns
  uint32_t retransmits;  // chunks of this message sent again (sends)
  uint32_t paths;        // paths (QPs) its chunks took, over its parts
  uint64_t rtt_ns;       // its connections' latest RTT sample, slowest
  uint64_t cwnd_bytes;   // their windows then, added up (0: unlimited)
  uint64_t rate_bps;     // their pacing rates then, added up
};
static_assert(sizeof(UcclNetEventV1) == 56, "UcclNetEventV1");
static_assert(offsetof(UcclNetEventV1, bytes) == 8, "UcclNetEventV1");
static_assert(offsetof(UcclNetEventV1, retransmits) == 24, "UcclNetEventV1");
static_assert(offsetof(UcclNetEventV1, rtt_ns) == 32, "UcclNetEventV1");
static_assert(offsetof(UcclNetEventV1, rate_bps) == 48, "UcclNetEventV1");

}  // namespace uccl::ncclabi
