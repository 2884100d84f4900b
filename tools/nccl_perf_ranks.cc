// nccl_perf's ranks: one process per GPU (rank_main, torchrun's way) or one
// process driving every GPU (procs_main, ncclCommInitAll), timing NCCL.
#include "tools/nccl_perf_ranks.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace uccl::tools {
namespace {

// NCCL entry points, resolved with dlsym (the GPU machine ships no
// unversioned libnccl.so to link against).
struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclCommInitAll) comm_init_all;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclGetErrorString) error_string;
};

[[noreturn]] void die(int rank, const std::string& what) {
  std::fprintf(stderr, "nccl_perf rank %d: %s\n", rank, what.c_str());
  std::fflush(stderr);
  _exit(2);
}

#define CUDA_OK(rank, x)                                          \
  do {                                                            \
    cudaError_t e_ = (x);                                         \
    if (e_ != cudaSuccess)                                        \
      die(rank, std::string(#x) + ": " + cudaGetErrorString(e_)); \
  } while (0)
#define NCCL_OK(rank, nccl, x)                                     \
  do {                                                             \
    ncclResult_t r_ = (x);                                         \
    if (r_ != ncclSuccess)                                         \
      die(rank, std::string(#x) + ": " + (nccl).error_string(r_)); \
  } while (0)

Nccl load_nccl(int rank, const std::string& lib) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    die(rank, "dlopen " + lib + ": " + dlerror() +
                  " (give --nccl_lib=<path of libnccl.so.2>)");
  }
  Nccl n{};
  auto sym = [&](const char* name) {
    void* p = dlsym(h, name);
    if (p == nullptr) die(rank, std::string("dlsym ") + name);
    return p;
  };
  n.get_unique_id =
      reinterpret_cast<decltype(n.get_unique_id)>(sym("ncclGetUniqueId"));
  n.comm_init_rank =
      reinterpret_cast<decltype(n.comm_init_rank)>(sym("ncclCommInitRank"));
  n.comm_init_all =
      reinterpret_cast<decltype(n.comm_init_all)>(sym("ncclCommInitAll"));
  n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(sym("ncclAllReduce"));
  n.send = reinterpret_cast<decltype(n.send)>(sym("ncclSend"));
  n.recv = reinterpret_cast<decltype(n.recv)>(sym("ncclRecv"));
  n.group_start =
      reinterpret_cast<decltype(n.group_start)>(sym("ncclGroupStart"));
  n.group_end = reinterpret_cast<decltype(n.group_end)>(sym("ncclGroupEnd"));
  n.comm_destroy =
      reinterpret_cast<decltype(n.comm_destroy)>(sym("ncclCommDestroy"));
  n.error_string =
      reinterpret_cast<decltype(n.error_string)>(sym("ncclGetErrorString"));
  return n;
}

bool write_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One GPU's stream, events and buffers (recv also carries one error count
// per size at the end), its input in place.
struct Gpu {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  float* send = nullptr;
  float* recv = nullptr;
  std::vector<float> host;
};

void setup_gpu(int rank, uint64_t max_bytes, const PerfRunConfig& cfg, Gpu* g) {
  CUDA_OK(rank, cudaSetDevice(cfg.share_gpu ? 0 : rank));
  CUDA_OK(rank, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  CUDA_OK(rank, cudaEventCreate(&g->start));
  CUDA_OK(rank, cudaEventCreate(&g->stop));
  const size_t max_n = max_bytes / sizeof(float);
  g->host.resize(max_n);
  for (size_t i = 0; i < max_n; ++i) g->host[i] = perf_input(rank, i);
  CUDA_OK(rank, cudaMalloc(&g->send, max_bytes));
  CUDA_OK(rank,
          cudaMalloc(&g->recv, std::max<size_t>(max_bytes, cfg.sizes.size() *
                                                               sizeof(float))));
  CUDA_OK(rank, cudaMemcpy(g->send, g->host.data(), max_bytes,
                           cudaMemcpyHostToDevice));
}

// One rank's all_to_all inside the caller's group: block j of `send` (n /
// nranks elements) to rank j, rank j's block for this rank into block j of
// `recv`; the rank's own block goes through NCCL's send to self.
void all_to_all_calls(int rank, const Nccl& nccl, const float* send,
                      float* recv, size_t n, int nranks, ncclComm_t comm,
                      cudaStream_t stream) {
  const size_t m = n / static_cast<size_t>(nranks);
  for (int j = 0; j < nranks; ++j) {
    const size_t off = static_cast<size_t>(j) * m;
    NCCL_OK(rank, nccl, nccl.send(send + off, m, ncclFloat32, j, comm, stream));
    NCCL_OK(rank, nccl, nccl.recv(recv + off, m, ncclFloat32, j, comm, stream));
  }
}

// Rank 0's rows to the parent (a count, then the rows as bytes); exits.
[[noreturn]] void send_rows(int rank, int out_fd,
                            const std::vector<PerfRow>& rows) {
  if (rank == 0) {
    uint32_t count = static_cast<uint32_t>(rows.size());
    if (!write_all(out_fd, &count, sizeof(count)) ||
        !write_all(out_fd, rows.data(), rows.size() * sizeof(PerfRow))) {
      die(rank, "result pipe write");
    }
  }
  std::fflush(stdout);
  _exit(0);
}

}  // namespace

// One rank: never returns. id_fd[0] is read by ranks > 0, id_fd[1] written
// by rank 0 (once per other rank); rows go to out_fd from rank 0 only.
[[noreturn]] void rank_main(int rank, int nranks, int id_fd[2], int out_fd,
                            const PerfRunConfig& cfg) {
  const std::vector<uint64_t>& sizes = cfg.sizes;
  const PerfColl coll = cfg.coll;
  CUDA_OK(rank, cudaSetDevice(cfg.share_gpu ? 0 : rank));
  Nccl nccl = load_nccl(rank, cfg.nccl_lib);
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_OK(rank, nccl, nccl.get_unique_id(&id));
    for (int r = 1; r < nranks; ++r) {
      if (!write_all(id_fd[1], &id, sizeof(id))) die(rank, "id pipe write");
    }
  } else if (!read_all(id_fd[0], &id, sizeof(id))) {
    die(rank, "id pipe read (rank 0 failed?)");
  }
  ncclComm_t comm;
  NCCL_OK(rank, nccl, nccl.comm_init_rank(&comm, nranks, id, rank));
  const uint64_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  Gpu g;
  setup_gpu(rank, max_bytes, cfg, &g);
  cudaStream_t stream = g.stream;
  cudaEvent_t start = g.start, stop = g.stop;
  float *send = g.send, *recv = g.recv;
  std::vector<float>& host = g.host;

  auto barrier = [&] {
    NCCL_OK(rank, nccl,
            nccl.all_reduce(recv, recv, 1, ncclFloat32, ncclSum, comm, stream));
    CUDA_OK(rank, cudaStreamSynchronize(stream));
  };
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  auto op = [&](size_t n) {
    if (coll == PerfColl::kAllReduce) {
      NCCL_OK(
          rank, nccl,
          nccl.all_reduce(send, recv, n, ncclFloat32, ncclSum, comm, stream));
      return;
    }
    NCCL_OK(rank, nccl, nccl.group_start());
    if (coll == PerfColl::kSendRecv) {
      NCCL_OK(rank, nccl, nccl.send(send, n, ncclFloat32, next, comm, stream));
      NCCL_OK(rank, nccl, nccl.recv(recv, n, ncclFloat32, prev, comm, stream));
    } else {
      all_to_all_calls(rank, nccl, send, recv, n, nranks, comm, stream);
    }
    NCCL_OK(rank, nccl, nccl.group_end());
  };
  std::vector<PerfRow> rows;
  for (uint64_t bytes : sizes) {
    const size_t n = bytes / sizeof(float);
    const uint32_t iters = perf_iters(bytes, cfg.iters, cfg.bytes_per_size);
    for (uint32_t i = 0; i < cfg.warmup; ++i) op(n);
    barrier();
    // NaN everywhere, so an element the timed loop never wrote fails.
    CUDA_OK(rank, cudaMemsetAsync(recv, 0xff, bytes, stream));
    CUDA_OK(rank, cudaEventRecord(start, stream));
    auto t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < iters; ++i) op(n);
    auto t1 = std::chrono::steady_clock::now();
    CUDA_OK(rank, cudaEventRecord(stop, stream));
    CUDA_OK(rank, cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(rank, cudaEventElapsedTime(&ms, start, stop));
    CUDA_OK(rank, cudaMemcpy(host.data(), recv, bytes, cudaMemcpyDeviceToHost));
    PerfRow row;
    row.bytes = bytes;
    row.iters = iters;
    row.time_us = ms * 1e3 / iters;
    row.host_us =
        std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
    row.errors = perf_check_result(coll, host.data(), n, rank, nranks);
    if (cfg.lat_calls > 0 && bytes <= cfg.lat_max_bytes) {
      // Isolated calls: the pipeline is empty when each one is issued, so
      // this is what one call costs end to end (the host's issue in C is a
      // few us, unlike the torch loop's).
      barrier();
      std::vector<double> lat(std::min(cfg.lat_calls, iters));
      for (double& l : lat) {
        auto c0 = std::chrono::steady_clock::now();
        op(n);
        CUDA_OK(rank, cudaStreamSynchronize(stream));
        l = std::chrono::duration<double, std::micro>(
                std::chrono::steady_clock::now() - c0)
                .count();
      }
      row.lat_us = median(std::move(lat));
    }
    rows.push_back(row);
  }
  // Every rank's errors count: one all_reduce folds them into rank 0's rows
  // (capped at 2^24 per size, where float counts stay exact).
  std::vector<float> errs(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    errs[i] = static_cast<float>(std::min<uint64_t>(rows[i].errors, 1u << 24));
  }
  const size_t err_bytes = errs.size() * sizeof(float);
  CUDA_OK(rank,
          cudaMemcpy(recv, errs.data(), err_bytes, cudaMemcpyHostToDevice));
  NCCL_OK(rank, nccl,
          nccl.all_reduce(recv, recv, errs.size(), ncclFloat32, ncclSum, comm,
                          stream));
  CUDA_OK(rank, cudaStreamSynchronize(stream));
  CUDA_OK(rank,
          cudaMemcpy(errs.data(), recv, err_bytes, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].errors = static_cast<uint64_t>(errs[i]);
  }
  NCCL_OK(rank, nccl, nccl.comm_destroy(comm));
  send_rows(rank, out_fd, rows);
}

// One process drives every GPU (ncclCommInitAll, one communicator per GPU,
// each call a group over them), as JAX and single-process harnesses do.
// Never returns; rows go to out_fd. Times: the slowest GPU's CUDA events.
[[noreturn]] void procs_main(int nranks, int out_fd, const PerfRunConfig& cfg) {
  const int rank = 0;  // for messages
  Nccl nccl = load_nccl(rank, cfg.nccl_lib);
  std::vector<ncclComm_t> comms(static_cast<size_t>(nranks));
  std::vector<int> devs(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) devs[static_cast<size_t>(r)] = r;
  NCCL_OK(rank, nccl, nccl.comm_init_all(comms.data(), nranks, devs.data()));
  const uint64_t max_bytes =
      *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  std::vector<Gpu> g(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) setup_gpu(r, max_bytes, cfg, &g[r]);
  const PerfColl coll = cfg.coll;
  auto op = [&](size_t n, bool in_place_one) {
    NCCL_OK(rank, nccl, nccl.group_start());
    for (int r = 0; r < nranks; ++r) {
      Gpu& x = g[static_cast<size_t>(r)];
      if (in_place_one) {  // the barrier: a 1-element all_reduce
        NCCL_OK(rank, nccl,
                nccl.all_reduce(x.recv, x.recv, 1, ncclFloat32, ncclSum,
                                comms[r], x.stream));
      } else if (coll == PerfColl::kAllReduce) {
        NCCL_OK(rank, nccl,
                nccl.all_reduce(x.send, x.recv, n, ncclFloat32, ncclSum,
                                comms[r], x.stream));
      } else if (coll == PerfColl::kAllToAll) {
        all_to_all_calls(r, nccl, x.send, x.recv, n, nranks, comms[r],
                         x.stream);
      } else {
        NCCL_OK(rank, nccl,
                nccl.send(x.send, n, ncclFloat32, (r + 1) % nranks, comms[r],
                          x.stream));
        NCCL_OK(rank, nccl,
                nccl.recv(x.recv, n, ncclFloat32, (r + nranks - 1) % nranks,
                          comms[r], x.stream));
      }
    }
    NCCL_OK(rank, nccl, nccl.group_end());
  };
  auto sync_all = [&] {
    for (int r = 0; r < nranks; ++r) {
      CUDA_OK(r, cudaSetDevice(r));
      CUDA_OK(r, cudaStreamSynchronize(g[r].stream));
    }
  };
  std::vector<PerfRow> rows;
  for (uint64_t bytes : cfg.sizes) {
    const size_t n = bytes / sizeof(float);
    const uint32_t iters = perf_iters(bytes, cfg.iters, cfg.bytes_per_size);
    for (uint32_t i = 0; i < cfg.warmup; ++i) op(n, false);
    op(1, true);
    sync_all();
    for (int r = 0; r < nranks; ++r) {
      CUDA_OK(r, cudaSetDevice(r));
      CUDA_OK(r, cudaMemsetAsync(g[r].recv, 0xff, bytes, g[r].stream));
      CUDA_OK(r, cudaEventRecord(g[r].start, g[r].stream));
    }
    auto t0 = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < iters; ++i) op(n, false);
    auto t1 = std::chrono::steady_clock::now();
    PerfRow row;
    row.bytes = bytes;
    row.iters = iters;
    for (int r = 0; r < nranks; ++r) {
      Gpu& x = g[static_cast<size_t>(r)];
      CUDA_OK(r, cudaSetDevice(r));
      CUDA_OK(r, cudaEventRecord(x.stop, x.stream));
      CUDA_OK(r, cudaEventSynchronize(x.stop));
      float ms = 0;
      CUDA_OK(r, cudaEventElapsedTime(&ms, x.start, x.stop));
      row.time_us = std::max(row.time_us, ms * 1e3 / iters);
      CUDA_OK(r,
              cudaMemcpy(x.host.data(), x.recv, bytes, cudaMemcpyDeviceToHost));
      row.errors += perf_check_result(coll, x.host.data(), n, r, nranks);
    }
    row.host_us =
        std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
    if (cfg.lat_calls > 0 && bytes <= cfg.lat_max_bytes) {
      op(1, true);
      sync_all();
      std::vector<double> lat(std::min(cfg.lat_calls, iters));
      for (double& l : lat) {
        auto c0 = std::chrono::steady_clock::now();
        op(n, false);
        sync_all();
        l = std::chrono::duration<double, std::micro>(
                std::chrono::steady_clock::now() - c0)
                .count();
      }
      row.lat_us = median(std::move(lat));
    }
    rows.push_back(row);
  }
  for (ncclComm_t c : comms) NCCL_OK(rank, nccl, nccl.comm_destroy(c));
  send_rows(rank, out_fd, rows);
}

}  // namespace uccl::tools
