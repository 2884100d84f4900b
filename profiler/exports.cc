// libnccl-profiler-uccl.so's entry points: ncclProfiler_v5 (NCCL 2.28) and
// ncclProfiler_v4 (2.27) as a shim; nothing NCCL passes can crash them.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "profiler/abi.h"
#include "profiler/analysis.h"
#include "profiler/comm.h"
#include "profiler/trace.h"
#include "util/clock.h"

namespace uccl::profiler {
namespace {

uint64_t clock_ns() { return monotonic_ns(); }

void log(abi::Logger logger, int level, const std::string& msg) {
  if (logger != nullptr) {
    logger(level, abi::kLogInit, __FILE__, __LINE__, "PROFILER/UCCL %s",
           msg.c_str());
  } else if (level <= abi::kLogWarn) {
    std::fprintf(stderr, "PROFILER/UCCL %s\n", msg.c_str());
  }
}
void log(const Comm* c, int level, const std::string& msg) {
  log(c ? c->logger : nullptr, level, msg);
}

const ProfilerConfig& config() {
  static const ProfilerConfig c = ProfilerConfig::from_knobs();
  return c;
}

int init_comm(void** ctx, uint64_t comm_id, int* mask, const char* name,
              int nnodes, int nranks, int rank, abi::Logger logger,
              uint64_t supported) {
  if (ctx == nullptr || mask == nullptr) return abi::kInvalidArgument;
  *ctx = nullptr;
  *mask = 0;
  const ProfilerConfig& cfg = config();
  if (!cfg.error.empty()) {
    log(logger, abi::kLogWarn, "not profiling: " + cfg.error);
    return abi::kInvalidArgument;
  }
  auto* c = new (std::nothrow) Comm(cfg, clock_ns);
  if (c == nullptr || c->pool.capacity() == 0) {
    delete c;
    return abi::kInternalError;
  }
  c->comm_id = comm_id;
  c->name = name ? name : "";
  c->nnodes = nnodes;
  c->nranks = nranks;
  c->rank = rank;
  c->logger = logger;
  if (!register_comm(c)) {
    log(c, abi::kLogWarn, "not profiling: too many communicators at once");
    delete c;
    return abi::kInternalError;
  }
  *mask = static_cast<int>(cfg.mask & supported);
  *ctx = c;
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "rank %d of %d: events 0x%x, up to %zu kept, output in %s",
                rank, nranks, *mask, cfg.events, cfg.dir.c_str());
  log(c, abi::kLogInfo, buf);
  return abi::kSuccess;
}

Kind kind_of(uint64_t type) {
  switch (type) {
    case abi::kGroupApi:
      return Kind::kGroupApi;
    case abi::kCollApi:
      return Kind::kCollApi;
    case abi::kP2pApi:
      return Kind::kP2pApi;
    case abi::kKernelLaunch:
      return Kind::kKernelLaunch;
    case abi::kGroup:
      return Kind::kGroup;
    case abi::kColl:
      return Kind::kColl;
    case abi::kP2p:
      return Kind::kP2p;
    case abi::kProxyOp:
      return Kind::kProxyOp;
    case abi::kProxyStep:
      return Kind::kProxyStep;
    case abi::kProxyCtrl:
      return Kind::kProxyCtrl;
    case abi::kKernelCh:
      return Kind::kKernelCh;
    case abi::kNetPlugin:
      return Kind::kNetPlugin;
    default:
      return Kind::kCount;
  }
}

// The descriptor's fields into a new event (whose start time is now).
void fill(Comm* c, Event* e, const abi::DescrV5& d) {
  switch (e->kind) {
    case Kind::kCollApi:
      e->func = d.collApi.func;
      e->count = d.collApi.count;
      e->dtype = d.collApi.datatype;
      e->root = d.collApi.root;
      break;
    case Kind::kP2pApi:
      e->func = d.p2pApi.func;
      e->count = d.p2pApi.count;
      e->dtype = d.p2pApi.datatype;
      break;
    case Kind::kColl:
      e->seq = d.coll.seqNumber;
      e->func = d.coll.func;
      e->count = d.coll.count;
      e->root = d.coll.root;
      e->dtype = d.coll.datatype;
      e->nchannels = d.coll.nChannels;
      e->algo = d.coll.algo;
      e->proto = d.coll.proto;
      break;
    case Kind::kP2p:
      e->func = d.p2p.func;
      e->dtype = d.p2p.datatype;
      e->count = d.p2p.count;
      e->peer = d.p2p.peer;
      e->nchannels = d.p2p.nChannels;
      break;
    case Kind::kProxyOp:
      e->channel = d.proxyOp.channelId;
      e->peer = d.proxyOp.peer;
      e->nsteps = d.proxyOp.nSteps;
      e->chunk_size = d.proxyOp.chunkSize;
      e->is_send = d.proxyOp.isSend != 0;
      break;
    case Kind::kProxyStep:
      e->step = d.proxyStep.step;
      break;
    case Kind::kKernelCh:
      e->channel = d.kernelCh.channelId;
      e->gpu_start_ns = d.kernelCh.pTimer;
      break;
    case Kind::kNetPlugin:
      c->pool.set_net(e, d.netPlugin.id, d.netPlugin.data, false);
      break;
    default:
      break;
  }
}

int start_event(void* ctx, void** handle, const abi::DescrV5* d) {
  if (handle == nullptr) {
    count_stray_call();
    return abi::kInvalidArgument;
  }
  *handle = nullptr;
  auto* c = static_cast<Comm*>(ctx);
  if (d == nullptr || !is_registered(c)) {
    count_stray_call();
    return abi::kInvalidArgument;
  }
  const Kind k = kind_of(d->type);
  if (k == Kind::kCount) {
    c->pool.counters().unknown_type.fetch_add(1, std::memory_order_relaxed);
    return abi::kSuccess;
  }
  // A parent in another process (a proxy op's pid says so) or outside this
  // pool (dropped, or not a handle of ours) is not followed.
  const bool other_process = k == Kind::kProxyOp && d->proxyOp.pid != getpid();
  const int32_t parent = other_process ? -1 : c->pool.index_of(d->parentObj);
  if (d->parentObj != nullptr && parent < 0) {
    c->pool.counters().foreign_parent.fetch_add(1, std::memory_order_relaxed);
    if (k == Kind::kProxyStep || k == Kind::kNetPlugin) {
      // Its parent was dropped: drop it too (it could not be placed).
      c->pool.counters().orphans.fetch_add(1, std::memory_order_relaxed);
      return abi::kSuccess;
    }
  }
  Event* e = c->pool.start(k);
  if (e == nullptr) return abi::kSuccess;  // full: dropped and counted
  e->parent = parent;
  fill(c, e, *d);
  *handle = e;
  return abi::kSuccess;
}

int stop_event(void* handle) {
  if (handle == nullptr) return abi::kSuccess;  // a dropped event
  Event* e;
  Comm* c = find_event(handle, &e);
  if (c == nullptr) {
    count_stray_call();
    return abi::kInvalidArgument;
  }
  c->pool.stop(e);
  return abi::kSuccess;
}

int record_state(void* handle, int state, abi::StateArgs* args) {
  if (handle == nullptr) return abi::kSuccess;
  Event* e;
  Comm* c = find_event(handle, &e);
  if (c == nullptr) {
    count_stray_call();
    return abi::kInvalidArgument;
  }
  c->pool.record_state(e, state, args);
  return abi::kSuccess;
}

bool make_dir(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!path.empty() && mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return false;
      }
    }
    if (i < dir.size()) path += dir[i];
  }
  return true;
}

// <dir>/<host>-<pid>-<comm id>-r<rank>: .trace.json and .summary.txt.
void write_outputs(Comm* c) {
  const uint64_t end = clock_ns();
  const Analysis a = analyze(c->pool, end, c->config.slowest);
  char host[64] = "host";
  gethostname(host, sizeof(host) - 1);
  char base[512];
  std::snprintf(base, sizeof(base), "%s/%s-%d-%016" PRIx64 "-r%d",
                c->config.dir.c_str(), host, static_cast<int>(getpid()),
                c->comm_id, c->rank);
  if (!make_dir(c->config.dir)) {
    log(c, abi::kLogWarn,
        "cannot create " + c->config.dir + ": " + std::strerror(errno));
    return;
  }
  TraceInfo info{c->rank, c->nranks, c->comm_id, c->name, stray_calls()};
  const std::string trace = std::string(base) + ".trace.json";
  std::FILE* f = std::fopen(trace.c_str(), "w");
  const bool ok = f != nullptr && write_trace(f, c->pool, a, info);
  if (f != nullptr && std::fclose(f) != 0) f = nullptr;
  if (!ok || f == nullptr) {
    log(c, abi::kLogWarn, "cannot write " + trace);
  }
  char head[256];
  std::snprintf(head, sizeof(head),
                "UCCL profiler: rank %d of %d, communicator %s (0x%016" PRIx64
                "), %zu collectives\n",
                c->rank, c->nranks, c->name.c_str(), c->comm_id,
                a.colls.size());
  const std::string summary = std::string(base) + ".summary.txt";
  const std::string text = summary_text(c->pool, a, head);
  std::FILE* s = std::fopen(summary.c_str(), "w");
  if (s == nullptr ||
      std::fwrite(text.data(), 1, text.size(), s) != text.size()) {
    log(c, abi::kLogWarn, "cannot write " + summary);
  }
  if (s != nullptr) std::fclose(s);
  log(c, abi::kLogInfo, "wrote " + trace + " and " + summary);
}

int finalize(void* ctx) {
  auto* c = static_cast<Comm*>(ctx);
  if (!is_registered(c)) {
    count_stray_call();
    return abi::kInvalidArgument;
  }
  unregister_comm(c);
  write_outputs(c);
  delete c;
  return abi::kSuccess;
}

// ------------------------------------------------------------------- v5
int v5_init(void** ctx, uint64_t comm_id, int* mask, const char* name,
            int nnodes, int nranks, int rank, abi::Logger logger) {
  return init_comm(ctx, comm_id, mask, name, nnodes, nranks, rank, logger,
                   abi::kAllV5Types);
}
int v5_start(void* ctx, void** handle, abi::DescrV5* d) {
  return start_event(ctx, handle, d);
}

// ------------------------------------------------------------------- v4
int v4_init(void** ctx, int* mask, const char* name, uint64_t comm_hash,
            int nnodes, int nranks, int rank, abi::Logger logger) {
  return init_comm(ctx, comm_hash, mask, name, nnodes, nranks, rank, logger,
                   abi::kAllV4Types);
}
// v4's descriptor: an 8-bit type, and its union members are prefixes of
// v5's (v5 appended parentGroup to coll and p2p).
int v4_start(void* ctx, void** handle, abi::DescrV4* d) {
  if (d == nullptr) return start_event(ctx, handle, nullptr);
  abi::DescrV5 v5;
  std::memset(&v5, 0, sizeof(v5));
  v5.type = d->type;
  v5.parentObj = d->parentObj;
  v5.rank = d->rank;
  std::memcpy(&v5.coll, &d->coll,
              sizeof(abi::DescrV4) - offsetof(abi::DescrV4, coll));
  return start_event(ctx, handle, &v5);
}

}  // namespace
}  // namespace uccl::profiler

namespace p = uccl::profiler;

extern "C" {
__attribute__((
    visibility("default"))) extern const p::abi::ProfilerV5 ncclProfiler_v5;
__attribute__((
    visibility("default"))) extern const p::abi::ProfilerV4 ncclProfiler_v4;

const p::abi::ProfilerV5 ncclProfiler_v5 = {"UCCL",          p::v5_init,
                                            p::v5_start,     p::stop_event,
                                            p::record_state, p::finalize};
const p::abi::ProfilerV4 ncclProfiler_v4 = {"UCCL",          p::v4_init,
                                            p::v4_start,     p::stop_event,
                                            p::record_state, p::finalize};
}
