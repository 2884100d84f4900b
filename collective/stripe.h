// The NCCL plugin's striping policy: engine and connection counts, the
// default stripe and engine placement (the cut itself: uccl/striped.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace uccl::nccl {

// Engine threads per device when UCCL_NCCL_ENGINES=0: three quarters of
// this rank's share of the CPUs it may run on (allowed CPUs, or the
// cgroup's CPU quota where lower, over the ranks on the host), and never
// more than the share less two, between 1 and a cap; the rest is left to
// NCCL's and the application's threads. The two matter on small shares:
// with 4 ranks on 16 CPUs, three quarters (3 engines each) left NCCL's
// proxy threads and the ranks' own threads 4 CPUs for 8 busy threads, and
// an all_to_all of 64 KiB-1 MiB per peer took 24-28 ms; 2 engines each
// took 0.21-1.4 ms (BENCHMARKS.md, GPU-initiated channels, one GPU).
// Engines spin while there is traffic and sleep after a second without, so
// the count is what a busy rank costs, and too many is far worse than too
// few: 16 engines per rank on 32 CPUs, the whole share, were six times
// slower (BENCHMARKS.md, NCCL section).
// The cap is 12 for one or two ranks per host: on 2 ranks with 32 CPUs, 12
// engines with 6 NCCL channels (unknown_link_speed_mbps) moved 256 MiB
// 1.20-1.36x faster than 8. It needs NCCL's threads kept off engine cores
// (UCCL_NCCL_STEER_THREADS): a proxy thread the kernel placed on a core
// where a busy engine spun waited behind it until the kernel moved it (4 B
// at 28-120 us instead of 20 in 5 of 14 process pairs without, 0 of 14
// with). With three or more ranks per host the cap stays 8: with 4 ranks on
// 64 CPUs, 12 made 256 MiB only 1.04-1.10x faster.
constexpr int kMaxAutoEngines = 12;
constexpr int kMaxAutoEnginesManyRanks = 8;  // three or more local ranks
inline int auto_engines(int allowed_cpus, int local_ranks) {
  if (local_ranks < 1) local_ranks = 1;
  const int cap = local_ranks <= 2 ? kMaxAutoEngines : kMaxAutoEnginesManyRanks;
  const int share = allowed_cpus / local_ranks;
  const int engines = std::min(share * 3 / 4, share - 2);
  return std::clamp(engines, 1, cap);
}

// The link speed the plugin reports to NCCL, Mb/s, for a device whose link
// has none (lo, most VM NICs under the software NIC), given the engines per
// device. NCCL 2.28 sizes its NET channels from it: on one host 100000 and
// 200000 gave 2 channels, 300000 gave 6, and 400000 up to 2400000 gave 4;
// 4 against 2 made 256 MiB 1.56x faster. 4 channels suit up to 8 engines:
// with 8, 6 channels made 256 MiB no faster and 64 KiB 26% slower. 12
// engines move more than 4 channels feed them: 6 channels made 256 MiB
// 1.09-1.12x and 1 MiB 1.12-1.21x faster than 12 engines under 4, for 64
// KiB 21-65% slower (still faster than Socket's). (BENCHMARKS.md, NCCL
// section, for each.)
constexpr int kSixChannelEngines = 12;
constexpr uint64_t kUnknownSpeedMbps = 400000;
constexpr uint64_t kUnknownSpeedManyEnginesMbps = 300000;
inline uint64_t unknown_link_speed_mbps(int engines) {
  return engines >= kSixChannelEngines ? kUnknownSpeedManyEnginesMbps
                                       : kUnknownSpeedMbps;
}

// Connections per comm when UCCL_NCCL_CONNS=0: half the engines, between 1
// and kMaxAutoConns. NCCL opens a send and a receive comm per channel and
// peer (4 + 4 with 2 ranks and 4 channels), so with K = n/2 every engine
// carries 4 connections, 2 each way (lane_engine). Each part of a message
// costs a receive descriptor, its RC ACK, the write and its ACK, and a
// message completes with its slowest part, while NCCL brings parallelism
// of its own: with 8 engines, K = 4 made all_reduce of 2-8 MiB 1.2-1.8x
// faster than K = 8; with 12, K = 6 made 16-256 MiB 1.2x faster than K =
// 4, whose 32 connections sit unevenly on 12 engines. The cap keeps an explicit
// 16 engines from cutting NCCL's messages into 8 parts.
constexpr int kMaxAutoConns = 6;
inline int auto_conns(int engines) {
  return std::clamp(engines / 2, 1, kMaxAutoConns);
}

// Ranks of this job on this host, for auto_engines: the launcher's count
// (LOCAL_WORLD_SIZE from torchrun, OMPI_COMM_WORLD_LOCAL_SIZE from Open
// MPI, MPI_LOCALNRANKS from MPICH's Hydra), else one rank per GPU on the
// host (NCCL's usual layout), else 1. `get` looks a variable up (getenv);
// a value that is not a positive number is ignored.
template <typename GetEnv>
int local_ranks(GetEnv get, int gpus_on_host) {
  for (const char* var :
       {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = get(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end == '\0' && n > 0 && n <= 4096) return static_cast<int>(n);
  }
  return gpus_on_host > 0 ? gpus_on_host : 1;
}

// The message a default stripe is cut for: NCCL's all_reduce slice at its
// default NCCL_BUFFSIZE (4 MiB, 8 steps, 2 steps per slice), which is what
// large all_reduce sends.
constexpr size_t kNcclSliceBytes = size_t{1} << 20;

// The stripe for comms of `k` connections whose engines cut messages into
// chunks of `chunk_bytes` (one datagram each; 0: unknown): the slice over
// k, rounded up to 1 KiB, then to a whole number of chunks (down, else up)
// where every part, the last one included (it takes the rest), stays
// within an eighth above an even share. A part that is not whole chunks
// ends in a short chunk, a datagram of its own: 1 MiB over 8 connections
// in 128 KiB parts with 65408-byte chunks is 24 datagrams, 8 of them 256
// bytes; in parts of 130816 bytes (two chunks) it is 17, the fewest. Where
// no whole number keeps the parts even (12 connections: 86 KiB shares
// against 64 KiB chunks), the stripe stays as it was.
inline size_t default_stripe_bytes(int k, uint32_t chunk_bytes,
                                   size_t slice_bytes = kNcclSliceBytes) {
  if (k < 1) k = 1;
  const size_t ks = static_cast<size_t>(k);
  const size_t per = (slice_bytes + ks - 1) / ks;
  const size_t stripe = (per + 1023) / 1024 * 1024;
  if (chunk_bytes == 0 || k == 1 || stripe <= chunk_bytes) return stripe;
  const size_t limit = slice_bytes / ks + slice_bytes / ks / 8;
  auto even = [&](size_t s) {
    if ((ks - 1) * s >= slice_bytes) return false;  // the last part empty
    return s <= limit && slice_bytes - (ks - 1) * s <= limit;
  };
  const size_t down = stripe / chunk_bytes * chunk_bytes;
  if (even(down)) return down;
  if (even(down + chunk_bytes)) return down + chunk_bytes;
  return stripe;
}

// The engine, of n, of connection i of a comm's k (UCCL_NCCL_SPREAD).
// Send and receive comms each take lanes in turn (0, 1, ...); a send comm's
// connection 0 runs on engine `lane`, a receive comm's n/2 after it, and
// connection i on the i*n/k-th engine after its connection 0. So the
// connection 0s (each comm's small messages) of up to n/2 comms each way
// have engines of their own, and where NCCL opens as many send as receive
// comms, every engine carries both directions alike. (Consecutive
// engines, which this replaced, left engines send-only or receive-only
// when K < n: 4 ranks' 256 MiB all_reduce 1.44x slower in one run.)
inline int lane_engine(bool send, uint32_t lane, int i, int k, int n) {
  if (n < 1) return 0;
  const uint64_t nn = static_cast<uint64_t>(n);
  const uint64_t kk = k > 0 ? static_cast<uint64_t>(k) : 1;
  const uint64_t base = send ? lane : lane + nn / 2;
  const uint64_t step = static_cast<uint64_t>(i < 0 ? 0 : i) * nn / kk;
  return static_cast<int>((base + step) % nn);
}

}  // namespace uccl::nccl
