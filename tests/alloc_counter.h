// Counts heap allocations made on the hot threads (the engines, and a test
// thread inside a CountingScope), with the first few call stacks kept.
//
// Include in exactly one source file of a test binary: it replaces the
// global operator new. Engine threads are told by their name ("uccl-eng-*",
// set first thing in UcclRDMAEngine::run()), read per allocation with
// prctl, so no state is cached before the name exists. The stacks are
// captured with backtrace(), warmed up once at start, into static storage:
// the counter itself never allocates.
#pragma once

#include <execinfo.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace uccl::testing::alloc {

constexpr int kStacks = 4;
constexpr int kFrames = 24;

struct State {
  std::atomic<bool> armed{false};
  std::atomic<uint64_t> count{0};
  std::atomic<int> stacks_taken{0};
  void* frames[kStacks][kFrames];
  int depth[kStacks];
};

inline State& state() {
  static State s;
  return s;
}

inline thread_local bool t_counting = false;

inline bool hot_thread() {
  if (t_counting) return true;
  char name[16] = {};
  if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0) return false;
  return std::strncmp(name, "uccl-eng-", 9) == 0;
}

inline void note_allocation() {
  State& s = state();
  if (!s.armed.load(std::memory_order_relaxed) || !hot_thread()) return;
  s.count.fetch_add(1, std::memory_order_relaxed);
  const int k = s.stacks_taken.fetch_add(1, std::memory_order_relaxed);
  if (k < kStacks) s.depth[k] = backtrace(s.frames[k], kFrames);
}

// Starts counting from zero (allocations on the hot threads only).
inline void arm() {
  State& s = state();
  void* warm[2];
  (void)backtrace(warm, 2);  // loads the unwinder now, not inside new
  s.count.store(0);
  s.stacks_taken.store(0);
  s.armed.store(true);
}

// Stops counting; returns the allocations seen since arm().
inline uint64_t disarm() {
  State& s = state();
  s.armed.store(false);
  return s.count.load();
}

// The call stacks of the first allocations counted, symbolized (for the
// failure message; call after disarm()).
inline std::string stacks() {
  State& s = state();
  std::string out;
  const int n = std::min(s.stacks_taken.load(), kStacks);
  for (int k = 0; k < n; ++k) {
    out += "allocation " + std::to_string(k + 1) + ":\n";
    char** syms = backtrace_symbols(s.frames[k], s.depth[k]);
    for (int i = 0; syms != nullptr && i < s.depth[k]; ++i) {
      out += "  ";
      out += syms[i];
      out += "\n";
    }
    std::free(syms);
  }
  return out;
}

// Counts this thread's allocations too while it lives.
class CountingScope {
 public:
  CountingScope() { t_counting = true; }
  ~CountingScope() { t_counting = false; }
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
