// App-thread -> engine commands and the bounded lock-free queue that carries
// them. Completions go back through the Request objects, not a queue.
#pragma once

#include <boost/lockfree/queue.hpp>
#include <cstdint>

#include "transport/nic.h"
#include "uccl/endpoint.h"

namespace uccl::engine {

struct ConnSetup;
struct Query;

enum class CmdType : uint8_t {
  kSend,         // two-sided send
  kRecv,         // (grouped) receive
  kWrite,        // one-sided write into a peer region
  kRead,         // one-sided read: the peer sends a region into our buffer
  kCreateConn,   // bootstrap: create the connection's QPs
  kConnectConn,  // bootstrap: connect them to the peer's
  kCloseConn,    // app closed the connection
  kQuery,        // fill a statistics snapshot (Query*)
};

struct CmdBuf {
  uint64_t addr;
  uint64_t size;
  const transport::MemoryRegion* mr;  // this engine's registration
  int32_t tag;
  uint32_t pad;
};

// Trivially copyable (Boost.Lockfree requirement); ~300 bytes.
struct Command {
  CmdType type;
  uint8_t n;  // kRecv: buffers
  uint16_t pad;
  uint32_t conn;  // connection index in the engine
  Request* req;
  ConnSetup* setup;  // kCreateConn / kConnectConn
  Query* query;      // kQuery
  // kSend / kWrite / kRead: local buffer.
  uint64_t addr;
  uint64_t len;
  uint32_t lkey;
  int32_t tag;
  const transport::MemoryRegion* mr;
  // kWrite / kRead: the peer's region.
  uint64_t remote_addr;
  uint32_t remote_key;  // kWrite: rkey; kRead: region id on the peer
  uint32_t pad2;
  CmdBuf bufs[kMaxRecvsPerRequest];  // kRecv
};

constexpr size_t kCommandQueueDepth = 4096;
using CommandQueue =
    boost::lockfree::queue<Command, boost::lockfree::fixed_sized<true>,
                           boost::lockfree::capacity<kCommandQueueDepth>>;

}  // namespace uccl::engine
