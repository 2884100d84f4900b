// CUDA helpers: pointer queries and kernels that fill/check util/pattern.h's
// pattern on the GPU, so GPU-memory tests verify data without host copies.
#include <cuda_runtime.h>

#include <string>

#include "util/gpu.h"
#include "util/pattern.h"

namespace uccl {
namespace {

Status cuda_status(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return Status::OK();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

__device__ inline uint8_t dev_pattern_byte(uint64_t seed, uint64_t offset) {
  uint64_t x = (offset >> 3) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (offset & 7)));
}

__global__ void fill_kernel(uint8_t* p, size_t len, uint64_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < len;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = dev_pattern_byte(seed, i);
  }
}

__global__ void check_kernel(const uint8_t* p, size_t len, uint64_t seed,
                             unsigned long long* first_bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < len;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (p[i] != dev_pattern_byte(seed, i)) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

int blocks_for(size_t len) {
  size_t b = (len + 255) / 256;
  return static_cast<int>(b > 4096 ? 4096 : (b == 0 ? 1 : b));
}

}  // namespace

bool gpu_support_compiled() { return true; }

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

bool is_gpu_pointer(const void* p) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice;
}

Result<void*> gpu_alloc(int device, size_t len) {
  UCCL_RETURN_IF_ERROR(cuda_status("cudaSetDevice", cudaSetDevice(device)));
  void* p = nullptr;
  UCCL_RETURN_IF_ERROR(cuda_status("cudaMalloc", cudaMalloc(&p, len)));
  return p;
}

Status gpu_free(void* p) { return cuda_status("cudaFree", cudaFree(p)); }

Result<void*> gpu_alloc_mapped(int device, size_t len) {
  UCCL_RETURN_IF_ERROR(cuda_status("cudaSetDevice", cudaSetDevice(device)));
  void* p = nullptr;
  UCCL_RETURN_IF_ERROR(cuda_status(
      "cudaHostAlloc",
      cudaHostAlloc(&p, len, cudaHostAllocMapped | cudaHostAllocPortable)));
  // With unified addressing (every 64-bit CUDA platform) the GPU uses the
  // host address; refuse a platform where it would not.
  void* dev = nullptr;
  Status st = cuda_status("cudaHostGetDevicePointer",
                          cudaHostGetDevicePointer(&dev, p, 0));
  if (st.ok() && dev != p) {
    st = NotSupported("mapped host memory has another address on the GPU");
  }
  if (!st.ok()) {
    cudaFreeHost(p);
    return st;
  }
  return p;
}

Status gpu_free_mapped(void* p) {
  return cuda_status("cudaFreeHost", cudaFreeHost(p));
}

Status gpu_memcpy(void* dst, const void* src, size_t len) {
  return cuda_status("cudaMemcpy",
                     cudaMemcpy(dst, src, len, cudaMemcpyDefault));
}

Status gpu_fill_pattern(void* dptr, size_t len, uint64_t seed) {
  if (len == 0) return Status::OK();
  fill_kernel<<<blocks_for(len), 256>>>(static_cast<uint8_t*>(dptr), len, seed);
  UCCL_RETURN_IF_ERROR(cuda_status("fill_kernel", cudaGetLastError()));
  return cuda_status("cudaDeviceSynchronize", cudaDeviceSynchronize());
}

Result<int64_t> gpu_find_pattern_mismatch(const void* dptr, size_t len,
                                          uint64_t seed) {
  if (len == 0) return int64_t{-1};
  unsigned long long* d_bad = nullptr;
  UCCL_RETURN_IF_ERROR(
      cuda_status("cudaMalloc", cudaMalloc(&d_bad, sizeof(*d_bad))));
  unsigned long long init = ~0ull;
  Status st = cuda_status("cudaMemcpy", cudaMemcpy(d_bad, &init, sizeof(init),
                                                   cudaMemcpyHostToDevice));
  if (st.ok()) {
    check_kernel<<<blocks_for(len), 256>>>(static_cast<const uint8_t*>(dptr),
                                           len, seed, d_bad);
    st = cuda_status("check_kernel", cudaGetLastError());
  }
  unsigned long long bad = ~0ull;
  if (st.ok()) {
    st = cuda_status("cudaMemcpy", cudaMemcpy(&bad, d_bad, sizeof(bad),
                                              cudaMemcpyDeviceToHost));
  }
  cudaFree(d_bad);
  if (!st.ok()) return st;
  return bad == ~0ull ? int64_t{-1} : static_cast<int64_t>(bad);
}

}  // namespace uccl
