// A profiler plugin for NCCL (ncclProfiler_v5) that checks the NetPlugin
// events a net plugin emits under real NCCL and writes what it saw to a file.
//
// Loaded by NCCL through NCCL_PROFILER_PLUGIN (tools/nccl_test.py profile).
// It turns on ProxyOp, ProxyStep and NetPlugin events and checks each
// NetPlugin start: the plugin id is NCCL's socket event type, version 1; the
// descriptor is a socket descriptor (send or receive, a length); its parent
// is a ProxyStep event this probe started. Every stop must match one start.
// Report: PROFILER_PROBE_OUT.<pid>, one line of key=value pairs,
// rewritten at every finalize and when the library unloads.
//
// The layouts below are NCCL's profiler ABI (ext-profiler/example/nccl,
// profiler_v5.h and net_socket_v1.h), written out here on their own, not
// taken from the net plugin's header: the probe must not share a mistake
// with the code it checks.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using ncclResult = int;  // ncclResult_t: 0 success
using DebugLogger = void (*)(int level, unsigned long flags, const char* file,
                             int line, const char* fmt, ...);

constexpr uint64_t kProfileProxyOp = 1u << 3;
constexpr uint64_t kProfileProxyStep = 1u << 4;
constexpr uint64_t kProfileNetPlugin = 1u << 7;

// The NetPlugin event's id: bits 16-31 the net type, 0-15 its version.
constexpr int64_t kNetTypeSock = int64_t{2} << 16;
constexpr int64_t kNetSockV1 = 1;
constexpr uint8_t kSocketEvent = 1;  // ncclProfileSocket

struct SocketDescrV1 {  // ncclProfilerNetSockDescr_v1_t
  uint8_t type;
  struct {
    int fd;
    int op;  // 0 send, 1 receive
    size_t length;
  } sock;
};
static_assert(offsetof(SocketDescrV1, sock.fd) == 8, "socket descriptor");
static_assert(offsetof(SocketDescrV1, sock.length) == 16, "socket descriptor");

struct EventDescrV5 {  // ncclProfilerEventDescr_v5_t, the members read here
  uint64_t type;
  void* parent;
  int rank;
  union {
    struct {
      int step;
    } proxy_step;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
    unsigned char others[88];  // the largest member (coll)
  };
};
static_assert(offsetof(EventDescrV5, parent) == 8, "event descriptor");
static_assert(offsetof(EventDescrV5, rank) == 16, "event descriptor");
static_assert(offsetof(EventDescrV5, net_plugin.id) == 24, "event descriptor");
static_assert(offsetof(EventDescrV5, net_plugin.data) == 32,
              "event descriptor");

struct ProfilerV5 {  // ncclProfiler_v5_t
  const char* name;
  ncclResult (*init)(void** context, uint64_t comm_id, int* activation_mask,
                     const char* comm_name, int n_nodes, int n_ranks, int rank,
                     DebugLogger logger);
  ncclResult (*start_event)(void* context, void** handle, EventDescrV5* descr);
  ncclResult (*stop_event)(void* handle);
  ncclResult (*record_event_state)(void* handle, int state, void* args);
  ncclResult (*finalize)(void* context);
};
static_assert(sizeof(ProfilerV5) == 48, "six members");

// Handles: slots of fixed pools, so a stop can be matched to its start
// without allocating. NCCL keeps at most a few hundred events open.
constexpr int kSlots = 1 << 14;
struct Slot {
  std::atomic<int> open{0};
};
Slot g_steps[kSlots];
Slot g_nets[kSlots];
char g_op;  // every ProxyOp event shares this handle
std::atomic<uint32_t> g_next_step{0}, g_next_net{0};

struct Counters {
  std::atomic<long> comms{0}, ops{0}, steps{0};
  std::atomic<long> net_start{0}, net_stop{0}, net_update{0};
  std::atomic<long> net_send{0}, net_recv{0}, net_bytes{0};
  std::atomic<long> bad_descr{0};   // wrong id, type, op or no data
  std::atomic<long> bad_parent{0};  // parent not an open ProxyStep
  std::atomic<long> bad_stop{0};    // a stop of nothing open
  std::atomic<long> busy{0};        // a pool slot still open on reuse
};
Counters g;
std::atomic<int> g_rank{-1};

template <typename T>
bool in_pool(const void* h, const T (&pool)[kSlots]) {
  auto p = reinterpret_cast<uintptr_t>(h);
  auto b = reinterpret_cast<uintptr_t>(&pool[0]);
  return p >= b && p < b + sizeof(pool) && (p - b) % sizeof(T) == 0;
}

Slot* take(Slot (&pool)[kSlots], std::atomic<uint32_t>* next) {
  Slot* s = &pool[next->fetch_add(1, std::memory_order_relaxed) % kSlots];
  if (s->open.exchange(1, std::memory_order_acq_rel) != 0) ++g.busy;
  return s;
}

void write_report() {
  const char* out = std::getenv("PROFILER_PROBE_OUT");
  if (out == nullptr || *out == '\0') return;
  std::string path = std::string(out) + "." + std::to_string(getpid());
  char line[512];
  int n = std::snprintf(
      line, sizeof(line),
      "rank=%d comms=%ld ops=%ld steps=%ld net_start=%ld net_stop=%ld "
      "net_update=%ld net_send=%ld net_recv=%ld net_bytes=%ld bad_descr=%ld "
      "bad_parent=%ld bad_stop=%ld busy=%ld\n",
      g_rank.load(), g.comms.load(), g.ops.load(), g.steps.load(),
      g.net_start.load(), g.net_stop.load(), g.net_update.load(),
      g.net_send.load(), g.net_recv.load(), g.net_bytes.load(),
      g.bad_descr.load(), g.bad_parent.load(), g.bad_stop.load(),
      g.busy.load());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, line, static_cast<size_t>(n));
  (void)w;
  close(fd);
}

ncclResult probe_init(void** context, uint64_t, int* activation_mask,
                      const char*, int, int n_ranks, int rank,
                      DebugLogger logger) {
  *activation_mask =
      static_cast<int>(kProfileProxyOp | kProfileProxyStep | kProfileNetPlugin);
  *context = &g;
  g_rank.store(rank);
  ++g.comms;
  if (logger) {
    logger(3, 1ul /* NCCL_INIT */, __FILE__, __LINE__,
           "uccl profiler probe: rank %d of %d, ProxyOp ProxyStep NetPlugin",
           rank, n_ranks);
  }
  return 0;
}

void check_net_start(const EventDescrV5* d) {
  if (!in_pool(d->parent, g_steps) ||
      static_cast<const Slot*>(d->parent)->open.load() == 0) {
    ++g.bad_parent;
  }
  const auto* s = static_cast<const SocketDescrV1*>(d->net_plugin.data);
  if (d->net_plugin.id != (kNetTypeSock | kNetSockV1) || s == nullptr ||
      s->type != kSocketEvent || (s->sock.op != 0 && s->sock.op != 1)) {
    ++g.bad_descr;
    return;
  }
  ++(s->sock.op == 0 ? g.net_send : g.net_recv);
  g.net_bytes += static_cast<long>(s->sock.length);
}

ncclResult probe_start(void*, void** handle, EventDescrV5* d) {
  *handle = nullptr;
  if (d->type == kProfileProxyOp) {
    ++g.ops;
    *handle = &g_op;
  } else if (d->type == kProfileProxyStep) {
    ++g.steps;
    *handle = take(g_steps, &g_next_step);
  } else if (d->type == kProfileNetPlugin) {
    ++g.net_start;
    check_net_start(d);
    *handle = take(g_nets, &g_next_net);
  }
  return 0;
}

ncclResult probe_stop(void* handle) {
  if (handle == nullptr || handle == &g_op) return 0;
  bool net = in_pool(handle, g_nets);
  if (!net && !in_pool(handle, g_steps)) {
    ++g.bad_stop;
    return 0;
  }
  if (static_cast<Slot*>(handle)->open.exchange(0) == 0) {
    ++g.bad_stop;
  } else if (net) {
    ++g.net_stop;
  }
  return 0;
}

ncclResult probe_record(void* handle, int, void*) {
  if (in_pool(handle, g_nets)) ++g.net_update;
  return 0;
}

ncclResult probe_finalize(void*) {
  write_report();
  return 0;
}

struct AtUnload {
  ~AtUnload() { write_report(); }
} g_at_unload;

}  // namespace

extern "C" {
__attribute__((visibility("default")))
ProfilerV5 ncclProfiler_v5 = {"uccl-probe", probe_init,   probe_start,
                              probe_stop,   probe_record, probe_finalize};
}
