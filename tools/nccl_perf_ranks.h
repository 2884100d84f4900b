// nccl_perf's timing side: the processes that run NCCL (one per GPU, or one
// for every GPU) and pipe rank 0's rows to the parent (tools/nccl_perf.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/nccl_perf_util.h"

namespace uccl::tools {

struct PerfRunConfig {
  std::vector<uint64_t> sizes;
  PerfColl coll = PerfColl::kAllReduce;
  std::string nccl_lib;  // dlopen'd (the GPU machine has no libnccl.so)
  uint32_t iters = 0, warmup = 0, lat_calls = 0;
  uint64_t bytes_per_size = 0, lat_max_bytes = 0;
  // Every rank on CUDA device 0 (--share_gpu) instead of device `rank`.
  bool share_gpu = false;
};

// One rank of `nranks`, one process each: rank 0 makes NCCL's unique id and
// writes it to id_fd[1] once per other rank, which read it from id_fd[0];
// rank 0 writes the rows (a uint32 count, then PerfRow bytes) to out_fd.
// Exits the process (0, or 2 after printing what failed).
[[noreturn]] void rank_main(int rank, int nranks, int id_fd[2], int out_fd,
                            const PerfRunConfig& cfg);

// One process for all `nranks` GPUs (ncclCommInitAll; each call a group
// over the communicators), rows to out_fd as rank_main's. Exits.
[[noreturn]] void procs_main(int nranks, int out_fd, const PerfRunConfig& cfg);

}  // namespace uccl::tools
