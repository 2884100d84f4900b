// channel_bench --mode pingpong: two processes, one kernel each; the
// client puts a message with a signal and waits for the server's answer,
// the server waits, checks and answers. Bytes are checked in the kernels.
// Baseline first, on the same connection: p2p send/recv from host memory.
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "channels/proxy.h"
#include "tools/channel_bench.h"
#include "uccl/device/channel.h"
#include "uccl/p2p.h"

DECLARE_int32(gpu);
DECLARE_int32(iterations);
DECLARE_uint64(msg_bytes);
DECLARE_string(role);
DECLARE_string(server);
DECLARE_int32(port);
DECLARE_int32(core);
DEFINE_string(nic, "udp:lo", "pingpong: the p2p endpoint's NIC device.");
DECLARE_bool(host_blocks);

namespace {

using channel_bench::pct;
namespace dev = uccl::device;
using Clock = std::chrono::steady_clock;
constexpr int kTimeoutMs = 60000;

__device__ uint8_t pp_byte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>((i * 2654435761ull >> 7) ^ (seed * 131));
}

__device__ void fill(uint8_t* p, uint64_t n, uint64_t seed) {
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
    p[i] = pp_byte(seed, i);
}

// Volatile reads: the bytes came from outside this kernel.
__device__ void check(const uint8_t* p, uint64_t n, uint64_t seed,
                      unsigned long long* errors) {
  const volatile uint8_t* v = p;
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (v[i] != pp_byte(seed, i)) atomicAdd(errors, 1ull);
  }
}

// buf[0, msg): what this side sends; buf[msg, 2 msg): what the peer puts.
__global__ void pingpong_kernel(dev::ChannelHandle c, uint8_t* buf,
                                uint64_t msg, int iters, bool client,
                                uint64_t* ns, unsigned long long* errors) {
  __shared__ int rc;
  constexpr uint64_t kAnswer = 1000000;
  for (int i = 1; i <= iters; ++i) {
    const uint64_t t0 = dev::fifo_detail::now_ns();
    if (client) fill(buf, msg, i);
    __syncthreads();
    if (threadIdx.x == 0) {
      rc = dev::kChannelOk;
      if (client) {
        __threadfence_system();  // the block's bytes, before the copy
        rc = dev::channel_put_with_signal(c, 0, msg, 0, 0, msg, 0);
        if (rc == dev::kChannelOk) rc = dev::channel_wait(c, 1, i);
      } else {
        rc = dev::channel_wait(c, 0, i);
      }
    }
    __syncthreads();
    if (rc != dev::kChannelOk) {
      if (threadIdx.x == 0) atomicAdd(errors, 1ull << 32);
      return;
    }
    check(buf + msg, msg, client ? i + kAnswer : i, errors);
    if (!client) {
      fill(buf, msg, i + kAnswer);
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence_system();
        if (dev::channel_put_with_signal(c, 0, msg, 0, 0, msg, 1) !=
            dev::kChannelOk) {
          atomicAdd(errors, 1ull << 32);
        }
      }
    }
    if (threadIdx.x == 0) ns[i - 1] = dev::fifo_detail::now_ns() - t0;
    __syncthreads();
  }
}

bool fail(const char* what, const uccl::Status& st) {
  std::fprintf(stderr, "channel_bench: %s: %s\n", what, st.to_string().c_str());
  return false;
}

// The baseline: p2p send/recv of msg bytes from host memory, as a
// ping-pong on the same connection; one-way us per iteration.
bool p2p_baseline(uccl::p2p::Endpoint* ep, uccl::p2p::ConnHandle conn,
                  bool client, std::vector<double>* one_way_us) {
  const size_t n = std::max<uint64_t>(FLAGS_msg_bytes, 1);
  std::vector<uint8_t> mem(2 * n);
  auto mr = ep->reg(mem.data(), mem.size());
  if (!mr.ok()) return fail("reg", mr.status());
  for (int i = 0; i < FLAGS_iterations; ++i) {
    const auto t0 = Clock::now();
    auto r = ep->recv_async(conn, *mr, mem.data() + n, n);
    if (!r.ok()) return fail("recv", r.status());
    if (!client) {
      uccl::Status st = ep->wait(*r, kTimeoutMs);
      if (!st.ok()) return fail("recv", st);
    }
    auto s = ep->send_async(conn, *mr, mem.data(), FLAGS_msg_bytes);
    if (!s.ok()) return fail("send", s.status());
    if (client) {
      uccl::Status st = ep->wait(*r, kTimeoutMs);
      if (!st.ok()) return fail("recv", st);
      one_way_us->push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
          2);
    }
    uccl::Status st = ep->wait(*s, kTimeoutMs);
    if (!st.ok()) return fail("send", st);
  }
  return ep->dereg(*mr).ok();
}

}  // namespace

int channel_bench::run_pingpong() {
  using namespace uccl;
  const bool client = FLAGS_role == "client";
  if (!client && FLAGS_role != "server") {
    std::fprintf(stderr, "channel_bench: --role server|client\n");
    return 2;
  }
  p2p::Config pc;
  pc.num_cpus = 1;
  pc.engine.device = FLAGS_nic;
  auto ep = p2p::Endpoint::create(pc);
  if (!ep.ok()) return fail("endpoint", ep.status()), 1;
  Result<p2p::ConnHandle> conn = Unavailable("");
  if (client) {
    conn = (*ep)->connect(FLAGS_server, static_cast<uint16_t>(FLAGS_port),
                          kTimeoutMs);
  } else {
    auto port = (*ep)->listen(static_cast<uint16_t>(FLAGS_port));
    if (!port.ok()) return fail("listen", port.status()), 1;
    std::printf("listening on port %u\n", *port);
    std::fflush(stdout);
    conn = (*ep)->accept(kTimeoutMs);
  }
  if (!conn.ok()) return fail("connection", conn.status()), 1;
  std::vector<double> base_us;
  if (!p2p_baseline(ep->get(), *conn, client, &base_us)) return 1;

  const uint64_t msg = FLAGS_msg_bytes;
  uint8_t* buf = nullptr;
  unsigned long long* errors = nullptr;
  uint64_t* ns = nullptr;
  const cudaError_t be =
      FLAGS_host_blocks
          ? cudaHostAlloc(reinterpret_cast<void**>(&buf), 2 * msg + 1,
                          cudaHostAllocMapped | cudaHostAllocPortable)
          : cudaMalloc(&buf, 2 * msg + 1);
  if (be != cudaSuccess ||
      cudaMalloc(&errors, sizeof(*errors)) != cudaSuccess ||
      cudaMalloc(&ns, sizeof(uint64_t) * FLAGS_iterations) != cudaSuccess ||
      cudaMemset(errors, 0, sizeof(*errors)) != cudaSuccess) {
    std::fprintf(stderr, "channel_bench: cudaMalloc failed\n");
    return 1;
  }
  auto cfg = channels::proxy_config_from_knobs();
  cfg.gpu = FLAGS_gpu;
  cfg.core = FLAGS_core;
  auto proxy = channels::ChannelProxy::create(ep->get(), cfg);
  if (!proxy.ok()) return fail("proxy", proxy.status()), 1;
  (void)(*proxy)->register_memory(buf, 2 * msg);
  auto ch = (*proxy)->open_channel(*conn, kTimeoutMs);
  if (!ch.ok()) return fail("channel", ch.status()), 1;
  Status st = (*proxy)->start();
  if (!st.ok()) return fail("start", st), 1;
  pingpong_kernel<<<1, 256>>>(*(*proxy)->handle(*ch), buf, msg,
                              FLAGS_iterations, client, ns, errors);
  const cudaError_t ke = cudaDeviceSynchronize();
  unsigned long long nerr = 0;
  std::vector<uint64_t> host(FLAGS_iterations);
  cudaMemcpy(&nerr, errors, sizeof(nerr), cudaMemcpyDeviceToHost);
  cudaMemcpy(host.data(), ns, host.size() * 8, cudaMemcpyDeviceToHost);
  // The kernel's own count decides: a channel the peer closed after its
  // last answer (its proxy stops once that answer is applied here) is not
  // a failure of this run.
  Status cs = (*proxy)->channel_status(*ch);
  (void)(*proxy)->stop();
  if (ke != cudaSuccess || nerr != 0) {
    std::fprintf(stderr,
                 "channel_bench: pingpong failed: kernel %s, %llu bad bytes, "
                 "%llu failed calls, channel %s\n",
                 cudaGetErrorString(ke), nerr & 0xffffffffull, nerr >> 32,
                 cs.to_string().c_str());
    return 1;
  }
  if (client) {
    std::vector<double> us;
    for (int i = FLAGS_iterations / 10; i < FLAGS_iterations; ++i) {
      us.push_back(host[i] / 2000.0);
    }
    std::printf(
        "pingpong %llu B, %d round trips, data checked: GPU channel "
        "(buffers in %s memory) one-way p50 %.2f p99 %.2f us; p2p from "
        "host memory (baseline) p50 %.2f p99 %.2f us; ratio p50 %.2f\n",
        static_cast<unsigned long long>(msg), FLAGS_iterations,
        FLAGS_host_blocks ? "host" : "GPU", pct(us, 0.5), pct(us, 0.99),
        pct(base_us, 0.5), pct(base_us, 0.99),
        pct(us, 0.5) / pct(base_us, 0.5));
  }
  if (FLAGS_host_blocks) {
    cudaFreeHost(buf);
  } else {
    cudaFree(buf);
  }
  cudaFree(errors);
  cudaFree(ns);
  return 0;
}
