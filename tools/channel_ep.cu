// channel_bench --mode ep: expert-parallel dispatch and combine between
// --world processes (a GPU each), issued from kernels through channels.
// Each rank routes each of its tokens to --topk experts (a fixed hash;
// --experts_per_rank per rank), packs the rows per owning rank, puts each
// block to its owner with a signal, the owners scale each row by its
// expert's (id + 1) and put the results back, and the origin sums them.
// The result is checked against the host's reference every iteration.
// Baseline, same run and connections: the same exchange posted by the host
// as p2p send/recv of the same GPU blocks (the engine stages them). Each
// timed iteration starts with the ranks at a barrier; both exchanges are
// also timed alone (tools/ep_nccl_baseline.py times NCCL's the same way).
#include <cuda_runtime.h>
#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "channels/proxy.h"
#include "tools/channel_bench.h"
#include "uccl/device/channel.h"
#include "uccl/p2p.h"

DECLARE_int32(gpu);
DECLARE_int32(iterations);
DECLARE_int32(core);
DECLARE_string(nic);
DEFINE_int32(world, 2, "ep: ranks (processes).");
DEFINE_int32(rank, 0, "ep: this process's rank.");
DEFINE_int32(base_port, 29600, "ep: rank r listens on base_port + r.");
DEFINE_int32(tokens, 128, "ep: tokens per rank.");
DEFINE_int32(hidden, 1024, "ep: floats per token row.");
DEFINE_int32(experts_per_rank, 4, "ep: experts each rank owns.");
DEFINE_int32(num_cpus, 4, "ep: engines of each rank's p2p endpoint.");
DEFINE_uint64(stripe_kb, 256, "ep: the p2p endpoint's stripe, KiB.");
DEFINE_bool(host_blocks, false,
            "ep and pingpong: the exchanged blocks (buffers) in page-locked "
            "host memory mapped into the GPU (kernels write and read them "
            "over PCIe; the proxy and the engines move them without a CUDA "
            "copy), as NCCL's network buffers are; else GPU memory.");

namespace {

using channel_bench::pct;
namespace dev = uccl::device;
using Clock = std::chrono::steady_clock;
constexpr int kTopK = 2;
constexpr int kTimeoutMs = 60000;

struct Shape {
  int world, rank, tokens, hidden, experts;
  __host__ __device__ int slots() const {
    return tokens * kTopK;
  }  // (token, k) per block
  __host__ __device__ size_t block_floats() const {
    return size_t(slots()) * hidden;
  }
  __host__ __device__ size_t block_bytes() const {
    return block_floats() * sizeof(float);
  }
};

// Expert k of token t of rank `src` (two different experts).
__host__ __device__ int expert_of(int src, int t, int k, int experts) {
  uint32_t h = static_cast<uint32_t>(src) * 1000003u + t * 7919u + 13u;
  h ^= h >> 15;
  h *= 0x2c1b3c6dU;
  h ^= h >> 12;
  const int e0 = static_cast<int>(h % experts);
  if (k == 0 || experts == 1) return e0;
  return (e0 + 1 + static_cast<int>((h >> 16) % (experts - 1))) % experts;
}

__host__ __device__ float token_value(int rank, int t, int h, int iter) {
  return static_cast<float>((t * 131 + h * 7 + iter * 3 + rank * 17) % 97) /
         8.0f;
}

__global__ void init_kernel(Shape s, float* x, int iter) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < s.tokens * s.hidden;
       i += gridDim.x * blockDim.x) {
    x[i] = token_value(s.rank, i / s.hidden, i % s.hidden, iter);
  }
}

// Rows into the owner's block (our own rows straight into our receive).
__global__ void pack_kernel(Shape s, const float* x, float* send, float* recv) {
  const int slot = blockIdx.x;  // t * kTopK + k
  const int t = slot / kTopK, k = slot % kTopK;
  const int owner = expert_of(s.rank, t, k, s.experts) / (s.experts / s.world);
  float* dst = (owner == s.rank ? recv : send) +
               (size_t(owner) * s.slots() + slot) * s.hidden;
  for (int h = threadIdx.x; h < s.hidden; h += blockDim.x) {
    dst[h] = x[size_t(t) * s.hidden + h];
  }
}

// Each owned (src, t, k): the row scaled by (expert + 1), back to src's
// block (ours straight into the combine receive).
__global__ void expert_kernel(Shape s, const float* recv, float* csend,
                              float* crecv) {
  const int src = blockIdx.y, slot = blockIdx.x;
  const int t = slot / kTopK, k = slot % kTopK;
  const int e = expert_of(src, t, k, s.experts);
  if (e / (s.experts / s.world) != s.rank) return;
  const size_t row = (size_t(src) * s.slots() + slot) * s.hidden;
  float* dst = (src == s.rank ? crecv : csend) + row;
  for (int h = threadIdx.x; h < s.hidden; h += blockDim.x) {
    dst[h] = recv[row + h] * static_cast<float>(e + 1);
  }
}

__global__ void reduce_kernel(Shape s, const float* crecv, float* out) {
  const int t = blockIdx.x;
  for (int h = threadIdx.x; h < s.hidden; h += blockDim.x) {
    float acc = 0;
    for (int k = 0; k < kTopK; ++k) {
      const int owner =
          expert_of(s.rank, t, k, s.experts) / (s.experts / s.world);
      acc += crecv[(size_t(owner) * s.slots() + t * kTopK + k) * s.hidden + h];
    }
    out[size_t(t) * s.hidden + h] = acc;
  }
}

// One thread per peer: the phase's block to that peer, then its signal
// awaited. mem ids: 0 send, 1 recv, 2 csend, 3 crecv (same on every rank).
__global__ void exchange_kernel(Shape s, const dev::ChannelHandle* ch,
                                int phase, uint64_t iter, int* errors) {
  const int j = threadIdx.x;
  if (j >= s.world || j == s.rank) return;
  const uint32_t src_mem = phase == 0 ? 0 : 2, dst_mem = phase == 0 ? 1 : 3;
  int rc = dev::channel_put_with_signal(
      ch[j], dst_mem, uint64_t(s.rank) * s.block_bytes(), src_mem,
      uint64_t(j) * s.block_bytes(), s.block_bytes(), phase);
  if (rc == dev::kChannelOk) rc = dev::channel_wait(ch[j], phase, iter);
  if (rc != dev::kChannelOk) atomicAdd(errors, 1);
}

// Every rank at the same iteration before the clock starts: each peer gets
// a signal on semaphore kBarrierSem and this rank waits for theirs. (The
// host's per-iteration check takes long enough that, without it, the rank
// that finishes first times its peer's check inside its next exchange.)
constexpr uint32_t kBarrierSem = 2;
__global__ void barrier_kernel(Shape s, const dev::ChannelHandle* ch,
                               uint64_t iter, int* errors) {
  const int j = threadIdx.x;
  if (j >= s.world || j == s.rank) return;
  int rc = dev::channel_signal(ch[j], kBarrierSem);
  if (rc == dev::kChannelOk) rc = dev::channel_wait(ch[j], kBarrierSem, iter);
  if (rc != dev::kChannelOk) atomicAdd(errors, 1);
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

struct Buffers {
  float *x, *send, *recv, *csend, *crecv, *out;
  int* errors;
};

// The host's reference for token t, element h.
float reference(const Shape& s, int t, int h, int iter) {
  float acc = 0;
  for (int k = 0; k < kTopK; ++k) {
    acc += token_value(s.rank, t, h, iter) *
           static_cast<float>(expert_of(s.rank, t, k, s.experts) + 1);
  }
  return acc;
}

bool check(const Shape& s, const Buffers& b, int iter) {
  std::vector<float> out(size_t(s.tokens) * s.hidden);
  cudaMemcpy(out.data(), b.out, out.size() * sizeof(float),
             cudaMemcpyDeviceToHost);
  for (int t = 0; t < s.tokens; ++t) {
    for (int h = 0; h < s.hidden; ++h) {
      if (out[size_t(t) * s.hidden + h] != reference(s, t, h, iter)) {
        std::fprintf(stderr,
                     "channel_bench: ep rank %d iteration %d: token "
                     "%d element %d is %g, expected %g\n",
                     s.rank, iter, t, h, out[size_t(t) * s.hidden + h],
                     reference(s, t, h, iter));
        return false;
      }
    }
  }
  return true;
}

void compute_front(const Shape& s, const Buffers& b, int iter) {
  init_kernel<<<64, 256>>>(s, b.x, iter);
  pack_kernel<<<s.slots(), 256>>>(s, b.x, b.send, b.recv);
}

// Connections to every peer: rank r connects to lower ranks (retrying
// while they come up) and accepts higher ones, which name themselves.
bool connect_all(uccl::p2p::Endpoint* ep, const Shape& s,
                 std::vector<uccl::p2p::ConnHandle>* conns) {
  conns->assign(s.world, 0);
  int32_t me = s.rank, peer = -1;
  auto mr_me = ep->reg(&me, sizeof(me));
  auto mr_peer = ep->reg(&peer, sizeof(peer));
  if (!mr_me.ok() || !mr_peer.ok()) return false;
  for (int j = 0; j < s.rank; ++j) {
    uccl::Result<uccl::p2p::ConnHandle> c = uccl::Unavailable("");
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!c.ok() && Clock::now() < deadline) {
      c = ep->connect("127.0.0.1", uint16_t(FLAGS_base_port + j), 5000);
      if (!c.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!c.ok()) return false;
    auto h = ep->send_async(*c, *mr_me, &me, sizeof(me));
    if (!h.ok() || !ep->wait(*h, kTimeoutMs).ok()) return false;
    (*conns)[j] = *c;
  }
  for (int k = s.rank + 1; k < s.world; ++k) {
    auto c = ep->accept(kTimeoutMs);
    if (!c.ok()) return false;
    auto h = ep->recv_async(*c, *mr_peer, &peer, sizeof(peer));
    if (!h.ok() || !ep->wait(*h, kTimeoutMs).ok()) return false;
    if (peer <= s.rank || peer >= s.world || (*conns)[peer] != 0) return false;
    (*conns)[peer] = *c;
  }
  return ep->dereg(*mr_me).ok() && ep->dereg(*mr_peer).ok();
}

// The host posts p2p send/recv of `bytes` to and from every peer (peer j's
// piece at j * bytes of send and recv) and waits: the baseline's exchange
// of one phase, and with 4-byte pieces its barrier (as barrier_kernel).
bool host_exchange(uccl::p2p::Endpoint* ep, const Shape& s,
                   const std::vector<uccl::p2p::ConnHandle>& conns,
                   uccl::p2p::MrId smr, const void* send, uccl::p2p::MrId rmr,
                   void* recv, size_t bytes) {
  std::vector<uccl::p2p::XferHandle> hs;
  for (int j = 0; j < s.world; ++j) {
    if (j == s.rank) continue;
    auto r = ep->recv_async(conns[j], rmr, static_cast<char*>(recv) + j * bytes,
                            bytes);
    auto w = ep->send_async(conns[j], smr,
                            static_cast<const char*>(send) + j * bytes, bytes);
    if (!r.ok() || !w.ok()) return false;
    hs.push_back(*r);
    hs.push_back(*w);
  }
  for (auto h : hs) {
    if (!ep->wait(h, kTimeoutMs).ok()) return false;
  }
  return true;
}

}  // namespace

namespace {

// The four exchanged buffers, in the order the proxy registers them (the
// memory ids the exchange kernel names).
float** big_buffers(Buffers* b, int i) {
  float** bigs[] = {&b->send, &b->recv, &b->csend, &b->crecv};
  return bigs[i];
}

bool alloc_buffers(const Shape& s, Buffers* b) {
  const size_t big = size_t(s.world) * s.block_bytes();
  const size_t row_bytes = size_t(s.tokens) * s.hidden * sizeof(float);
  for (int i = 0; i < 4; ++i) {
    void** p = reinterpret_cast<void**>(big_buffers(b, i));
    const cudaError_t e =
        FLAGS_host_blocks
            ? cudaHostAlloc(p, big, cudaHostAllocMapped | cudaHostAllocPortable)
            : cudaMalloc(p, big);
    if (e != cudaSuccess) return false;
    cudaMemset(*p, 0, big);
  }
  return cudaMalloc(&b->x, row_bytes) == cudaSuccess &&
         cudaMalloc(&b->out, row_bytes) == cudaSuccess &&
         cudaMalloc(&b->errors, sizeof(int)) == cudaSuccess &&
         cudaMemset(b->errors, 0, sizeof(int)) == cudaSuccess;
}

// Times per iteration, us: the whole of it (compute and both exchanges,
// to the host's synchronize) and the two exchanges alone.
struct IterTimes {
  std::vector<double> whole, exchanges;
};

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// The baseline: the host posts each exchange as p2p send/recv of the GPU
// blocks (the exchanges timed by the host). False on a failure or wrong
// result.
bool baseline_rounds(uccl::p2p::Endpoint* ep, const Shape& s, Buffers& b,
                     const std::vector<uccl::p2p::ConnHandle>& conns,
                     IterTimes* us) {
  const size_t big = size_t(s.world) * s.block_bytes();
  uccl::p2p::MrId mr[4];
  for (int i = 0; i < 4; ++i) {
    auto m = ep->reg(*big_buffers(&b, i), big);
    if (!m.ok()) {
      std::fprintf(stderr, "channel_bench: %s\n",
                   m.status().to_string().c_str());
      return false;
    }
    mr[i] = *m;
  }
  std::vector<int32_t> tok(2 * size_t(s.world), s.rank);
  auto tok_mr = ep->reg(tok.data(), tok.size() * sizeof(int32_t));
  if (!tok_mr.ok()) return false;
  for (int it = 1; it <= FLAGS_iterations; ++it) {
    if (!host_exchange(ep, s, conns, *tok_mr, tok.data(), *tok_mr,
                       tok.data() + s.world, sizeof(int32_t))) {
      return false;
    }
    const auto t0 = Clock::now();
    compute_front(s, b, it);
    cudaDeviceSynchronize();
    auto x0 = Clock::now();
    if (!host_exchange(ep, s, conns, mr[0], b.send, mr[1], b.recv,
                       s.block_bytes())) {
      return false;
    }
    double x_us = us_since(x0);
    expert_kernel<<<dim3(s.slots(), s.world), 256>>>(s, b.recv, b.csend,
                                                     b.crecv);
    cudaDeviceSynchronize();
    x0 = Clock::now();
    if (!host_exchange(ep, s, conns, mr[2], b.csend, mr[3], b.crecv,
                       s.block_bytes())) {
      return false;
    }
    x_us += us_since(x0);
    reduce_kernel<<<s.tokens, 256>>>(s, b.crecv, b.out);
    cudaDeviceSynchronize();
    us->whole.push_back(us_since(t0));
    us->exchanges.push_back(x_us);
    if (!check(s, b, it)) return false;
  }
  for (auto m : mr) (void)ep->dereg(m);
  (void)ep->dereg(*tok_mr);
  return true;
}

// The exchanges issued from kernels through a proxy's channels, one per
// peer (the exchange kernels timed by CUDA events: the GPU's time in them,
// as the NCCL baseline times its all_to_all calls). False on a failure or
// wrong result.
bool channel_rounds(uccl::p2p::Endpoint* ep, const Shape& s, Buffers& b,
                    const std::vector<uccl::p2p::ConnHandle>& conns,
                    IterTimes* us) {
  using namespace uccl;
  auto cfg = channels::proxy_config_from_knobs();
  cfg.gpu = FLAGS_gpu;
  cfg.core = FLAGS_core;
  auto proxy = channels::ChannelProxy::create(ep, cfg);
  if (!proxy.ok()) return false;
  const size_t big = size_t(s.world) * s.block_bytes();
  for (int i = 0; i < 4; ++i) {
    (void)(*proxy)->register_memory(*big_buffers(&b, i), big);
  }
  // Peers in ascending order on every rank: each pair meets.
  std::vector<dev::ChannelHandle> hs(s.world);
  for (int j = 0; j < s.world; ++j) {
    if (j == s.rank) continue;
    auto ch = (*proxy)->open_channel(conns[j], kTimeoutMs);
    if (!ch.ok()) {
      std::fprintf(stderr, "channel_bench: %s\n",
                   ch.status().to_string().c_str());
      return false;
    }
    hs[j] = *(*proxy)->handle(*ch);
  }
  dev::ChannelHandle* dhs = nullptr;
  cudaMalloc(&dhs, sizeof(dev::ChannelHandle) * s.world);
  cudaMemcpy(dhs, hs.data(), sizeof(dev::ChannelHandle) * s.world,
             cudaMemcpyHostToDevice);
  if (!(*proxy)->start().ok()) return false;
  cudaEvent_t ev[4];
  for (cudaEvent_t& e : ev) cudaEventCreate(&e);
  int errors = 0;
  for (int it = 1; it <= FLAGS_iterations && errors == 0; ++it) {
    barrier_kernel<<<1, 32>>>(s, dhs, it, b.errors);
    cudaDeviceSynchronize();
    const auto t0 = Clock::now();
    compute_front(s, b, it);
    cudaEventRecord(ev[0]);
    exchange_kernel<<<1, 32>>>(s, dhs, 0, it, b.errors);
    cudaEventRecord(ev[1]);
    expert_kernel<<<dim3(s.slots(), s.world), 256>>>(s, b.recv, b.csend,
                                                     b.crecv);
    cudaEventRecord(ev[2]);
    exchange_kernel<<<1, 32>>>(s, dhs, 1, it, b.errors);
    cudaEventRecord(ev[3]);
    reduce_kernel<<<s.tokens, 256>>>(s, b.crecv, b.out);
    cudaDeviceSynchronize();
    us->whole.push_back(us_since(t0));
    float ms[2] = {0, 0};
    cudaEventElapsedTime(&ms[0], ev[0], ev[1]);
    cudaEventElapsedTime(&ms[1], ev[2], ev[3]);
    us->exchanges.push_back((ms[0] + ms[1]) * 1e3);
    cudaMemcpy(&errors, b.errors, sizeof(int), cudaMemcpyDeviceToHost);
    if (errors == 0 && !check(s, b, it)) return false;
  }
  (void)(*proxy)->stop();
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  cudaFree(dhs);
  if (errors == 0) return true;
  Status why = Internal("a wait timed out");
  for (uint32_t c = 0; c + 1 < uint32_t(s.world); ++c) {
    Status st = (*proxy)->channel_status(c);
    if (!st.ok()) why = st;
  }
  std::fprintf(stderr,
               "channel_bench: ep rank %d: %d channel calls failed: %s\n",
               s.rank, errors, why.to_string().c_str());
  return false;
}

}  // namespace

int channel_bench::run_ep() {
  using namespace uccl;
  const Shape s{FLAGS_world, FLAGS_rank, FLAGS_tokens, FLAGS_hidden,
                FLAGS_experts_per_rank * FLAGS_world};
  if (s.world < 2 || s.world > 32 || s.rank < 0 || s.rank >= s.world ||
      s.tokens < 1 || s.hidden < 1 || FLAGS_experts_per_rank < 1) {
    std::fprintf(stderr, "channel_bench: bad --world/--rank/--tokens/...\n");
    return 2;
  }
  p2p::Config pc;
  pc.num_cpus = FLAGS_num_cpus;
  pc.stripe_bytes = FLAGS_stripe_kb << 10;
  pc.local_gpu_idx = FLAGS_gpu;
  pc.engine.device = FLAGS_nic;
  auto ep = p2p::Endpoint::create(pc);
  if (!ep.ok() || !(*ep)->listen(uint16_t(FLAGS_base_port + s.rank)).ok()) {
    std::fprintf(stderr, "channel_bench: ep rank %d: no endpoint\n", s.rank);
    return 1;
  }
  std::vector<p2p::ConnHandle> conns;
  if (!connect_all(ep->get(), s, &conns)) {
    std::fprintf(stderr, "channel_bench: ep rank %d: connecting failed\n",
                 s.rank);
    return 1;
  }
  Buffers b{};
  if (!alloc_buffers(s, &b)) return 1;
  IterTimes base_us, chan_us;
  if (!baseline_rounds(ep->get(), s, b, conns, &base_us) ||
      !channel_rounds(ep->get(), s, b, conns, &chan_us)) {
    return 1;
  }
  // The first tenth of the iterations is warm-up.
  auto tail = [](const std::vector<double>& v) {
    return std::vector<double>(v.begin() + v.size() / 10, v.end());
  };
  const auto b_tail = tail(base_us.whole), c_tail = tail(chan_us.whole);
  const auto bx_tail = tail(base_us.exchanges);
  const auto cx_tail = tail(chan_us.exchanges);
  std::printf(
      "ep rank %d of %d: %d tokens x %d floats, top-%d of %d experts, "
      "%d iterations, blocks in %s memory, every result checked: "
      "dispatch+combine from kernels p50 %.1f p99 %.1f mean %.1f us "
      "(exchanges alone p50 %.1f p99 %.1f); host-posted p2p (baseline) "
      "p50 %.1f p99 %.1f mean %.1f us (exchanges alone p50 %.1f p99 %.1f); "
      "ratio p50 %.2f\n",
      s.rank, s.world, s.tokens, s.hidden, kTopK, s.experts, FLAGS_iterations,
      FLAGS_host_blocks ? "host" : "GPU", pct(c_tail, 0.5), pct(c_tail, 0.99),
      mean(c_tail), pct(cx_tail, 0.5), pct(cx_tail, 0.99), pct(b_tail, 0.5),
      pct(b_tail, 0.99), mean(b_tail), pct(bx_tail, 0.5), pct(bx_tail, 0.99),
      pct(c_tail, 0.5) / pct(b_tail, 0.5));
  return 0;
}
