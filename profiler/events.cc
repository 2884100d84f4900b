// The event pool: slots taken by an atomic add from memory mapped at init
// (pages touched only when used), and what start/stop/record write there.
#include "profiler/events.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "collective/net_event.h"

namespace uccl::profiler {

const char* kind_name(Kind k) {
  static const char* const kNames[] = {"GroupApi",     "CollApi",  "P2pApi",
                                       "KernelLaunch", "Group",    "Coll",
                                       "P2p",          "ProxyOp",  "ProxyStep",
                                       "ProxyCtrl",    "KernelCh", "NetPlugin"};
  const int i = static_cast<int>(k);
  return i >= 0 && i < static_cast<int>(Kind::kCount) ? kNames[i] : "?";
}

EventPool::EventPool(size_t capacity, Clock clock)
    : capacity_(capacity), clock_(clock), events_(nullptr) {
  if (capacity_ == 0) return;
  void* p = mmap(nullptr, capacity_ * sizeof(Event), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) events_ = static_cast<Event*>(p);
}

EventPool::~EventPool() {
  if (events_ != nullptr) munmap(events_, capacity_ * sizeof(Event));
}

Event* EventPool::start(Kind k) {
  const size_t i =
      events_ ? next_.fetch_add(1, std::memory_order_relaxed) : capacity_;
  if (i >= capacity_) {
    counters_.dropped[static_cast<int>(k)].fetch_add(1,
                                                     std::memory_order_relaxed);
    return nullptr;
  }
  Event* e = new (&events_[i]) Event();
  e->kind = k;
  e->start_ns = clock_();
  e->life.store(1, std::memory_order_release);
  return e;
}

size_t EventPool::used() const {
  const size_t n = next_.load(std::memory_order_acquire);
  return n < capacity_ ? n : capacity_;
}

int32_t EventPool::index_of(const void* handle) const {
  if (events_ == nullptr || handle == nullptr) return -1;
  const auto p = reinterpret_cast<uintptr_t>(handle);
  const auto b = reinterpret_cast<uintptr_t>(events_);
  if (p < b || p >= b + used() * sizeof(Event)) return -1;
  if ((p - b) % sizeof(Event) != 0) return -1;
  const auto i = static_cast<int32_t>((p - b) / sizeof(Event));
  return events_[i].life.load(std::memory_order_acquire) != 0 ? i : -1;
}

uint64_t EventPool::dropped_total() const {
  uint64_t n = 0;
  for (const auto& d : counters_.dropped) n += d.load();
  return n;
}

void EventPool::stop(Event* e) {
  const uint64_t now = clock_();
  uint8_t expect = 1;
  if (!e->life.compare_exchange_strong(expect, 2, std::memory_order_acq_rel)) {
    counters_.bad_calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  e->stop_ns = now;
}

void EventPool::record_state(Event* e, int state, const abi::StateArgs* args) {
  const uint64_t now = clock_();
  switch (e->kind) {
    case Kind::kKernelCh:
      if (state == abi::kKernelChStop && args) {
        e->gpu_stop_ns = args->kernelCh.pTimer;
      }
      return;
    case Kind::kNetPlugin:
      if (state == abi::kNetPluginUpdate && args) {
        set_net(e, e->net.id, args->netPlugin.data, true);
      }
      return;
    case Kind::kProxyStep:
      if (args && args->proxyStep.transSize > e->bytes) {
        e->bytes = args->proxyStep.transSize;
      }
      break;
    case Kind::kProxyOp:
    case Kind::kProxyCtrl:
    case Kind::kGroupApi:
      break;
    default:
      return;
  }
  // Keep the first kMaxStates - 1 transitions and always the latest.
  const int slot = e->nstates < kMaxStates ? e->nstates++ : kMaxStates - 1;
  e->states[slot] = state;
  e->state_ns[slot] = now;
}

void EventPool::set_net(Event* e, int64_t id, const void* data, bool update) {
  NetInfo& n = e->net;
  n.id = id;
  if (data == nullptr) return;
  if (id == (ncclabi::kNetTypeUccl | ncclabi::kNetUcclVersion)) {
    ncclabi::UcclNetEventV1 u;
    std::memcpy(&u, data, sizeof(u));
    if (u.type != ncclabi::kUcclNetMessage) return;
    n.decoded = n.uccl = true;
    n.updated = n.updated || (update && u.done == 1);
    n.op = u.op;
    n.parts = u.parts;
    n.conn = u.conn;
    n.bytes = u.bytes;
    n.status = u.status;
    n.retransmits = u.retransmits;
    n.paths = u.paths;
    n.rtt_ns = u.rtt_ns;
    n.cwnd_bytes = u.cwnd_bytes;
    n.rate_bps = u.rate_bps;
  } else if ((id & ncclabi::kNetTypeMask) == abi::kNetTypeSock &&
             (id & 0xffff) == 1) {
    abi::SockDescrV1 s;
    std::memcpy(&s, data, sizeof(s));
    n.decoded = true;
    n.op = static_cast<uint8_t>(s.sock.op);
    n.conn = static_cast<uint32_t>(s.sock.fd);
    n.bytes = s.sock.length;
  }
}

}  // namespace uccl::profiler
