// channel_bench's modes in their own files (tools/channel_*.cu) and what
// they share: the modes' entry points and a percentile of samples.
#pragma once

#include <vector>

namespace channel_bench {

int run_rtt();       // tools/channel_rtt.cu
int run_pingpong();  // tools/channel_pingpong.cu
int run_ep();        // tools/channel_ep.cu

// The p-quantile (0..1) of `v`, 0 when empty.
double pct(std::vector<double> v, double p);

}  // namespace channel_bench
