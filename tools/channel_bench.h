// channel_bench's modes in their own files (tools/channel_*.cu) and what
// they share: the modes' entry points, a percentile, CUDA error checks.
#pragma once

#include <cstdio>
#include <vector>

// In a mode's int-returning function: a failed CUDA call prints what
// failed and returns 1 (channel_bench's exit code for a failed check).
#define CUDA_OK(x)                                        \
  do {                                                    \
    cudaError_t e_ = (x);                                 \
    if (e_ != cudaSuccess) {                              \
      std::fprintf(stderr, "channel_bench: %s: %s\n", #x, \
                   cudaGetErrorString(e_));               \
      return 1;                                           \
    }                                                     \
  } while (0)

namespace channel_bench {

int run_rtt();       // tools/channel_rtt.cu
int run_pingpong();  // tools/channel_pingpong.cu
int run_ep();        // tools/channel_ep.cu

// The p-quantile (0..1) of `v`, 0 when empty.
double pct(std::vector<double> v, double p);

}  // namespace channel_bench
