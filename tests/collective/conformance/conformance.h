// The NCCL plugin's conformance harness: what its files share (the ABI
// as one shape, checks, counts from the plugin's log, scenario entries).
//
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
#pragma once

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

namespace uccl::conformance {

using namespace uccl::ncclabi;  // NOLINT

extern int g_failures;
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

// Counts and state the plugin's log lines and profiler events leave
// (api.cc defines them; each scenario process starts from zero).
extern std::atomic<int> g_warnings;
extern std::mutex g_lanes_mu;
extern std::vector<int> g_lanes;  // engines of new comms' connection 0
extern std::atomic<int> g_closed_mrs;
// Engines per device chosen, engines an endpoint started, connections of
// the last comm logged; -1 until seen.
extern std::atomic<int> g_chosen_engines, g_started_engines, g_comm_conns;
extern std::atomic<int> g_endpoints_up[3];  // no GPU, GPU 0, GPU 1
extern std::atomic<int> g_idle_after_ms, g_idle_wait_us, g_idle_sleeps,
    g_idle_wakes;
// From comms' close lines: [send, recv] x [messages, all parts at once,
// done with part 0], summed.
extern std::atomic<int> g_closed_counts[2][3];
extern std::atomic<int> g_prof_start, g_prof_stop, g_prof_bad;
extern std::atomic<int> g_prof_update, g_prof_rtt;
extern std::atomic<long> g_prof_retx;
extern int g_phandle_target;  // what we pass as NCCL's parent event handle
extern std::string g_plugin;  // the .so under test (children load the same)
// UCCL_FAKE_CUDA (fake_libcuda.cc), loaded before the plugin: sets the
// calling thread's "current CUDA device"; nullptr where not loaded.
extern void (*g_fake_set_device)(int);

// NCCL's logger and profiler callback as the plugin gets them.
void logger(int level, unsigned long flags, const char* file, int line,
            const char* fmt, ...);
int profiler(void** handle, int type, void* parent, int64_t plugin_id,
             void* ext);

// The plugin's table of `version` (8-12) behind Api's calls.
bool load_api(const std::string& path, int version, Api* a);
// Loops connect/accept (neither may block) until both comms exist.
bool connect_pair(Api& a, int dev, void** sc, void** rc, void** lc);
// Closes what connect_pair made, each close checked (a scenario's end).
void close_pair(Api& a, void* sc, void* rc, void* lc);
// Polls test() until done; the result code of the completing test().
int wait_req(Api& a, void* req, int* sizes, int timeout_ms = 60000);
// One message of `len` bytes from src (sc) into dst (rc, cap bytes), both
// requests tested until done; *got: the bytes received. False (after
// saying why) on an error or after 60 s.
bool send_one(Api& a, void* sc, void* rc, void* smh, void* rmh,
              const uint8_t* src, size_t len, void* dst, size_t cap, int* got);
// Message sizes around the default stripe (0 B included).
size_t step_size(int s);
// One message from sc to rc through fresh registrations, checked.
void exchange_once(Api& a, void* sc, void* rc, std::vector<uint8_t>& sbuf,
                   std::vector<uint8_t>& rbuf, const char* what);
std::string hex(const void* p, size_t n);
bool unhex(const std::string& s, void* out, size_t n);
// --name=value from argv, else `def`.
std::string flag(int argc, char** argv, const std::string& name,
                 const std::string& def);

// The scenarios (data.cc, conns.cc, engines.cc, procs.cc).
void scenario_props(Api& a);
void scenario_data(Api& a, int steps);
void scenario_parts(Api& a);
void scenario_backpressure(Api& a);
void scenario_truncation(Api& a);
void scenario_portscan(Api& a);
void scenario_per_gpu(Api& a);
void scenario_flush(Api& a);
void scenario_grouped(Api& a);
void scenario_close(Api& a);
void scenario_placement(Api& a);
void scenario_steer(Api& a);
void scenario_auto_engines(Api& a);
void scenario_idle(Api& a);
void scenario_tuner(Api& a);
void scenario_twoproc(Api& a, const std::string& self);
void twoproc_sender(Api& a, const std::string& hexhandle);
void scenario_killed_peer(Api& a, const std::string& self);
void killed_child(Api& a, const std::string& role, const std::string& hexh);
int run_scenario(const std::string& plugin, const std::string& name,
                 int version, const std::string& self, const std::string& hexh,
                 const std::string& role);

}  // namespace uccl::conformance
