// channel_bench: GPU-initiated channels measured and checked on a GPU.
// --mode fifo: triggers/s with many warps pushing, every trigger checked
// (none lost, none twice, each producer's in order). --mode rtt: a GPU
// thread's push to the host's answer and back, against a CPU thread doing
// the same (the baseline). --mode pingpong --role server|client: two
// processes, one kernel each, put_with_signal then wait, data checked in
// the kernel; the same exchange by p2p from host memory is the baseline.
// --mode ep: expert-parallel dispatch and combine among --world processes
// (tools/channel_ep.cu). Exit 1 on any lost, doubled or wrong trigger or byte;
// 2 on bad flags.
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "channels/proxy.h"
#include "tools/channel_bench.h"
#include "uccl/device/channel.h"
#include "uccl/device/fifo.h"
#include "uccl/p2p.h"

DEFINE_string(mode, "fifo", "fifo, rtt, pingpong or ep.");
DEFINE_int32(gpu, 0, "GPU index.");
DEFINE_int32(blocks, 132, "fifo: blocks of the pushing kernel.");
DEFINE_int32(threads, 128, "fifo: threads per block.");
DEFINE_int32(pushes, 64, "fifo: pushes per thread.");
DEFINE_int32(slots, 4096, "fifo: FIFO slots.");
DEFINE_int32(iterations, 10000, "rtt and pingpong: round trips.");
DEFINE_uint64(msg_bytes, 256, "pingpong: bytes each way.");
DEFINE_string(role, "", "pingpong: server or client.");
DEFINE_string(server, "127.0.0.1", "pingpong client: the server's address.");
DEFINE_int32(port, 0, "pingpong: the server's port (server: 0 picks).");
DEFINE_int32(core, -1, "Core the proxy or consumer thread is pinned to.");

namespace {

using channel_bench::pct;
using uccl::channels::FifoConfig;
using uccl::channels::FifoPlacement;
using uccl::channels::TriggerFifo;
namespace dev = uccl::device;
using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------ fifo

__global__ void push_kernel(dev::FifoHandle f, int pushes,
                            unsigned long long* failed) {
  const uint64_t id = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = 0; i < pushes; ++i) {
    dev::Trigger t = dev::encode_trigger(dev::TriggerOp::kPut, 0, 0, 1, 0, id,
                                         0, static_cast<uint64_t>(i));
    if (dev::fifo_push(f, t) < 0) atomicAdd(failed, 1ull);
  }
}

int run_fifo() {
  FifoConfig cfg;
  cfg.placement = FifoPlacement::kGpu;
  cfg.gpu = FLAGS_gpu;
  cfg.slots = static_cast<uint32_t>(FLAGS_slots);
  auto fifo = TriggerFifo::create(cfg);
  if (!fifo.ok()) {
    std::fprintf(stderr, "channel_bench: %s\n",
                 fifo.status().to_string().c_str());
    return 1;
  }
  const uint64_t producers =
      static_cast<uint64_t>(FLAGS_blocks) * FLAGS_threads;
  const uint64_t total = producers * FLAGS_pushes;
  unsigned long long* failed = nullptr;
  CUDA_OK(cudaMalloc(&failed, sizeof(*failed)));
  CUDA_OK(cudaMemset(failed, 0, sizeof(*failed)));
  std::vector<uint64_t> next(producers, 0);
  uint64_t bad = 0;
  const auto t0 = Clock::now();
  push_kernel<<<FLAGS_blocks, FLAGS_threads>>>((*fifo)->handle(), FLAGS_pushes,
                                               failed);
  CUDA_OK(cudaGetLastError());
  dev::Trigger t;
  uint64_t got = 0;
  const auto deadline = t0 + std::chrono::seconds(60);
  for (uint32_t idle = 0; got < total;) {
    if (!(*fifo)->pop(&t)) {
      if (++idle % 4096 == 0 && Clock::now() > deadline) break;
      continue;
    }
    auto f = dev::decode_trigger(t);
    if (f.src_off >= producers || f.dst_off != next[f.src_off]) {
      ++bad;
    } else {
      ++next[f.src_off];
    }
    ++got;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  CUDA_OK(cudaDeviceSynchronize());
  unsigned long long nfailed = 0;
  CUDA_OK(
      cudaMemcpy(&nfailed, failed, sizeof(nfailed), cudaMemcpyDeviceToHost));
  std::printf(
      "fifo, %d slots: %d blocks x %d threads x %d pushes = %llu "
      "triggers, %llu popped in %.3f s: %.1f M triggers/s; out of order or "
      "unknown %llu, failed pushes %llu\n",
      FLAGS_slots, FLAGS_blocks, FLAGS_threads, FLAGS_pushes,
      static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(got), s, got / s / 1e6,
      static_cast<unsigned long long>(bad), nfailed);
  return got == total && bad == 0 && nfailed == 0 ? 0 : 1;
}

}  // namespace

double channel_bench::pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "GPU-initiated channels: FIFO, round trip, "
      "ping-pong");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= FLAGS_gpu) {
    std::fprintf(stderr, "channel_bench: no GPU %d\n", FLAGS_gpu);
    return 1;
  }
  cudaSetDevice(FLAGS_gpu);
  if (FLAGS_mode == "fifo") return run_fifo();
  if (FLAGS_mode == "rtt") return channel_bench::run_rtt();
  if (FLAGS_mode == "pingpong") return channel_bench::run_pingpong();
  if (FLAGS_mode == "ep") return channel_bench::run_ep();
  std::fprintf(stderr, "channel_bench: unknown --mode %s\n",
               FLAGS_mode.c_str());
  return 2;
}
