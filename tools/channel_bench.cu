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
#include <cstring>
#include <thread>
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

#define CUDA_OK(x)                                        \
  do {                                                    \
    cudaError_t e_ = (x);                                 \
    if (e_ != cudaSuccess) {                              \
      std::fprintf(stderr, "channel_bench: %s: %s\n", #x, \
                   cudaGetErrorString(e_));               \
      return 1;                                           \
    }                                                     \
  } while (0)

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

// ------------------------------------------------------------------- rtt

// One trip per iteration: push, then poll the host's answer, either with
// an acquire load per poll or with relaxed polls and one acquire fence
// (the way channel_wait polls), to compare the two in one run.
__global__ void rtt_kernel(dev::FifoHandle f, const uint64_t* answer, int iters,
                           bool acquire_each, uint64_t* ns) {
  for (int i = 0; i < iters; ++i) {
    const uint64_t t0 = dev::fifo_detail::now_ns();
    const uint64_t want = static_cast<uint64_t>(i + 1);
    dev::fifo_push(
        f, dev::encode_trigger(dev::TriggerOp::kSignal, 0,
                               static_cast<uint32_t>(want), 0, 0, 0, 0, 0));
    if (acquire_each) {
      while (dev::fifo_detail::load_acquire_sys(answer) < want) {
      }
    } else {
      while (dev::fifo_detail::load_relaxed_sys(answer) < want) {
      }
      dev::fifo_detail::fence_acquire_sys();
    }
    ns[i] = dev::fifo_detail::now_ns() - t0;
  }
}

// The consumer: answers each trigger by storing its arg.
void answer_loop(TriggerFifo* fifo, uint64_t* answer, int iters) {
  dev::Trigger t;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < iters && Clock::now() < deadline;) {
    if (!fifo->pop(&t)) continue;
    __atomic_store_n(answer, static_cast<uint64_t>(t.w[0] >> 32),
                     __ATOMIC_RELEASE);
    ++i;
  }
}

int run_rtt() {
  const int n = FLAGS_iterations;
  // Baseline: a CPU thread in the GPU's place, host memory throughout.
  std::vector<double> cpu_us;
  {
    FifoConfig cfg;
    auto fifo = TriggerFifo::create(cfg);
    if (!fifo.ok()) return 1;
    alignas(64) static uint64_t answer = 0;
    std::thread consumer(answer_loop, fifo->get(), &answer, n);
    const dev::FifoHandle h = (*fifo)->handle();
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      dev::fifo_push(
          h, dev::encode_trigger(dev::TriggerOp::kSignal, 0,
                                 static_cast<uint32_t>(i + 1), 0, 0, 0, 0, 0));
      while (__atomic_load_n(&answer, __ATOMIC_ACQUIRE) <
             static_cast<uint64_t>(i + 1)) {
      }
      cpu_us.push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    consumer.join();
  }
  // The GPU's trips, both ways of polling, on a fresh FIFO each.
  std::vector<double> gpu_us[2];
  uint64_t* answer = nullptr;
  uint64_t* ns = nullptr;
  CUDA_OK(cudaHostAlloc(&answer, 64, cudaHostAllocMapped));
  CUDA_OK(cudaMalloc(&ns, sizeof(uint64_t) * n));
  for (int v = 0; v < 2; ++v) {
    FifoConfig cfg;
    cfg.placement = FifoPlacement::kGpu;
    cfg.gpu = FLAGS_gpu;
    auto fifo = TriggerFifo::create(cfg);
    if (!fifo.ok()) return 1;
    *answer = 0;
    std::thread consumer(answer_loop, fifo->get(), answer, n);
    rtt_kernel<<<1, 1>>>((*fifo)->handle(), answer, n, v == 0, ns);
    CUDA_OK(cudaGetLastError());
    consumer.join();
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint64_t> host(n);
    CUDA_OK(cudaMemcpy(host.data(), ns, sizeof(uint64_t) * n,
                       cudaMemcpyDeviceToHost));
    for (int i = n / 10; i < n; ++i) gpu_us[v].push_back(host[i] / 1000.0);
  }
  std::printf(
      "rtt: GPU push -> host answer -> GPU, p50 / p99 us: acquire per poll "
      "%.2f / %.2f, relaxed polls + one fence %.2f / %.2f; CPU thread "
      "(baseline) %.2f / %.2f; ratio p50 %.2f\n",
      pct(gpu_us[0], 0.5), pct(gpu_us[0], 0.99), pct(gpu_us[1], 0.5),
      pct(gpu_us[1], 0.99), pct(cpu_us, 0.5), pct(cpu_us, 0.99),
      pct(gpu_us[1], 0.5) / pct(cpu_us, 0.5));
  cudaFreeHost(answer);
  cudaFree(ns);
  return 0;
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
  if (FLAGS_mode == "rtt") return run_rtt();
  if (FLAGS_mode == "pingpong") return channel_bench::run_pingpong();
  if (FLAGS_mode == "ep") return channel_bench::run_ep();
  std::fprintf(stderr, "channel_bench: unknown --mode %s\n",
               FLAGS_mode.c_str());
  return 2;
}
