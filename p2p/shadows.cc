// GPU memory peers reach: registered with a NIC that reaches it (dma-buf),
// else advertised as a page-locked host shadow kept in step by flush() and
// publish().
#include <unistd.h>

#include <string>

#include "p2p/p2p_impl.h"
#include "util/clock.h"

namespace uccl::p2p {
namespace {

constexpr uint64_t kCopyTimeoutNs = 10'000'000'000;  // a stuck GPU copy

}  // namespace

Result<RegionDesc> Endpoint::Impl::advertise_shadow(Registration* r,
                                                    size_t offset, size_t len) {
  Shadow sh;
  sh.off = offset;
  sh.len = len;
  UCCL_ASSIGN_OR_RETURN(void* host, dev->alloc_host(len));
  sh.host = static_cast<uint8_t*>(host);
  Result<MrHandle*> mh = ep->reg_mr(sh.host, len);
  if (!mh.ok()) {
    dev->free_host(sh.host);
    return mh.status();
  }
  sh.mh = *mh;
  // It starts as a copy of the GPU memory, as if published.
  r->shadows.push_back(sh);
  Status st = sync_shadows(r, false);
  RegionDesc d;
  Result<RemoteRegion> region = ep->advertise(sh.mh, sh.host, len);
  if (!st.ok() || !region.ok()) {
    (void)ep->dereg_mr(sh.mh);
    dev->free_host(sh.host);
    r->shadows.pop_back();
    return st.ok() ? region.status() : st;
  }
  d.region = *region;
  return d;
}

Status Endpoint::Impl::sync_shadows(Registration* r, bool to_device) {
  for (const Shadow& sh : r->shadows) {
    uint8_t* gpu = reinterpret_cast<uint8_t*>(r->addr) + sh.off;
    UCCL_ASSIGN_OR_RETURN(uint64_t t,
                          to_device ? dev->copy_async(gpu, sh.host, sh.len)
                                    : dev->copy_async(sh.host, gpu, sh.len));
    const uint64_t deadline = monotonic_ns() + kCopyTimeoutNs;
    for (;;) {
      UCCL_ASSIGN_OR_RETURN(bool done, dev->copy_done(t));
      if (done) break;
      if (monotonic_ns() > deadline) {
        return TimedOut("a GPU copy of an advertised region took over 10 s");
      }
    }
  }
  return Status::OK();
}

Status Endpoint::Impl::sync_mr(MrId mr, bool to_device) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = mrs.find(mr);
  if (it == mrs.end()) return InvalidArgument("unknown memory id");
  // Memory the NIC wrote directly: the GPUDirect flush makes it visible.
  if (it->second.direct) return to_device ? dev->flush_nic_writes() : Status();
  return sync_shadows(&it->second, to_device);
}

Result<MrHandle*> Endpoint::Impl::reg_direct(void* addr, size_t len) {
  Result<DeviceMemory::DmaBuf> buf = dev->export_dmabuf(addr, len);
  if (!buf.ok()) return static_cast<MrHandle*>(nullptr);
  Result<MrHandle*> mh = ep->reg_dmabuf_mr(addr, len, buf->fd, buf->offset);
  ::close(buf->fd);  // the registration holds its own reference
  if (mh.ok()) return mh;
  if (mh.status().code() == StatusCode::kNotSupported) {
    return static_cast<MrHandle*>(nullptr);
  }
  return mh.status();
}

Status Endpoint::flush(MrId mr) { return impl_->sync_mr(mr, true); }
Status Endpoint::publish(MrId mr) { return impl_->sync_mr(mr, false); }

}  // namespace uccl::p2p
