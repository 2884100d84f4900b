// nccl_perf's host-side logic, kept free of CUDA and NCCL so it is unit
// tested on any machine: size lists, the data pattern and its check, tables.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "uccl/status.h"

namespace uccl::tools {

// One size's result from one run (piped from rank 0 to the parent as raw
// bytes, so plain old data only).
struct PerfRow {
  uint64_t bytes = 0;
  uint32_t iters = 0;
  uint32_t pad = 0;
  double time_us = 0;   // per all_reduce, CUDA events over the timed loop
  double host_us = 0;   // per call, the host's issuing time only
  uint64_t errors = 0;  // wrong output elements, summed over the ranks
  // One call from an idle stream until the host sees it done (issue, launch,
  // network, synchronize), median over --lat_calls; NaN where not measured.
  double lat_us = NAN;
};
static_assert(sizeof(PerfRow) == 48, "PerfRow crosses a pipe as bytes");

// "4,64,1K,256M" -> bytes (K/M/G are powers of 1024). Every size must be a
// positive multiple of 4 (float32 elements); an empty or malformed list is
// InvalidArgument naming the bad entry.
Result<std::vector<uint64_t>> parse_sizes(const std::string& list);

// Comma-separated names, empty entries dropped.
std::vector<std::string> split_list(const std::string& list);

// One --nets entry: a transport and the environment of that run only, as
// "Base+VAR=value+VAR=value" (e.g. "UCCL+UCCL_NCCL_SPEED_MBPS=400000").
struct NetSpec {
  std::string base;  // UCCL, Socket, Socket4x4, SHM, P2P
  std::vector<std::pair<std::string, std::string>> env;
};

// SHM and P2P: NCCL's paths between GPUs of one host that use no network
// (host shared memory; NVLink/PCIe peer access). They bound what any network
// transport can reach there, so tables do not count them as baselines.
bool is_floor_net(const std::string& base);

// Parses one entry. The base must be a known transport and each variable
// name upper-case letters, digits and '_'; anything else is InvalidArgument
// naming the bad part.
Result<NetSpec> parse_net_spec(const std::string& entry);

// The median (the mean of the middle two for an even count); NaN if empty.
double median(std::vector<double> v);

// Timed iterations for one size: `iters`, capped at `cap_bytes / bytes`,
// never below 5.
uint32_t perf_iters(uint64_t bytes, uint32_t iters, uint64_t cap_bytes);

// Rank `rank`'s input element i: small integers, so every sum is exact in
// float32 and the expected output is known without the other ranks' data.
inline float perf_input(int rank, size_t i) {
  return static_cast<float>(i % 251 + static_cast<size_t>(rank));
}
inline float perf_expected(int nranks, size_t i) {
  return static_cast<float>(static_cast<size_t>(nranks) * (i % 251) +
                            static_cast<size_t>(nranks * (nranks - 1) / 2));
}

// The operation timed: all_reduce (sum), sendrecv (a ring: each rank
// sends its buffer to the next rank and receives the previous rank's, in
// one group), the pattern of pipeline-parallel stages, or all_to_all (the
// buffer in nranks blocks: block j goes to rank j, whose block j comes
// back; sends and receives to every rank in one group, as
// torch.distributed.all_to_all_single does over NCCL).
enum class PerfColl { kAllReduce, kSendRecv, kAllToAll };

// "all_reduce", "sendrecv" or "all_to_all"; anything else is
// InvalidArgument.
Result<PerfColl> parse_coll(const std::string& name);

// busbw / algbw as nccl-tests defines it: 2(n-1)/n for all_reduce (each
// rank sends and receives that share of the buffer), 1 for sendrecv,
// (n-1)/n for all_to_all (a rank's own block does not cross the network).
double bus_factor(PerfColl coll, uint32_t nranks);

// Output elements of an n-element sendrecv result that are not rank
// `from`'s input (perf_input).
uint64_t perf_check_recv(const float* out, size_t n, int from);

// Elements of rank `rank`'s n-element all_to_all result (nranks blocks of
// n / nranks; the rest is not written) that are not what it should hold:
// block j is block `rank` of rank j's input.
uint64_t perf_check_all_to_all(const float* out, size_t n, int rank,
                               int nranks);

// Rank `rank`'s n-element result of `coll` checked by the one of the three
// above that fits it (sendrecv: against the previous rank's input).
uint64_t perf_check_result(PerfColl coll, const float* out, size_t n, int rank,
                           int nranks);

// Output elements of an n-element all_reduce result that are not
// perf_expected (NaN counts as wrong).
uint64_t perf_check(const float* out, size_t n, int nranks);

// results[net][round] = that run's rows (a failed run has no entry). The
// table gives per size each net's median time, the subject's (nets[0])
// median host time and bus bandwidth, the best baseline's median time, the
// ratio baseline / subject (> 1: the subject is faster), and in how many
// rounds the subject was faster than every baseline of that round. The
// baselines are the other nets except UCCL variants ("UCCL+VAR=value") and
// floors (is_floor_net): those get their own time column only, and the
// first floor a last column, its time / the subject's (1: the subject is as
// fast as the floor).
std::string perf_table(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results,
    uint32_t nranks, PerfColl coll = PerfColl::kAllReduce);

// The sizes that have a latency (PerfRow::lat_us): per size each net's
// median latency over its rounds, the best baseline's (baselines as in
// perf_table) and the ratio baseline / subject (> 1: the subject's isolated
// call completes sooner). "" when no run measured a latency.
std::string perf_latency_table(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results);

// Every round's time per size and net, one row per (size, net) and one
// column per round ("-" where that run failed): shows what a median hides,
// e.g. a process pair that ran slow throughout.
std::string perf_rounds_table(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results);

// Every round's rows as JSON: {"net": [[{"bytes":..,"time_us":..},..],..]}.
std::string perf_json(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results);

}  // namespace uccl::tools
