// Counts heap allocations made on the hot threads (the engines, and a test
// thread inside a CountingScope) and mutex locks taken on engine threads,
// with the first few call stacks of each kept.
//
// Include in exactly one source file of a test binary: it replaces the
// global operator new and pthread_mutex_lock/trylock (forwarded to the C
// library's). Engine threads are told by their name ("uccl-eng-*", set
// first thing in UcclRDMAEngine::run()), read per call with prctl, so no
// state is cached before the name exists. The stacks are captured with
// backtrace(), warmed up once at start, into static storage: the counter
// itself never allocates or locks.
#pragma once

#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define UCCL_COUNT_LOCKS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define UCCL_COUNT_LOCKS 0
#endif
#endif
#ifndef UCCL_COUNT_LOCKS
#define UCCL_COUNT_LOCKS 1
#endif

namespace uccl::testing::alloc {

// Whether locks() counts anything in this build.
constexpr bool kCountsLocks = UCCL_COUNT_LOCKS;

constexpr int kStacks = 4;
constexpr int kFrames = 24;

struct Events {
  std::atomic<uint64_t> count{0};
  std::atomic<int> stacks_taken{0};
  void* frames[kStacks][kFrames];
  int depth[kStacks];

  void reset() {
    count.store(0);
    stacks_taken.store(0);
  }
  void note() {
    count.fetch_add(1, std::memory_order_relaxed);
    const int k = stacks_taken.fetch_add(1, std::memory_order_relaxed);
    if (k < kStacks) depth[k] = backtrace(frames[k], kFrames);
  }
  std::string stacks(const char* what) {
    std::string out;
    const int n = std::min(stacks_taken.load(), kStacks);
    for (int k = 0; k < n; ++k) {
      out += std::string(what) + " " + std::to_string(k + 1) + ":\n";
      char** syms = backtrace_symbols(frames[k], depth[k]);
      for (int i = 0; syms != nullptr && i < depth[k]; ++i) {
        out += "  ";
        out += syms[i];
        out += "\n";
      }
      std::free(syms);
    }
    return out;
  }
};

struct State {
  std::atomic<bool> armed{false};
  Events allocs, locks;
};

inline State& state() {
  static State s;
  return s;
}

inline thread_local bool t_counting = false;        // its allocations
inline thread_local bool t_counting_locks = false;  // and its locks

inline bool engine_thread() {
  char name[16] = {};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) return false;
  return std::strncmp(name, "uccl-eng-", 9) == 0;
}

inline void note_allocation() {
  State& s = state();
  if (!s.armed.load(std::memory_order_relaxed)) return;
  if (t_counting || engine_thread()) s.allocs.note();
}

// Engine threads, and a test thread whose scope asks for it (the p2p
// layer's API calls lock: it serializes its callers).
inline void note_lock() {
  State& s = state();
  if (s.armed.load(std::memory_order_relaxed) &&
      (t_counting_locks || engine_thread())) {
    s.locks.note();
  }
}

// Starts counting from zero.
inline void arm() {
  State& s = state();
  void* warm[2];
  (void)backtrace(warm, 2);  // loads the unwinder now, not inside new
  s.allocs.reset();
  s.locks.reset();
  s.armed.store(true);
}

// Stops counting; returns the allocations seen since arm().
inline uint64_t disarm() {
  State& s = state();
  s.armed.store(false);
  return s.allocs.count.load();
}

// Mutex locks on engine threads between arm() and disarm().
inline uint64_t locks() { return state().locks.count.load(); }

// The call stacks of the first allocations and locks counted, symbolized
// (for the failure message; call after disarm()).
inline std::string stacks() {
  return state().allocs.stacks("allocation") + state().locks.stacks("lock");
}

// Counts this thread's allocations (and, if asked, its locks) too while it
// lives.
class CountingScope {
 public:
  explicit CountingScope(bool locks_too = false) {
    t_counting = true;
    t_counting_locks = locks_too;
  }
  ~CountingScope() { t_counting = t_counting_locks = false; }
  CountingScope(const CountingScope&) = delete;
  CountingScope& operator=(const CountingScope&) = delete;
};

}  // namespace uccl::testing::alloc

inline void* uccl_counted_alloc(std::size_t n, std::size_t align) {
  uccl::testing::alloc::note_allocation();
  if (n == 0) n = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(n);
  } else if (posix_memalign(&p, align, n) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void* operator new(std::size_t n) {
  return uccl_counted_alloc(n, alignof(std::max_align_t));
}
void* operator new[](std::size_t n) {
  return uccl_counted_alloc(n, alignof(std::max_align_t));
}
void* operator new(std::size_t n, std::align_val_t a) {
  return uccl_counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return uccl_counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return uccl_counted_alloc(n, alignof(std::max_align_t));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return uccl_counted_alloc(n, alignof(std::max_align_t));
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

// The C library's, looked up before main() and again on first use should
// a constructor of another file lock first. Left out under the sanitizers,
// whose runtimes intercept these functions themselves (locks() is then 0).
#if UCCL_COUNT_LOCKS
using MutexFn = int (*)(pthread_mutex_t*);
inline MutexFn g_real_lock = nullptr, g_real_trylock = nullptr;

inline MutexFn uccl_real_mutex_fn(MutexFn* cache, const char* name) {
  MutexFn f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (f == nullptr) {
    f = reinterpret_cast<MutexFn>(dlsym(RTLD_NEXT, name));
    __atomic_store_n(cache, f, __ATOMIC_RELEASE);
  }
  return f;
}

__attribute__((constructor)) inline void uccl_find_real_mutex() {
  uccl_real_mutex_fn(&g_real_lock, "pthread_mutex_lock");
  uccl_real_mutex_fn(&g_real_trylock, "pthread_mutex_trylock");
}

extern "C" int pthread_mutex_lock(pthread_mutex_t* m) {
  uccl::testing::alloc::note_lock();
  return uccl_real_mutex_fn(&g_real_lock, "pthread_mutex_lock")(m);
}
extern "C" int pthread_mutex_trylock(pthread_mutex_t* m) {
  uccl::testing::alloc::note_lock();
  return uccl_real_mutex_fn(&g_real_trylock, "pthread_mutex_trylock")(m);
}
#endif  // UCCL_COUNT_LOCKS
