// p2p::Endpoint: creation (one engine endpoint with num_cpus engines),
// registered memory and the region descriptors peers write and read.
#include <cstring>

#include "p2p/p2p_impl.h"

namespace uccl::p2p {
namespace {

constexpr uint32_t kSlots = 4096;       // transfers outstanding at most
constexpr uint32_t kHelloSlots = 1024;  // engine connections being accepted

}  // namespace

std::string RegionDesc::to_bytes() const {
  return std::string(reinterpret_cast<const char*>(this), sizeof(*this));
}

Result<RegionDesc> RegionDesc::from_bytes(const std::string& bytes) {
  if (bytes.size() != sizeof(RegionDesc)) {
    return InvalidArgument("region descriptor of " +
                           std::to_string(bytes.size()) + " bytes, not " +
                           std::to_string(sizeof(RegionDesc)));
  }
  RegionDesc d;
  std::memcpy(&d, bytes.data(), sizeof(d));
  if (d.magic != kMagic || d.version != kVersion) {
    return InvalidArgument(
        "not a uccl.p2p region descriptor (or another "
        "version of one)");
  }
  if (d.region.len == 0 || d.region.num_engines == 0 ||
      d.region.num_engines > 16 ||
      d.region.addr + d.region.len < d.region.addr) {
    return InvalidArgument("region descriptor describes no valid region");
  }
  return d;
}

Endpoint::Endpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Endpoint>> Endpoint::create(const Config& cfg) {
  if (cfg.num_cpus < 1 || cfg.num_cpus > kMaxStripes) {
    return InvalidArgument("num_cpus must be in [1, " +
                           std::to_string(kMaxStripes) + "]");
  }
  if (cfg.stripe_bytes < 4096) {
    return InvalidArgument("stripe_bytes must be at least 4096");
  }
  if (cfg.hello_timeout_ms < 1) {
    return InvalidArgument("hello_timeout_ms must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->dev = cfg.device_memory;
  if (impl->dev == nullptr && cfg.local_gpu_idx >= 0) {
    UCCL_ASSIGN_OR_RETURN(impl->dev, open_cuda_memory(cfg.local_gpu_idx));
  }
  impl->hello_timeout_ns =
      static_cast<uint64_t>(cfg.hello_timeout_ms) * 1000000;
  impl->num_slots = kSlots;
  impl->slots.reset(new Xfer[kSlots]);
  impl->free_slots.reserve(kSlots);
  for (uint32_t i = kSlots; i > 0; --i) impl->free_slots.push_back(i - 1);
  EndpointConfig ec = cfg.engine;
  ec.num_engines = cfg.num_cpus;
  UCCL_ASSIGN_OR_RETURN(impl->ep, uccl::Endpoint::create(ec));
  impl->hello_bufs.assign(size_t{kHelloSlots} * sizeof(ConnHello), 0);
  for (uint32_t i = kHelloSlots; i > 0; --i) impl->free_hellos.push_back(i - 1);
  UCCL_ASSIGN_OR_RETURN(
      impl->hello_mh,
      impl->ep->reg_mr(impl->hello_bufs.data(), impl->hello_bufs.size()));
  UCCL_RETURN_IF_ERROR(impl->init_staging());
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

Endpoint::~Endpoint() {
  // Stopping the engines (the engine endpoint's destructor) ends every
  // write into the slots' requests; the slots go after it.
  impl_->ep.reset();
  impl_->free_staging();
}

Endpoint::StagingStats Endpoint::staging_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->staging;
}

int Endpoint::num_engines() const { return impl_->cfg.num_cpus; }
uint64_t Endpoint::rejected_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rejected_hellos;
}
uccl::Endpoint* Endpoint::engine_endpoint() { return impl_->ep.get(); }
bool Endpoint::landed_writes_final() const {
  return impl_->ep->landed_writes_final();
}

Result<MrId> Endpoint::reg(void* addr, size_t len) {
  if (addr == nullptr || len == 0) {
    return InvalidArgument("reg: empty buffer");
  }
  MrHandle* mh = nullptr;
  bool device = impl_->dev != nullptr && impl_->dev->is_device(addr, len);
  bool direct = false;
  if (device) {
    // A NIC that reaches GPU memory registers it as a dma-buf; the others
    // (the software NIC) have it staged.
    UCCL_ASSIGN_OR_RETURN(mh, impl_->reg_direct(addr, len));
    direct = mh != nullptr;
    device = !direct;
  } else {
    UCCL_ASSIGN_OR_RETURN(mh, impl_->ep->reg_mr(addr, len));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  const MrId id = impl_->next_mr++;
  Registration& r = impl_->mrs[id];
  r = Registration{mh, device, reinterpret_cast<uintptr_t>(addr), len};
  r.direct = direct;
  return id;
}

Status Endpoint::dereg(MrId mr) {
  MrHandle* mh = nullptr;
  std::vector<Shadow> shadows;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->mrs.find(mr);
    if (it == impl_->mrs.end()) return InvalidArgument("dereg: unknown memory");
    impl_->reap_finishing();  // requests done early whose parts have ended
    for (uint32_t s = 0; s < impl_->num_slots; ++s) {
      const Xfer& x = impl_->slots[s];
      if (x.in_use && x.mr == mr) {
        return Unavailable(
            "dereg: a transfer on this memory is "
            "outstanding");
      }
    }
    mh = it->second.mh;
    shadows = std::move(it->second.shadows);
    impl_->mrs.erase(it);
  }
  for (const Shadow& sh : shadows) {
    (void)impl_->ep->dereg_mr(sh.mh);
    impl_->dev->free_host(sh.host);
  }
  return mh == nullptr ? Status::OK() : impl_->ep->dereg_mr(mh);
}

Result<RegionDesc> Endpoint::advertise(MrId mr, size_t offset, size_t len) {
  MrHandle* mh = nullptr;
  uintptr_t base = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->mrs.find(mr);
    if (it == impl_->mrs.end()) {
      return InvalidArgument("advertise: unknown memory");
    }
    if (len == 0 || offset > it->second.len || len > it->second.len - offset) {
      return OutOfRange("advertise: range outside the registered memory");
    }
    if (it->second.device)
      return impl_->advertise_shadow(&it->second, offset, len);
    mh = it->second.mh;
    base = it->second.addr;
  }
  RegionDesc d;
  UCCL_ASSIGN_OR_RETURN(
      d.region,
      impl_->ep->advertise(mh, reinterpret_cast<void*>(base + offset), len));
  return d;
}

Result<MrHandle*> Endpoint::Impl::region_of(MrId mr, const void* p,
                                            size_t len) const {
  auto it = mrs.find(mr);
  if (it == mrs.end()) return InvalidArgument("unknown memory id");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Registration& r = it->second;
  if (len == 0) return r.mh;  // no bytes: any address (new_xfer moves it)
  if (a < r.addr || a > r.addr + r.len || len > r.addr + r.len - a) {
    return OutOfRange("buffer outside its registered memory");
  }
  return r.mh;
}

}  // namespace uccl::p2p
