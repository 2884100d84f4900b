// Endpoint transfers: two-sided sends and receives, one-sided writes and
// reads, flushes, and waiting on requests; each call checked, then queued.
#include <algorithm>
#include <cstring>

#include "engine/endpoint_impl.h"

namespace uccl {

using engine::CmdType;
using engine::Command;
using engine::ConnRecord;
using engine::RequestAccess;

namespace {
Status check_request(Request* req) {
  if (req == nullptr) return InvalidArgument("null request");
  if (RequestAccess::pending(req)) {
    return InvalidArgument("request is still in use (not completed)");
  }
  return Status::OK();
}
}  // namespace

Status Endpoint::send_async(ConnId c, const void* data, size_t len,
                            MrHandle* mh, Request* req, int tag) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("send: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (r->failed.load(std::memory_order_acquire)) {
    return RemoteError("send: the connection has failed; close it");
  }
  if (len > 0 && !covers(mh, data, len)) {
    return InvalidArgument("send: buffer is not inside the registered region");
  }
  if (r->tx_outstanding.load(std::memory_order_relaxed) >=
      static_cast<int>(engine::kMaxPendingSends)) {
    return ResourceExhausted(
        "send: " + std::to_string(engine::kMaxPendingSends) +
        " sends already outstanding on this connection");
  }
  RequestAccess::start(req, e, i, 1);
  Command cmd{};
  cmd.type = CmdType::kSend;
  cmd.conn = i;
  cmd.req = req;
  cmd.addr = reinterpret_cast<uint64_t>(data);
  cmd.len = len;
  cmd.lkey = len ? mh->mrs[e]->lkey() : 0;
  cmd.tag = tag;
  r->tx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::recv_async(ConnId c, int n, void* const* data,
                            const size_t* sizes, const int* tags,
                            MrHandle* const* mhs, Request* req) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("recv: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (n < 1 || n > kMaxRecvsPerRequest) {
    return InvalidArgument("recv: n must be in [1, " +
                           std::to_string(kMaxRecvsPerRequest) + "]");
  }
  if (r->failed.load(std::memory_order_acquire)) {
    return RemoteError("recv: the connection has failed; close it");
  }
  Command cmd{};
  cmd.type = CmdType::kRecv;
  cmd.conn = i;
  cmd.req = req;
  cmd.n = static_cast<uint8_t>(n);
  for (int k = 0; k < n; ++k) {
    if (sizes[k] > 0 && !covers(mhs[k], data[k], sizes[k])) {
      return InvalidArgument("recv: buffer " + std::to_string(k) +
                             " is not inside its registered region");
    }
    if (sizes[k] > (1ull << 40))
      return InvalidArgument("recv: buffer too large");
    cmd.bufs[k] = engine::CmdBuf{reinterpret_cast<uint64_t>(data[k]), sizes[k],
                                 sizes[k] ? mhs[k]->mrs[e].get() : nullptr,
                                 tags ? tags[k] : 0, 0};
  }
  if (r->rx_outstanding.load(std::memory_order_relaxed) >=
      kMaxRequestsPerFlow) {
    return ResourceExhausted(
        "recv: " + std::to_string(kMaxRequestsPerFlow) +
        " receives already outstanding on this connection");
  }
  RequestAccess::start(req, e, i, n);
  r->rx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::flush_async(ConnId c, int n, void* const* data,
                             const size_t* sizes, MrHandle* const* mhs,
                             Request* req) {
  uint32_t e, i;
  if (impl_->lookup(c, &e, &i) == nullptr) {
    return InvalidArgument("flush: unknown or closed connection");
  }
  UCCL_RETURN_IF_ERROR(check_request(req));
  for (int k = 0; k < n; ++k) {
    if (sizes[k] > 0 && !covers(mhs[k], data[k], sizes[k])) {
      return InvalidArgument(
          "flush: buffer is not inside its registered region");
    }
  }
  // Host memory: the engine placed the bytes before completing the receive,
  // so nothing is left to flush. (GPU memory would need a read-back here.)
  RequestAccess::start(req, e, i, n);
  RequestAccess::complete(req, Status::OK());
  return Status::OK();
}

Status Endpoint::write_async(ConnId c, const void* src, size_t len,
                             MrHandle* mh, const RemoteRegion& dst,
                             uint64_t dst_offset, Request* req, bool notify) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("write: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (len > 0 && !covers(mh, src, len)) {
    return InvalidArgument("write: source is not inside the registered region");
  }
  if (dst_offset > dst.len || len > dst.len - dst_offset) {
    return OutOfRange(
        "write: [offset, offset+len) is outside the remote region");
  }
  if (r->peer_engine >= dst.num_engines) {
    return InvalidArgument("write: remote region is from another endpoint");
  }
  if (r->tx_outstanding.load(std::memory_order_relaxed) >=
      static_cast<int>(engine::kMaxPendingSends)) {
    return ResourceExhausted("write: too many outstanding operations");
  }
  RequestAccess::start(req, e, i, 1);
  Command cmd{};
  cmd.type = CmdType::kWrite;
  cmd.conn = i;
  cmd.req = req;
  cmd.addr = reinterpret_cast<uint64_t>(src);
  cmd.len = len;
  cmd.lkey = len ? mh->mrs[e]->lkey() : 0;
  cmd.remote_addr = dst.addr + dst_offset;
  cmd.remote_key = dst.rkeys[r->peer_engine];
  cmd.tag = notify ? 1 : 0;
  r->tx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::read_async(ConnId c, void* dst, size_t len, MrHandle* mh,
                            const RemoteRegion& src, uint64_t src_offset,
                            Request* req) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("read: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (len > 0 && !covers(mh, dst, len)) {
    return InvalidArgument(
        "read: destination is not inside the registered region");
  }
  if (src_offset > src.len || len > src.len - src_offset) {
    return OutOfRange(
        "read: [offset, offset+len) is outside the remote region");
  }
  if (r->rx_outstanding.load(std::memory_order_relaxed) >=
      kMaxRequestsPerFlow) {
    return ResourceExhausted("read: too many outstanding receives and reads");
  }
  RequestAccess::start(req, e, i, 1);
  Command cmd{};
  cmd.type = CmdType::kRead;
  cmd.conn = i;
  cmd.req = req;
  cmd.addr = reinterpret_cast<uint64_t>(dst);
  cmd.len = len;
  cmd.mr = len ? mh->mrs[e].get() : nullptr;
  cmd.remote_addr = src.addr + src_offset;
  cmd.remote_key = src.region;
  r->rx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::wait(Request* req, int timeout_ms) {
  if (req == nullptr) return InvalidArgument("null request");
  if (RequestAccess::state(req).load(std::memory_order_acquire) == 0) {
    return InvalidArgument("wait: request was never posted");
  }
  // Spin briefly, then yield a while, then sleep on the futex. Yielding
  // (not pausing) matters when this thread shares a core with an engine:
  // a pause loop holds the core the engine needs to complete the request.
  for (int i = 0; i < 64; ++i) {
    if (req->done()) return req->status();
    __builtin_ia32_pause();
  }
  for (int i = 0; i < 2000; ++i) {
    if (req->done()) return req->status();
    sched_yield();
  }
  const uint64_t ns =
      timeout_ms < 0 ? UINT64_MAX : uint64_t(timeout_ms) * 1000000;
  if (!RequestAccess::wait(req, ns)) {
    return TimedOut("request did not complete within " +
                    std::to_string(timeout_ms) + " ms");
  }
  return req->status();
}

int Endpoint::poll(Request* const* reqs, int n) const {
  int done = 0;
  for (int i = 0; i < n; ++i) done += reqs[i] && reqs[i]->done();
  return done;
}

}  // namespace uccl
