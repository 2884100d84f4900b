// The profiler's record of one communicator: a fixed pool of events that
// NCCL's start/stop/record calls fill in, without allocating or locking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "profiler/abi.h"

namespace uccl::profiler {

enum class Kind : uint8_t {
  kGroupApi,
  kCollApi,
  kP2pApi,
  kKernelLaunch,
  kGroup,
  kColl,
  kP2p,
  kProxyOp,
  kProxyStep,
  kProxyCtrl,
  kKernelCh,
  kNetPlugin,
  kCount,
};
const char* kind_name(Kind k);

// What a NetPlugin event said (NCCL's socket descriptor or UCCL's own,
// collective/net_event.h); other net types keep only their id.
struct NetInfo {
  int64_t id = 0;
  bool decoded = false;
  bool uccl = false;  // UCCL's descriptor: the fields below all mean something
  bool updated = false;  // an update with the outcome came
  uint8_t op = 0;        // 0 send, 1 receive
  uint16_t parts = 0;
  uint32_t conn = 0;
  int32_t status = 0;
  uint64_t bytes = 0;
  uint32_t retransmits = 0, paths = 0;
  uint64_t rtt_ns = 0, cwnd_bytes = 0, rate_bps = 0;
};

// A ProxyStep's or ProxyCtrl's state transitions: the first kMaxStates - 1
// and always the latest (a ProxyCtrl period may record many).
constexpr int kMaxStates = 6;

struct Event {
  // 0 free, 1 started, 2 stopped: a second stop is counted, not applied.
  std::atomic<uint8_t> life{0};
  Kind kind = Kind::kCount;
  uint8_t channel = 0;
  bool is_send = false;
  uint8_t nstates = 0;
  uint8_t nchannels = 0;
  int32_t parent = -1;  // index in this pool; -1: none, or not ours
  int32_t peer = -1;
  int32_t step = -1;
  int32_t nsteps = 0;
  int32_t chunk_size = 0;
  int32_t root = -1;
  uint64_t start_ns = 0, stop_ns = 0;
  uint64_t seq = 0;
  uint64_t count = 0;                          // elements (API, Coll, P2p)
  uint64_t bytes = 0;                          // ProxyStep: transSize
  uint64_t gpu_start_ns = 0, gpu_stop_ns = 0;  // KernelCh: GPU timer
  const char* func = nullptr;                  // NCCL's static strings
  const char* dtype = nullptr;
  const char* algo = nullptr;
  const char* proto = nullptr;
  int32_t states[kMaxStates] = {};
  uint64_t state_ns[kMaxStates] = {};
  NetInfo net;
};

// Counters of what the pool saw; written by any thread.
struct PoolCounters {
  std::atomic<uint64_t> dropped[static_cast<int>(Kind::kCount)] = {};
  std::atomic<uint64_t> unknown_type{0};    // a type this profiler lacks
  std::atomic<uint64_t> bad_calls{0};       // NULL arguments, second stops
  std::atomic<uint64_t> foreign_parent{0};  // a parent not in this pool
  // Steps and net events whose parent was not found (dropped itself, or
  // not a handle of ours): not recorded, as they could not be placed.
  std::atomic<uint64_t> orphans{0};
};

// One communicator's events. Start takes the next slot (an atomic add);
// when the pool is full the event is dropped (counted; its handle is NULL,
// which NCCL passes back and the profiler ignores, and its children get no
// parent): a trace then covers the run's first `capacity` events.
class EventPool {
 public:
  using Clock = uint64_t (*)();
  EventPool(size_t capacity, Clock clock);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A new event of kind k, or nullptr (pool full: counted as dropped).
  Event* start(Kind k);
  // Index of `handle` if it is one of this pool's started events, else -1.
  int32_t index_of(const void* handle) const;
  bool owns(const void* handle) const { return index_of(handle) >= 0; }

  // Start/stop/record on an event of this pool (handle from start()).
  void stop(Event* e);
  void record_state(Event* e, int state, const abi::StateArgs* args);
  void set_net(Event* e, int64_t id, const void* data, bool update);

  size_t capacity() const { return capacity_; }
  size_t used() const;
  Event& at(size_t i) { return events_[i]; }
  const Event& at(size_t i) const { return events_[i]; }
  uint64_t now() const { return clock_(); }
  PoolCounters& counters() { return counters_; }
  const PoolCounters& counters() const { return counters_; }
  uint64_t dropped_total() const;

 private:
  const size_t capacity_;
  Clock clock_;
  Event* events_;  // capacity_ slots, untouched until used
  std::atomic<size_t> next_{0};
  PoolCounters counters_;
};

}  // namespace uccl::profiler
