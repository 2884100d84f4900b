// current_cuda_device(): libcuda.so.1's cuCtxGetDevice, looked up once with
// dlopen so the plugin loads (and CI runs) on machines without CUDA.
#include "collective/cuda_device.h"

#include <dlfcn.h>

namespace uccl::nccl {

int current_cuda_device() {
  using CtxGetDevice = int (*)(int* device);  // CUresult cuCtxGetDevice
  static const CtxGetDevice get = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (lib == nullptr) return CtxGetDevice{nullptr};  // CUDA not in use
    return reinterpret_cast<CtxGetDevice>(dlsym(lib, "cuCtxGetDevice"));
  }();
  int dev = -1;
  if (get == nullptr || get(&dev) != 0) return -1;
  return dev;
}

}  // namespace uccl::nccl
