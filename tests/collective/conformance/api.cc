// The harness's side of the plugin's ABI: loading each version, NCCL's
// logger and profiler callbacks (counting what the plugin says), helpers.
#include "tests/collective/conformance/conformance.h"

namespace uccl::conformance {

int g_failures = 0;
std::atomic<int> g_warnings{0};
// The engines of new comms' connection 0, from the plugin's INFO lines.
std::mutex g_lanes_mu;
std::vector<int> g_lanes;
static void note_lane(const char* fmt, va_list ap) {
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
static void note_closed_mrs(const char* fmt, va_list ap) {
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
static int number_before(const char* msg, const char* what) {
  const char* p = std::strstr(msg, what);
  if (p == nullptr) return -1;
  const char* b = p;
  while (b > msg && b[-1] >= '0' && b[-1] <= '9') --b;
  return b == p ? -1 : std::atoi(b);
}
// From each comm's close line ("send comm closed: N messages, A with all
// parts at once, E done with part 0"): [send, recv] x [N, A, E], summed.
std::atomic<int> g_closed_counts[2][3];
static void note_counts(const char* fmt, va_list ap) {
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

// getProperties of v9 and v10, widened to v12's layout.
template <typename T>
void props_v9(Api* a, const T* t) {
  a->props = [t](int d, PropertiesV12* p) {
    PropertiesV9 v9;
    const int r = t->getProperties(d, &v9);
    widen(v9, p);
    return r;
  };
}

// v11 and v12: per-communicator init/finalize, listen and connect through
// the init's context. Returns that context for the version's extras.
template <typename T>
std::shared_ptr<void*> context_api(const T* t, Api* a) {
  common(a, t);
  auto ctx = std::make_shared<void*>(nullptr);
  a->init = [t, ctx] {
    CommConfig cfg{-1};
    return t->init(ctx.get(), 42, &cfg, logger, profiler);
  };
  a->finalize = [t, ctx] { return t->finalize(*ctx); };
  a->listen = [t, ctx](int d, void* h, void** l) {
    return t->listen(*ctx, d, h, l);
  };
  a->connect = [t, ctx](int d, void* h, void** s2) {
    return t->connect(*ctx, d, h, s2, nullptr);
  };
  profiled_io(a, t);
  return ctx;
}

// The v12 table behind Api's calls.
bool load_v12(const NetV12* t, Api* a) {
  if (std::strcmp(t->name, "UCCL") != 0 || t->finalize == nullptr) return false;
  auto ctx = context_api(t, a);
  a->props = t->getProperties;
  a->make_vdevice = [t](int* d, int n, const int* devs) {
    VDevicePropsV12 v{n, {}};
    for (int i = 0; i < n && i < kMaxDevsPerNicV12; ++i) v.devs[i] = devs[i];
    return t->makeVDevice(d, &v);
  };
  a->set_net_attr = [t, ctx](NetAttrV12* attr) {
    return t->setNetAttr ? t->setNetAttr(*ctx, attr) : -1;
  };
  return true;
}

// The v11 table behind Api's calls.
bool load_v11(const NetV11* t, Api* a) {
  if (std::strcmp(t->name, "UCCL") != 0 || t->finalize == nullptr) return false;
  context_api(t, a);
  a->props = [t](int d, PropertiesV12* p) {
    PropertiesV11 v11;
    const int r = t->getProperties(d, &v11);
    widen(v11, p);
    p->maxMultiRequestSize = v11.maxMultiRequestSize;
    return r;
  };
  vdevice_v9(a, t);
  return true;
}

// The v10 table behind Api's calls.
bool load_v10(const NetV10* t, Api* a) {
  common(a, t);
  a->init = [t] { return t->init(logger, profiler); };
  props_v9(a, t);
  a->listen = t->listen;
  a->connect = [t](int d, void* h, void** s2) {
    CommConfig cfg{-1};
    return t->connect(d, &cfg, h, s2, nullptr);
  };
  vdevice_v9(a, t);
  profiled_io(a, t);
  return true;
}

// The v9 table behind Api's calls.
bool load_v9(const NetV9* t, Api* a) {
  common(a, t);
  a->init = [t] { return t->init(logger); };
  props_v9(a, t);
  a->listen = t->listen;
  a->connect = [t](int d, void* h, void** s2) {
    return t->connect(d, h, s2, nullptr);
  };
  vdevice_v9(a, t);
  a->isend = t->isend;
  a->irecv = t->irecv;
  return true;
}

// The v8 table behind Api's calls.
bool load_v8(const NetV8* t, Api* a) {
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
  return true;
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
  switch (version) {
    case 12:
      return load_v12(static_cast<const NetV12*>(s), a);
    case 11:
      return load_v11(static_cast<const NetV11*>(s), a);
    case 10:
      return load_v10(static_cast<const NetV10*>(s), a);
    case 9:
      return load_v9(static_cast<const NetV9*>(s), a);
    case 8:
      return load_v8(static_cast<const NetV8*>(s), a);
    default:
      return false;
  }
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

void close_pair(Api& a, void* sc, void* rc, void* lc) {
  CHECK_THAT(a.close_send(sc) == kSuccess, "closeSend");
  CHECK_THAT(a.close_recv(rc) == kSuccess, "closeRecv");
  CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
}

// Polls test() until done; the result code of the completing test().
int wait_req(Api& a, void* req, int* sizes, int timeout_ms) {
  const uint64_t until = uccl::monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  int done = 0;
  while (uccl::monotonic_ns() < until) {
    int r = a.test(req, &done, sizes);
    if (r != kSuccess || done) return r;
  }
  return -1;  // timed out
}

bool send_one(Api& a, void* sc, void* rc, void* smh, void* rmh,
              const uint8_t* src, size_t len, void* dst, size_t cap, int* got) {
  void *sr = nullptr, *rr = nullptr;
  int tag = 0;
  const uint64_t until = uccl::monotonic_ns() + 60000000000ull;
  while (rr == nullptr && uccl::monotonic_ns() < until) {
    if (!CHECK_THAT(a.irecv(rc, 1, &dst, &cap, &tag, &rmh, &rr) == kSuccess,
                    "irecv")) {
      return false;
    }
  }
  while (sr == nullptr && uccl::monotonic_ns() < until) {
    if (!CHECK_THAT(a.isend(sc, const_cast<uint8_t*>(src), len, 0, smh, &sr) ==
                        kSuccess,
                    "isend")) {
      return false;
    }
  }
  // Both sides tested in turn: a striped receive posts its later parts
  // from test() (uccl/striped.h).
  int sdone = 0, rdone = 0;
  *got = -1;
  while ((!sdone || !rdone) && uccl::monotonic_ns() < until) {
    if (!sdone && !CHECK_THAT(a.test(sr, &sdone, nullptr) == kSuccess, "send"))
      return false;
    if (!rdone && !CHECK_THAT(a.test(rr, &rdone, got) == kSuccess, "recv"))
      return false;
  }
  return CHECK_THAT(sdone && rdone, "a message of %zu bytes timed out", len);
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

}  // namespace uccl::conformance
