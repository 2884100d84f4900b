// The trigger FIFO's producer side: any GPU thread (or, in the CPU tests,
// any CPU thread) claims a slot, writes its trigger and marks it written.
//
// Memory: the ring and FifoShared are page-locked host memory mapped into
// the GPU (the consumer, a host thread, polls them from its cache);
// FifoState is GPU memory, so the producers' claim atomics stay on the GPU.
//
// Ordering, and why no trigger is lost or taken twice:
//  1. Claim: ticket = fetch_add(head, 1). Tickets are unique and dense, so
//     every slot of every lap has exactly one producer.
//  2. Room: the producer writes slot ticket % slots only once
//     ticket < tail + slots, i.e. the consumer has taken ticket - slots (the
//     slot's previous trigger). It tests its cached tail first (GPU memory,
//     never ahead of the real one, so the test is conservative) and, when
//     the cache says full, one waiting producer at a time reads the
//     consumer's tail (a PCIe read) into the cache. That read is an
//     acquire at system scope, pairing with the consumer's release of the
//     tail, which it makes after reading the slot: those reads happen
//     before this producer's writes. The cache is raised with a release and
//     read with an acquire, so a producer that trusts it inherits that
//     order too.
//  3. Publish: words 1-3, then word 0 with a release store at system scope
//     (PCIe writes of one thread then arrive in order behind it). Word 0
//     carries the op (never 0) and, in bits 24-31, the ticket's lap
//     (ticket / slots, mod 256), so the consumer's acquire load of word 0
//     tells this lap's trigger (whose words 1-3 it then sees) from the
//     previous lap's still in the slot, and the consumer never writes the
//     ring (no cache line goes back and forth with the GPU's writes).
//  4. Consume (host, one thread, channels/fifo.h): in ticket order, wait
//     for the lap's word 0, read the trigger, release tail + 1.
// A producer that finds no room for `full_timeout_ns` (a consumer gone)
// marks the FIFO failed and returns kPushFailed; its claimed slot is never
// written, so every later push fails fast too and the host reads the error
// from FifoShared (a FIFO does not recover; its channel is torn down).
#pragma once

#include <cstdint>

#include "uccl/device/trigger.h"

#if !defined(__CUDA_ARCH__)
#include <sched.h>

#include <ctime>
#endif

namespace uccl::device {

enum FifoError : uint32_t {
  kFifoOk = 0,
  kFifoFullTimedOut = 1,  // a producer found no room for full_timeout_ns
};

// Host-mapped; the consumer writes tail, a failing producer error.
struct FifoShared {
  alignas(64) uint64_t tail;   // slots consumed
  alignas(64) uint32_t error;  // FifoError, sticky
};

// GPU memory (host memory in the CPU tests); the producers' counters.
struct FifoState {
  alignas(64) unsigned long long head;        // slots claimed
  alignas(64) unsigned long long tail_cache;  // newest tail a producer read
  alignas(64) unsigned int error;    // FifoError: later pushes fail fast
  alignas(64) unsigned int polling;  // 1 while a producer reads the tail
};

// What a kernel (or producer thread) holds by value.
struct FifoHandle {
  Trigger* ring;
  FifoShared* shared;
  FifoState* state;
  uint32_t slots;  // a power of two
  uint64_t full_timeout_ns;
};

constexpr int64_t kPushFailed = -1;

// Word 0's lap tag (trigger.h's bits 24-31, 0 in an encoded trigger).
constexpr uint64_t kLapShift = 24;
constexpr uint64_t kLapMask = uint64_t{0xff} << kLapShift;
UCCL_HD uint64_t fifo_lap(uint64_t ticket, uint32_t slots) {
  return (ticket / slots) & 0xff;
}

namespace fifo_detail {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint64_t claim(unsigned long long* head) {
  return atomicAdd(head, 1ull);
}
__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ uint64_t load_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void fence_acquire_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}
__device__ __forceinline__ void store_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v)
               : "memory");
}
__device__ __forceinline__ void store_relaxed(uint64_t* p, uint64_t v) {
  *reinterpret_cast<volatile uint64_t*>(p) = v;
}
// The tail cache passes the consumer's release on to the other producers:
// a release max, read with an acquire (GPU scope: producers share a GPU).
__device__ __forceinline__ void cache_max(unsigned long long* p, uint64_t v) {
  asm volatile("red.release.gpu.global.max.u64 [%0], %1;" ::"l"(p), "l"(v)
               : "memory");
}
__device__ __forceinline__ uint64_t load_cache(const unsigned long long* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ uint32_t load_error(const unsigned int* p) {
  return *reinterpret_cast<const volatile unsigned int*>(p);
}
__device__ __forceinline__ void fail(FifoHandle f) {
  atomicExch(&f.state->error, static_cast<unsigned int>(kFifoFullTimedOut));
  *reinterpret_cast<volatile uint32_t*>(&f.shared->error) = kFifoFullTimedOut;
  __threadfence_system();
}
__device__ __forceinline__ void relax() { __nanosleep(100); }
__device__ __forceinline__ bool try_lock(unsigned int* p) {
  return *reinterpret_cast<volatile unsigned int*>(p) == 0 &&
         atomicCAS(p, 0u, 1u) == 0u;
}
__device__ __forceinline__ void unlock(unsigned int* p) { atomicExch(p, 0u); }
#else
inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}
inline uint64_t claim(unsigned long long* head) {
  return __atomic_fetch_add(head, 1ull, __ATOMIC_RELAXED);
}
inline uint64_t load_acquire_sys(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
inline uint64_t load_relaxed_sys(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
inline void fence_acquire_sys() { __atomic_thread_fence(__ATOMIC_ACQUIRE); }
inline void store_release_sys(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
inline void store_relaxed(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
inline void cache_max(unsigned long long* p, uint64_t v) {
  unsigned long long cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (cur < v && !__atomic_compare_exchange_n(
                        p, &cur, v, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
  }
}
inline uint64_t load_cache(const unsigned long long* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
inline uint32_t load_error(const unsigned int* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
inline void fail(FifoHandle f) {
  __atomic_store_n(&f.state->error, kFifoFullTimedOut, __ATOMIC_RELAXED);
  __atomic_store_n(&f.shared->error, kFifoFullTimedOut, __ATOMIC_RELEASE);
}
// CPU producers share cores with the consumer (the tests): give it the core.
inline void relax() { sched_yield(); }
inline bool try_lock(unsigned int* p) {
  unsigned int zero = 0;
  return __atomic_load_n(p, __ATOMIC_RELAXED) == 0 &&
         __atomic_compare_exchange_n(p, &zero, 1u, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED);
}
inline void unlock(unsigned int* p) {
  __atomic_store_n(p, 0u, __ATOMIC_RELEASE);
}
#endif

}  // namespace fifo_detail

// Waits until ticket `last` has room (the consumer has taken last - slots):
// false when the FIFO failed or stayed full past the timeout.
UCCL_HD bool fifo_wait_room(const FifoHandle& f, uint64_t last) {
  namespace d = fifo_detail;
  if (last < d::load_cache(&f.state->tail_cache) + f.slots) return true;
  const uint64_t start = d::now_ns();
  for (;;) {
    // One waiting producer at a time reads the tail across PCIe (a read per
    // waiter would crowd out the triggers' own writes); the others watch
    // the cache it raises.
    if (d::try_lock(&f.state->polling)) {
      d::cache_max(&f.state->tail_cache, d::load_acquire_sys(&f.shared->tail));
      d::unlock(&f.state->polling);
    }
    if (last < d::load_cache(&f.state->tail_cache) + f.slots) return true;
    if (d::load_error(&f.state->error) != kFifoOk) return false;
    if (d::now_ns() - start > f.full_timeout_ns) {
      d::fail(f);
      return false;
    }
    d::relax();
  }
}

UCCL_HD uint64_t fifo_word0(const Trigger& t, uint64_t ticket, uint32_t slots) {
  return (t.w[0] & ~kLapMask) | (fifo_lap(ticket, slots) << kLapShift);
}

// Pushes `t` (its word 0 must be non-zero: encode_trigger's is). Returns
// its ticket (the order the consumer takes it in), or kPushFailed when the
// FIFO has failed or stayed full past full_timeout_ns (see above).
UCCL_HD int64_t fifo_push(const FifoHandle& f, const Trigger& t) {
  namespace d = fifo_detail;
  if (d::load_error(&f.state->error) != kFifoOk) return kPushFailed;
  const uint64_t ticket = d::claim(&f.state->head);
  if (!fifo_wait_room(f, ticket)) return kPushFailed;
  Trigger* s = &f.ring[ticket & (f.slots - 1)];
  d::store_relaxed(&s->w[1], t.w[1]);
  d::store_relaxed(&s->w[2], t.w[2]);
  d::store_relaxed(&s->w[3], t.w[3]);
  d::store_release_sys(&s->w[0], fifo_word0(t, ticket, f.slots));
  return static_cast<int64_t>(ticket);
}

}  // namespace uccl::device
