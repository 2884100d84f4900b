// The CUDA device current on the calling thread, for the NCCL plugin to give
// each GPU of a process engines of its own (collective/net_plugin.cc).
#pragma once

#include <string>

namespace uccl::nccl {

// Through CUDA's driver API (libcuda.so.1, loaded once, never linked): the
// device of the context current on this thread, or -1 where there is no
// driver or no current context (then every caller shares one endpoint).
int current_cuda_device();

// The sysfs path of that device's PCI function (/sys/devices/pci.../BDF),
// from cuDeviceGetPCIBusId; "" where unknown.
std::string current_gpu_pci_path();

}  // namespace uccl::nccl
