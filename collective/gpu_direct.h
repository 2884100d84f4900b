// Whether the NCCL plugin offers NCCL GPU memory on a device (ptrSupport),
// and how it flushes received GPU data: decisions kept pure for tests.
#pragma once

#include <functional>
#include <string>

namespace uccl::nccl {

// What the host offers a verbs NIC for GPU memory.
struct GpuDirectProbe {
  bool verbs = false;       // a verbs device (the software NIC never)
  bool dmabuf_api = false;  // rdma-core has ibv_reg_dmabuf_mr (v34+)
  bool peermem = false;     // nvidia_peermem (or nv_peer_mem) is loaded
  bool enabled = true;      // UCCL_NCCL_GPU_DIRECT
};

// NCCL_PTR_* bits: HOST always; CUDA and DMABUF where ibv_reg_dmabuf_mr
// exists; CUDA alone where only peer memory does (ibv_reg_mr on GPU
// pointers). Where the driver cannot after all, regMr fails and NCCL
// stages through host memory as it does for a HOST-only device.
int gpu_ptr_support(const GpuDirectProbe& p);

// Peer memory, from sysfs: `exists` tells whether a path exists.
bool peermem_loaded(const std::function<bool(const std::string&)>& exists);

// How iflush makes received data visible to the GPU (UCCL_NCCL_FLUSH):
// kAuto reads back one byte of received GPU memory through a loopback
// connection (the NIC's read of GPU memory is ordered after its writes
// there, as NCCL's IB transport flushes), and nothing for host memory;
// kRead does that for host memory too (exercises the path on any NIC);
// kOff never (NCCL_GDR_FLUSH_DISABLE's equivalent).
enum class FlushMode { kAuto, kRead, kOff };
// Whether a receive into memory of that kind needs the read-back.
bool flush_needed(FlushMode m, bool gpu_memory);

}  // namespace uccl::nccl
