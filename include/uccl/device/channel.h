// A channel as a kernel holds it (by value): put, signal and flush push
// triggers into the proxy's FIFO; wait spins on a local semaphore.
//
// Semantics (the proxy, channels/proxy.h, makes them true):
//  - put(dst_mem, dst_off, src_mem, src_off, bytes): copies bytes from this
//    side's registered memory src_mem to the peer's dst_mem, asynchronously.
//  - signal(sem): raises the peer's semaphore `sem` of this channel by one
//    once every put this channel's FIFO took before it has landed in the
//    peer's memory (FIFO order is claim order: a thread's own puts always
//    precede its signal; other threads' puts need their own ordering).
//    A signal orders nothing else the thread did: it is published without
//    a fence (fifo.h, step 3). A signal that tells the peer it may now
//    overwrite memory this kernel has read needs those reads ordered
//    first (__threadfence_system() before it).
//  - wait(sem, value): spins until this side's semaphore `sem` >= value.
//  - flush(): returns once every put taken before it is in the peer's
//    memory.
// Any call may run on any thread, many warps at once. Errors are returned,
// never spun on: kChannelFailed (the proxy recorded an error for this
// channel: a bad memory id or range, a dead peer; read it from the host),
// kChannelTimedOut (wait or flush past the channel's timeout).
#pragma once

#include <cstdint>

#include "uccl/device/fifo.h"

namespace uccl::device {

enum ChannelStatus : int {
  kChannelOk = 0,
  kChannelFailed = -1,
  kChannelTimedOut = -2,
};

// Host-mapped words the proxy writes for one channel.
struct ChannelShared {
  alignas(64) uint64_t flushed;  // FIFO ticket + 1 of its newest flush done
  alignas(64) uint32_t error;    // the proxy's ChannelError, sticky
};

struct ChannelHandle {
  FifoHandle fifo;
  uint32_t id;  // this channel at the local proxy
  uint32_t num_semaphores;
  uint64_t* semaphores;  // host-mapped, raised by the peer's signals
  ChannelShared* shared;
  uint64_t timeout_ns;  // wait and flush give up after this
};

namespace channel_detail {

UCCL_HD uint64_t load_acquire(const uint64_t* p) {
  return fifo_detail::load_acquire_sys(p);
}

UCCL_HD uint32_t load_error(const ChannelShared* s) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const volatile uint32_t*>(&s->error);
#else
  return __atomic_load_n(&s->error, __ATOMIC_ACQUIRE);
#endif
}

// Spins until *p >= value, the channel fails or the timeout passes.
UCCL_HD int spin_until(const ChannelHandle& c, const uint64_t* p,
                       uint64_t value) {
  const uint64_t start = fifo_detail::now_ns();
  for (uint32_t i = 0;; ++i) {
    if (load_acquire(p) >= value) return kChannelOk;
    if ((i & 63) == 63) {
      if (load_error(c.shared) != 0) return kChannelFailed;
      if (fifo_detail::now_ns() - start > c.timeout_ns) {
        return kChannelTimedOut;
      }
      fifo_detail::relax();
    }
  }
}

// Puts name data this thread (or those it synchronized with) wrote, so
// they publish with a release; signals and flushes name none.
UCCL_HD int push(const ChannelHandle& c, const Trigger& t, Publish order) {
  return fifo_push(c.fifo, t, order) >= 0 ? kChannelOk : kChannelFailed;
}

}  // namespace channel_detail

UCCL_HD int channel_put(const ChannelHandle& c, uint32_t dst_mem,
                        uint64_t dst_off, uint32_t src_mem, uint64_t src_off,
                        uint64_t bytes) {
  return channel_detail::push(
      c,
      encode_trigger(TriggerOp::kPut, c.id, 0, bytes, src_mem, src_off, dst_mem,
                     dst_off),
      Publish::kRelease);
}

UCCL_HD int channel_signal(const ChannelHandle& c, uint32_t sem) {
  return channel_detail::push(
      c, encode_trigger(TriggerOp::kSignal, c.id, sem, 0, 0, 0, 0, 0),
      Publish::kRelaxed);
}

UCCL_HD int channel_put_with_signal(const ChannelHandle& c, uint32_t dst_mem,
                                    uint64_t dst_off, uint32_t src_mem,
                                    uint64_t src_off, uint64_t bytes,
                                    uint32_t sem) {
  return channel_detail::push(
      c,
      encode_trigger(TriggerOp::kPutWithSignal, c.id, sem, bytes, src_mem,
                     src_off, dst_mem, dst_off),
      Publish::kRelease);
}

UCCL_HD int channel_wait(const ChannelHandle& c, uint32_t sem, uint64_t value) {
  if (sem >= c.num_semaphores) return kChannelFailed;
  return channel_detail::spin_until(c, &c.semaphores[sem], value);
}

UCCL_HD int channel_flush(const ChannelHandle& c) {
  const int64_t ticket = fifo_push(
      c.fifo, encode_trigger(TriggerOp::kFlush, c.id, 0, 0, 0, 0, 0, 0),
      Publish::kRelaxed);
  if (ticket < 0) return kChannelFailed;
  return channel_detail::spin_until(c, &c.shared->flushed,
                                    static_cast<uint64_t>(ticket) + 1);
}

}  // namespace uccl::device
