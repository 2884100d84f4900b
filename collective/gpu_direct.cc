// GPU memory on verbs devices for the NCCL plugin: ptrSupport from what
// the host offers (dma-buf registration, peer memory), and the flush rule.
#include "collective/gpu_direct.h"

#include "collective/nccl_net_abi.h"

namespace uccl::nccl {

int gpu_ptr_support(const GpuDirectProbe& p) {
  int bits = ncclabi::kPtrHost;
  if (!p.verbs || !p.enabled) return bits;
  if (p.dmabuf_api) return bits | ncclabi::kPtrCuda | ncclabi::kPtrDmaBuf;
  if (p.peermem) return bits | ncclabi::kPtrCuda;
  return bits;
}

bool peermem_loaded(const std::function<bool(const std::string&)>& exists) {
  return exists("/sys/module/nvidia_peermem") ||
         exists("/sys/module/nv_peer_mem") ||
         exists("/sys/kernel/mm/memory_peers/nv_mem/version");
}

bool flush_needed(FlushMode m, bool gpu_memory) {
  switch (m) {
    case FlushMode::kOff:
      return false;
    case FlushMode::kRead:
      return true;
    case FlushMode::kAuto:
    default:
      return gpu_memory;
  }
}

}  // namespace uccl::nccl
