// The channel proxy's per-channel state (send pipeline, receive ring) and
// the CPU stand-in's memory; shared by proxy.cc and proxy_rx.cc only.
#pragma once

#include <mutex>
#include <vector>

#include "channels/proxy.h"

namespace uccl::channels {

// One operation taken from the FIFO, waiting its turn to be sent.
struct ChannelProxy::Op {
  MsgKind kind;
  uint8_t flags;  // kSignalAfter for a put with signal
  uint32_t sem;
  uint32_t dst_mem;
  uint64_t dst_off;
  const uint8_t* src;  // a put's source
  bool src_host;       // in host memory: staged by memcpy
  bool write;          // goes as a one-sided write from src_mr
  p2p::MrId src_mr;
  uint64_t bytes;     // a put's length; kFlush/kFlushAck: the ticket
  uint64_t done = 0;  // put bytes staged so far
};

// Fixed-capacity ring (the loop allocates nothing).
template <typename T>
class Ring {
 public:
  explicit Ring(size_t cap = 0) : v_(cap) {}
  bool full() const { return tail_ - head_ == v_.size(); }
  bool empty() const { return tail_ == head_; }
  size_t size() const { return tail_ - head_; }
  T& front() { return v_[head_ % v_.size()]; }
  T& at(size_t i) { return v_[(head_ + i) % v_.size()]; }
  void push(const T& x) { v_[tail_++ % v_.size()] = x; }
  void pop() { ++head_; }

 private:
  std::vector<T> v_;
  size_t head_ = 0, tail_ = 0;
};

// A send buffer on its way: staged (copy running), posted, then reaped.
struct Piece {
  int buf;
  uint64_t copy;  // copy token; 0: no copy (header only)
  bool copying;
  size_t len;  // header + payload
  p2p::XferHandle send;
  bool posted;
};

// A receive buffer, in posting order (messages land in that order).
struct RxBuf {
  p2p::XferHandle recv;
  bool landed;   // its message is in (the receive is spent)
  bool copying;  // its put's copy into the destination is running
  bool copied;   // and has finished
  bool held;     // its signal waits for the writes it follows (counted once)
  uint64_t copy;
};

struct ChannelProxy::Channel {
  uint32_t id = 0;
  p2p::ConnHandle conn = 0;
  std::vector<uint64_t> peer_mem_len;
  // Per peer memory: writable (host memory it advertised), and where.
  std::vector<uint8_t> peer_writable;
  std::vector<p2p::RegionDesc> peer_regions;
  uint32_t peer_semaphores = 0;
  // Host-mapped: ChannelShared, then the semaphores.
  void* block = nullptr;
  device::ChannelShared* shared = nullptr;
  uint64_t* sems = nullptr;
  // Send side: ops in FIFO order, the pieces staged from them in order.
  Ring<Op> ops;
  Ring<Piece> pieces;
  // One-sided writes in flight, oldest first: a signal or flush goes out
  // only once none is left.
  Ring<p2p::XferHandle> writes;
  std::vector<int> free_bufs;
  uint8_t* tx = nullptr;
  p2p::MrId tx_mr = 0;
  // Receive side: buffers posted in order; `rx_next` the oldest.
  std::vector<RxBuf> rx_bufs;
  size_t rx_next = 0;
  uint8_t* rx = nullptr;
  p2p::MrId rx_mr = 0;
  size_t buf_bytes = 0;  // header + piece
  // Stopping: a channel that queued anything ends with a flush of its own
  // (ticket drain_ticket), so the close that follows loses nothing.
  bool sent_any = false;
  bool drain_queued = false;
  uint64_t drain_ticket = 0;
  // What failed it (read by channel_status from other threads).
  mutable std::mutex mu;
  Status error;
  bool failed = false;
};

// The CPU stand-in's "device": host memory, copies done at once.
class HostMemory : public p2p::DeviceMemory {
 public:
  bool is_device(const void*, size_t) override { return false; }
  Result<void*> alloc_host(size_t len) override;
  void free_host(void* p) override;
  Result<uint64_t> copy_async(void* dst, const void* src, size_t len) override;
  Result<bool> copy_done(uint64_t) override { return true; }
};

}  // namespace uccl::channels
