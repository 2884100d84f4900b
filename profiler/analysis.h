// Where each collective's time went, computed from a communicator's events
// at finalize: the summary text and the numbers the trace's slices carry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/events.h"

namespace uccl::profiler {

// A proxy step's time by state (NCCL's recordEventState transitions), ns:
// each state lasts until the next transition or the step's stop.
struct StepTimes {
  uint64_t gpu_wait = 0;     // send: the GPU had not filled the buffer
  uint64_t peer_wait = 0;    // send: the receiver had not granted space
  uint64_t network = 0;      // posted to the net plugin, not yet done
  uint64_t flush = 0;        // receive: flushing into GPU memory
  uint64_t gpu_consume = 0;  // receive: done, the GPU had not taken it
  uint64_t proxy = 0;        // started, before its first state
  void add(const StepTimes& o);
  uint64_t total() const {
    return gpu_wait + peer_wait + network + flush + gpu_consume + proxy;
  }
};
StepTimes step_times(const Event& step, uint64_t end_ns);
// "GPU wait", "network", ... for a proxy step's state, "idle", "sleep", ...
// for the proxy thread's; nullptr for any other number.
const char* state_label(int state);

struct ChannelReport {
  int channel = 0;
  int steps = 0;
  uint64_t bytes = 0;
  uint32_t retransmits = 0;
  StepTimes t;
};

// One Coll or P2p event and everything under it.
struct CollReport {
  int32_t index = -1;     // the Coll/P2p event
  uint64_t start_ns = 0;  // its start
  uint64_t end_ns = 0;    // the last stop among it and its descendants
  uint64_t api_ns = 0;    // its API call (CollApi/P2pApi parent), if seen
  uint64_t bytes = 0;     // count x the datatype's size
  uint32_t retransmits = 0;
  bool unfinished = false;  // something under it never stopped
  std::vector<ChannelReport> channels;
  std::vector<int32_t> slowest;  // ProxyStep events, slowest first
};

// Counts the trace's metadata and the summary's header report.
struct PoolStats {
  uint64_t events = 0, dropped = 0, orphans = 0, bad_calls = 0;
  uint64_t foreign_parents = 0;
  uint64_t unknown_types = 0, unfinished = 0;
  uint64_t by_kind[static_cast<int>(Kind::kCount)] = {};
  uint64_t net_uccl = 0, net_socket = 0, net_other = 0;
  uint64_t net_updated = 0, net_under_step = 0, net_retransmits = 0;
};

struct Analysis {
  PoolStats stats;
  std::vector<CollReport> colls;  // in start order
  // Per event: the Coll/P2p it belongs to (-1: none), for the trace.
  std::vector<int32_t> owner;
  // Per ProxyStep event: its NetPlugin child (the last one), else -1.
  std::vector<int32_t> net_child;
  uint64_t end_ns = 0;  // finalize time: the stop of what never stopped
};

Analysis analyze(const EventPool& pool, uint64_t end_ns, int slowest);
// Bytes per element of NCCL's datatype name ("ncclFloat32", "float", ...).
size_t datatype_bytes(const char* name);
// The summary text of one communicator (see docs/nccl-profiler.md).
std::string summary_text(const EventPool& pool, const Analysis& a,
                         const std::string& header);

}  // namespace uccl::profiler
