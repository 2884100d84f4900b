// DeviceMemory over CUDA's runtime, loaded with dlopen when a GPU is asked
// for, so the p2p engine builds and runs without CUDA where none is used.
#include <dlfcn.h>

#include <string>
#include <vector>

#include "uccl/p2p_device.h"
#include "util/knobs.h"

namespace uccl::p2p {

UCCL_DECLARE_KNOB(std::string, knob_cudart);  // p2p/knobs.cc

namespace {

// The runtime's ABI as this file uses it (stable since CUDA 10): error 0 is
// success; cudaPointerAttributes as in driver_types.h.
using cudaError_t = int;
using cudaStream_t = void*;
using cudaEvent_t = void*;
struct PointerAttributes {
  int type;  // 2: device memory, 3: managed
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
};
constexpr int kMemoryTypeDevice = 2;
constexpr int kMemoryTypeManaged = 3;
constexpr unsigned kHostAllocPortable = 1;
constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kEventDisableTiming = 2;
constexpr int kMemcpyDefault = 4;
constexpr int kErrorNotReady = 600;

struct Runtime {
  cudaError_t (*set_device)(int);
  cudaError_t (*get_device_count)(int*);
  cudaError_t (*pointer_attributes)(PointerAttributes*, const void*);
  cudaError_t (*host_alloc)(void**, size_t, unsigned);
  cudaError_t (*free_host)(void*);
  cudaError_t (*stream_create)(cudaStream_t*, unsigned);
  cudaError_t (*memcpy_async)(void*, const void*, size_t, int, cudaStream_t);
  cudaError_t (*event_create)(cudaEvent_t*, unsigned);
  cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
  cudaError_t (*event_query)(cudaEvent_t);
  cudaError_t (*event_destroy)(cudaEvent_t);
  cudaError_t (*get_last_error)();
  const char* (*error_string)(cudaError_t);
  // Optional (CUDA 11.3+): the GPUDirect RDMA flush.
  cudaError_t (*flush_rdma_writes)(int target, int scope);
  // The driver API's (libcuda.so.1), optional: dma-buf export.
  int (*pointer_get_attribute)(void* data, int attribute, uint64_t ptr);
  int (*get_handle_for_range)(void* handle, uint64_t ptr, size_t size, int type,
                              unsigned long long flags);
};
constexpr int kPointerRangeStart = 11;  // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
constexpr int kPointerRangeSize = 12;   // CU_POINTER_ATTRIBUTE_RANGE_SIZE
constexpr int kHandleDmaBufFd = 1;      // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
constexpr int kFlushToOwner = 100;      // cudaFlushGPUDirectRDMAWritesToOwner

template <typename F>
bool load(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

Result<Runtime> open_runtime() {
  std::vector<std::string> names;
  if (!knob_cudart().get().empty()) {
    names.push_back(knob_cudart().get());
  } else {
    names = {"libcudart.so", "libcudart.so.13", "libcudart.so.12"};
  }
  void* lib = nullptr;
  for (const std::string& n : names) {
    lib = dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    return NotSupported("GPU memory needs CUDA's runtime; could not load " +
                        names.front() + " (set UCCL_CUDART)");
  }
  Runtime r{};
  const bool ok =
      load(lib, "cudaSetDevice", &r.set_device) &&
      load(lib, "cudaGetDeviceCount", &r.get_device_count) &&
      load(lib, "cudaPointerGetAttributes", &r.pointer_attributes) &&
      load(lib, "cudaHostAlloc", &r.host_alloc) &&
      load(lib, "cudaFreeHost", &r.free_host) &&
      load(lib, "cudaStreamCreateWithFlags", &r.stream_create) &&
      load(lib, "cudaMemcpyAsync", &r.memcpy_async) &&
      load(lib, "cudaEventCreateWithFlags", &r.event_create) &&
      load(lib, "cudaEventRecord", &r.event_record) &&
      load(lib, "cudaEventQuery", &r.event_query) &&
      load(lib, "cudaEventDestroy", &r.event_destroy) &&
      load(lib, "cudaGetLastError", &r.get_last_error) &&
      load(lib, "cudaGetErrorString", &r.error_string);
  if (!ok)
    return NotSupported("the CUDA runtime lacks " + std::string(dlerror()));
  load(lib, "cudaDeviceFlushGPUDirectRDMAWrites", &r.flush_rdma_writes);
  if (void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    load(drv, "cuPointerGetAttribute", &r.pointer_get_attribute);
    load(drv, "cuMemGetHandleForAddressRange", &r.get_handle_for_range);
  }
  return r;
}

// Copies go on two streams (into the device, out of it) so both directions
// overlap; each copy records an event from a ring, whose index and
// generation make the token.
class CudaMemory : public DeviceMemory {
 public:
  static constexpr uint32_t kEvents = 256;

  CudaMemory(Runtime rt, int gpu) : rt_(rt), gpu_(gpu) {}
  ~CudaMemory() override {
    for (cudaEvent_t e : events_) rt_.event_destroy(e);
  }

  Status init() {
    int n = 0;
    if (rt_.get_device_count(&n) != 0 || gpu_ >= n) {
      rt_.get_last_error();
      return NotSupported("no GPU " + std::to_string(gpu_) + " (" +
                          std::to_string(n) + " visible)");
    }
    UCCL_RETURN_IF_ERROR(check(rt_.set_device(gpu_), "cudaSetDevice"));
    for (cudaStream_t* s : {&to_device_, &to_host_}) {
      UCCL_RETURN_IF_ERROR(check(rt_.stream_create(s, kStreamNonBlocking),
                                 "cudaStreamCreateWithFlags"));
    }
    events_.resize(kEvents);
    gens_.assign(kEvents, 0);
    for (cudaEvent_t& e : events_) {
      UCCL_RETURN_IF_ERROR(check(rt_.event_create(&e, kEventDisableTiming),
                                 "cudaEventCreateWithFlags"));
    }
    return Status::OK();
  }

  bool is_device(const void* p, size_t) override {
    PointerAttributes a{};
    if (rt_.pointer_attributes(&a, p) != 0) {
      rt_.get_last_error();  // plain host memory on old runtimes
      return false;
    }
    return a.type == kMemoryTypeDevice || a.type == kMemoryTypeManaged;
  }

  Result<void*> alloc_host(size_t len) override {
    void* p = nullptr;
    rt_.set_device(gpu_);
    UCCL_RETURN_IF_ERROR(
        check(rt_.host_alloc(&p, len, kHostAllocPortable), "cudaHostAlloc"));
    return p;
  }
  void free_host(void* p) override { rt_.free_host(p); }

  // The whole allocation holding p (dma-buf ranges must be page-aligned;
  // an allocation is), and p's offset in it.
  Result<DmaBuf> export_dmabuf(void* p, size_t len) override {
    if (rt_.pointer_get_attribute == nullptr ||
        rt_.get_handle_for_range == nullptr) {
      return NotSupported("the CUDA driver exports no dma-buf (before 11.7)");
    }
    uint64_t base = 0;
    size_t size = 0;
    const uint64_t a = reinterpret_cast<uint64_t>(p);
    if (rt_.pointer_get_attribute(&base, kPointerRangeStart, a) != 0 ||
        rt_.pointer_get_attribute(&size, kPointerRangeSize, a) != 0 ||
        a + len > base + size) {
      return NotSupported("no GPU allocation holds this range");
    }
    int fd = -1;
    if (rt_.get_handle_for_range(&fd, base, size, kHandleDmaBufFd, 0) != 0) {
      return NotSupported("cuMemGetHandleForAddressRange refused a dma-buf");
    }
    return DmaBuf{fd, a - base};
  }

  Status flush_nic_writes() override {
    if (rt_.flush_rdma_writes == nullptr) return Status::OK();
    rt_.set_device(gpu_);
    return check(rt_.flush_rdma_writes(0, kFlushToOwner),
                 "cudaDeviceFlushGPUDirectRDMAWrites");
  }

  Result<uint64_t> copy_async(void* dst, const void* src, size_t len) override {
    rt_.set_device(gpu_);
    // The ring is deep enough for every copy the engine keeps in flight
    // (staging buffers); a slot still busy is refused, never reused.
    const uint32_t i = next_++ % kEvents;
    if (busy_[i]) {
      return ResourceExhausted("too many GPU copies in flight");
    }
    cudaStream_t s = is_device(dst, len) ? to_device_ : to_host_;
    UCCL_RETURN_IF_ERROR(check(
        rt_.memcpy_async(dst, src, len, kMemcpyDefault, s), "cudaMemcpyAsync"));
    UCCL_RETURN_IF_ERROR(
        check(rt_.event_record(events_[i], s), "cudaEventRecord"));
    busy_[i] = 1;
    return static_cast<uint64_t>(++gens_[i]) << 32 | i;
  }

  Result<bool> copy_done(uint64_t token) override {
    const uint32_t i = static_cast<uint32_t>(token);
    if (i >= kEvents || gens_[i] != static_cast<uint32_t>(token >> 32)) {
      return InvalidArgument("unknown GPU copy");
    }
    const cudaError_t e = rt_.event_query(events_[i]);
    if (e == kErrorNotReady) return false;
    busy_[i] = 0;
    ++gens_[i];  // spent
    UCCL_RETURN_IF_ERROR(check(e, "GPU copy"));
    return true;
  }

 private:
  Status check(cudaError_t e, const char* what) {
    if (e == 0) return Status::OK();
    rt_.get_last_error();
    return Internal(std::string(what) + ": " + rt_.error_string(e));
  }

  Runtime rt_;
  int gpu_;
  cudaStream_t to_device_ = nullptr, to_host_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<uint32_t> gens_;
  uint8_t busy_[kEvents] = {};  // a copy's event not yet seen done
  uint32_t next_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeviceMemory>> open_cuda_memory(int gpu_idx) {
  if (gpu_idx < 0) return InvalidArgument("GPU index must be >= 0");
  UCCL_ASSIGN_OR_RETURN(Runtime rt, open_runtime());
  auto m = std::make_unique<CudaMemory>(rt, gpu_idx);
  UCCL_RETURN_IF_ERROR(m->init());
  return std::unique_ptr<DeviceMemory>(std::move(m));
}

}  // namespace uccl::p2p
