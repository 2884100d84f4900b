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
//     order too. The cache only grows, so it may be read while the claim
//     is still in flight (both are GPU-memory round trips; one wait).
//  3. Publish: the four words as relaxed stores (two 16-byte stores, whose
//     8-byte halves each land whole), each carrying the slot's
//     phase in bit 63 (1 on even laps, 0 on odd ones, so the zeroed ring of
//     lap 0 reads as empty). Until this lap's word has arrived, a word
//     still holds the previous lap's value, whose phase differs (step 2:
//     the consumer took it before this producer got room), so the
//     consumer checks each word's phase and needs no order among them, and
//     it never writes the ring (no cache line goes back and forth with the
//     GPU's writes). A trigger naming data the producer wrote (a put) is
//     published with kRelease: a system-scope release fence first on the
//     GPU (release stores of the words on the CPU), so the proxy, which
//     sees the trigger, sees the data. Signals and flushes
//     name none and skip that fence: on an H200 it is 0.5 of a put's
//     0.86 us push (channel_bench --mode rtt).
//  4. Consume (host, one thread, channels/fifo.h): in ticket order, wait
//     until all four words carry the lap's phase, read the trigger,
//     release tail + 1.
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

// How a push orders the producer's earlier writes (see step 3 above).
enum class Publish : uint32_t {
  kRelease,  // earlier writes are visible to whoever sees the trigger
  kRelaxed,  // the trigger names no data the producer wrote
};

// The phase bit (trigger.h's bit 63) every word of `ticket`'s slot carries.
UCCL_HD uint64_t fifo_phase(uint64_t ticket, uint32_t slots) {
  return ((ticket / slots) & 1) != 0 ? 0 : kPhaseBit;
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
// A put's release (step 3): one system-scope fence before the words.
__device__ __forceinline__ void begin_publish(Publish order) {
  if (order == Publish::kRelease)
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}
// Two words in one 16-byte store (one PCIe write); each word carries its
// own phase, so nothing relies on the pair arriving whole. The order was
// made by begin_publish().
__device__ __forceinline__ void store_pair(uint64_t* p, uint64_t a, uint64_t b,
                                           Publish) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a),
               "l"(b)
               : "memory");
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
// On the CPU a put's release rides on the words' stores instead of a
// fence: the consumer's acquire load of any of them then sees the data, at
// no cost on x86, and ThreadSanitizer models release stores where it
// models no fence at all (GCC refuses one under -fsanitize=thread).
inline void begin_publish(Publish) {}
inline void store_pair(uint64_t* p, uint64_t a, uint64_t b, Publish order) {
  const int mo =
      order == Publish::kRelease ? __ATOMIC_RELEASE : __ATOMIC_RELAXED;
  __atomic_store_n(p, a, mo);
  __atomic_store_n(p + 1, b, mo);
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

// Pushes `t` (bit 63 of each word clear: encode_trigger's are). Returns
// its ticket (the order the consumer takes it in), or kPushFailed when the
// FIFO has failed or stayed full past full_timeout_ns (see above).
UCCL_HD int64_t fifo_push(const FifoHandle& f, const Trigger& t,
                          Publish order = Publish::kRelease) {
  namespace d = fifo_detail;
  // Three GPU-memory reads, none waiting for another: the error, the claim
  // and the cached tail (a lower bound of the tail whenever it is read, so
  // the room test stays conservative). A ticket claimed from a failed FIFO
  // is lost with it: the consumer never gets past the failed push's hole.
  const uint32_t error = d::load_error(&f.state->error);
  const uint64_t ticket = d::claim(&f.state->head);
  const uint64_t cached = d::load_cache(&f.state->tail_cache);
  if (error != kFifoOk) return kPushFailed;
  if (ticket >= cached + f.slots && !fifo_wait_room(f, ticket)) {
    return kPushFailed;
  }
  d::begin_publish(order);
  Trigger* s = &f.ring[ticket & (f.slots - 1)];
  const uint64_t phase = fifo_phase(ticket, f.slots);
  d::store_pair(&s->w[0], t.w[0] | phase, t.w[1] | phase, order);
  d::store_pair(&s->w[2], t.w[2] | phase, t.w[3] | phase, order);
  return static_cast<int64_t>(ticket);
}

}  // namespace uccl::device
