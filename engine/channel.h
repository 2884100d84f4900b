// App-thread -> engine commands and the bounded lock-free ring that carries
// them. Completions go back through the Request objects, not a queue.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "transport/nic.h"
#include "uccl/types.h"

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

// Trivially copyable. A send's fields come first: with the ring slot's
// sequence word they fill one cache line, so handing a send to the engine
// moves one line between the cores (kRecv's buffers follow, copied only up
// to `n`).
struct Command {
  CmdType type;
  uint8_t n;  // kRecv: buffers
  uint16_t pad;
  uint32_t conn;  // connection index in the engine
  Request* req;
  // kSend / kWrite / kRead: local buffer.
  uint64_t addr;
  uint64_t len;
  uint32_t lkey;
  int32_t tag;  // kSend: the message's tag; kWrite: 1 = notify, else 0
  const transport::MemoryRegion* mr;
  ConnSetup* setup;  // kCreateConn / kConnectConn
  Query* query;      // kQuery
  // kWrite / kRead: the peer's region.
  uint64_t remote_addr;
  uint32_t remote_key;  // kWrite: rkey; kRead: region id on the peer
  uint32_t pad2;
  CmdBuf bufs[kMaxRecvsPerRequest];  // kRecv
};
static_assert(std::is_trivially_copyable<Command>::value,
              "commands are copied as bytes");
static_assert(offsetof(Command, tag) + sizeof(int32_t) <= 56,
              "a send's fields share the slot's first cache line");
static_assert(offsetof(Command, bufs) % 8 == 0, "CmdBuf alignment");

// Bytes of `c` that mean something: the fixed part, plus kRecv's buffers.
inline size_t command_bytes(const Command& c) {
  size_t n = offsetof(Command, bufs);
  if (c.type == CmdType::kRecv) {
    const size_t k = c.n < kMaxRecvsPerRequest ? c.n : kMaxRecvsPerRequest;
    n += k * sizeof(CmdBuf);
  }
  return n;
}

// Bounded multi-producer, single-consumer ring of Commands (per-slot
// sequence numbers, as in D. Vyukov's bounded MPMC queue, with the consumer
// side reduced to one thread). Producers: any app thread, the bootstrap
// thread. Consumer: the engine thread (and stop(), after it has joined).
//
// Why not boost::lockfree::queue: its push and pop each take a node from
// or return it to a shared free list and CAS the queue's head or tail, and
// pop copies the whole ~340-byte value out, so one hand-off moved several
// contended cache lines between the two cores. Here a producer claims a
// slot with one CAS on `tail_` (a line only producers write), writes the
// command's meaningful bytes and publishes them with the slot's sequence
// word; the engine reads the command in place and frees the slot with one
// store. No allocation, no lock; a full ring makes try_push return false.
template <size_t kDepth>
class CommandRing {
  static_assert(kDepth >= 2 && (kDepth & (kDepth - 1)) == 0,
                "depth is a power of two");

 public:
  CommandRing() : slots_(new Slot[kDepth]) {
    for (size_t i = 0; i < kDepth; ++i) {
      slots_[i].seq.store(i, std::memory_order_relaxed);
    }
  }
  CommandRing(const CommandRing&) = delete;
  CommandRing& operator=(const CommandRing&) = delete;

  // Thread-safe. False when the ring is full (the command is not queued).
  bool try_push(const Command& c) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& s = slots_[pos & (kDepth - 1)];
      const uint64_t seq = s.seq.load(std::memory_order_acquire);
      const int64_t dif = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
      if (dif == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1,
                                        std::memory_order_relaxed)) {
          std::memcpy(static_cast<void*>(&s.cmd), &c, command_bytes(c));
          s.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
        // pos now holds the current tail: try that slot.
      } else if (dif < 0) {
        return false;  // the slot still holds a command kDepth behind: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);  // another producer won
      }
    }
  }

  // Consumer only. The oldest command, or nullptr when none is published
  // yet. It stays valid (and its slot taken) until pop().
  const Command* front() const {
    const Slot& s = slots_[head_ & (kDepth - 1)];
    if (s.seq.load(std::memory_order_acquire) != head_ + 1) return nullptr;
    return &s.cmd;
  }
  // Consumer only, after front() returned a command: frees its slot.
  void pop() {
    slots_[head_ & (kDepth - 1)].seq.store(head_ + kDepth,
                                           std::memory_order_release);
    ++head_;
  }
  // Consumer only: front() copied out and popped; false when empty.
  bool pop(Command* out) {
    const Command* c = front();
    if (c == nullptr) return false;
    std::memcpy(static_cast<void*>(out), c, command_bytes(*c));
    pop();
    return true;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq;  // pos + 1: published; pos + kDepth: free
    Command cmd;
  };
  alignas(64) std::atomic<uint64_t> tail_{0};  // next position to claim
  alignas(64) uint64_t head_ = 0;              // consumer's next position
  std::unique_ptr<Slot[]> slots_;
};

constexpr size_t kCommandQueueDepth = 4096;
using CommandQueue = CommandRing<kCommandQueueDepth>;

}  // namespace uccl::engine
