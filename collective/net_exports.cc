// The symbols NCCL looks up in libnccl-net-uccl.so: ncclNetPlugin_v12 (the
// implementation), v8..v11 as thin shims over it, and ncclTunerPlugin_v4.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "collective/nccl_net_abi.h"
#include "collective/net_plugin.h"
#include "collective/tuner.h"

namespace uccl::nccl {
namespace {

using namespace ncclabi;  // NOLINT

NetPlugin& P() { return NetPlugin::get(); }

// Per-communicator context of v11's and v12's init/finalize, with the last
// hints v12's setNetAttr gave (kept for the log; the engines' placement
// does not depend on them).
struct CommContext {
  uint64_t comm_id;
  int traffic_class;
  NetAttrV12 attr;
  bool has_attr;
};

// ------------------------------------------------------------------ v12
int v12_init(void** ctx, uint64_t comm_id, CommConfig* config, Logger logger,
             ProfilerCallback profiler) {
  if (ctx == nullptr) return kInternalError;
  const NcclResult r = P().init(logger, profiler);
  if (r != kSuccess) return r;
  *ctx = new (std::nothrow)
      CommContext{comm_id, config ? config->trafficClass : -1, {}, false};
  return *ctx ? kSuccess : kSystemError;
}
int devices(int* n) { return P().devices(n); }
int v12_props(int dev, PropertiesV12* p) { return P().properties(dev, p); }
int v11_listen(void*, int dev, void* handle, void** lc) {
  return P().listen(dev, handle, lc);
}
int v11_connect(void*, int dev, void* handle, void** sc, DeviceHandle**) {
  return P().connect(dev, handle, sc);
}
int accept(void* lc, void** rc, DeviceHandle**) { return P().accept(lc, rc); }
int reg_mr(void* comm, void* data, size_t size, int type, void** mh) {
  return P().reg_mr(comm, data, size, type, mh);
}
int reg_mr_dmabuf(void* comm, void* data, size_t size, int type,
                  uint64_t offset, int fd, void** mh) {
  return P().reg_mr_dmabuf(comm, data, size, type, offset, fd, mh);
}
int dereg_mr(void* comm, void* mh) { return P().dereg_mr(comm, mh); }
int v11_isend(void* sc, void* data, size_t size, int tag, void* mh,
              void* phandle, void** req) {
  return P().isend(sc, data, size, tag, mh, phandle, req);
}
int v11_irecv(void* rc, int n, void** data, size_t* sizes, int* tags,
              void** mhs, void** phandles, void** req) {
  return P().irecv(rc, n, data, sizes, tags, mhs, phandles, req);
}
int iflush(void* rc, int n, void** data, int* sizes, void** mhs, void** req) {
  return P().iflush(rc, n, data, sizes, mhs, req);
}
int test(void* req, int* done, int* sizes) {
  return P().test(req, done, sizes);
}
int close_comm(void* c) { return P().close_comm(c); }
int close_listen(void* l) { return P().close_listen(l); }
int get_device_mr(void*, void*, void** dptr) {
  if (dptr) *dptr = nullptr;  // no device offload
  return kSuccess;
}
int irecv_consumed(void*, int, void*) { return kSuccess; }
int make_vdevice(int* d, VDeviceProps* props) {
  if (props == nullptr || props->ndevs < 1 || props->ndevs > kMaxDevsPerNic)
    return kInternalError;
  return P().make_vdevice(d, props->ndevs, props->devs);
}
int v12_make_vdevice(int* d, VDevicePropsV12* props) {
  if (props == nullptr || props->ndevs < 1 || props->ndevs > kMaxDevsPerNicV12)
    return kInternalError;
  return P().make_vdevice(d, props->ndevs, props->devs);
}
int v11_finalize(void* ctx) {
  // Endpoints stay up for the next communicator; only the context goes.
  delete static_cast<CommContext*>(ctx);
  return kSuccess;
}
int v12_set_net_attr(void* ctx, NetAttrV12* attr) {
  if (ctx == nullptr || attr == nullptr) return kInternalError;
  auto* c = static_cast<CommContext*>(ctx);
  c->attr = *attr;
  c->has_attr = true;
  return kSuccess;
}

// ------------------------------------------------------------------ v11
int v11_props(int dev, PropertiesV11* p) {
  if (p == nullptr) return kInternalError;
  PropertiesV12 a;
  const int r = P().properties(dev, &a);
  if (r != kSuccess) return r;
  // v11 is v12 up to the virtual-NIC props, which hold 4 devices, not 8.
  std::memcpy(p, &a, offsetof(PropertiesV11, vProps));
  p->vProps.ndevs = std::min(a.vProps.ndevs, kMaxDevsPerNic);
  for (int i = 0; i < p->vProps.ndevs; ++i)
    p->vProps.devs[i] = a.vProps.devs[i];
  for (int i = p->vProps.ndevs; i < kMaxDevsPerNic; ++i) p->vProps.devs[i] = 0;
  p->maxP2pBytes = a.maxP2pBytes;
  p->maxCollBytes = a.maxCollBytes;
  p->maxMultiRequestSize = a.maxMultiRequestSize;
  return kSuccess;
}

// ------------------------------------------------------- v10, v9, v8
int v10_init(Logger logger, ProfilerCallback profiler) {
  return P().init(logger, profiler);
}
int v9_init(Logger logger) { return P().init(logger, nullptr); }
int v9_props(int dev, PropertiesV9* p) {
  if (p == nullptr) return kInternalError;
  PropertiesV11 full;
  const int r = v11_props(dev, &full);
  if (r == kSuccess) std::memcpy(p, &full, sizeof(PropertiesV9));  // prefix
  return r;
}
int v8_props(int dev, PropertiesV8* p) {
  if (p == nullptr) return kInternalError;
  PropertiesV12 a;
  const int r = P().properties(dev, &a);
  if (r != kSuccess) return r;
  p->name = a.name;
  p->pciPath = a.pciPath;
  p->guid = a.guid;
  p->ptrSupport = a.ptrSupport;
  p->regIsGlobal = a.regIsGlobal;
  p->speed = a.speed;
  p->port = a.port;
  p->latency = a.latency;
  p->maxComms = a.maxComms;
  p->maxRecvs = a.maxRecvs;
  p->netDeviceType = a.netDeviceType;
  p->netDeviceVersion = a.netDeviceVersion;
  return kSuccess;
}
int v8_listen(int dev, void* handle, void** lc) {
  return P().listen(dev, handle, lc);
}
int v8_connect(int dev, void* handle, void** sc, DeviceHandle**) {
  return P().connect(dev, handle, sc);
}
int v10_connect(int dev, CommConfig*, void* handle, void** sc, DeviceHandle**) {
  return P().connect(dev, handle, sc);
}
int v9_isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  return P().isend(sc, data, size, tag, mh, nullptr, req);
}
int v9_irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs,
             void** req) {
  return P().irecv(rc, n, data, sizes, tags, mhs, nullptr, req);
}
int v8_isend(void* sc, void* data, int size, int tag, void* mh, void** req) {
  if (size < 0) return kInternalError;
  return P().isend(sc, data, static_cast<size_t>(size), tag, mh, nullptr, req);
}
int v8_irecv(void* rc, int n, void** data, int* sizes, int* tags, void** mhs,
             void** req) {
  if (n < 1 || n > kMaxRecvsPerRequest || sizes == nullptr) {
    if (req) *req = nullptr;
    return kInternalError;
  }
  size_t s[kMaxRecvsPerRequest];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return kInternalError;
    s[i] = static_cast<size_t>(sizes[i]);
  }
  return P().irecv(rc, n, data, s, tags, mhs, nullptr, req);
}

// ---------------------------------------------------------------- tuner
struct TunerContext {
  TunerPolicy policy;
};

int tuner_init(size_t nranks, size_t nnodes, Logger logger, void** ctx) {
  if (ctx == nullptr) return kInternalError;
  auto* c = new (std::nothrow) TunerContext{make_tuner_policy(
      nranks, nnodes, P().software_nic_only(),
      [](const char* name) -> const char* { return std::getenv(name); })};
  if (c == nullptr) return kSystemError;
  if (logger) {
    logger(kLogInfo, kLogSubsysTuning, __FILE__, __LINE__,
           "NET/UCCL tuner (%zu ranks, %zu nodes): %s", nranks, nnodes,
           c->policy.why.c_str());
  }
  *ctx = c;
  return kSuccess;
}
// Per collective: no allocation, no lock.
int tuner_get_coll_info(void* ctx, int coll, size_t nbytes, int, float** table,
                        int num_algo, int num_proto, int, int*) {
  if (ctx == nullptr) return kInternalError;
  apply_tuner_policy(static_cast<TunerContext*>(ctx)->policy, coll, nbytes,
                     reinterpret_cast<float*>(table), num_algo, num_proto);
  return kSuccess;
}
int tuner_destroy(void* ctx) {
  delete static_cast<TunerContext*>(ctx);
  return kSuccess;
}

}  // namespace
}  // namespace uccl::nccl

using namespace uccl::ncclabi;  // NOLINT
namespace n = uccl::nccl;

extern "C" {

__attribute__((visibility("default"))) extern const NetV12 ncclNetPlugin_v12;
__attribute__((visibility("default"))) extern const NetV11 ncclNetPlugin_v11;
__attribute__((visibility("default"))) extern const NetV10 ncclNetPlugin_v10;
__attribute__((visibility("default"))) extern const NetV9 ncclNetPlugin_v9;
__attribute__((visibility("default"))) extern const NetV8 ncclNetPlugin_v8;
__attribute__((visibility("default"))) extern const TunerV4 ncclTunerPlugin_v4;

// The cost table NCCL passes is a float[numAlgo][numProto] cast to float**.
const TunerV4 ncclTunerPlugin_v4 = {"UCCL", n::tuner_init,
                                    n::tuner_get_coll_info, n::tuner_destroy};

const NetV12 ncclNetPlugin_v12 = {
    "UCCL",
    n::v12_init,
    n::devices,
    n::v12_props,
    n::v11_listen,
    n::v11_connect,
    n::accept,
    n::reg_mr,
    n::reg_mr_dmabuf,
    n::dereg_mr,
    n::v11_isend,
    n::v11_irecv,
    n::iflush,
    n::test,
    n::close_comm,
    n::close_comm,
    n::close_listen,
    n::get_device_mr,
    n::irecv_consumed,
    n::v12_make_vdevice,
    n::v11_finalize,
    n::v12_set_net_attr,
};

const NetV11 ncclNetPlugin_v11 = {
    "UCCL",           n::v12_init,      n::devices,        n::v11_props,
    n::v11_listen,    n::v11_connect,   n::accept,         n::reg_mr,
    n::reg_mr_dmabuf, n::dereg_mr,      n::v11_isend,      n::v11_irecv,
    n::iflush,        n::test,          n::close_comm,     n::close_comm,
    n::close_listen,  n::get_device_mr, n::irecv_consumed, n::make_vdevice,
    n::v11_finalize,  nullptr,
};

const NetV10 ncclNetPlugin_v10 = {
    "UCCL",           n::v10_init,      n::devices,        n::v9_props,
    n::v8_listen,     n::v10_connect,   n::accept,         n::reg_mr,
    n::reg_mr_dmabuf, n::dereg_mr,      n::v11_isend,      n::v11_irecv,
    n::iflush,        n::test,          n::close_comm,     n::close_comm,
    n::close_listen,  n::get_device_mr, n::irecv_consumed, n::make_vdevice,
};

const NetV9 ncclNetPlugin_v9 = {
    "UCCL",           n::v9_init,       n::devices,        n::v9_props,
    n::v8_listen,     n::v8_connect,    n::accept,         n::reg_mr,
    n::reg_mr_dmabuf, n::dereg_mr,      n::v9_isend,       n::v9_irecv,
    n::iflush,        n::test,          n::close_comm,     n::close_comm,
    n::close_listen,  n::get_device_mr, n::irecv_consumed, n::make_vdevice,
};

const NetV8 ncclNetPlugin_v8 = {
    "UCCL",           n::v9_init,       n::devices,        n::v8_props,
    n::v8_listen,     n::v8_connect,    n::accept,         n::reg_mr,
    n::reg_mr_dmabuf, n::dereg_mr,      n::v8_isend,       n::v8_irecv,
    n::iflush,        n::test,          n::close_comm,     n::close_comm,
    n::close_listen,  n::get_device_mr, n::irecv_consumed,
};

}  // extern "C"
