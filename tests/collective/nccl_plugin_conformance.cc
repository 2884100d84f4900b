// nccl_plugin_conformance: dlopens libnccl-net-uccl.so and drives each exported
// ABI version the way NCCL's proxy does, checking results byte for byte.
//
//   nccl_plugin_conformance [--plugin=PATH]   run every scenario (each in its
//                                             own process: knobs are read at
//                                             load), print a summary
//   nccl_plugin_conformance --scenario=NAME [--version=N]   one scenario
//
// Scenarios: props, data, backpressure, truncation, grouped, close, twoproc
// (sender in a second process), per_gpu (one process, two GPUs: an
// endpoint each), tuner (ncclTunerPlugin_v4), parts (each
// UCCL_NCCL_PARTS mode), steer (NCCL's threads off engine cores), idle
// (the engines' sleep policy, and commands waking a sleeping engine), and
// data/twoproc again under 1% injected loss.
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/nccl_net_abi.h"
#include "collective/net_event.h"
#include "collective/stripe.h"
#include "tests/engine_threads.h"
#include "tests/subprocess.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/pattern.h"

namespace {

using namespace uccl::ncclabi;  // NOLINT

int g_failures = 0;
// Both evaluate `cond` exactly once (it is often a plugin call).
#define CHECK_THAT(cond, ...)                                            \
  ([&]() -> bool {                                                       \
    if (cond) return true;                                               \
    ++g_failures;                                                        \
    std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
    std::fprintf(stderr, __VA_ARGS__);                                   \
    std::fprintf(stderr, "\n");                                          \
    return false;                                                        \
  }())
#define REQUIRE(cond, ...)                      \
  do {                                          \
    if (!CHECK_THAT(cond, __VA_ARGS__)) return; \
  } while (0)

std::atomic<int> g_warnings{0};
// The engines of new comms' connection 0, from the plugin's INFO lines.
std::mutex g_lanes_mu;
std::vector<int> g_lanes;
void note_lane(const char* fmt, va_list ap) {
  char msg[512];
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  const char* p = std::strstr(msg, "connection 0 on engine ");
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(g_lanes_mu);
  g_lanes.push_back(std::atoi(p + std::strlen("connection 0 on engine ")));
}
// Memory handles the plugin deregistered itself because a comm was closed
// with them still registered, from its INFO lines.
std::atomic<int> g_closed_mrs{0};
void note_closed_mrs(const char* fmt, va_list ap) {
  char msg[512];
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  const char* p = std::strstr(msg, "close: deregistered ");
  if (p != nullptr) g_closed_mrs += std::atoi(p + 20);
}
// Counts from the plugin's INFO lines: the engines per device it chose
// ("12 engines per device (auto: ..."), the engines an endpoint started
// ("12 engine(s) on cores"), the connections of the last comm logged
// ("6 connections, "); -1 until seen.
std::atomic<int> g_chosen_engines{-1}, g_started_engines{-1}, g_comm_conns{-1};
// Endpoints started for no GPU, GPU 0 and GPU 1 ("endpoint up" lines).
std::atomic<int> g_endpoints_up[3];
// The endpoint's idle policy and, from comms' close lines, the most sleeps
// and early wakes their engine reported; -1 until seen.
std::atomic<int> g_idle_after_ms{-1}, g_idle_wait_us{-1}, g_idle_sleeps{-1},
    g_idle_wakes{-1};
int number_before(const char* msg, const char* what) {
  const char* p = std::strstr(msg, what);
  if (p == nullptr) return -1;
  const char* b = p;
  while (b > msg && b[-1] >= '0' && b[-1] <= '9') --b;
  return b == p ? -1 : std::atoi(b);
}
// From each comm's close line ("send comm closed: N messages, A with all
// parts at once, E done with part 0"): [send, recv] x [N, A, E], summed.
std::atomic<int> g_closed_counts[2][3];
void note_counts(const char* fmt, va_list ap) {
  char msg[512];
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  if (std::strstr(msg, " comm closed: ") != nullptr) {
    const int side = std::strstr(msg, "send comm closed") != nullptr ? 0 : 1;
    const char* what[] = {" messages, ", " with all parts at once, ",
                          " done with part 0"};
    for (int i = 0; i < 3; ++i) {
      const int v = number_before(msg, what[i]);
      if (v >= 0) g_closed_counts[side][i] += v;
    }
  }
  int n = number_before(msg, " engines per device (");
  if (n >= 0) g_chosen_engines = n;
  n = number_before(msg, " engine(s) on cores ");
  if (n >= 0) g_started_engines = n;
  n = number_before(msg, " connections, ");
  if (n >= 0) g_comm_conns = n;
  // "device udp:lo for GPU 1: endpoint up" (an endpoint per GPU), or
  // without " for GPU" where the caller had no CUDA context.
  if (std::strstr(msg, ": endpoint up") != nullptr) {
    const char* g = std::strstr(msg, " for GPU ");
    const int gpu = g ? std::atoi(g + 9) : -1;
    if (gpu >= -1 && gpu < 2) ++g_endpoints_up[gpu + 1];
  }
  // "idle engines sleep after A ms, W us per wait" (the endpoint), and
  // "its engine E slept S times, K woken early" (each comm's close).
  n = number_before(msg, " ms, ");
  if (n >= 0 && std::strstr(msg, "idle engines sleep after ")) {
    g_idle_after_ms = n;
    g_idle_wait_us = number_before(msg, " us per wait");
  }
  n = number_before(msg, " times, ");
  if (n >= 0 && std::strstr(msg, " slept ")) {
    g_idle_sleeps = std::max(g_idle_sleeps.load(), n);
    g_idle_wakes =
        std::max(g_idle_wakes.load(), number_before(msg, " woken early"));
  }
}
void logger(int level, unsigned long, const char* file, int line,
            const char* fmt, ...) {
  va_list lane_ap;
  va_start(lane_ap, fmt);
  note_lane(fmt, lane_ap);
  va_end(lane_ap);
  va_start(lane_ap, fmt);
  note_counts(fmt, lane_ap);
  va_end(lane_ap);
  va_start(lane_ap, fmt);
  note_closed_mrs(fmt, lane_ap);
  va_end(lane_ap);
  if (level > kLogWarn && std::getenv("CONFORMANCE_VERBOSE") == nullptr) {
    return;
  }
  if (level == kLogWarn) ++g_warnings;
  std::fprintf(stderr, "[%.6f plugin %s %s:%d] ", uccl::monotonic_ns() / 1e9,
               level == kLogWarn ? "WARN" : "INFO", file, line);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
}

// NCCL's side of the NetPlugin events (collective/net_event.h): a start
// with the message's descriptor, one update with its outcome, a stop.
std::atomic<int> g_prof_start{0}, g_prof_stop{0}, g_prof_bad{0};
std::atomic<int> g_prof_update{0}, g_prof_rtt{0};
std::atomic<long> g_prof_retx{0};
int profiler(void** handle, int type, void* parent, int64_t plugin_id,
             void* ext) {
  auto* d = static_cast<UcclNetEventV1*>(ext);
  if (type == kProfilerStart) {
    if (parent == nullptr || d == nullptr || d->type != kUcclNetMessage ||
        plugin_id != (kNetTypeUccl | kNetUcclVersion) || d->done != 0 ||
        d->parts < 1 || (d->op != 0 && d->op != 1)) {
      ++g_prof_bad;
    }
    *handle = reinterpret_cast<void*>(0x1000 + g_prof_start.fetch_add(1));
  } else if (type == kProfilerUpdate) {
    if (handle == nullptr || *handle == nullptr || d == nullptr ||
        d->done != 1 || (d->op != 0 && d->op != 1)) {
      ++g_prof_bad;
      return 0;
    }
    ++g_prof_update;
    g_prof_retx += d->retransmits;
    if (d->rtt_ns > 0) ++g_prof_rtt;
  } else if (type == kProfilerStop) {
    if (handle == nullptr || *handle == nullptr) ++g_prof_bad;
    ++g_prof_stop;
  }
  return 0;
}
int g_phandle_target;  // what we pass as NCCL's parent event handle
std::string g_plugin;  // the .so under test (children load the same)

// One ABI version, seen through v12-shaped calls.
struct Api {
  int version = 0;
  std::function<int()> init;
  std::function<int()> finalize;
  std::function<int(int*)> devices;
  std::function<int(int, PropertiesV12*)> props;
  // v9+: makeVDevice over devs[0..n); v12: setNetAttr on the init context.
  std::function<int(int*, int, const int*)> make_vdevice;
  std::function<int(NetAttrV12*)> set_net_attr;
  std::function<int(int, void*, void**)> listen;
  std::function<int(int, void*, void**)> connect;
  std::function<int(void*, void**)> accept;
  std::function<int(void*, void*, size_t, int, void**)> reg_mr;
  std::function<int(void*, void*)> dereg_mr;
  std::function<int(void*, void*, size_t, int, void*, void**)> isend;
  std::function<int(void*, int, void**, size_t*, int*, void**, void**)> irecv;
  std::function<int(void*, int, void**, int*, void**, void**)> iflush;
  std::function<int(void*, int*, int*)> test;
  std::function<int(void*)> close_send, close_recv, close_listen;
};

template <typename T>
void common(Api* a, const T* t) {
  a->devices = t->devices;
  a->accept = [t](void* l, void** r) { return t->accept(l, r, nullptr); };
  a->reg_mr = t->regMr;
  a->dereg_mr = t->deregMr;
  a->iflush = t->iflush;
  a->test = t->test;
  a->close_send = t->closeSend;
  a->close_recv = t->closeRecv;
  a->close_listen = t->closeListen;
}

// v10+ isend/irecv take profiler handles: pass ours, to check the events.
template <typename T>
void profiled_io(Api* a, const T* t) {
  a->isend = [t](void* c, void* d, size_t n, int tag, void* m, void** r) {
    return t->isend(c, d, n, tag, m, &g_phandle_target, r);
  };
  a->irecv = [t](void* c, int n, void** d, size_t* sz, int* tg, void** m,
                 void** r) {
    void* ph[8];
    for (int i = 0; i < 8; ++i) ph[i] = &g_phandle_target;
    return t->irecv(c, n, d, sz, tg, m, ph, r);
  };
}

// v9-v11 properties in v12's shape: the fields up to the virtual-NIC props
// are laid out alike; those props hold 4 devices before v12, not 8.
template <typename V>
void widen(const V& v, PropertiesV12* p) {
  std::memset(p, 0, sizeof(*p));
  std::memcpy(p, &v, offsetof(V, vProps));
  p->vProps.ndevs = v.vProps.ndevs;
  for (int i = 0; i < kMaxDevsPerNic; ++i) p->vProps.devs[i] = v.vProps.devs[i];
  p->maxP2pBytes = v.maxP2pBytes;
  p->maxCollBytes = v.maxCollBytes;
  p->railId = p->planeId = kNetIdUndef;  // not in v9-v11
}

// makeVDevice of v9-v11 (4 devices at most).
template <typename T>
void vdevice_v9(Api* a, const T* t) {
  a->make_vdevice = [t](int* d, int n, const int* devs) {
    VDeviceProps v{n, {}};
    for (int i = 0; i < n && i < kMaxDevsPerNic; ++i) v.devs[i] = devs[i];
    return t->makeVDevice(d, &v);
  };
}

bool load_api(const std::string& path, int version, Api* a) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", path.c_str(), dlerror());
    return false;
  }
  const std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  void* s = dlsym(lib, sym.c_str());
  if (s == nullptr) {
    std::fprintf(stderr, "%s: no symbol %s\n", path.c_str(), sym.c_str());
    return false;
  }
  a->version = version;
  a->finalize = [] { return 0; };
  if (version == 12) {
    auto* t = static_cast<const NetV12*>(s);
    if (std::strcmp(t->name, "UCCL") != 0 || t->finalize == nullptr)
      return false;
    common(a, t);
    auto ctx = std::make_shared<void*>(nullptr);
    a->init = [t, ctx] {
      CommConfig cfg{-1};
      return t->init(ctx.get(), 42, &cfg, logger, profiler);
    };
    a->finalize = [t, ctx] { return t->finalize(*ctx); };
    a->props = t->getProperties;
    a->listen = [t, ctx](int d, void* h, void** l) {
      return t->listen(*ctx, d, h, l);
    };
    a->connect = [t, ctx](int d, void* h, void** s2) {
      return t->connect(*ctx, d, h, s2, nullptr);
    };
    a->make_vdevice = [t](int* d, int n, const int* devs) {
      VDevicePropsV12 v{n, {}};
      for (int i = 0; i < n && i < kMaxDevsPerNicV12; ++i) v.devs[i] = devs[i];
      return t->makeVDevice(d, &v);
    };
    a->set_net_attr = [t, ctx](NetAttrV12* attr) {
      return t->setNetAttr ? t->setNetAttr(*ctx, attr) : -1;
    };
    profiled_io(a, t);
  } else if (version == 11) {
    auto* t = static_cast<const NetV11*>(s);
    if (std::strcmp(t->name, "UCCL") != 0 || t->finalize == nullptr)
      return false;
    common(a, t);
    auto ctx = std::make_shared<void*>(nullptr);
    a->init = [t, ctx] {
      CommConfig cfg{-1};
      return t->init(ctx.get(), 42, &cfg, logger, profiler);
    };
    a->finalize = [t, ctx] { return t->finalize(*ctx); };
    a->props = [t](int d, PropertiesV12* p) {
      PropertiesV11 v11;
      const int r = t->getProperties(d, &v11);
      widen(v11, p);
      p->maxMultiRequestSize = v11.maxMultiRequestSize;
      return r;
    };
    a->listen = [t, ctx](int d, void* h, void** l) {
      return t->listen(*ctx, d, h, l);
    };
    a->connect = [t, ctx](int d, void* h, void** s2) {
      return t->connect(*ctx, d, h, s2, nullptr);
    };
    vdevice_v9(a, t);
    profiled_io(a, t);
  } else if (version == 10) {
    auto* t = static_cast<const NetV10*>(s);
    common(a, t);
    a->init = [t] { return t->init(logger, profiler); };
    a->props = [t](int d, PropertiesV12* p) {
      PropertiesV9 v9;
      const int r = t->getProperties(d, &v9);
      widen(v9, p);
      return r;
    };
    a->listen = t->listen;
    a->connect = [t](int d, void* h, void** s2) {
      CommConfig cfg{-1};
      return t->connect(d, &cfg, h, s2, nullptr);
    };
    vdevice_v9(a, t);
    profiled_io(a, t);
  } else if (version == 9) {
    auto* t = static_cast<const NetV9*>(s);
    common(a, t);
    a->init = [t] { return t->init(logger); };
    a->props = [t](int d, PropertiesV12* p) {
      PropertiesV9 v9;
      const int r = t->getProperties(d, &v9);
      widen(v9, p);
      return r;
    };
    a->listen = t->listen;
    a->connect = [t](int d, void* h, void** s2) {
      return t->connect(d, h, s2, nullptr);
    };
    vdevice_v9(a, t);
    a->isend = t->isend;
    a->irecv = t->irecv;
  } else if (version == 8) {
    auto* t = static_cast<const NetV8*>(s);
    common(a, t);
    a->init = [t] { return t->init(logger); };
    a->props = [t](int d, PropertiesV12* p) {
      std::memset(p, 0, sizeof(*p));
      PropertiesV8 v8;
      const int r = t->getProperties(d, &v8);
      p->name = v8.name;
      p->pciPath = v8.pciPath;
      p->guid = v8.guid;
      p->ptrSupport = v8.ptrSupport;
      p->speed = v8.speed;
      p->maxComms = v8.maxComms;
      p->maxRecvs = v8.maxRecvs;
      p->maxP2pBytes = size_t{1} << 30;  // not in v8: NCCL assumes this
      p->maxCollBytes = size_t{1} << 30;
      p->railId = p->planeId = kNetIdUndef;  // not in v8
      return r;
    };
    a->listen = t->listen;
    a->connect = [t](int d, void* h, void** s2) {
      return t->connect(d, h, s2, nullptr);
    };
    a->isend = [t](void* c, void* d, size_t n, int tag, void* m, void** r) {
      return t->isend(c, d, static_cast<int>(n), tag, m, r);
    };
    a->irecv = [t](void* c, int n, void** d, size_t* sz, int* tg, void** m,
                   void** r) {
      int s2[8];
      for (int i = 0; i < n && i < 8; ++i) s2[i] = static_cast<int>(sz[i]);
      return t->irecv(c, n, d, s2, tg, m, r);
    };
  } else {
    return false;
  }
  return true;
}

// UCCL_FAKE_CUDA (fake_libcuda.cc), loaded before the plugin: sets the
// calling thread's "current CUDA device"; nullptr where not loaded.
void (*g_fake_set_device)(int) = nullptr;

// Loops connect/accept (neither may block) until both comms exist.
bool connect_pair(Api& a, int dev, void** sc, void** rc, void** lc) {
  char handle[kHandleMaxSize];
  if (a.listen(dev, handle, lc) != kSuccess) return false;
  *sc = *rc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while ((*sc == nullptr || *rc == nullptr) && uccl::monotonic_ns() < until) {
    if (*sc == nullptr && a.connect(dev, handle, sc) != kSuccess) return false;
    if (*rc == nullptr && a.accept(*lc, rc) != kSuccess) return false;
  }
  return *sc != nullptr && *rc != nullptr;
}

// Polls test() until done; the result code of the completing test().
int wait_req(Api& a, void* req, int* sizes, int timeout_ms = 60000) {
  const uint64_t until = uccl::monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  int done = 0;
  while (uccl::monotonic_ns() < until) {
    int r = a.test(req, &done, sizes);
    if (r != kSuccess || done) return r;
  }
  return -1;  // timed out
}

size_t step_size(int s) {
  // Around the default stripe on lo with 4 connections (collective/
  // stripe.h): 261632 B (four 65408-byte chunks) where payloads are copied,
  // 256 KiB where they are spliced (61440-byte chunks cut 1 MiB unevenly).
  // Shorter messages go whole on one connection, longer ones (and exactly
  // one stripe) are striped.
  static const size_t kSizes[] = {0,       1,      261631, 65536 + 17, 1 << 20,
                                  3 << 20, 777777, 261632, 262143,     262144};
  return kSizes[s % (sizeof(kSizes) / sizeof(kSizes[0]))];
}

// --------------------------------------------------------------- scenarios

// makeVDevice: a virtual NIC of one device is that device; merging several
// (up to 4 before v12, 8 in v12) is refused, as are counts past the
// version's limit and unknown devices. v12's setNetAttr takes NCCL's hints.
void scenario_vdevice(Api& a, int ndev) {
  if (!a.make_vdevice) return;  // v8 has no virtual NICs
  const int limit = a.version >= 12 ? kMaxDevsPerNicV12 : kMaxDevsPerNic;
  int devs[kMaxDevsPerNicV12] = {0, 0, 0, 0, 0, 0, 0, 0};
  int d = -7;
  CHECK_THAT(a.make_vdevice(&d, 1, devs) == kSuccess && d == 0,
             "makeVDevice of device 0: %d", d);
  devs[0] = ndev;
  CHECK_THAT(a.make_vdevice(&d, 1, devs) != kSuccess, "unknown device");
  devs[0] = 0;
  CHECK_THAT(a.make_vdevice(&d, limit, devs) != kSuccess, "merging %d devices",
             limit);
  if (a.version >= 12) {
    CHECK_THAT(a.make_vdevice(&d, kMaxDevsPerNicV12 + 1, devs) != kSuccess,
               "9 devices");
    NetAttrV12 attr;
    std::memset(&attr, 0xff, sizeof(attr));  // NCCL_NET_ATTR_INIT: all -1
    attr.sendCommAttr.maxConcurrentPeers = 4;
    attr.op = kFuncAllReduce;
    CHECK_THAT(a.set_net_attr(&attr) == kSuccess, "setNetAttr");
    CHECK_THAT(a.set_net_attr(nullptr) != kSuccess, "setNetAttr(NULL)");
  }
}

void scenario_props(Api& a) {
  int n = 0;
  REQUIRE(a.devices(&n) == kSuccess && n >= 1, "devices: %d", n);
  std::vector<std::string> names;
  for (int d = 0; d < n; ++d) {
    PropertiesV12 p;
    REQUIRE(a.props(d, &p) == kSuccess, "getProperties(%d)", d);
    REQUIRE(p.name != nullptr, "name");
    for (const auto& x : names)
      CHECK_THAT(x != p.name, "duplicate name %s", p.name);
    names.push_back(p.name);
    CHECK_THAT(p.ptrSupport == kPtrHost, "ptrSupport %d", p.ptrSupport);
    CHECK_THAT(p.speed > 0, "speed %d", p.speed);
    if (std::strcmp(p.name, "udp:lo") == 0) {
      // lo has no link speed: the one for the engines the plugin chose
      // (400000 with 8, 300000 with 12: 4 or 6 NCCL channels on one host)
      // unless the user says otherwise.
      const char* s = std::getenv("UCCL_NCCL_SPEED_MBPS");
      const int engines = g_chosen_engines.load();
      const int want =
          s ? std::atoi(s)
            : static_cast<int>(uccl::nccl::unknown_link_speed_mbps(engines));
      CHECK_THAT(p.speed == want, "udp:lo speed %d, want %d (%d engines)",
                 p.speed, want, engines);
    }
    CHECK_THAT(p.maxComms > 0, "maxComms");
    CHECK_THAT(p.maxRecvs >= 1 && p.maxRecvs <= 8, "maxRecvs %d", p.maxRecvs);
    CHECK_THAT(p.netDeviceType == kNetDeviceHost, "netDeviceType");
    if (a.version >= 9) {
      CHECK_THAT(p.maxP2pBytes > 0 && p.maxP2pBytes <= (size_t{1} << 40),
                 "maxP2pBytes %zu", p.maxP2pBytes);
      CHECK_THAT(p.maxCollBytes > 0 && p.maxCollBytes <= (size_t{1} << 40),
                 "maxCollBytes %zu", p.maxCollBytes);
      CHECK_THAT(p.vProps.ndevs == 1 && p.vProps.devs[0] == d, "vProps");
    }
    // v12: no rail or plane (NCCL_NET_ID_UNDEF); the harness sets the same
    // for older versions, which have neither field.
    CHECK_THAT(p.railId == kNetIdUndef && p.planeId == kNetIdUndef,
               "railId %d planeId %d", p.railId, p.planeId);
    std::printf("  device %d: %s speed %d Mb/s pci %s maxRecvs %d\n", d, p.name,
                p.speed, p.pciPath ? p.pciPath : "(none)", p.maxRecvs);
  }
  PropertiesV12 p;
  CHECK_THAT(a.props(n, &p) != kSuccess, "getProperties(out of range)");
  scenario_vdevice(a, n);
}

struct Buffers {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<void*> mhs;
};

// Closes a scenario's comms when it returns early (a REQUIRE failed) with
// requests perhaps still posted. Declared after the scenario's buffers, it
// runs before they are freed, so no engine writes into freed memory: NCCL
// too closes its comms before it frees their buffers. dismiss() where the
// scenario closes them itself.
class CloseOnReturn {
 public:
  CloseOnReturn(Api& a, std::vector<void*> send, std::vector<void*> recv,
                std::vector<void*> listen)
      : a_(a), send_(send), recv_(recv), listen_(listen) {}
  CloseOnReturn(const CloseOnReturn&) = delete;
  CloseOnReturn& operator=(const CloseOnReturn&) = delete;
  ~CloseOnReturn() {
    if (!armed_) return;
    std::fprintf(stderr, "  (closing the scenario's comms after a failure)\n");
    for (void* c : recv_) a_.close_recv(c);
    for (void* c : send_) a_.close_send(c);
    for (void* c : listen_) a_.close_listen(c);
  }
  void dismiss() { armed_ = false; }

 private:
  Api& a_;
  std::vector<void*> send_, recv_, listen_;
  bool armed_ = true;
};

// The proxy's pattern: the receiver keeps 8 receives posted (NCCL_STEPS),
// the sender up to 32 sends; sizes vary (0 B included); every byte checked.
void scenario_data(Api& a, int steps) {
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  const size_t kSlot = 4 << 20;
  Buffers sb, rb;
  sb.bufs.assign(32, std::vector<uint8_t>(kSlot));
  rb.bufs.assign(8, std::vector<uint8_t>(kSlot));
  // One receive region, registered twice below, overlapping (NCCL does this).
  std::vector<uint8_t> big(8 * kSlot);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  for (auto& b : sb.bufs) {
    void* mh = nullptr;
    REQUIRE(a.reg_mr(sc, b.data(), b.size(), kPtrHost, &mh) == kSuccess,
            "regMr");
    sb.mhs.push_back(mh);
  }
  void *mh_big = nullptr, *mh_part = nullptr;
  REQUIRE(a.reg_mr(rc, big.data(), big.size(), kPtrHost, &mh_big) == kSuccess,
          "regMr big");
  REQUIRE(a.reg_mr(rc, big.data() + kSlot, 2 * kSlot, kPtrHost, &mh_part) ==
              kSuccess,
          "regMr overlapping");
  void* cuda_mh = nullptr;
  CHECK_THAT(a.reg_mr(rc, big.data(), 4096, kPtrCuda, &cuda_mh) != kSuccess,
             "CUDA memory must be refused (ptrSupport is HOST)");
  std::vector<void*> sreq(steps, nullptr), rreq(steps, nullptr);
  int sent = 0, recvd = 0, sdone = 0, rdone = 0;
  const uint64_t until = uccl::monotonic_ns() + 120000000000ull;
  while ((sdone < steps || rdone < steps) && uccl::monotonic_ns() < until) {
    if (recvd < steps && recvd - rdone < 8) {
      void* data = big.data() + (recvd % 8) * kSlot;
      size_t size = kSlot;
      int tag = 7;
      void* mh = (recvd % 8 == 1 || recvd % 8 == 2) ? mh_part : mh_big;
      rreq[recvd] = reinterpret_cast<void*>(kOptionalRecvCompletion);
      int r = a.irecv(rc, 1, &data, &size, &tag, &mh, &rreq[recvd]);
      REQUIRE(r == kSuccess, "irecv step %d", recvd);
      CHECK_THAT(
          rreq[recvd] != reinterpret_cast<void*>(kOptionalRecvCompletion),
          "irecv left NCCL's optional-completion marker");
      if (rreq[recvd]) ++recvd;
    }
    if (sent < steps && sent - sdone < 32) {
      const size_t n = step_size(sent);
      auto& b = sb.bufs[sent % 32];
      uccl::fill_pattern(b.data(), n, 1000 + sent);
      int r = a.isend(sc, b.data(), n, 7, sb.mhs[sent % 32], &sreq[sent]);
      REQUIRE(r == kSuccess, "isend step %d", sent);
      if (sreq[sent]) ++sent;
    }
    if (sdone < sent) {
      int done = 0, size = -1;
      REQUIRE(a.test(sreq[sdone], &done, &size) == kSuccess, "send test");
      if (done) {
        CHECK_THAT(size == static_cast<int>(step_size(sdone)), "send size %d",
                   size);
        ++sdone;
      }
    }
    if (rdone < recvd) {
      int done = 0, size = -1;
      REQUIRE(a.test(rreq[rdone], &done, &size) == kSuccess, "recv test %d",
              rdone);
      if (done) {
        const size_t n = step_size(rdone);
        CHECK_THAT(size == static_cast<int>(n), "step %d: size %d, want %zu",
                   rdone, size, n);
        int64_t bad = uccl::find_pattern_mismatch(
            big.data() + (rdone % 8) * kSlot, n, 1000 + rdone);
        CHECK_THAT(bad < 0, "step %d: bad byte at %lld", rdone,
                   static_cast<long long>(bad));
        // iflush: host memory, nothing to do: NULL request.
        void* fr = reinterpret_cast<void*>(0x2);
        void* data = big.data();
        int fs = static_cast<int>(n);
        CHECK_THAT(a.iflush(rc, 1, &data, &fs, &mh_big, &fr) == kSuccess &&
                       fr == nullptr,
                   "iflush");
        ++rdone;
      }
    }
  }
  CHECK_THAT(sdone == steps && rdone == steps, "sends %d/%d receives %d/%d",
             sdone, steps, rdone, steps);
  closer.dismiss();
  for (void* mh : sb.mhs) CHECK_THAT(a.dereg_mr(sc, mh) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, mh_part) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, mh_big) == kSuccess, "deregMr");
  CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend");
  CHECK_THAT(a.close_recv(rc) == kSuccess, "closeRecv");
  CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
  std::printf("  %d messages each way checked\n", steps);
}

// UCCL_NCCL_PARTS: on one comm, 40 messages of about 1 MiB (striped), 40 of
// about 1 KiB (whole), 40 of about 1 MiB; 8 receives posted at a time
// (NCCL's depth), the sender up to 32 ahead; every byte checked. Each side's
// close line counts the messages posted with all parts at once and those
// done with part 0 (short messages posted so), which follow from the mode:
// auto takes all parts at once where the message 32 before was striped.
void scenario_parts(Api& a) {
  const char* env = std::getenv("UCCL_NCCL_PARTS");
  const std::string mode = env ? env : "auto";
  constexpr int kMsgs = 120;
  auto size_of = [](int i) -> size_t {
    return i >= 40 && i < 80 ? 1000 + i : (1u << 20) + i;
  };
  int want_all = 48, want_early = 32;  // auto: [32, 72) and [112, 120)
  if (mode == "all") {
    want_all = kMsgs;
    want_early = 40;
  } else if (mode == "first") {
    want_all = want_early = 0;
  }
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  const size_t kSlot = 2 << 20;
  std::vector<uint8_t> sbuf(32 * kSlot), rbuf(8 * kSlot);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  std::vector<void*> sreq(kMsgs, nullptr), rreq(kMsgs, nullptr);
  int sent = 0, recvd = 0, sdone = 0, rdone = 0;
  const uint64_t until = uccl::monotonic_ns() + 120000000000ull;
  while ((sdone < kMsgs || rdone < kMsgs) && uccl::monotonic_ns() < until) {
    if (recvd < kMsgs && recvd - rdone < 8) {
      void* data = rbuf.data() + (recvd % 8) * kSlot;
      size_t size = kSlot;
      int tag = 0;
      REQUIRE(
          a.irecv(rc, 1, &data, &size, &tag, &rmh, &rreq[recvd]) == kSuccess,
          "irecv %d", recvd);
      if (rreq[recvd]) ++recvd;
    }
    if (sent < kMsgs && sent - sdone < 32) {
      uint8_t* b = sbuf.data() + (sent % 32) * kSlot;
      uccl::fill_pattern(b, size_of(sent), 3000 + sent);
      REQUIRE(a.isend(sc, b, size_of(sent), 0, smh, &sreq[sent]) == kSuccess,
              "isend %d", sent);
      if (sreq[sent]) ++sent;
    }
    int done = 0, size = -1;
    if (sdone < sent) {
      REQUIRE(a.test(sreq[sdone], &done, &size) == kSuccess, "send test");
      if (done) {
        CHECK_THAT(size == static_cast<int>(size_of(sdone)), "send %d size %d",
                   sdone, size);
        ++sdone;
      }
    }
    if (rdone < recvd) {
      REQUIRE(a.test(rreq[rdone], &done, &size) == kSuccess, "recv test %d",
              rdone);
      if (done) {
        CHECK_THAT(size == static_cast<int>(size_of(rdone)),
                   "message %d: size %d, want %zu", rdone, size,
                   size_of(rdone));
        const int64_t bad = uccl::find_pattern_mismatch(
            rbuf.data() + (rdone % 8) * kSlot, size_of(rdone), 3000 + rdone);
        CHECK_THAT(bad < 0, "message %d: bad byte at %lld", rdone,
                   static_cast<long long>(bad));
        ++rdone;
      }
    }
  }
  CHECK_THAT(sdone == kMsgs && rdone == kMsgs, "sends %d/%d receives %d/%d",
             sdone, kMsgs, rdone, kMsgs);
  closer.dismiss();
  CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
  CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
  CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend");
  CHECK_THAT(a.close_recv(rc) == kSuccess, "closeRecv");
  CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
  for (int side = 0; side < 2; ++side) {
    const char* name = side == 0 ? "send" : "recv";
    CHECK_THAT(g_closed_counts[side][0] == kMsgs, "%s: %d messages logged",
               name, g_closed_counts[side][0].load());
    CHECK_THAT(g_closed_counts[side][1] == want_all,
               "%s: %d messages with all parts at once, want %d (%s)", name,
               g_closed_counts[side][1].load(), want_all, mode.c_str());
    CHECK_THAT(g_closed_counts[side][2] == want_early,
               "%s: %d messages done with part 0, want %d (%s)", name,
               g_closed_counts[side][2].load(), want_early, mode.c_str());
  }
  std::printf(
      "  %d messages checked; %d with all parts at once, %d done with "
      "part 0 (%s)\n",
      kMsgs, g_closed_counts[1][1].load(), g_closed_counts[1][2].load(),
      mode.c_str());
}

// 32 requests per comm: the 33rd isend returns a NULL request (try later).
void scenario_backpressure(Api& a) {
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  std::vector<uint8_t> b(64 * 1024), rbuf(64 * 1024 * 8);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, b.data(), b.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  uccl::fill_pattern(b.data(), b.size(), 5);
  std::vector<void*> s;
  for (int i = 0; i < kMaxRequests; ++i) {
    void* r = nullptr;
    REQUIRE(a.isend(sc, b.data(), 1024 + i, 0, smh, &r) == kSuccess, "isend %d",
            i);
    CHECK_THAT(r != nullptr, "isend %d of %d got no request", i, kMaxRequests);
    s.push_back(r);
  }
  void* extra = reinterpret_cast<void*>(0x3);
  REQUIRE(a.isend(sc, b.data(), 10, 0, smh, &extra) == kSuccess, "isend 33");
  CHECK_THAT(extra == nullptr, "the 33rd isend must return a NULL request");
  // Drain: 8 receives in flight at a time.
  int posted = 0, done = 0;
  std::vector<void*> r(kMaxRequests, nullptr);
  const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
  while (done < kMaxRequests && uccl::monotonic_ns() < until) {
    if (posted < kMaxRequests && posted - done < 8) {
      void* d = rbuf.data() + (posted % 8) * 65536;
      size_t sz = 65536;
      int tag = 0;
      REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &r[posted]) == kSuccess,
              "irecv");
      if (r[posted]) ++posted;
    }
    if (done < posted) {
      int dn = 0, size = 0;
      REQUIRE(a.test(r[done], &dn, &size) == kSuccess, "test");
      if (dn) {
        CHECK_THAT(size == 1024 + done, "size %d", size);
        CHECK_THAT(uccl::find_pattern_mismatch(rbuf.data() + (done % 8) * 65536,
                                               size, 5) < 0,
                   "bytes of message %d", done);
        ++done;
      }
    }
  }
  for (void* x : s)
    CHECK_THAT(wait_req(a, x, nullptr) == kSuccess, "send done");
  CHECK_THAT(done == kMaxRequests, "received %d", done);
  closer.dismiss();
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// A send larger than the posted receive is an error at both ends.
void scenario_truncation(Api& a) {
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  std::vector<uint8_t> sbuf(8192), rbuf(8192);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  void *sr = nullptr, *rr = nullptr;
  void* d = rbuf.data();
  size_t sz = 100;
  int tag = 0;
  REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &rr) == kSuccess && rr, "irecv");
  REQUIRE(a.isend(sc, sbuf.data(), 200, 0, smh, &sr) == kSuccess && sr,
          "isend");
  const int g0 = g_warnings.load();
  CHECK_THAT(wait_req(a, rr, nullptr) > 0, "receiver must see an error");
  CHECK_THAT(wait_req(a, sr, nullptr) > 0, "sender must see an error");
  CHECK_THAT(g_warnings.load() > g0, "the error must be logged (WARN)");
  closer.dismiss();
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// One message from sc to rc, checked byte for byte: both buffers registered,
// the receive (rbuf, which may be longer) and the send posted, then both
// tested in turn until done, as NCCL's proxy does (a striped message's
// receiver posts parts 1..K-1 from test() once part 0 shows the stripe).
void exchange_once(Api& a, void* sc, void* rc, std::vector<uint8_t>& sbuf,
                   std::vector<uint8_t>& rbuf, const char* what) {
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "%s: regMr", what);
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "%s: regMr", what);
  void *sr = nullptr, *rr = nullptr;
  void* d = rbuf.data();
  size_t sz = rbuf.size();
  int tag = 0;
  REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &rr) == kSuccess && rr,
          "%s: irecv", what);
  REQUIRE(a.isend(sc, sbuf.data(), sbuf.size(), 0, smh, &sr) == kSuccess && sr,
          "%s: isend", what);
  int got = -1, sdone = 0, rdone = 0;
  const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
  while ((!sdone || !rdone) && uccl::monotonic_ns() < until) {
    if (!sdone) {
      REQUIRE(a.test(sr, &sdone, nullptr) == kSuccess, "%s: test send", what);
    }
    if (!rdone) {
      REQUIRE(a.test(rr, &rdone, &got) == kSuccess, "%s: test recv", what);
    }
  }
  REQUIRE(sdone && rdone, "%s: send %s, receive %s after 60 s", what,
          sdone ? "done" : "pending", rdone ? "done" : "pending");
  CHECK_THAT(got == static_cast<int>(sbuf.size()), "%s: received %d bytes",
             what, got);
  CHECK_THAT(std::memcmp(rbuf.data(), sbuf.data(), sbuf.size()) == 0,
             "%s: bytes differ", what);
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
}

// A port scan of the listen comm's bootstrap port (connects that close at
// once, garbage, a silent connection) must not end the listen comm: it
// still accepts NCCL's own connections, and they carry data.
void scenario_portscan(Api& a) {
  char handle[kHandleMaxSize];
  void* lc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
  uint16_t port = 0;  // ConnectHandle::port (collective/net_plugin.cc)
  std::memcpy(&port, handle + 12, sizeof(port));
  REQUIRE(port != 0, "no port in the handle");
  auto knock = [&](const char* bytes, size_t n) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 && n) {
      (void)!send(fd, bytes, n, 0);
    }
    return fd;
  };
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  int silent = knock(nullptr, 0);
  for (int i = 0; i < 20; ++i) {
    close(i % 2 ? knock(junk, sizeof(junk)) : knock(nullptr, 0));
  }
  void* rc = nullptr;
  REQUIRE(a.accept(lc, &rc) == kSuccess && rc == nullptr,
          "accept after a port scan");
  void* sc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while ((sc == nullptr || rc == nullptr) && uccl::monotonic_ns() < until) {
    if (sc == nullptr)
      REQUIRE(a.connect(0, handle, &sc) == kSuccess, "connect");
    if (rc == nullptr) REQUIRE(a.accept(lc, &rc) == kSuccess, "accept");
  }
  REQUIRE(sc != nullptr && rc != nullptr, "connect/accept after a port scan");
  std::vector<uint8_t> sbuf(100000), rbuf(100000);
  uccl::fill_pattern(sbuf.data(), sbuf.size(), 3);
  exchange_once(a, sc, rc, sbuf, rbuf, "after a port scan");
  close(silent);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// Two comm pairs in one process (4 comms, run with 4 engines): each comm's
// connection 0, which carries its small messages, has an engine of its own
// (UCCL_NCCL_SPREAD), and both pairs still carry data, byte-checked.
void scenario_placement(Api& a) {
  void *sc[2], *rc[2], *lc[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(connect_pair(a, 0, &sc[i], &rc[i], &lc[i]), "connect/accept %d", i);
  }
  std::vector<uint8_t> sbufs[2], rbufs[2];
  CloseOnReturn closer(a, {sc[0], sc[1]}, {rc[0], rc[1]}, {lc[0], lc[1]});
  {
    std::lock_guard<std::mutex> lock(g_lanes_mu);
    REQUIRE(g_lanes.size() == 4, "%zu comms logged their engines",
            g_lanes.size());
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < i; ++j) {
        CHECK_THAT(g_lanes[i] != g_lanes[j],
                   "comms %d and %d both have connection 0 on engine %d", j, i,
                   g_lanes[i]);
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t>& sbuf = sbufs[i];
    std::vector<uint8_t>& rbuf = rbufs[i];
    sbuf.assign(3000, 0);
    rbuf.assign(4096, 0);
    for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 7 + i);
    exchange_once(a, sc[i], rc[i], sbuf, rbuf, i == 0 ? "pair 0" : "pair 1");
  }
  closer.dismiss();
  for (int i = 0; i < 2; ++i) {
    a.close_send(sc[i]);
    a.close_recv(rc[i]);
    a.close_listen(lc[i]);
  }
}

// UCCL_NCCL_STEER_THREADS (run with UCCL_NCCL_ENGINES=1 and a
// UCCL_CORE_LOCK_DIR of its own, so that other processes' claims on this
// host change nothing): a thread that connects and accepts, and one that
// only sends and receives, leave the cores engines are pinned to, this
// process's and those other processes claim in the lock directory
// (CONFORMANCE_STEER_CLAIM=1: this scenario holds the claim of the
// second-highest CPU, as another process would; files not named
// uccl-core-<n>.lock do not count), where other CPUs remain. The process's
// main thread (which loaded the plugin here, and calls none of those)
// keeps its CPUs through connect and accept and leaves those cores too at
// the first send or receive (not with UCCL_NCCL_STEER_MAIN=0). Off: nobody
// moves.
void scenario_steer(Api& a) {
  const char* knob = std::getenv("UCCL_NCCL_STEER_THREADS");
  const bool steer = knob == nullptr || std::strcmp(knob, "0") != 0;
  const char* main_knob = std::getenv("UCCL_NCCL_STEER_MAIN");
  const bool steer_main =
      steer && (main_knob == nullptr || std::strcmp(main_knob, "0") != 0);
  const char* dir = std::getenv("UCCL_CORE_LOCK_DIR");
  REQUIRE(dir != nullptr && *dir != 0 && std::strcmp(dir, "/dev/shm") != 0,
          "run with a UCCL_CORE_LOCK_DIR of its own");
  const char* claim = std::getenv("CONFORMANCE_STEER_CLAIM");
  const std::vector<int> cpus = uccl::allowed_cpus();
  REQUIRE(!cpus.empty(), "no allowed CPUs");
  std::vector<int> fds;
  std::vector<std::string> files;
  auto hold = [&](const std::string& name) {
    files.push_back(std::string(dir) + "/" + name);
    const int fd =
        open(files.back().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return false;
    fds.push_back(fd);
    return flock(fd, LOCK_EX | LOCK_NB) == 0;
  };
  // The engine takes the highest CPU; another process, the one below.
  const int other =
      claim != nullptr && std::strcmp(claim, "1") == 0 && cpus.size() >= 2
          ? cpus[cpus.size() - 2]
          : -1;
  if (other >= 0) {
    REQUIRE(hold("uccl-core-" + std::to_string(other) + ".lock"), "lock");
  }
  REQUIRE(hold("uccl-core-" + std::to_string(cpus.front()) + ".lockx") &&
              hold("uccl-core-x.lock"),
          "decoy locks");
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  std::vector<int> connector_cpus, sender_cpus;
  std::thread connector([&] {
    if (connect_pair(a, 0, &sc, &rc, &lc))
      connector_cpus = uccl::allowed_cpus();
  });
  connector.join();
  REQUIRE(sc != nullptr && rc != nullptr, "connect/accept");
  REQUIRE(syscall(SYS_gettid) == getpid(), "run on the main thread");
  const std::vector<int> main_after_connect = uccl::allowed_cpus();
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  std::vector<int> engines = uccl::testing::pinned_engine_cores(1);
  REQUIRE(engines.size() == 1, "%zu engine cores pinned, want 1",
          engines.size());
  std::vector<int> avoid = engines;
  if (other >= 0) avoid.push_back(other);
  std::vector<int> want;
  for (int c : cpus) {
    if (std::find(avoid.begin(), avoid.end(), c) == avoid.end()) {
      want.push_back(c);
    }
  }
  if (!steer || want.empty()) want = cpus;
  std::thread sender([&] {
    std::vector<uint8_t> sbuf(70000), rbuf(70000);
    for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 11 + 3);
    exchange_once(a, sc, rc, sbuf, rbuf, "sender thread");
    sender_cpus = uccl::allowed_cpus();
  });
  sender.join();
  CHECK_THAT(connector_cpus == want,
             "connecting thread may run on %s, want %s (engine on %d, "
             "other process's claim %d, steering %s)",
             uccl::format_cpu_list(connector_cpus).c_str(),
             uccl::format_cpu_list(want).c_str(), engines[0], other,
             steer ? "on" : "off");
  CHECK_THAT(sender_cpus == want, "sending thread may run on %s, want %s",
             uccl::format_cpu_list(sender_cpus).c_str(),
             uccl::format_cpu_list(want).c_str());
  CHECK_THAT(main_after_connect == cpus,
             "the main thread may run on %s after connect, had %s",
             uccl::format_cpu_list(main_after_connect).c_str(),
             uccl::format_cpu_list(cpus).c_str());
  const std::vector<int>& want_main = steer_main ? want : cpus;
  CHECK_THAT(uccl::allowed_cpus() == want_main,
             "the main thread may run on %s after the first send, want %s",
             uccl::format_cpu_list(uccl::allowed_cpus()).c_str(),
             uccl::format_cpu_list(want_main).c_str());
  closer.dismiss();
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
  for (int fd : fds) close(fd);
  for (const std::string& f : files) unlink(f.c_str());
}

// UCCL_NCCL_ENGINES=0 and UCCL_NCCL_CONNS=0 (run with LOCAL_WORLD_SIZE
// set): the plugin starts auto_engines() of this host's usable CPUs over
// the local ranks (three quarters of the share, 1 to 8), gives each comm
// auto_conns() of them (half, 1 to 6), and a message cut over all of them
// arrives whole. The rules themselves are unit-tested (stripe_test.cc);
// here the loaded plugin must follow them.
void scenario_auto_engines(Api& a) {
  const char* lws = std::getenv("LOCAL_WORLD_SIZE");
  REQUIRE(lws != nullptr && std::atoi(lws) > 0, "run with LOCAL_WORLD_SIZE");
  const int cpus = uccl::usable_cpu_count();  // affinity, or the cgroup's quota
  REQUIRE(cpus > 0, "no usable CPUs");
  const int want_engines = uccl::nccl::auto_engines(cpus, std::atoi(lws));
  const int want_conns = uccl::nccl::auto_conns(want_engines);
  CHECK_THAT(g_chosen_engines.load() == want_engines,
             "%d CPUs, %s local ranks: chose %d engines, want %d", cpus, lws,
             g_chosen_engines.load(), want_engines);
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  CHECK_THAT(g_started_engines.load() == want_engines,
             "the endpoint started %d engines, want %d",
             g_started_engines.load(), want_engines);
  CHECK_THAT(g_comm_conns.load() == want_conns, "%d connections, want %d",
             g_comm_conns.load(), want_conns);
  // Longer than every part's share: all connections carry bytes.
  std::vector<uint8_t> sbuf((size_t{2} << 20) + 333), rbuf(sbuf.size() + 4096);
  for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 13 + 5);
  exchange_once(a, sc, rc, sbuf, rbuf, "striped message");
  closer.dismiss();
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// Idle engines (run with UCCL_NCCL_ENGINES=1; CONFORMANCE_IDLE_AFTER_MS and
// CONFORMANCE_IDLE_WAIT_US: the policy the endpoint must log). A comm pair
// exchanges six messages, byte-checked, the second after 300 ms idle and
// the others after 50 ms. Where the policy sleeps after less than 50 ms the
// engine must have slept, and commands or datagrams must have woken it
// early; where it sleeps after more than 300 ms, it must not have slept.
void scenario_idle(Api& a) {
  const char* after = std::getenv("CONFORMANCE_IDLE_AFTER_MS");
  const char* wait = std::getenv("CONFORMANCE_IDLE_WAIT_US");
  REQUIRE(after && wait, "run with CONFORMANCE_IDLE_AFTER_MS/_WAIT_US");
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  CHECK_THAT(g_idle_after_ms.load() == std::atoi(after) &&
                 g_idle_wait_us.load() == std::atoi(wait),
             "the endpoint logged sleeps after %d ms, %d us per wait; want "
             "%s ms, %s us",
             g_idle_after_ms.load(), g_idle_wait_us.load(), after, wait);
  std::vector<uint8_t> sbuf(1000), rbuf(4096);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(i == 1 ? 300 : 50));
    for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 3 + i);
    exchange_once(a, sc, rc, sbuf, rbuf, "after idle");
  }
  closer.dismiss();
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
  const int after_ms = std::atoi(after);
  if (after_ms < 50) {
    CHECK_THAT(g_idle_sleeps.load() > 0, "the engine slept %d times",
               g_idle_sleeps.load());
    CHECK_THAT(g_idle_wakes.load() > 0, "no sleep of %d was woken early",
               g_idle_sleeps.load());
  } else if (after_ms > 300) {
    CHECK_THAT(g_idle_sleeps.load() == 0,
               "the engine slept %d times, idle for 300 ms at most",
               g_idle_sleeps.load());
  }
}

// One process driving two GPUs (ncclCommInitAll): each GPU's calls get an
// endpoint of their own, keyed by the caller's CUDA device, and comms
// between them carry data. A caller with no CUDA context shares a third.
void scenario_per_gpu(Api& a) {
  REQUIRE(g_fake_set_device != nullptr, "fake libcuda not loaded");
  g_fake_set_device(0);
  char handle[kHandleMaxSize];
  void *lc = nullptr, *rc = nullptr, *sc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen on GPU 0");
  std::atomic<bool> connected{false};
  std::thread gpu1([&] {  // GPU 1's proxy thread connects
    g_fake_set_device(1);
    const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
    while (sc == nullptr && uccl::monotonic_ns() < until) {
      if (a.connect(0, handle, &sc) != kSuccess) break;
    }
    connected = sc != nullptr;
  });
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while (rc == nullptr && uccl::monotonic_ns() < until) {
    if (a.accept(lc, &rc) != kSuccess) break;
  }
  gpu1.join();
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  REQUIRE(connected.load() && rc != nullptr, "GPU 1 -> GPU 0 comm");
  CHECK_THAT(g_endpoints_up[1] == 1 && g_endpoints_up[2] == 1,
             "endpoints: GPU 0 %d, GPU 1 %d", g_endpoints_up[1].load(),
             g_endpoints_up[2].load());
  // GPU 0 again: its endpoint; a thread without a context: a shared one.
  char h2[kHandleMaxSize];
  void* lc2 = nullptr;
  REQUIRE(a.listen(0, h2, &lc2) == kSuccess, "second listen on GPU 0");
  CHECK_THAT(g_endpoints_up[1] == 1, "GPU 0 got a second endpoint");
  a.close_listen(lc2);
  std::thread none([&] {
    char h3[kHandleMaxSize];
    void* lc3 = nullptr;
    if (a.listen(0, h3, &lc3) == kSuccess) a.close_listen(lc3);
  });
  none.join();
  CHECK_THAT(g_endpoints_up[0] == 1, "no-context endpoint: %d",
             g_endpoints_up[0].load());
  // Data across the two GPUs' endpoints, every byte checked.
  std::vector<uint8_t> sbuf(1 << 20), rbuf(1 << 20);
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(
      a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess &&
          a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
      "regMr");
  for (int m = 0; m < 20; ++m) {
    const size_t len = (m * 77773) % sbuf.size();
    uccl::fill_pattern(sbuf.data(), len, 40 + m);
    void *sr = nullptr, *rr = nullptr;
    void* data = rbuf.data();
    size_t size = rbuf.size();
    int tag = 0;
    while (rr == nullptr) {
      REQUIRE(a.irecv(rc, 1, &data, &size, &tag, &rmh, &rr) == kSuccess,
              "irecv");
    }
    while (sr == nullptr) {
      REQUIRE(a.isend(sc, sbuf.data(), len, 0, smh, &sr) == kSuccess, "isend");
    }
    // Both sides tested in turn: a striped receive posts its later parts
    // from test() (uccl/striped.h).
    int got = -1, sdone = 0, rdone = 0;
    const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
    while ((!sdone || !rdone) && uccl::monotonic_ns() < until) {
      if (!sdone)
        REQUIRE(a.test(sr, &sdone, nullptr) == kSuccess, "send %d", m);
      if (!rdone) REQUIRE(a.test(rr, &rdone, &got) == kSuccess, "recv %d", m);
    }
    REQUIRE(sdone && rdone, "message %d timed out", m);
    CHECK_THAT(got == static_cast<int>(len), "message %d: %d bytes", m, got);
    CHECK_THAT(uccl::find_pattern_mismatch(rbuf.data(), len, 40 + m) == -1,
               "message %d corrupted", m);
  }
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
}

// iflush after each receive, as NCCL calls it for GPU memory: with
// UCCL_NCCL_FLUSH=read a one-byte read back through the endpoint's
// loopback connection (collective/gpu_direct.h) that must complete; with
// the default, host memory needs none (a NULL request).
void scenario_flush(Api& a) {
  const char* mode = std::getenv("UCCL_NCCL_FLUSH");
  const bool reads = mode != nullptr && std::string(mode) == "read";
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  std::vector<uint8_t> sbuf(1 << 20), rbuf(2 << 20);
  void *smh = nullptr, *rmh = nullptr;
  REQUIRE(
      a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess &&
          a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
      "regMr");
  int flushed = 0;
  for (int m = 0; m < 40; ++m) {
    const size_t len = 1 + (m * 52361) % sbuf.size();
    uccl::fill_pattern(sbuf.data(), len, 90 + m);
    // Receive at an offset of the region: the read-back's offset follows.
    uint8_t* at = rbuf.data() + (m % 3) * 4096;
    void *sr = nullptr, *rr = nullptr, *data = at;
    size_t size = sbuf.size();
    int tag = 0;
    while (rr == nullptr) {
      REQUIRE(a.irecv(rc, 1, &data, &size, &tag, &rmh, &rr) == kSuccess,
              "irecv");
    }
    while (sr == nullptr) {
      REQUIRE(a.isend(sc, sbuf.data(), len, 0, smh, &sr) == kSuccess, "isend");
    }
    int got = -1, sdone = 0, rdone = 0;
    const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
    while ((!sdone || !rdone) && uccl::monotonic_ns() < until) {
      if (!sdone) REQUIRE(a.test(sr, &sdone, nullptr) == kSuccess, "send");
      if (!rdone) REQUIRE(a.test(rr, &rdone, &got) == kSuccess, "recv");
    }
    REQUIRE(sdone && rdone && got == static_cast<int>(len), "message %d", m);
    void* fr = reinterpret_cast<void*>(0x1);
    int fsize = got;
    REQUIRE(a.iflush(rc, 1, &data, &fsize, &rmh, &fr) == kSuccess, "iflush");
    if (!reads) {
      CHECK_THAT(fr == nullptr, "host memory needs no flush");
      continue;
    }
    REQUIRE(fr != nullptr, "iflush %d: no request", m);
    REQUIRE(wait_req(a, fr, nullptr) == kSuccess, "flush %d", m);
    ++flushed;
    CHECK_THAT(uccl::find_pattern_mismatch(at, len, 90 + m) == -1,
               "message %d corrupted", m);
  }
  CHECK_THAT(!reads || flushed == 40, "%d flushes", flushed);
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
}

// maxRecvs > 1 (UCCL_NCCL_MAX_RECVS=8): grouped receives, tags pick buffers.
void scenario_grouped(Api& a) {
  PropertiesV12 p;
  REQUIRE(a.props(0, &p) == kSuccess, "props");
  REQUIRE(p.maxRecvs == 8, "run with UCCL_NCCL_MAX_RECVS=8 (maxRecvs %d)",
          p.maxRecvs);
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  const int n = 4;
  std::vector<uint8_t> sbuf(4 * 65536), rbuf(4 * 65536);
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  void *smh, *rmh;
  REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
          "regMr");
  REQUIRE(a.reg_mr(rc, rbuf.data(), rbuf.size(), kPtrHost, &rmh) == kSuccess,
          "regMr");
  for (int round = 0; round < 3; ++round) {
    void* data[n];
    size_t sizes[n];
    int tags[n];
    void* mhs[n];
    for (int i = 0; i < n; ++i) {
      data[i] = rbuf.data() + i * 65536;
      sizes[i] = 65536;
      tags[i] = 10 + i;
      mhs[i] = rmh;
    }
    void* rr = nullptr;
    REQUIRE(a.irecv(rc, n, data, sizes, tags, mhs, &rr) == kSuccess && rr,
            "grouped irecv");
    const int order[n] = {2, 0, 3, 1};  // sent out of tag order
    std::vector<void*> sr;
    for (int k = 0; k < n; ++k) {
      const int i = order[k];
      uint8_t* b = sbuf.data() + i * 65536;
      const size_t len = 1000 * (i + 1) + round;
      uccl::fill_pattern(b, len, 50 + i + round * 10);
      void* r = nullptr;
      REQUIRE(a.isend(sc, b, len, 10 + i, smh, &r) == kSuccess && r, "isend");
      sr.push_back(r);
    }
    int got[n];
    CHECK_THAT(wait_req(a, rr, got) == kSuccess, "grouped receive");
    for (int i = 0; i < n; ++i) {
      const size_t len = 1000 * (i + 1) + round;
      CHECK_THAT(got[i] == static_cast<int>(len), "buffer %d size %d", i,
                 got[i]);
      CHECK_THAT(uccl::find_pattern_mismatch(rbuf.data() + i * 65536, len,
                                             50 + i + round * 10) < 0,
                 "buffer %d (tag %d) has another message's bytes", i, 10 + i);
    }
    for (void* r : sr) CHECK_THAT(wait_req(a, r, nullptr) == kSuccess, "send");
  }
  closer.dismiss();
  a.dereg_mr(sc, smh);
  a.dereg_mr(rc, rmh);
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// Close orders NCCL may use: with requests pending, receiver first, sender
// first, and a listen comm closed before anything connected.
void scenario_close(Api& a) {
  for (int order = 0; order < 2; ++order) {
    void *sc, *rc, *lc;
    REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
    // Separate buffers: the two sides run on different engine threads.
    std::vector<uint8_t> sbuf(1 << 20), buf(1 << 20);
    CloseOnReturn closer(a, {sc}, {rc}, {lc});
    void *smh, *rmh;
    REQUIRE(a.reg_mr(sc, sbuf.data(), sbuf.size(), kPtrHost, &smh) == kSuccess,
            "regMr");
    REQUIRE(a.reg_mr(rc, buf.data(), buf.size(), kPtrHost, &rmh) == kSuccess,
            "regMr");
    // A completed exchange, then pending ones in the direction closed.
    void *sr = nullptr, *rr = nullptr;
    void* d = buf.data();
    size_t sz = buf.size();
    int tag = 0;
    REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &rr) == kSuccess && rr,
            "irecv");
    REQUIRE(a.isend(sc, sbuf.data(), 4096, 0, smh, &sr) == kSuccess && sr,
            "isend");
    CHECK_THAT(wait_req(a, rr, nullptr) == kSuccess, "recv");
    CHECK_THAT(wait_req(a, sr, nullptr) == kSuccess, "send");
    // A handle belongs to the comm it was registered on; one left
    // registered on each comm is deregistered by the close.
    void *left_s = nullptr, *left_r = nullptr;
    REQUIRE(a.reg_mr(sc, sbuf.data(), 8192, kPtrHost, &left_s) == kSuccess,
            "regMr");
    REQUIRE(a.reg_mr(rc, buf.data(), 8192, kPtrHost, &left_r) == kSuccess,
            "regMr");
    CHECK_THAT(a.dereg_mr(rc, left_s) != kSuccess,
               "deregMr of the send comm's handle on the recv comm");
    const int closed_mrs = g_closed_mrs.load();
    void* pending = nullptr;
    closer.dismiss();  // each branch closes everything, in its order
    if (order == 0) {
      REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &rmh, &pending) == kSuccess,
              "irecv");
      CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_recv(rc) == kSuccess,
                 "closeRecv with a receive pending");
      CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend after the peer left");
    } else {
      REQUIRE(a.isend(sc, sbuf.data(), 4096, 0, smh, &pending) == kSuccess,
              "isend");
      CHECK_THAT(a.dereg_mr(sc, smh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend with a send pending");
      CHECK_THAT(a.dereg_mr(rc, rmh) == kSuccess, "deregMr");
      CHECK_THAT(a.close_recv(rc) == kSuccess, "closeRecv after the peer left");
    }
    CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
    CHECK_THAT(g_closed_mrs.load() == closed_mrs + 2,
               "closing freed %d memory handles, want 2",
               g_closed_mrs.load() - closed_mrs);
  }
  char handle[kHandleMaxSize];
  void* lc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess && lc, "listen");
  CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen unused");
}

// Two processes: the parent receives, a child (this program again) sends;
// the handle crosses through the child's command line, as NCCL's bootstrap
// would carry it.
std::string hex(const void* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t b = static_cast<const uint8_t*>(p)[i];
    s += k[b >> 4];
    s += k[b & 15];
  }
  return s;
}
bool unhex(const std::string& s, void* out, size_t n) {
  if (s.size() != 2 * n) return false;
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i)
    static_cast<uint8_t*>(out)[i] =
        static_cast<uint8_t>(v(s[2 * i]) << 4 | v(s[2 * i + 1]));
  return true;
}

// On any failure of the scenario, what the child process said (after it
// ends, or `wait_ms`).
struct ShowChildOnFailure {
  uccl::testing::Subprocess* c;
  const char* who;
  int wait_ms;
  ~ShowChildOnFailure() {
    if (g_failures) {
      c->wait(wait_ms);
      std::fprintf(stderr, "---- %s process ----\n%s\n", who,
                   c->output().c_str());
    }
  }
};

const int kTwoProcSteps = 64;

void twoproc_sender(Api& a, const std::string& hexhandle) {
  char handle[kHandleMaxSize];
  REQUIRE(unhex(hexhandle, handle, sizeof(handle)), "handle");
  void* sc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while (sc == nullptr && uccl::monotonic_ns() < until) {
    REQUIRE(a.connect(0, handle, &sc) == kSuccess, "connect");
  }
  REQUIRE(sc != nullptr, "connect did not finish");
  std::vector<std::vector<uint8_t>> bufs(32, std::vector<uint8_t>(4 << 20));
  CloseOnReturn closer(a, {sc}, {}, {});
  std::vector<void*> mhs;
  for (auto& b : bufs) {
    void* mh;
    REQUIRE(a.reg_mr(sc, b.data(), b.size(), kPtrHost, &mh) == kSuccess,
            "regMr");
    mhs.push_back(mh);
  }
  std::vector<void*> req(kTwoProcSteps, nullptr);
  int sent = 0, done = 0;
  const uint64_t end = uccl::monotonic_ns() + 120000000000ull;
  while (done < kTwoProcSteps && uccl::monotonic_ns() < end) {
    if (sent < kTwoProcSteps && sent - done < 32) {
      auto& b = bufs[sent % 32];
      uccl::fill_pattern(b.data(), step_size(sent), 2000 + sent);
      REQUIRE(a.isend(sc, b.data(), step_size(sent), 0, mhs[sent % 32],
                      &req[sent]) == kSuccess,
              "isend");
      if (req[sent]) ++sent;
    }
    if (done < sent) {
      int dn = 0;
      REQUIRE(a.test(req[done], &dn, nullptr) == kSuccess, "send test %d",
              done);
      if (dn) ++done;
    }
  }
  CHECK_THAT(done == kTwoProcSteps, "sent %d", done);
  closer.dismiss();
  for (void* mh : mhs) a.dereg_mr(sc, mh);
  a.close_send(sc);
}

// CONFORMANCE_SENDER_ENV="VAR=value,..." gives the sending process its own
// settings (a rank whose UCCL_* knobs differ from the receiver's).
void scenario_twoproc(Api& a, const std::string& self) {
  char handle[kHandleMaxSize];
  void* lc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
  std::vector<std::string> argv = {"/usr/bin/env"};
  if (const char* e = std::getenv("CONFORMANCE_SENDER_ENV")) {
    std::string s = e;
    for (size_t at = 0; at < s.size();) {
      size_t comma = s.find(',', at);
      if (comma == std::string::npos) comma = s.size();
      if (comma > at) argv.push_back(s.substr(at, comma - at));
      at = comma + 1;
    }
  }
  argv.insert(argv.end(),
              {self, "--scenario=twoproc_sender", "--plugin=" + g_plugin,
               "--version=" + std::to_string(a.version),
               "--handle=" + hex(handle, sizeof(handle))});
  uccl::testing::Subprocess child(argv);
  REQUIRE(child.started(), "spawn");
  ShowChildOnFailure show{&child, "sender", 20000};
  void* rc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while (rc == nullptr && uccl::monotonic_ns() < until) {
    REQUIRE(a.accept(lc, &rc) == kSuccess, "accept");
  }
  REQUIRE(rc != nullptr, "accept did not finish:\n%s", child.output().c_str());
  const size_t kSlot = 4 << 20;
  std::vector<uint8_t> big(8 * kSlot);
  CloseOnReturn closer(a, {}, {rc}, {lc});
  void* mh;
  REQUIRE(a.reg_mr(rc, big.data(), big.size(), kPtrHost, &mh) == kSuccess,
          "regMr");
  std::vector<void*> req(kTwoProcSteps, nullptr);
  int posted = 0, done = 0;
  const uint64_t end = uccl::monotonic_ns() + 120000000000ull;
  while (done < kTwoProcSteps && uccl::monotonic_ns() < end) {
    if (posted < kTwoProcSteps && posted - done < 8) {
      void* d = big.data() + (posted % 8) * kSlot;
      size_t sz = kSlot;
      int tag = 0;
      REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &mh, &req[posted]) == kSuccess,
              "irecv");
      if (req[posted]) ++posted;
    }
    if (done < posted) {
      int dn = 0, size = -1;
      REQUIRE(a.test(req[done], &dn, &size) == kSuccess, "recv test %d", done);
      if (dn) {
        const size_t n = step_size(done);
        CHECK_THAT(size == static_cast<int>(n), "size %d want %zu", size, n);
        CHECK_THAT(uccl::find_pattern_mismatch(big.data() + (done % 8) * kSlot,
                                               n, 2000 + done) < 0,
                   "bytes of message %d", done);
        ++done;
      }
    }
  }
  CHECK_THAT(done == kTwoProcSteps, "received %d", done);
  closer.dismiss();
  const int rc_child = child.wait(60000);
  CHECK_THAT(rc_child == 0, "sender process exited %d:\n%s", rc_child,
             child.output().c_str());
  a.dereg_mr(rc, mh);
  a.close_recv(rc);
  a.close_listen(lc);
  std::printf("  %d messages from another process checked\n", done);
}

// A peer process that dies (SIGKILL) with a request pending: the request
// fails, with an error, within seconds (the engine sees the bootstrap
// socket close), not never; later calls fail too, and the close succeeds.
// Both ways: the child sends and this process receives, then the reverse.
// The child does two exchanges first (the connection works), says so on
// its output, and then waits to be killed.
const int kKilledWarmup = 2;
const size_t kKilledBytes = 65536;

void killed_child(Api& a, const std::string& role, const std::string& hexh) {
  const bool sends = role == "send";
  void* comm = nullptr;
  void* lc = nullptr;
  char handle[kHandleMaxSize];
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  if (sends) {
    REQUIRE(unhex(hexh, handle, sizeof(handle)), "handle");
    while (comm == nullptr && uccl::monotonic_ns() < until) {
      REQUIRE(a.connect(0, handle, &comm) == kSuccess, "connect");
    }
  } else {
    REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
    std::printf("HANDLE=%s\n", hex(handle, sizeof(handle)).c_str());
    std::fflush(stdout);
    while (comm == nullptr && uccl::monotonic_ns() < until) {
      REQUIRE(a.accept(lc, &comm) == kSuccess, "accept");
    }
  }
  REQUIRE(comm != nullptr, "no connection");
  std::vector<uint8_t> buf(kKilledWarmup * kKilledBytes);
  void* mh = nullptr;
  REQUIRE(a.reg_mr(comm, buf.data(), buf.size(), kPtrHost, &mh) == kSuccess,
          "regMr");
  for (int i = 0; i < kKilledWarmup; ++i) {
    uint8_t* p = buf.data() + i * kKilledBytes;
    void* r = nullptr;
    if (sends) {
      uccl::fill_pattern(p, kKilledBytes, 3000 + i);
      REQUIRE(a.isend(comm, p, kKilledBytes, 0, mh, &r) == kSuccess && r,
              "isend");
    } else {
      void* d = p;
      size_t sz = kKilledBytes;
      int tag = 0;
      REQUIRE(a.irecv(comm, 1, &d, &sz, &tag, &mh, &r) == kSuccess && r,
              "irecv");
    }
    REQUIRE(wait_req(a, r, nullptr) == kSuccess, "exchange %d", i);
    if (!sends) {
      REQUIRE(uccl::find_pattern_mismatch(p, kKilledBytes, 4000 + i) < 0,
              "bytes of message %d", i);
    }
  }
  std::printf("WARMED\n");
  std::fflush(stdout);
  sleep(120);  // the parent kills us long before
}

void scenario_killed_peer(Api& a, const std::string& self) {
  for (const std::string role : {"send", "recv"}) {
    // role: what the child does; this process does the other.
    const bool child_sends = role == "send";
    char handle[kHandleMaxSize];
    void* lc = nullptr;
    std::vector<std::string> argv = {self, "--scenario=killed_child",
                                     "--role=" + role, "--plugin=" + g_plugin,
                                     "--version=" + std::to_string(a.version)};
    if (child_sends) {
      REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
      argv.push_back("--handle=" + hex(handle, sizeof(handle)));
    }
    uccl::testing::Subprocess child(argv);
    REQUIRE(child.started(), "spawn");
    ShowChildOnFailure show{&child, "child", 5000};
    void* comm = nullptr;
    const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
    if (child_sends) {
      while (comm == nullptr && uccl::monotonic_ns() < until) {
        REQUIRE(a.accept(lc, &comm) == kSuccess, "accept");
      }
    } else {
      REQUIRE(child.wait_for_output("HANDLE=", 20000), "no handle from child");
      const std::string& out = child.output();
      const size_t at = out.find("HANDLE=") + 7;
      REQUIRE(unhex(out.substr(at, 2 * sizeof(handle)), handle, sizeof(handle)),
              "handle");
      while (comm == nullptr && uccl::monotonic_ns() < until) {
        REQUIRE(a.connect(0, handle, &comm) == kSuccess, "connect");
      }
    }
    REQUIRE(comm != nullptr, "connection to the child did not finish");
    std::vector<uint8_t> buf((kKilledWarmup + 2) * kKilledBytes);
    CloseOnReturn closer(
        a, child_sends ? std::vector<void*>{} : std::vector<void*>{comm},
        child_sends ? std::vector<void*>{comm} : std::vector<void*>{},
        lc ? std::vector<void*>{lc} : std::vector<void*>{});
    void* mh = nullptr;
    REQUIRE(a.reg_mr(comm, buf.data(), buf.size(), kPtrHost, &mh) == kSuccess,
            "regMr");
    // Posts exchange i from our side: a receive if the child sends.
    auto post = [&](int i, void** r) {
      uint8_t* p = buf.data() + i * kKilledBytes;
      if (child_sends) {
        void* d = p;
        size_t sz = kKilledBytes;
        int tag = 0;
        return a.irecv(comm, 1, &d, &sz, &tag, &mh, r);
      }
      uccl::fill_pattern(p, kKilledBytes, 4000 + i);
      return a.isend(comm, p, kKilledBytes, 0, mh, r);
    };
    for (int i = 0; i < kKilledWarmup; ++i) {
      void* r = nullptr;
      REQUIRE(post(i, &r) == kSuccess && r, "post %d", i);
      REQUIRE(wait_req(a, r, nullptr, 20000) == kSuccess, "exchange %d", i);
      if (child_sends) {
        CHECK_THAT(uccl::find_pattern_mismatch(buf.data() + i * kKilledBytes,
                                               kKilledBytes, 3000 + i) < 0,
                   "bytes of message %d", i);
      }
    }
    REQUIRE(child.wait_for_output("WARMED", 20000), "child not warmed up");
    // One more request that the child will never match, then the crash.
    void* pending = nullptr;
    REQUIRE(post(kKilledWarmup, &pending) == kSuccess && pending, "post");
    child.kill_now();
    const uint64_t t0 = uccl::monotonic_ns();
    const int g0 = g_warnings.load();
    const int r = wait_req(a, pending, nullptr, 20000);
    const double took_s = (uccl::monotonic_ns() - t0) / 1e9;
    CHECK_THAT(r != kSuccess && r != -1,
               "%s: the pending request must fail once the peer is killed "
               "(test returned %d after %.1f s)",
               role.c_str(), r, took_s);
    CHECK_THAT(took_s < 10, "%s: the failure took %.1f s", role.c_str(),
               took_s);
    CHECK_THAT(g_warnings.load() > g0, "%s: the failure must be logged (WARN)",
               role.c_str());
    // Later requests on the dead comm fail too (at the call or the test).
    void* late = nullptr;
    const int pr = post(kKilledWarmup + 1, &late);
    CHECK_THAT(pr != kSuccess ||
                   (late != nullptr && wait_req(a, late, nullptr, 20000) > 0),
               "%s: a request posted after the failure must fail",
               role.c_str());
    closer.dismiss();
    CHECK_THAT(a.dereg_mr(comm, mh) == kSuccess, "deregMr");
    CHECK_THAT(
        (child_sends ? a.close_recv(comm) : a.close_send(comm)) == kSuccess,
        "close after the peer died");
    if (lc) CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
    std::printf("  child %s killed: pending request failed after %.3f s\n",
                role.c_str(), took_s);
  }
}

// The tuner exported beside the net plugin (ncclTunerPlugin_v4), driven the
// way NCCL drives it: init per communicator, getCollInfo per collective on
// a float[7][3] cost table, destroy. The net plugin is initialised first
// (NCCL loads the tuner after the net), so its devices are known.
void scenario_tuner(Api&) {
  void* lib = dlopen(g_plugin.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr, "plugin not loaded");
  auto* t = static_cast<const TunerV4*>(dlsym(lib, "ncclTunerPlugin_v4"));
  REQUIRE(t != nullptr && t->init && t->getCollInfo && t->destroy,
          "no ncclTunerPlugin_v4");
  CHECK_THAT(std::strcmp(t->name, "UCCL") == 0, "name %s", t->name);
  const char* kb = std::getenv("UCCL_NCCL_LL_MAX_KB");
  const char* on = std::getenv("UCCL_NCCL_TUNER");
  const bool off = on != nullptr && std::strcmp(on, "0") == 0;
  const size_t max_per_rank = (kb ? std::atoi(kb) : 64) * size_t{1024};
  const char* tb = std::getenv("UCCL_NCCL_TREE_MAX_BYTES");
  const size_t tree_max = tb ? std::strtoull(tb, nullptr, 10) : 512;
  constexpr int kAlgos = 7, kProtos = 3;
  // A table with every entry allowed except Tree/LL128 and CollNet (2, 3).
  auto fresh = [](float* tab) {
    for (int i = 0; i < kAlgos * kProtos; ++i) tab[i] = 10.0f + i;
    tab[0 * kProtos + kProtoLL128] = kAlgoProtoIgnore;
    for (int p = 0; p < kProtos; ++p) {
      tab[2 * kProtos + p] = tab[3 * kProtos + p] = kAlgoProtoIgnore;
    }
  };
  // One getCollInfo on `tab`, which must leave nChannels alone.
  auto call = [&](void* ctx, int coll, size_t bytes, float* tab) {
    int nch = 77;
    CHECK_THAT(
        t->getCollInfo(ctx, coll, bytes, 1, reinterpret_cast<float**>(tab),
                       kAlgos, kProtos, 0, &nch) == kSuccess,
        "getCollInfo");
    CHECK_THAT(nch == 77, "nChannels changed to %d", nch);
  };
  // Calls getCollInfo; returns whether it left LL/LL128 disallowed
  // everywhere while Simple, nChannels and the ignored entries are as given.
  auto run = [&](void* ctx, int coll, size_t bytes, bool* changed) {
    float tab[kAlgos * kProtos], want[kAlgos * kProtos];
    fresh(tab);
    fresh(want);
    call(ctx, coll, bytes, tab);
    bool all_ll_off = true, same = true;
    for (int a = 0; a < kAlgos; ++a) {
      for (int p = 0; p < kProtos; ++p) {
        const int i = a * kProtos + p;
        if (tab[i] != want[i]) same = false;
        if (p == kProtoSimple) {
          CHECK_THAT(tab[i] == want[i], "Simple cost of algo %d changed", a);
        } else if (tab[i] != kAlgoProtoIgnore) {
          all_ll_off = false;
        }
      }
    }
    CHECK_THAT(same || all_ll_off, "LL/LL128 only partly disallowed");
    *changed = !same;
  };
  // Calls getCollInfo on a table where Tree/LL is allowed but not the
  // cheapest (`tree_cost` < 0: disallowed); returns whether the table
  // changed, checking that a change makes Tree/LL the one cheapest entry
  // and touches nothing else.
  auto run_tree = [&](void* ctx, int coll, size_t bytes, float tree_cost,
                      bool* changed) {
    float tab[kAlgos * kProtos], want[kAlgos * kProtos];
    fresh(tab);
    tab[0 * kProtos + kProtoLL] = tree_cost;
    std::memcpy(want, tab, sizeof(tab));
    call(ctx, coll, bytes, tab);
    *changed = false;
    for (int i = 1; i < kAlgos * kProtos; ++i) {
      CHECK_THAT(tab[i] == want[i], "%zu B: entry %d changed", bytes, i);
    }
    if (tab[0] == want[0]) return;
    *changed = true;
    for (int i = 1; i < kAlgos * kProtos; ++i) {
      CHECK_THAT(tab[i] < 0 || tab[0] < tab[i],
                 "%zu B: Tree/LL %.2f is not below entry %d (%.2f)", bytes,
                 tab[0], i, tab[i]);
    }
    CHECK_THAT(tab[0] >= 0, "Tree/LL disallowed");
  };
  auto with = [&](size_t nranks, size_t nnodes,
                  const std::function<void(void*)>& body) {
    void* ctx = nullptr;
    REQUIRE(t->init(nranks, nnodes, logger, &ctx) == kSuccess && ctx,
            "tuner init");
    body(ctx);
    CHECK_THAT(t->destroy(ctx) == kSuccess, "tuner destroy");
  };
  for (const char* v : {"NCCL_PROTO", "NCCL_ALGO", "NCCL_NET",
                        "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"}) {
    unsetenv(v);
  }
  bool ch = false;
  if ((max_per_rank == 0 && tree_max == 0) || off) {  // the tuner is off
    with(2, 2, [&](void* ctx) {
      run(ctx, kFuncAllReduce, size_t{1} << 30, &ch);
      CHECK_THAT(!ch, "tuner acted while off");
      run_tree(ctx, kFuncAllReduce, 4, 50.0f, &ch);
      CHECK_THAT(!ch, "tuner moved a 4 B all_reduce to Tree while off");
    });
    return;
  }
  // Tiny all_reduce: Tree/LL where NCCL allows it, nothing else changed.
  for (size_t nranks : {2, 8}) {
    with(nranks, 2, [&](void* ctx) {
      for (size_t bytes : {size_t{0}, size_t{4}, tree_max}) {
        run_tree(ctx, kFuncAllReduce, bytes, 50.0f, &ch);
        CHECK_THAT(ch == (tree_max > 0), "%zu B all_reduce: Tree %s", bytes,
                   ch ? "chosen" : "not chosen");
      }
      run_tree(ctx, kFuncAllReduce, tree_max + 4, 50.0f, &ch);
      CHECK_THAT(!ch, "%zu B all_reduce moved to Tree", tree_max + 4);
      run_tree(ctx, kFuncAllReduce, 4, kAlgoProtoIgnore, &ch);
      CHECK_THAT(!ch, "disallowed Tree/LL allowed");
      run_tree(ctx, kFuncAllReduce, 4, 5.0f, &ch);  // already the cheapest
      CHECK_THAT(!ch, "Tree/LL changed though NCCL already chose it");
      run_tree(ctx, 2 /* all_gather */, 4, 50.0f, &ch);
      CHECK_THAT(!ch, "all_gather moved to Tree");
    });
  }
  if (max_per_rank == 0) {  // only the Tree rule: large sizes keep LL
    with(2, 2, [&](void* ctx) {
      run(ctx, kFuncAllReduce, size_t{1} << 30, &ch);
      CHECK_THAT(!ch, "LL disallowed with UCCL_NCCL_LL_MAX_KB=0");
    });
    return;
  }
  // Two nodes: all_reduce above the limit per rank moves off LL, at or
  // below it (and every other collective) keeps NCCL's table.
  for (size_t nranks : {2, 8}) {
    with(nranks, 2, [&](void* ctx) {
      const size_t limit = max_per_rank * nranks;
      run(ctx, kFuncAllReduce, limit + nranks, &ch);
      CHECK_THAT(ch, "%zu ranks: all_reduce of %zu B kept LL", nranks,
                 limit + nranks);
      run(ctx, kFuncAllReduce, limit, &ch);
      CHECK_THAT(!ch, "%zu ranks: all_reduce of %zu B changed", nranks, limit);
      run(ctx, 2 /* all_gather */, limit * 16, &ch);
      CHECK_THAT(!ch, "all_gather changed");
    });
  }
  // No Simple anywhere: NCCL keeps its only choices.
  with(2, 2, [&](void* ctx) {
    float tab[kAlgos * kProtos];
    for (float& f : tab) f = 5.0f;
    for (int a = 0; a < kAlgos; ++a) tab[a * kProtos + kProtoSimple] = -1;
    int nch = 0;
    t->getCollInfo(ctx, kFuncAllReduce, size_t{1} << 30, 1,
                   reinterpret_cast<float**>(tab), kAlgos, kProtos, 0, &nch);
    CHECK_THAT(tab[kProtoLL] == 5.0f, "LL removed with no Simple left");
  });
  const size_t big = max_per_rank * 2 * 4;
  // One node: only when NCCL is kept off its GPU paths (then the net
  // carries the traffic, as in tools/nccl_test.py).
  with(2, 1, [&](void* ctx) {
    run(ctx, kFuncAllReduce, big, &ch);
    CHECK_THAT(!ch, "one node without P2P/SHM disabled: changed");
  });
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  with(2, 1, [&](void* ctx) {
    run(ctx, kFuncAllReduce, big, &ch);
    CHECK_THAT(ch, "one node, P2P and SHM disabled: unchanged");
  });
  // The user's own choices win.
  for (const char* kv : {"NCCL_PROTO=LL", "NCCL_ALGO=Ring", "NCCL_NET=IB"}) {
    std::string s(kv);
    const std::string k = s.substr(0, s.find('='));
    setenv(k.c_str(), s.substr(s.find('=') + 1).c_str(), 1);
    with(2, 2, [&](void* ctx) {
      run(ctx, kFuncAllReduce, big, &ch);
      CHECK_THAT(!ch, "changed with %s", kv);
    });
    unsetenv(k.c_str());
  }
  setenv("NCCL_NET", "uccl", 1);  // NCCL compares net names case-blind
  with(2, 2, [&](void* ctx) {
    run(ctx, kFuncAllReduce, big, &ch);
    CHECK_THAT(ch, "NCCL_NET=uccl: unchanged");
  });
  unsetenv("NCCL_NET");
}

std::string flag(int argc, char** argv, const std::string& name,
                 const std::string& def) {
  const std::string p = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], p.c_str(), p.size()) == 0)
      return argv[i] + p.size();
  }
  return def;
}

int run_scenario(const std::string& plugin, const std::string& name,
                 int version, const std::string& self, const std::string& hexh,
                 const std::string& role) {
  Api a;
  g_plugin = plugin;
  if (name == "per_gpu") {  // CUDA's driver as the plugin will find it
    void* cuda = dlopen(UCCL_FAKE_CUDA_PATH, RTLD_NOW | RTLD_GLOBAL);
    if (cuda == nullptr) {
      std::fprintf(stderr, "dlopen %s: %s\n", UCCL_FAKE_CUDA_PATH, dlerror());
      return 2;
    }
    g_fake_set_device =
        reinterpret_cast<void (*)(int)>(dlsym(cuda, "fake_cuda_set_device"));
  }
  if (!load_api(plugin, version, &a)) return 2;
  if (name == "init_refused") {  // a bad setting: init fails, with a warning
    const bool refused = a.init() != kSuccess;
    CHECK_THAT(refused && g_warnings.load() > 0, "init took a bad setting");
    return g_failures ? 1 : 0;
  }
  if (a.init() != kSuccess) {
    std::fprintf(stderr, "FAIL init\n");
    return 1;
  }
  if (name == "props")
    scenario_props(a);
  else if (name == "data")
    scenario_data(a, 200);
  else if (name == "backpressure")
    scenario_backpressure(a);
  else if (name == "truncation")
    scenario_truncation(a);
  else if (name == "portscan")
    scenario_portscan(a);
  else if (name == "grouped")
    scenario_grouped(a);
  else if (name == "close")
    scenario_close(a);
  else if (name == "placement")
    scenario_placement(a);
  else if (name == "parts")
    scenario_parts(a);
  else if (name == "tuner")
    scenario_tuner(a);
  else if (name == "auto_engines")
    scenario_auto_engines(a);
  else if (name == "steer")
    scenario_steer(a);
  else if (name == "idle")
    scenario_idle(a);
  else if (name == "twoproc")
    scenario_twoproc(a, self);
  else if (name == "twoproc_sender")
    twoproc_sender(a, hexh);
  else if (name == "killed_peer")
    scenario_killed_peer(a, self);
  else if (name == "killed_child")
    killed_child(a, role, hexh);
  else if (name == "per_gpu")
    scenario_per_gpu(a);
  else if (name == "flush")
    scenario_flush(a);
  else {
    std::fprintf(stderr, "unknown scenario %s\n", name.c_str());
    return 2;
  }
  if (version >= 10 && name != "twoproc_sender") {
    CHECK_THAT(g_prof_bad.load() == 0, "%d malformed profiler events",
               g_prof_bad.load());
    CHECK_THAT(g_prof_start.load() == g_prof_stop.load() || name == "close" ||
                   name == "truncation",
               "profiler: %d starts, %d stops", g_prof_start.load(),
               g_prof_stop.load());
    CHECK_THAT(g_prof_update.load() == g_prof_stop.load(),
               "profiler: %d updates, %d stops", g_prof_update.load(),
               g_prof_stop.load());
    if (name == "data") {
      CHECK_THAT(g_prof_start.load() >= 400, "profiler: %d events",
                 g_prof_start.load());
      CHECK_THAT(g_prof_rtt.load() > 0, "no update carried an RTT sample");
      // Under injected loss the messages' own resends show.
      if (std::getenv("UCCL_FAULT_TX") != nullptr) {
        CHECK_THAT(g_prof_retx.load() > 0, "no resends in %d updates",
                   g_prof_update.load());
      }
    }
  }
  a.finalize();
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[n > 0 ? n : 0] = 0;
  const std::string plugin = flag(argc, argv, "plugin", UCCL_PLUGIN_PATH);
  const std::string scenario = flag(argc, argv, "scenario", "");
  if (!scenario.empty()) {
    return run_scenario(
        plugin, scenario, std::atoi(flag(argc, argv, "version", "11").c_str()),
        self, flag(argc, argv, "handle", ""), flag(argc, argv, "role", ""));
  }
  // Everything, each in a fresh process with its own UCCL_* environment.
  struct Run {
    std::string scenario;
    int version;
    std::vector<std::string> env;
  };
  std::vector<Run> runs;
  for (int v : {8, 9, 10, 11, 12}) {
    runs.push_back({"props", v, {}});
    runs.push_back({"data", v, {}});
  }
  for (const char* s : {"backpressure", "truncation", "portscan", "close",
                        "twoproc", "killed_peer"}) {
    runs.push_back({s, 11, {}});
  }
  runs.push_back({"props", 11, {"UCCL_NCCL_DEVICES=udp:lo"}});
  runs.push_back({"props",
                  11,
                  {"UCCL_NCCL_DEVICES=udp:lo", "UCCL_NCCL_SPEED_MBPS=123000"}});
  // NCCL's own interface choice, as NCCL's Socket transport reads it.
  runs.push_back({"props", 11, {"NCCL_SOCKET_IFNAME=lo"}});
  runs.push_back({"data", 11, {"NCCL_SOCKET_IFNAME==lo"}});
  runs.push_back({"init_refused", 11, {"NCCL_SOCKET_IFNAME=no_such_if"}});
  runs.push_back({"init_refused", 11, {"NCCL_IB_GID_INDEX=x"}});
  // 12 engines: lo reports 300000 (6 NCCL channels), not 400000.
  runs.push_back(
      {"props", 11, {"UCCL_NCCL_DEVICES=udp:lo", "UCCL_NCCL_ENGINES=12"}});
  runs.push_back({"grouped", 11, {"UCCL_NCCL_MAX_RECVS=8"}});
  runs.push_back({"placement", 11, {"UCCL_NCCL_ENGINES=4"}});
  runs.push_back({"parts", 11, {}});  // auto
  runs.push_back({"parts", 11, {"UCCL_NCCL_PARTS=first"}});
  runs.push_back({"parts", 11, {"UCCL_NCCL_PARTS=all"}});
  runs.push_back(
      {"parts", 11, {"UCCL_FAULT_TX=drop=0.01", "UCCL_FAULT_SEED=11"}});
  // The receiver's mode wins: the sender's own knob says first.
  runs.push_back({"twoproc",
                  11,
                  {"UCCL_NCCL_PARTS=all",
                   "CONFORMANCE_SENDER_ENV=UCCL_NCCL_PARTS=first"}});
  runs.push_back(
      {"auto_engines", 11, {"UCCL_NCCL_ENGINES=0", "LOCAL_WORLD_SIZE=1"}});
  runs.push_back(
      {"auto_engines", 11, {"UCCL_NCCL_ENGINES=0", "LOCAL_WORLD_SIZE=4"}});
  // A lock directory of the steer runs' own (removed at the end).
  char steer_dir[] = "/tmp/uccl_steer_XXXXXX";
  const std::string lock_dir = mkdtemp(steer_dir) ? steer_dir : "";
  const std::string lock_env = "UCCL_CORE_LOCK_DIR=" + lock_dir;
  runs.push_back({"steer", 11, {"UCCL_NCCL_ENGINES=1", lock_env}});
  runs.push_back(
      {"steer",
       11,
       {"UCCL_NCCL_ENGINES=1", lock_env, "CONFORMANCE_STEER_CLAIM=1"}});
  runs.push_back(
      {"steer",
       11,
       {"UCCL_NCCL_ENGINES=1", lock_env, "UCCL_NCCL_STEER_THREADS=0"}});
  runs.push_back({"steer",
                  11,
                  {"UCCL_NCCL_ENGINES=1", lock_env, "UCCL_NCCL_STEER_MAIN=0"}});
  // The plugin's default on the software NIC; what the knobs set instead.
  // An engine also sleeps only past UCCL_IDLE_SPIN_LOOPS empty loops, each
  // of which yields its core: on a busy machine 20000 of them can outlast
  // the scenario, so here the idle time alone decides.
  runs.push_back(
      {"idle",
       11,
       {"UCCL_NCCL_ENGINES=1", "UCCL_IDLE_SPIN_LOOPS=0",
        "CONFORMANCE_IDLE_AFTER_MS=10", "CONFORMANCE_IDLE_WAIT_US=1000"}});
  runs.push_back(
      {"idle",
       11,
       {"UCCL_NCCL_ENGINES=1", "UCCL_IDLE_SPIN_LOOPS=0",
        "UCCL_IDLE_SLEEP_AFTER_MS=60000", "UCCL_IDLE_SLEEP_US=20",
        "CONFORMANCE_IDLE_AFTER_MS=60000", "CONFORMANCE_IDLE_WAIT_US=20"}});
  runs.push_back({"tuner", 11, {}});
  runs.push_back({"tuner", 11, {"UCCL_NCCL_LL_MAX_KB=16"}});
  runs.push_back({"tuner", 11, {"UCCL_NCCL_LL_MAX_KB=0"}});
  runs.push_back({"tuner", 11, {"UCCL_NCCL_TREE_MAX_BYTES=0"}});
  runs.push_back(
      {"tuner", 11, {"UCCL_NCCL_LL_MAX_KB=0", "UCCL_NCCL_TREE_MAX_BYTES=0"}});
  runs.push_back({"tuner", 11, {"UCCL_NCCL_TUNER=0"}});
  runs.push_back({"grouped", 8, {"UCCL_NCCL_MAX_RECVS=8"}});
  runs.push_back({"grouped", 12, {"UCCL_NCCL_MAX_RECVS=8"}});
  runs.push_back({"per_gpu", 11, {}});
  runs.push_back({"flush", 11, {}});
  runs.push_back({"flush", 11, {"UCCL_NCCL_FLUSH=read"}});
  runs.push_back({"flush", 8, {"UCCL_NCCL_FLUSH=read"}});
  runs.push_back({"twoproc", 12, {}});
  runs.push_back(
      {"data", 11, {"UCCL_FAULT_TX=drop=0.01", "UCCL_FAULT_SEED=7"}});
  runs.push_back(
      {"twoproc", 11, {"UCCL_FAULT_TX=drop=0.01", "UCCL_FAULT_SEED=9"}});
  // The receiver's connection count and stripe win: 12 connections cut at
  // its default 86 KiB, though the sender's own knobs say 8 and 32 KiB.
  runs.push_back({"twoproc",
                  11,
                  {"UCCL_NCCL_ENGINES=12", "UCCL_NCCL_CONNS=12",
                   "CONFORMANCE_SENDER_ENV=UCCL_NCCL_ENGINES=8,"
                   "UCCL_NCCL_CONNS=8,UCCL_NCCL_STRIPE_KB=32"}});
  int failed = 0;
  for (const Run& r : runs) {
    // 8 engines (so 4 connections per comm) unless the run says otherwise:
    // the stripe-boundary sizes assume that cut, on any host's CPU count.
    std::vector<std::string> args = {"/usr/bin/env", "UCCL_NCCL_ENGINES=8"};
    for (const auto& e : r.env) args.push_back(e);
    args.push_back(self);
    args.push_back("--plugin=" + plugin);
    args.push_back("--scenario=" + r.scenario);
    args.push_back("--version=" + std::to_string(r.version));
    const uint64_t t0 = uccl::monotonic_ns();
    uccl::testing::Subprocess p(args);
    const int rc = p.wait(240000);
    std::string env;
    for (const auto& e : r.env) env += " " + e;
    std::printf("%-4s v%-2d %-13s%-45s %.1f s\n", rc == 0 ? "ok" : "FAIL",
                r.version, r.scenario.c_str(), env.c_str(),
                (uccl::monotonic_ns() - t0) / 1e9);
    if (rc != 0) {
      ++failed;
      std::printf("%s\n", p.output().c_str());
    }
    std::fflush(stdout);
  }
  if (!lock_dir.empty()) {
    if (DIR* d = opendir(lock_dir.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') unlink((lock_dir + "/" + e->d_name).c_str());
      }
      closedir(d);
    }
    rmdir(lock_dir.c_str());
  }
  std::printf("%s: %zu scenarios, %d failed\n", failed ? "FAIL" : "PASS",
              runs.size(), failed);
  return failed ? 1 : 0;
}
