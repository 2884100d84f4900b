// current_cuda_device(): libcuda.so.1's cuCtxGetDevice, looked up once with
// dlopen so the plugin loads (and CI runs) on machines without CUDA.
#include "collective/cuda_device.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cctype>

namespace uccl::nccl {

namespace {

// A driver entry point, where libcuda.so.1 is already loaded (by the
// program's CUDA runtime): this never loads CUDA into a process.
void* driver_symbol(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
}

}  // namespace

int current_cuda_device() {
  using CtxGetDevice = int (*)(int* device);  // CUresult cuCtxGetDevice
  static const auto get =
      reinterpret_cast<CtxGetDevice>(driver_symbol("cuCtxGetDevice"));
  int dev = -1;
  if (get == nullptr || get(&dev) != 0) return -1;
  return dev;
}

std::string current_gpu_pci_path() {
  // CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice dev)
  using GetBusId = int (*)(char* id, int len, int dev);
  static const auto get =
      reinterpret_cast<GetBusId>(driver_symbol("cuDeviceGetPCIBusId"));
  const int dev = current_cuda_device();
  char id[64] = {};
  if (get == nullptr || dev < 0 || get(id, sizeof(id) - 1, dev) != 0) {
    return "";
  }
  std::string bdf(id);
  for (char& ch : bdf) ch = static_cast<char>(std::tolower(ch));
  char real[PATH_MAX];
  const std::string link = "/sys/bus/pci/devices/" + bdf;
  return realpath(link.c_str(), real) ? std::string(real) : "";
}

}  // namespace uccl::nccl
