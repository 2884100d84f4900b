// The profiler's knobs (UCCL_PROFILER_*) and the registry of live
// communicators that event handles are checked against.
#include "profiler/comm.h"

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "profiler/knobs.h"

namespace uccl::profiler {

bool parse_mask(const std::string& text, uint64_t* mask) {
  static const struct {
    const char* name;
    uint64_t bit;
  } kNames[] = {{"group", abi::kGroup},
                {"coll", abi::kColl},
                {"p2p", abi::kP2p},
                {"proxyop", abi::kProxyOp},
                {"proxystep", abi::kProxyStep},
                {"proxyctrl", abi::kProxyCtrl},
                {"kernelch", abi::kKernelCh},
                {"net", abi::kNetPlugin},
                {"groupapi", abi::kGroupApi},
                {"collapi", abi::kCollApi},
                {"p2papi", abi::kP2pApi},
                {"kernellaunch", abi::kKernelLaunch}};
  if (text == "all") {
    *mask = abi::kAllV5Types;
    return true;
  }
  if (!text.empty() && text[0] >= '0' && text[0] <= '9') {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if (end == nullptr || *end != '\0' || v > abi::kAllV5Types) return false;
    *mask = v;
    return true;
  }
  uint64_t m = 0;
  std::string list = text, item;
  for (char& ch : list) ch = ch == '|' ? ',' : ch;
  std::stringstream ss(list);
  while (std::getline(ss, item, ',')) {
    bool found = false;
    for (const auto& n : kNames) {
      if (item == n.name) {
        m |= n.bit;
        found = true;
      }
    }
    if (!found) return false;
  }
  if (m == 0) return false;
  *mask = m;
  return true;
}

ProfilerConfig ProfilerConfig::from_knobs() {
  ProfilerConfig c;
  // A knob that did not parse or is out of range: the first one refuses.
  for (const KnobInfo& i : {knob_mask().info(), knob_dir().info(),
                            knob_events().info(), knob_slowest().info()}) {
    if (!i.error.empty() && c.error.empty()) c.error = i.name + ": " + i.error;
  }
  if (!parse_mask(knob_mask().get(), &c.mask) && c.error.empty()) {
    c.error = "UCCL_PROFILER_MASK: '" + knob_mask().get() +
              "' is not all, a number up to 0xfff, or event names "
              "(coll,proxystep,net,...)";
  }
  c.dir = knob_dir().get();
  if (c.dir.empty() && c.error.empty()) c.error = "UCCL_PROFILER_DIR: empty";
  c.events = static_cast<size_t>(knob_events().get());
  c.slowest = static_cast<int>(knob_slowest().get());
  return c;
}

namespace {
std::atomic<Comm*> g_comms[kMaxComms];
std::atomic<int> g_high{0};  // slots in use are below this
std::atomic<uint64_t> g_stray{0};
}  // namespace

bool register_comm(Comm* c) {
  for (int i = 0; i < kMaxComms; ++i) {
    Comm* expect = nullptr;
    if (g_comms[i].compare_exchange_strong(expect, c)) {
      int h = g_high.load();
      while (h < i + 1 && !g_high.compare_exchange_weak(h, i + 1)) {
      }
      return true;
    }
  }
  return false;
}

void unregister_comm(Comm* c) {
  for (auto& slot : g_comms) {
    Comm* expect = c;
    if (slot.compare_exchange_strong(expect, nullptr)) return;
  }
}

bool is_registered(const Comm* c) {
  if (c == nullptr) return false;
  const int n = g_high.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (g_comms[i].load(std::memory_order_acquire) == c) return true;
  }
  return false;
}

Comm* find_event(void* handle, Event** e) {
  *e = nullptr;
  if (handle == nullptr) return nullptr;
  const int n = g_high.load(std::memory_order_acquire);
  for (int k = 0; k < n; ++k) {
    Comm* c = g_comms[k].load(std::memory_order_acquire);
    if (c == nullptr) continue;
    const int32_t i = c->pool.index_of(handle);
    if (i >= 0) {
      *e = &c->pool.at(static_cast<size_t>(i));
      return c;
    }
  }
  return nullptr;
}

uint64_t stray_calls() { return g_stray.load(); }
void count_stray_call() { g_stray.fetch_add(1, std::memory_order_relaxed); }

}  // namespace uccl::profiler
