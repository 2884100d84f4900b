// The CUDA device current on the calling thread, for the NCCL plugin to give
// each GPU of a process engines of its own (collective/net_plugin.cc).
#pragma once

namespace uccl::nccl {

// Through CUDA's driver API (libcuda.so.1, loaded once, never linked): the
// device of the context current on this thread, or -1 where there is no
// driver or no current context (then every caller shares one endpoint).
int current_cuda_device();

}  // namespace uccl::nccl
