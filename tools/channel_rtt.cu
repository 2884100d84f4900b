// channel_bench --mode rtt: a GPU thread's push to the host's answer and
// back, with its parts measured alone; a CPU thread is the baseline.
//
// A trip is: the push (a device-memory claim, then PCIe writes of the
// trigger), the consumer's poll on the host, its store of the answer into
// host memory, and the GPU's PCIe reads of that answer. The run measures a
// PCIe read alone, the push's device-memory parts alone, and whole trips
// pushed the two ways fifo_push publishes: relaxed (signals, flushes) and
// with a release fence first (puts).
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "channels/fifo.h"
#include "tools/channel_bench.h"
#include "uccl/device/fifo.h"
#include "util/cpu.h"

DECLARE_int32(gpu);
DECLARE_int32(iterations);
DECLARE_int32(core);

namespace {

using channel_bench::pct;
using uccl::channels::FifoConfig;
using uccl::channels::FifoPlacement;
using uccl::channels::TriggerFifo;
namespace dev = uccl::device;
namespace fd = uccl::device::fifo_detail;
using Clock = std::chrono::steady_clock;

struct Variant {
  const char* name;
  dev::Publish publish;
};

constexpr Variant kVariants[] = {
    {"signal (relaxed push)", dev::Publish::kRelaxed},
    {"put-style (release push)", dev::Publish::kRelease},
};

// One trip per iteration: push, then poll the answer with an acquire load
// per poll (channel_wait's way). A failed push or an answer missing for a
// second ends the run; *failed says so.
__global__ void rtt_kernel(dev::FifoHandle f, const uint64_t* answer, int iters,
                           dev::Publish publish, uint64_t* trip_ns,
                           uint64_t* push_ns, unsigned int* failed) {
  constexpr uint64_t kAnswerTimeoutNs = 1000000000ull;
  for (int i = 0; i < iters; ++i) {
    const uint64_t t0 = fd::now_ns();
    const uint64_t want = static_cast<uint64_t>(i + 1);
    const int64_t ticket = dev::fifo_push(
        f,
        dev::encode_trigger(dev::TriggerOp::kSignal, 0,
                            static_cast<uint32_t>(want), 0, 0, 0, 0, 0),
        publish);
    const uint64_t t1 = fd::now_ns();
    if (ticket < 0) {
      *failed = 1;
      return;
    }
    for (uint32_t k = 1; fd::load_acquire_sys(answer) < want; ++k) {
      if (k % 1024 == 0 && fd::now_ns() - t1 > kAnswerTimeoutNs) {
        *failed = 1;
        return;
      }
    }
    trip_ns[i] = fd::now_ns() - t0;
    push_ns[i] = t1 - t0;
  }
}

// The parts alone, `iters` back to back each, total ns: PCIe reads of host
// memory (dependent: it holds 0, so each address is the last result plus
// the base), the claim's atomic add and the cached tail's acquire load.
__global__ void parts_kernel(dev::FifoHandle f, const uint64_t* host, int iters,
                             uint64_t* ns) {
  uint64_t v = 0;
  uint64_t t0 = fd::now_ns();
  for (int i = 0; i < iters; ++i) v = fd::load_relaxed_sys(host + v);
  ns[0] = fd::now_ns() - t0 + (v & 1);
  t0 = fd::now_ns();
  for (int i = 0; i < iters; ++i) v += fd::claim(&f.state->head);
  ns[1] = fd::now_ns() - t0;
  t0 = fd::now_ns();
  for (int i = 0; i < iters; ++i) v += fd::load_cache(&f.state->tail_cache);
  ns[2] = fd::now_ns() - t0;
  ns[3] = v;
}

// The consumer: answers each trigger by storing its arg.
void answer_loop(TriggerFifo* fifo, uint64_t* answer, int iters) {
  if (FLAGS_core >= 0) {
    uccl::Status st = uccl::pin_current_thread(FLAGS_core);
    if (!st.ok()) {
      std::fprintf(stderr, "channel_bench: %s (consumer unpinned)\n",
                   st.to_string().c_str());
    }
  }
  dev::Trigger t;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < iters && Clock::now() < deadline;) {
    if (!fifo->pop(&t)) continue;
    __atomic_store_n(answer, uint64_t{dev::decode_trigger(t).arg},
                     __ATOMIC_RELEASE);
    ++i;
  }
}

std::vector<double> cpu_trips(int n) {
  std::vector<double> us;
  auto fifo = TriggerFifo::create(FifoConfig{});
  if (!fifo.ok()) return us;
  alignas(64) static uint64_t answer = 0;
  std::thread consumer(answer_loop, fifo->get(), &answer, n);
  const dev::FifoHandle h = (*fifo)->handle();
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    dev::fifo_push(
        h,
        dev::encode_trigger(dev::TriggerOp::kSignal, 0,
                            static_cast<uint32_t>(i + 1), 0, 0, 0, 0, 0),
        dev::Publish::kRelaxed);
    while (__atomic_load_n(&answer, __ATOMIC_ACQUIRE) <
           static_cast<uint64_t>(i + 1)) {
    }
    us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  consumer.join();
  return us;
}

// Device samples to microseconds, the first tenth (warm-up) left out.
int fetch_us(const uint64_t* dev_ns, int n, std::vector<double>* us) {
  std::vector<uint64_t> host(n);
  CUDA_OK(cudaMemcpy(host.data(), dev_ns, sizeof(uint64_t) * n,
                     cudaMemcpyDeviceToHost));
  us->clear();
  for (int i = n / 10; i < n; ++i) us->push_back(host[i] / 1000.0);
  return 0;
}

uccl::Result<std::unique_ptr<TriggerFifo>> gpu_fifo() {
  FifoConfig cfg;
  cfg.placement = FifoPlacement::kGpu;
  cfg.gpu = FLAGS_gpu;
  return TriggerFifo::create(cfg);
}

int print_parts(uint64_t* answer, uint64_t* scratch, int n) {
  auto fifo = gpu_fifo();
  if (!fifo.ok()) return 1;
  *answer = 0;
  parts_kernel<<<1, 1>>>((*fifo)->handle(), answer, n, scratch);
  CUDA_OK(cudaDeviceSynchronize());
  uint64_t ns[3];
  CUDA_OK(cudaMemcpy(ns, scratch, sizeof(ns), cudaMemcpyDeviceToHost));
  std::printf(
      "rtt: parts, mean of %d: a PCIe read of host memory %.3f us, the "
      "claim's atomic add %.3f us, the cached tail's acquire load %.3f us\n",
      n, ns[0] / 1000.0 / n, ns[1] / 1000.0 / n, ns[2] / 1000.0 / n);
  return 0;
}

}  // namespace

int channel_bench::run_rtt() {
  const int n = FLAGS_iterations;
  if (n < 10) {
    std::fprintf(stderr, "channel_bench: rtt needs --iterations >= 10\n");
    return 2;
  }
  const std::vector<double> cpu_us = cpu_trips(n);
  uint64_t* answer = nullptr;
  uint64_t *trip = nullptr, *push = nullptr;
  unsigned int* failed = nullptr;
  CUDA_OK(cudaHostAlloc(&answer, 64, cudaHostAllocMapped));
  CUDA_OK(cudaHostAlloc(&failed, sizeof(*failed), cudaHostAllocMapped));
  CUDA_OK(cudaMalloc(&trip, sizeof(uint64_t) * n));
  CUDA_OK(cudaMalloc(&push, sizeof(uint64_t) * n));
  if (print_parts(answer, trip, n) != 0) return 1;
  double signal_p50 = 0;
  for (const Variant& v : kVariants) {
    auto fifo = gpu_fifo();
    if (!fifo.ok()) return 1;
    *answer = 0;
    *failed = 0;
    std::thread consumer(answer_loop, fifo->get(), answer, n);
    rtt_kernel<<<1, 1>>>((*fifo)->handle(), answer, n, v.publish, trip, push,
                         failed);
    CUDA_OK(cudaGetLastError());
    consumer.join();
    CUDA_OK(cudaDeviceSynchronize());
    if (*failed) {
      std::fprintf(stderr,
                   "channel_bench: rtt %s: a push failed or its answer did "
                   "not come within 1 s\n",
                   v.name);
      return 1;
    }
    std::vector<double> trip_us, push_us;
    if (fetch_us(trip, n, &trip_us) != 0 || fetch_us(push, n, &push_us) != 0)
      return 1;
    if (v.publish == dev::Publish::kRelaxed) signal_p50 = pct(trip_us, 0.5);
    std::printf(
        "rtt: GPU push -> host answer -> GPU, %-24s p50 / p99 %.2f / %.2f "
        "us, of which the push %.2f / %.2f\n",
        v.name, pct(trip_us, 0.5), pct(trip_us, 0.99), pct(push_us, 0.5),
        pct(push_us, 0.99));
  }
  std::printf(
      "rtt: CPU thread in the GPU's place (baseline) p50 / p99 %.2f / %.2f "
      "us; the GPU's signal trip p50 %.1fx the CPU's\n",
      pct(cpu_us, 0.5), pct(cpu_us, 0.99), signal_p50 / pct(cpu_us, 0.5));
  cudaFreeHost(answer);
  cudaFreeHost(failed);
  cudaFree(trip);
  cudaFree(push);
  return 0;
}
