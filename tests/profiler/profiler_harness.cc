// Drives libnccl-profiler-uccl.so the way NCCL does (dlopen, init, events
// from a user thread and proxy threads, finalize), plus calls NCCL never
// makes; checks every return code and prints what the output must hold.
//
//   profiler_harness --plugin=PATH [--version=5|4] [--colls=N]
//
// UCCL_PROFILER_DIR says where the plugin writes; the last line printed is
// a JSON object of expected counts that check_profile.py compares with the
// trace's "otherData" (tests/profiler/CMakeLists.txt runs both).
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collective/net_event.h"
#include "profiler/abi.h"

namespace {

namespace abi = uccl::profiler::abi;
namespace nab = uccl::ncclabi;

int g_failures = 0;
#define EXPECT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ++g_failures;                                                        \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                      \
  } while (0)

std::string flag(int argc, char** argv, const char* name, const char* def) {
  const std::string pre = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], pre.c_str(), pre.size()) == 0) {
      return argv[i] + pre.size();
    }
  }
  return def;
}

// The v5 table, or v4's behind the same calls.
struct Api {
  const abi::ProfilerV5* v5 = nullptr;
  const abi::ProfilerV4* v4 = nullptr;
  int init(void** ctx, uint64_t id, int* mask, int rank) const {
    return v5 ? v5->init(ctx, id, mask, "harness", 1, 2, rank, nullptr)
              : v4->init(ctx, mask, "harness", id, 1, 2, rank, nullptr);
  }
  int start(void* ctx, void** h, abi::DescrV5* d) const {
    if (v5) return v5->startEvent(ctx, h, d);
    if (d == nullptr) return v4->startEvent(ctx, h, nullptr);
    abi::DescrV4 d4;
    std::memset(&d4, 0, sizeof(d4));
    d4.type = static_cast<uint8_t>(d->type);
    d4.parentObj = d->parentObj;
    d4.rank = d->rank;
    std::memcpy(&d4.coll, &d->coll,
                sizeof(abi::DescrV4) - offsetof(abi::DescrV4, coll));
    return v4->startEvent(ctx, h, &d4);
  }
  int stop(void* h) const { return v5 ? v5->stopEvent(h) : v4->stopEvent(h); }
  int record(void* h, int s, abi::StateArgs* a) const {
    return v5 ? v5->recordEventState(h, s, a) : v4->recordEventState(h, s, a);
  }
  int finalize(void* ctx) const {
    return v5 ? v5->finalize(ctx) : v4->finalize(ctx);
  }
};

abi::DescrV5 descr(uint64_t type, void* parent) {
  abi::DescrV5 d;
  std::memset(&d, 0, sizeof(d));
  d.type = type;
  d.parentObj = parent;
  return d;
}

// One proxy thread: for each collective, an op on `channel` with `steps`
// steps, up to 8 in flight, each with its states and a UCCL net event.
void proxy(const Api& api, void* ctx, int channel, bool send,
           const std::vector<void*>& colls, int steps, std::atomic<int>* nets) {
  for (void* coll : colls) {
    abi::DescrV5 d = descr(abi::kProxyOp, coll);
    d.proxyOp.pid = getpid();
    d.proxyOp.channelId = static_cast<uint8_t>(channel);
    d.proxyOp.peer = 1;
    d.proxyOp.nSteps = steps;
    d.proxyOp.isSend = send;
    void* op = nullptr;
    EXPECT(api.start(ctx, &op, &d) == abi::kSuccess);
    EXPECT(api.record(op, abi::kProxyOpInProgress, nullptr) == 0);
    std::vector<void*> inflight;
    std::vector<void*> net_handles;
    for (int s = 0; s < steps; ++s) {
      abi::DescrV5 sd = descr(abi::kProxyStep, op);
      sd.proxyStep.step = s;
      void* st = nullptr;
      EXPECT(api.start(ctx, &st, &sd) == abi::kSuccess);
      EXPECT(api.record(st, send ? abi::kSendGpuWait : abi::kRecvWait,
                        nullptr) == 0);
      if (send) {
        EXPECT(api.record(st, abi::kSendPeerWait, nullptr) == 0);
        EXPECT(api.record(st, abi::kSendWait, nullptr) == 0);
      }
      nab::UcclNetEventV1 ev{};
      ev.type = nab::kUcclNetMessage;
      ev.op = send ? 0 : 1;
      ev.parts = 2;
      ev.bytes = 65536;
      abi::DescrV5 nd = descr(abi::kNetPlugin, st);
      nd.netPlugin.id = nab::kNetTypeUccl | nab::kNetUcclVersion;
      nd.netPlugin.data = &ev;
      void* net = nullptr;
      EXPECT(api.start(ctx, &net, &nd) == abi::kSuccess);
      ev.done = 1;
      ev.retransmits = s % 3 == 2 ? 1 : 0;
      ev.rtt_ns = 30000;
      abi::StateArgs a;
      a.netPlugin.data = &ev;
      EXPECT(api.record(net, abi::kNetPluginUpdate, &a) == 0);
      EXPECT(api.stop(net) == 0);
      ++*nets;
      if (!send) EXPECT(api.record(st, abi::kRecvGpuWait, nullptr) == 0);
      inflight.push_back(st);
      if (inflight.size() == 8) {  // NCCL_STEPS: the oldest completes
        EXPECT(api.stop(inflight.front()) == 0);
        inflight.erase(inflight.begin());
      }
    }
    for (void* st : inflight) EXPECT(api.stop(st) == 0);
    EXPECT(api.stop(op) == 0);
  }
}

// Calls NCCL never makes; none may crash, each gets its code. Returns the
// calls the plugin counts as stray (not of a live communicator).
int hostile(const Api& api, void* ctx, void* some_event) {
  int stray = 0;
  abi::DescrV5 d = descr(abi::kColl, nullptr);
  void* h = reinterpret_cast<void*>(0x1);
  EXPECT(api.start(ctx, nullptr, &d) != abi::kSuccess);
  ++stray;
  EXPECT(api.start(nullptr, &h, &d) != abi::kSuccess && h == nullptr);
  ++stray;
  EXPECT(api.start(ctx, &h, nullptr) != abi::kSuccess && h == nullptr);
  ++stray;
  abi::DescrV5 odd = descr(uint64_t{1} << 20, nullptr);
  EXPECT(api.start(ctx, &h, &odd) == abi::kSuccess && h == nullptr);
  int local = 0;
  EXPECT(api.stop(nullptr) == abi::kSuccess);
  EXPECT(api.stop(&local) != abi::kSuccess);
  ++stray;
  EXPECT(api.stop(static_cast<char*>(some_event) + 1) != abi::kSuccess);
  ++stray;
  EXPECT(api.record(&local, abi::kSendWait, nullptr) != abi::kSuccess);
  ++stray;
  EXPECT(api.record(nullptr, abi::kSendWait, nullptr) == abi::kSuccess);
  EXPECT(api.finalize(nullptr) != abi::kSuccess);
  ++stray;
  EXPECT(api.finalize(&local) != abi::kSuccess);
  ++stray;
  return stray;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string plugin = flag(argc, argv, "plugin", "");
  const int version = std::atoi(flag(argc, argv, "version", "5").c_str());
  const int ncolls = std::atoi(flag(argc, argv, "colls", "20").c_str());
  void* lib = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", plugin.c_str(), dlerror());
    return 2;
  }
  Api api;
  if (version == 5) {
    api.v5 = static_cast<const abi::ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
  } else {
    api.v4 = static_cast<const abi::ProfilerV4*>(dlsym(lib, "ncclProfiler_v4"));
  }
  if (api.v5 == nullptr && api.v4 == nullptr) return 2;
  void* ctx = nullptr;
  int mask = 0;
  EXPECT(api.init(nullptr, 7, &mask, 0) != abi::kSuccess);
  const int rc = api.init(&ctx, 0x1234, &mask, 0);
  if (std::getenv("HARNESS_EXPECT_INIT_FAILS") != nullptr) {
    EXPECT(rc != abi::kSuccess && ctx == nullptr && mask == 0);
    std::printf("{\"init_refused\":true}\n");
    return g_failures ? 1 : 0;
  }
  EXPECT(rc == abi::kSuccess && ctx != nullptr);
  EXPECT(mask ==
         static_cast<int>(version == 5 ? abi::kAllV5Types : abi::kAllV4Types));
  // The user thread: API events (v5), then the collectives they enqueue.
  std::vector<void*> colls;
  void* group_api = nullptr;
  if (version == 5) {
    abi::DescrV5 g = descr(abi::kGroupApi, nullptr);
    EXPECT(api.start(ctx, &group_api, &g) == 0);
  }
  for (int i = 0; i < ncolls; ++i) {
    void* capi = nullptr;
    if (version == 5) {
      abi::DescrV5 c = descr(abi::kCollApi, group_api);
      c.collApi.func = "AllReduce";
      c.collApi.count = 16384;
      c.collApi.datatype = "ncclFloat32";
      EXPECT(api.start(ctx, &capi, &c) == 0);
    }
    abi::DescrV5 c = descr(abi::kColl, capi);
    c.coll.seqNumber = static_cast<uint64_t>(i);
    c.coll.func = "AllReduce";
    c.coll.count = 16384;
    c.coll.datatype = "ncclFloat32";
    c.coll.nChannels = 2;
    c.coll.algo = "RING";
    c.coll.proto = "SIMPLE";
    void* coll = nullptr;
    EXPECT(api.start(ctx, &coll, &c) == 0 && coll != nullptr);
    colls.push_back(coll);
    if (capi) EXPECT(api.stop(capi) == 0);
  }
  if (group_api) {
    EXPECT(api.record(group_api, abi::kGroupEndApiStart, nullptr) == 0);
    EXPECT(api.stop(group_api) == 0);
  }
  // Two proxy threads (a send channel, a receive channel) at once.
  const int steps = 12;
  std::atomic<int> nets{0};
  std::thread t0([&] { proxy(api, ctx, 0, true, colls, steps, &nets); });
  std::thread t1([&] { proxy(api, ctx, 1, false, colls, steps, &nets); });
  t0.join();
  t1.join();
  // A step under a parent that is no handle of ours is dropped; a proxy op
  // of another process keeps no parent.
  int local = 0;
  abi::DescrV5 orphan = descr(abi::kProxyStep, &local);
  void* h = nullptr;
  EXPECT(api.start(ctx, &h, &orphan) == 0 && h == nullptr);
  abi::DescrV5 far = descr(abi::kProxyOp, &local);
  far.proxyOp.pid = getpid() + 1;
  // (With a pool too small for the run, HARNESS_SMALL_POOL, it is dropped.)
  const bool small = std::getenv("HARNESS_SMALL_POOL") != nullptr;
  EXPECT(api.start(ctx, &h, &far) == 0 && (h != nullptr || small));
  EXPECT(api.stop(h) == 0);
  EXPECT(api.stop(h) == 0);  // a second stop: counted, not applied
  const int stray = hostile(api, ctx, colls[0]);
  for (void* c : colls) EXPECT(api.stop(c) == 0);
  EXPECT(api.finalize(ctx) == abi::kSuccess);
  EXPECT(api.finalize(ctx) != abi::kSuccess);  // already finalized
  // Expected, for check_profile.py: one ProxyOp with no parent beyond the
  // 2 per collective; events: API (v5) + colls + ops + steps + nets.
  const int api_events = version == 5 ? 1 + ncolls : 0;
  const int events =
      api_events + ncolls + 2 * ncolls + 1 + 2 * ncolls * steps + nets.load();
  std::printf(
      "{\"collectives\":%d,\"events\":%d,\"net_uccl\":%d,\"net_updated\":%d,"
      "\"net_under_step\":%d,\"net_retransmits\":%d,\"bad_calls\":1,"
      "\"stray_calls\":%d,\"unknown_types\":1,\"parents_not_found\":2,"
      "\"unfinished\":0,\"dropped\":0,\"orphans\":1,\"steps_per_coll\":%d}\n",
      ncolls, events, nets.load(), nets.load(), nets.load(),
      2 * ncolls * (steps / 3), stray, 2 * steps);
  return g_failures ? 1 : 0;
}
