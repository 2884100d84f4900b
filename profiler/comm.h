// One profiled communicator (NCCL's profiler context) and the registry that
// tells the profiler's own event handles from anything else passed to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "profiler/abi.h"
#include "profiler/events.h"

namespace uccl::profiler {

// The knobs, read once per process (UCCL_PROFILER_*).
struct ProfilerConfig {
  uint64_t mask = abi::kAllV5Types;  // NCCL event types to activate
  std::string dir = "uccl-profile";  // where traces and summaries go
  size_t events = size_t{1} << 18;   // pool slots per communicator
  int slowest = 5;                   // slowest steps named per collective
  std::string error;                 // a bad setting: init refuses
  static ProfilerConfig from_knobs();
};
// "all", a number (0x... or decimal), or names joined by ',' or '|':
// group, coll, p2p, proxyop, proxystep, proxyctrl, kernelch, net,
// groupapi, collapi, p2papi, kernellaunch. False on anything else.
bool parse_mask(const std::string& text, uint64_t* mask);

struct Comm {
  Comm(const ProfilerConfig& cfg, EventPool::Clock clock)
      : config(cfg), pool(cfg.events, clock) {}
  ProfilerConfig config;
  EventPool pool;
  uint64_t comm_id = 0;
  std::string name;
  int rank = 0, nranks = 0, nnodes = 0;
  abi::Logger logger = nullptr;
};

// Live communicators (at most kMaxComms per process at once): a handle is
// used only if it lies in one of their pools.
constexpr int kMaxComms = 256;
bool register_comm(Comm* c);
void unregister_comm(Comm* c);
bool is_registered(const Comm* c);
// The communicator whose pool holds `handle` and its event, or nullptr.
Comm* find_event(void* handle, Event** e);
// Calls made with handles of no live communicator, NULL contexts etc.
uint64_t stray_calls();
void count_stray_call();

}  // namespace uccl::profiler
