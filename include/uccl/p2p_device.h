// How the p2p engine moves memory its NIC cannot reach (GPU memory on the
// software NIC): asynchronous copies to and from pinned host buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "uccl/status.h"

namespace uccl::p2p {

// One device's memory as the p2p engine sees it. Calls come under the
// endpoint's lock, except is_device and export_dmabuf (from reg(), which
// must be thread-safe).
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Whether [p, p + len) is this device's memory (then it is staged).
  virtual bool is_device(const void* p, size_t len) = 0;
  // Page-locked host memory the copies run fast from and to.
  virtual Result<void*> alloc_host(size_t len) = 0;
  virtual void free_host(void* p) = 0;
  // Starts a copy between device and host memory (either way); the token
  // is polled with copy_done until true (or an error), then spent.
  virtual Result<uint64_t> copy_async(void* dst, const void* src,
                                      size_t len) = 0;
  virtual Result<bool> copy_done(uint64_t token) = 0;
  // For a NIC that reaches device memory itself (verbs, GPUDirect RDMA):
  // [p, p + len) exported as a dma-buf, its fd (the caller closes it) and
  // the offset of p in it. NotSupported where the device cannot.
  struct DmaBuf {
    int fd = -1;
    uint64_t offset = 0;
  };
  virtual Result<DmaBuf> export_dmabuf(void* p, size_t len) {
    (void)p, (void)len;
    return NotSupported("this device exports no dma-buf");
  }
  // After a NIC wrote into device memory directly: makes those writes
  // visible to the device's own work (the GPUDirect RDMA flush).
  virtual Status flush_nic_writes() { return Status::OK(); }
};

// CUDA's runtime, loaded when this is called (UCCL_CUDART names the
// library; else libcudart.so, .so.13, .so.12): copies on their own
// non-blocking streams of GPU `gpu_idx`. NotSupported where there is no
// CUDA runtime or no such GPU.
Result<std::unique_ptr<DeviceMemory>> open_cuda_memory(int gpu_idx);

}  // namespace uccl::p2p
