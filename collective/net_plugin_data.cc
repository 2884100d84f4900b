// The NCCL plugin's data path: memory registration, isend/irecv/test over
// the comm's StripedConn (grouped receives on one connection), profiling.

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "collective/plugin_state.h"
#include "collective/stripe.h"
#include "transport/udp/netif.h"
#include "util/clock.h"
#include "util/logging.h"

namespace uccl::nccl {

using namespace ncclabi;  // NOLINT: the ABI's names are short and plentiful

NcclResult NetPlugin::reg_mr(void* comm, void* data, size_t size, int type,
                             void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(comm);
  // GPU memory only where the device offered it (peer memory: the NIC
  // registers the GPU pointer as any other).
  if (type != kPtrHost &&
      !(type == kPtrCuda && (c->dev->ptr_support & kPtrCuda) != 0)) {
    return fail(
        "regMr",
        InvalidArgument("memory of type " + std::to_string(type) +
                        " is not offered on " + c->dev->name + " (ptrSupport " +
                        std::to_string(c->dev->ptr_support) + ")"),
        kInternalError);
  }
  Result<MrHandle*> mh = static_cast<MrHandle*>(nullptr);
  if (size > 0 && data != nullptr) mh = c->ep->reg_mr(data, size);
  return add_mr(c, mh, data, size, type == kPtrCuda, mhandle);
}

NcclResult NetPlugin::reg_mr_dmabuf(void* comm, void* data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(comm);
  if (type != kPtrCuda || fd < 0 || (c->dev->ptr_support & kPtrDmaBuf) == 0) {
    return reg_mr(comm, data, size, type, mhandle);
  }
  Result<MrHandle*> mh = static_cast<MrHandle*>(nullptr);
  if (size > 0 && data != nullptr) {
    mh = c->ep->reg_dmabuf_mr(data, size, fd, offset);
  }
  return add_mr(c, mh, data, size, true, mhandle);
}

NcclResult NetPlugin::add_mr(PluginComm* c, const Result<MrHandle*>& mh,
                             void* data, size_t size, bool gpu,
                             void** mhandle) {
  if (!mh.ok()) return fail("regMr", mh.status());
  auto* m = new PluginMr;
  m->mh = *mh;
  m->gpu = gpu;
  m->base = static_cast<uint8_t*>(data);
  m->len = size;
  {
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    c->mrs.insert(m);
  }
  *mhandle = m;
  return kSuccess;
}

NcclResult NetPlugin::dereg_mr(void* comm, void* mhandle) {
  if (comm == nullptr || mhandle == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(comm);
  auto* m = static_cast<PluginMr*>(mhandle);
  {
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    if (c->mrs.erase(m) == 0) {
      return fail("deregMr",
                  InvalidArgument("memory handle was not registered on this "
                                  "comm, or was deregistered already"),
                  kInvalidUsage);
    }
  }
  Status st = m->mh ? c->ep->dereg_mr(m->mh) : Status::OK();
  delete m;
  return st.ok() ? kSuccess : fail("deregMr", st);
}

PluginRequest* NetPlugin::alloc_request(PluginComm* c) {
  if (c->held >= c->max_held) return nullptr;
  for (int i = 0; i < c->pool_size; ++i) {
    PluginRequest& r = c->pool[i];
    if (r.s.finishing()) {  // done for NCCL, empty parts finishing
      if (c->group->reusable(&r.s)) return &r;
      continue;
    }
    bool expected = false;
    if (r.used.compare_exchange_strong(expected, true,
                                       std::memory_order_acquire)) {
      return &r;
    }
  }
  return nullptr;
}

void NetPlugin::profile_start(PluginRequest* r, void* phandle, int op,
                              size_t bytes) {
  ProfilerCallback prof = profiler_.load(std::memory_order_acquire);
  if (prof == nullptr || phandle == nullptr) return;
  UcclNetEventV1& e = r->ev;
  e = UcclNetEventV1{};
  e.type = kUcclNetMessage;
  e.op = static_cast<uint8_t>(op);
  e.parts = static_cast<uint16_t>(r->comm->conns.size());
  e.conn = static_cast<uint32_t>(r->comm->conns[0]);
  e.bytes = bytes;
  prof(&r->event, kProfilerStart, phandle, kNetTypeUccl | kNetUcclVersion, &e);
}

void NetPlugin::profile_stop(PluginRequest* r, size_t bytes,
                             NcclResult result) {
  if (r->event == nullptr) return;
  ProfilerCallback prof = profiler_.load(std::memory_order_acquire);
  if (prof) {
    UcclNetEventV1& e = r->ev;
    const RequestCc cc = r->n > 1 ? r->grouped.cc() : r->s.cc();
    e.bytes = bytes;
    e.done = 1;
    e.status = result;
    e.retransmits = cc.retransmits;
    e.paths = cc.paths;
    e.rtt_ns = cc.rtt_ns;
    e.cwnd_bytes = cc.cwnd_bytes;
    e.rate_bps = cc.rate_bps;
    prof(&r->event, kProfilerUpdate, nullptr, 0, &e);
    prof(&r->event, kProfilerStop, nullptr, 0, nullptr);
  }
  r->event = nullptr;
}

NcclResult NetPlugin::isend(void* send_comm, void* data, size_t size, int tag,
                            void* mhandle, void* phandle, void** request) {
  if (send_comm == nullptr || request == nullptr) return kInternalError;
  auto* c = static_cast<PluginComm*>(send_comm);
  steer_thread(true);
  *request = nullptr;
  if (!c->group->broken().ok()) return fail("isend", c->group->broken());
  if (size > max_bytes_) {
    return fail("isend",
                InvalidArgument("message of " + std::to_string(size) +
                                " bytes is above maxP2pBytes"),
                kInternalError);
  }
  PluginRequest* r = alloc_request(c);
  if (r == nullptr) return kSuccess;  // NCCL retries
  auto* m = static_cast<PluginMr*>(mhandle);
  r->n = 1;
  r->event = nullptr;
  // Striped comms pair parts FIFO and ignore NCCL's tags; grouped comms
  // (maxRecvs > 1) need them to pick the buffer.
  bool taken = false;
  Status st = c->group->send(&r->s, data, size, m ? m->mh : nullptr,
                             max_recvs_ > 1 ? tag : 0, &taken);
  // Parts posted before an error may still complete into the request: it
  // stays taken, and the comm is broken anyway.
  if (!st.ok()) return fail("isend", st);
  if (!taken) {  // an engine's queue is full: NCCL retries the message
    r->used.store(false, std::memory_order_release);
    return kSuccess;
  }
  profile_start(r, phandle, 0, size);
  ++c->held;
  *request = r;
  return kSuccess;
}

NcclResult NetPlugin::irecv(void* recv_comm, int n, void** data,
                            const size_t* sizes, const int* tags,
                            void** mhandles, void** phandles, void** request) {
  if (recv_comm == nullptr || request == nullptr) return kInternalError;
  *request = nullptr;  // also clears NCCL's optional-completion marker
  steer_thread(true);
  if (n < 1 || n > max_recvs_ || data == nullptr || sizes == nullptr) {
    return fail(
        "irecv",
        InvalidArgument("n=" + std::to_string(n) + " receives (maxRecvs " +
                        std::to_string(max_recvs_) + ")"),
        kInternalError);
  }
  auto* c = static_cast<PluginComm*>(recv_comm);
  if (!c->group->broken().ok()) return fail("irecv", c->group->broken());
  if (n > 1) {
    // Grouped receives share connection 0 with striped messages: behind
    // any whose parts still wait.
    Status st = c->group->progress();
    if (!st.ok()) return fail("irecv", st);
    if (c->group->backlogged()) return kSuccess;
  }
  PluginRequest* r = alloc_request(c);
  if (r == nullptr) return kSuccess;
  r->n = n;
  r->event = nullptr;
  Status st;
  bool taken = false;
  if (n == 1) {  // striped over the comm's connections
    auto* m = mhandles ? static_cast<PluginMr*>(mhandles[0]) : nullptr;
    st = c->group->recv(&r->s, data[0], sizes[0], m ? m->mh : nullptr,
                        max_recvs_ > 1 && tags ? tags[0] : 0, &taken);
  } else {  // grouped (maxRecvs > 1): one connection, tags pick buffers
    MrHandle* mhs[kMaxRecvsPerRequest];
    int tg[kMaxRecvsPerRequest];
    for (int i = 0; i < n; ++i) {
      auto* m = mhandles ? static_cast<PluginMr*>(mhandles[i]) : nullptr;
      mhs[i] = m ? m->mh : nullptr;
      tg[i] = tags ? tags[i] : 0;
    }
    st = c->ep->recv_async(c->conns[0], n, data, sizes, tg, mhs, &r->grouped);
    taken = st.ok();
    if (st.code() == StatusCode::kResourceExhausted) st = Status::OK();
    if (!st.ok()) r->used.store(false, std::memory_order_release);
  }
  if (!st.ok()) return fail("irecv", st);
  if (!taken) {
    r->used.store(false, std::memory_order_release);
    return kSuccess;
  }
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += sizes[i];
  profile_start(r, phandles ? phandles[0] : nullptr, 1, total);
  ++c->held;
  *request = r;
  return kSuccess;
}

NcclResult NetPlugin::iflush(void* recv_comm, int n, void** data,
                             const int* sizes, void** mhandles,
                             void** request) {
  if (recv_comm == nullptr || request == nullptr) return kInternalError;
  *request = nullptr;  // nothing to flush: done
  auto* c = static_cast<PluginComm*>(recv_comm);
  if (n < 1 || n > kMaxRecvsPerRequest || data == nullptr || sizes == nullptr ||
      mhandles == nullptr) {
    return kSuccess;
  }
  // The last buffer that received bytes into memory that needs it: the
  // NIC wrote them in order, so reading its first byte back flushes all.
  int k = -1;
  for (int i = 0; i < n; ++i) {
    auto* m = static_cast<PluginMr*>(mhandles[i]);
    if (sizes[i] > 0 && m != nullptr && m->mh != nullptr &&
        flush_needed(flush_mode_, m->gpu)) {
      k = i;
    }
  }
  if (k < 0) return kSuccess;
  auto* m = static_cast<PluginMr*>(mhandles[k]);
  auto* at = static_cast<uint8_t*>(data[k]);
  if (at < m->base || at >= m->base + m->len) {
    return fail("iflush", InvalidArgument("buffer outside its registration"),
                kInternalError);
  }
  if (c->flush == nullptr) {  // the comm's first flush
    std::lock_guard<std::mutex> lock(mu_);
    auto link = flush_link(c);
    if (!link.ok()) return fail("iflush", link.status());
    c->flush = *link;
  }
  if (!m->advertised.load(std::memory_order_acquire)) {  // its first flush
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    if (!m->advertised.load(std::memory_order_relaxed)) {
      auto r = c->ep->advertise(m->mh, m->base, m->len);
      if (!r.ok()) return fail("iflush", r.status());
      m->region = *r;
      m->advertised.store(true, std::memory_order_release);
    }
  }
  PluginRequest* r = alloc_request(c);
  if (r == nullptr) {
    return fail("iflush", ResourceExhausted("more than NCCL's 32 requests"),
                kInternalError);
  }
  r->n = 1;
  r->flush = true;
  r->event = nullptr;
  Status st = c->ep->read_async(
      c->flush->conn, c->flush->buf.data(), 1, c->flush->mh, m->region,
      static_cast<uint64_t>(at - m->base), &r->grouped);
  if (!st.ok()) {
    r->flush = false;
    r->used.store(false, std::memory_order_release);
    return fail("iflush", st);
  }
  ++c->held;
  *request = r;
  return kSuccess;
}

NcclResult NetPlugin::test(void* request, int* done, int* sizes) {
  if (request == nullptr || done == nullptr) return kInternalError;
  auto* r = static_cast<PluginRequest*>(request);
  PluginComm* c = r->comm;
  *done = 0;
  Status st;
  size_t moved = 0;
  if (r->flush) {  // an iflush's read-back
    if (!r->grouped.done()) return kSuccess;
    *done = 1;
    --c->held;
    r->flush = false;
    st = r->grouped.status();
    r->used.store(false, std::memory_order_release);
    return st.ok() ? kSuccess : fail("flush", st, kSystemError);
  }
  if (r->n > 1) {
    st = c->group->progress();
    if (!st.ok()) return fail("test", st);
    if (!r->grouped.done()) return kSuccess;
    st = r->grouped.status();
    if (sizes) {
      for (int i = 0; i < r->n; ++i) {
        sizes[i] = static_cast<int>(r->grouped.size(i));
      }
    }
    for (int i = 0; i < r->n; ++i) moved += r->grouped.size(i);
  } else {
    bool d = false;
    size_t bytes = 0;
    st = c->group->test(&r->s, &d, &bytes);
    if (!d) return st.ok() ? kSuccess : fail("test", st);
    if (sizes) sizes[0] = static_cast<int>(bytes);
    moved = bytes;
  }
  *done = 1;
  --c->held;
  const bool send = r->n == 1 && r->s.is_send();
  const NcclResult result =
      st.ok() ? kSuccess
              : (st.code() == StatusCode::kTruncated ? kInternalError
                                                     : kSystemError);
  profile_stop(r, moved, result);
  // Done early (part 0 held the whole message): alloc_request reuses it
  // once its empty parts finish. Otherwise NCCL never tests it again.
  if (!r->s.finishing()) r->used.store(false, std::memory_order_release);
  if (!st.ok()) return fail(send ? "send" : "receive", st, result);
  return kSuccess;
}

}  // namespace uccl::nccl
