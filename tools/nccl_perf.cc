// nccl_perf: nccl-tests-style all_reduce (or sendrecv) timing in C++, one
// process per GPU, comparing UCCL's net plugin with NCCL's Socket transport
// in one run.
//
// Why a C++ loop: the torch loop in tools/nccl_test.py costs the host ~16-17
// us per call, so below ~1 KiB it times Python and NCCL's proxy wake-ups,
// not the transport. Here the host issues ncclAllReduce back to back (a few
// us each, as nccl-tests' all_reduce_perf does), so the GPU/network side is
// the bound and small sizes show each transport's latency.
//
// The parent process only forks: for each round, for each --nets entry (the
// first is the subject; the rest its baselines, its variants (UCCL+VAR=value)
// and floors (SHM, P2P: no network)), it sets that transport's
// NCCL environment and forks one rank per GPU (--procs=one: one process for
// every GPU, tools/nccl_perf_ranks.cc). Rank 0 makes the unique id and
// pipes it to the others; each rank times every size with CUDA events,
// checks every element of its output, and rank 0 pipes the rows back. The
// table gives each net's median over the rounds, and the ratio of the best
// baseline's time to the subject's (> 1: the subject is faster).
#include <fcntl.h>
#include <gflags/gflags.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/nccl_perf_ranks.h"
#include "tools/nccl_perf_util.h"

DEFINE_string(nets, "UCCL,Socket,Socket4x4,SHM",
              "Transports, comma-separated; the first is compared with the "
              "best of the others. UCCL (our plugin), Socket (NCCL's, "
              "defaults), Socket4x4 (4 threads x 4 sockets); floors, which "
              "use no network and are not baselines: SHM (NCCL's host "
              "shared-memory path, what host-staged transports are bounded "
              "by), P2P (NVLink). An entry may add variables for its "
              "run alone: UCCL+UCCL_NCCL_SPEED_MBPS=400000+VAR=value.");
DEFINE_string(plugin, "",
              "UCCL plugin .so (absolute path); default: next to this "
              "binary (../libnccl-net-uccl.so or ../lib/libnccl-net-uccl.so).");
DEFINE_string(nccl_lib, "libnccl.so.2",
              "NCCL library to dlopen (e.g. the one torch ships).");
DEFINE_string(sizes, "4,16,64,256,1K,4K,16K,64K,256K,1M,4M,16M,64M,256M",
              "Message sizes in bytes (K/M/G suffixes), multiples of 4.");
DEFINE_uint32(iters, 1000,
              "Timed iterations per size, at most "
              "--bytes_per_size / size and at least 5.");
DEFINE_uint64(bytes_per_size, 4ull << 30,
              "Caps iterations per size at this many bytes reduced.");
DEFINE_uint32(warmup, 20, "Untimed iterations per size.");
DEFINE_uint32(lat_calls, 50,
              "Latency: after the timed loop, this many calls one at a time "
              "(each issued once the previous one is done; at most the "
              "size's iterations), timed by the host from issue to "
              "cudaStreamSynchronize; the median is the size's latency. 0: "
              "none.");
DEFINE_uint64(lat_max_bytes, 64 << 10,
              "Latency is measured for sizes up to this many bytes.");
DEFINE_uint32(rounds, 3, "Rounds; each runs every net once, in turn.");
DEFINE_uint32(gpus, 2, "Ranks, one GPU each (all on GPU 0 with --share_gpu).");
DEFINE_string(netns, "",
              "Network namespaces, comma-separated, one per rank (rank r "
              "joins the r-th: /var/run/netns/<name>), e.g. the two sides "
              "of tools/testbed/netns.sh (ranks on a shaped, lossy link). "
              "Empty: the caller's.");
DEFINE_string(procs, "per_gpu",
              "per_gpu: one process per GPU (torchrun's way); one: one "
              "process drives every GPU, one communicator each "
              "(ncclCommInitAll, each call a group over them: JAX's way), "
              "with LOCAL_WORLD_SIZE unset as such programs leave it.");
DEFINE_bool(share_gpu, false,
            "Every rank on GPU 0, each with its own NCCL_HOSTID so that NCCL "
            "takes the ranks for hosts of their own and runs them over the "
            "network (it refuses two ranks of one host on one GPU). Run it "
            "under CUDA MPS, or the ranks' kernels are time-sliced. Not with "
            "--procs=one or the SHM and P2P floors.");
DEFINE_uint32(timeout_s, 300, "One net's run is killed after this long.");
DEFINE_string(json, "", "Also write every round's rows here.");
DEFINE_string(coll, "all_reduce",
              "Operation: all_reduce (float32 sum, out-of-place), sendrecv "
              "(a ring: each rank sends its buffer to the next rank and "
              "receives the previous rank's, in one group) or all_to_all "
              "(block j of each rank's buffer to rank j, by grouped "
              "sends and receives).");
DEFINE_bool(per_round, true,
            "After the table of medians, print every round's time per size "
            "and net (a process pair that ran slow shows there).");

namespace {

using uccl::tools::PerfRow;

// --netns: each rank's network namespace (empty: the caller's).
std::vector<std::string> g_netns;

// In a forked rank, before NCCL or CUDA: join namespace `name`; exits the
// process where it cannot.
void join_netns(int rank, const std::string& name) {
  const std::string path = "/var/run/netns/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "nccl_perf rank %d: joining %s: %s\n", rank,
                 path.c_str(), std::strerror(errno));
    _exit(2);
  }
  close(fd);
}

// Variables some --nets entry sets for its own run, unset before the others.
std::vector<std::string> g_variant_vars;

// The environment that selects a net (parse_net_spec checked its base).
void set_net_env(const uccl::tools::NetSpec& spec, const std::string& plugin) {
  const std::string& net = spec.base;
  const char* kNetVars[] = {"NCCL_NET", "NCCL_NET_PLUGIN",
                            "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"};
  for (const char* v : kNetVars) unsetenv(v);
  for (const std::string& v : g_variant_vars) unsetenv(v.c_str());
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  // What torchrun sets: ranks on this host (the plugin sizes its engines
  // from it, else from the host's GPU count).
  if (FLAGS_procs == "one") {
    unsetenv("LOCAL_WORLD_SIZE");
  } else {
    setenv("LOCAL_WORLD_SIZE", std::to_string(FLAGS_gpus).c_str(), 1);
  }
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  if (net == "UCCL") {
    setenv("NCCL_NET", "UCCL", 1);
    setenv("NCCL_NET_PLUGIN", plugin.c_str(), 1);
  } else if (net == "Socket") {
    setenv("NCCL_NET", "Socket", 1);
  } else if (net == "Socket4x4") {
    setenv("NCCL_NET", "Socket", 1);
    setenv("NCCL_SOCKET_NTHREADS", "4", 1);
    setenv("NCCL_NSOCKS_PERTHREAD", "4", 1);
  } else if (net == "SHM") {
    setenv("NCCL_SHM_DISABLE", "0", 1);  // P2P stays off: through host memory
  } else if (net == "P2P") {
    setenv("NCCL_P2P_DISABLE", "0", 1);
    setenv("NCCL_SHM_DISABLE", "0", 1);
  }
  for (const auto& [k, v] : spec.env) setenv(k.c_str(), v.c_str(), 1);
}

// Forks the ranks for one net and collects rank 0's rows; an error message
// (empty on success) says what failed.
std::string run_net(const uccl::tools::NetSpec& net, const std::string& plugin,
                    const uccl::tools::PerfRunConfig& cfg,
                    std::vector<PerfRow>* rows) {
  set_net_env(net, plugin);
  int id_fd[2], out_fd[2];
  if (pipe(id_fd) != 0 || pipe(out_fd) != 0) return "pipe failed";
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  const bool one = FLAGS_procs == "one";
  for (uint32_t r = 0; r < (one ? 1 : FLAGS_gpus); ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      // Each end stays open only where it is used, so a rank that dies
      // gives the others EOF instead of a hang.
      close(out_fd[0]);
      if (r != 0) close(out_fd[1]);
      close(r == 0 ? id_fd[0] : id_fd[1]);
      if (!g_netns.empty()) join_netns(static_cast<int>(r), g_netns[r]);
      if (FLAGS_share_gpu) {
        setenv("NCCL_HOSTID", ("nccl-perf-rank-" + std::to_string(r)).c_str(),
               1);
      }
      if (one) {
        close(id_fd[1]);
        uccl::tools::procs_main(static_cast<int>(FLAGS_gpus), out_fd[1], cfg);
      }
      uccl::tools::rank_main(static_cast<int>(r), static_cast<int>(FLAGS_gpus),
                             id_fd, out_fd[1], cfg);
    }
    if (pid < 0) return "fork failed";
    pids.push_back(pid);
  }
  close(id_fd[0]);
  close(id_fd[1]);
  close(out_fd[1]);
  // Read rank 0's rows (EOF early if it died), bounded by the timeout.
  std::string err;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(FLAGS_timeout_s);
  std::vector<char> buf;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      err = "timed out after " + std::to_string(FLAGS_timeout_s) + " s";
      break;
    }
    pollfd p{out_fd[0], POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(std::min<long>(left, 1000)));
    if (pr < 0 && errno != EINTR) {
      err = "poll failed";
      break;
    }
    if (pr <= 0) continue;
    char chunk[4096];
    ssize_t n = read(out_fd[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.insert(buf.end(), chunk, chunk + n);
  }
  close(out_fd[0]);
  // Reap every rank by the same deadline; kill what is left after it.
  std::vector<int> status(pids.size(), 0);
  std::vector<bool> reaped(pids.size(), false);
  for (;;) {
    size_t left = 0;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (!reaped[r] && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
        reaped[r] = true;
      }
      left += !reaped[r];
    }
    if (left == 0) break;
    if (!err.empty() || std::chrono::steady_clock::now() > deadline) {
      if (err.empty()) {
        err = "timed out after " + std::to_string(FLAGS_timeout_s) + " s";
      }
      for (size_t r = 0; r < pids.size(); ++r) {
        if (!reaped[r]) kill(pids[r], SIGKILL);
      }
      for (size_t r = 0; r < pids.size(); ++r) {
        if (!reaped[r]) waitpid(pids[r], &status[r], 0);
      }
      break;
    }
    usleep(10000);
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    int st = status[r];
    if (err.empty() && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      err = "rank " + std::to_string(r) + " failed (" +
            (WIFEXITED(st) ? "exit " + std::to_string(WEXITSTATUS(st))
                           : "signal " + std::to_string(WTERMSIG(st))) +
            ")";
    }
  }
  if (!err.empty()) return err;
  uint32_t count = 0;
  if (buf.size() < sizeof(count)) return "rank 0 sent no rows";
  std::memcpy(&count, buf.data(), sizeof(count));
  if (buf.size() != sizeof(count) + count * sizeof(PerfRow)) {
    return "rank 0 sent a short result";
  }
  rows->resize(count);
  std::memcpy(rows->data(), buf.data() + sizeof(count),
              count * sizeof(PerfRow));
  return "";
}

std::string default_plugin(const char* argv0) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, static_cast<size_t>(n)) : argv0;
  dir = dir.substr(0, dir.rfind('/'));
  for (const char* rel :
       {"/../libnccl-net-uccl.so", "/../lib/libnccl-net-uccl.so"}) {
    std::string p = dir + rel;
    char real[4096];
    if (access(p.c_str(), R_OK) == 0 && realpath(p.c_str(), real)) return real;
  }
  return "";
}

}  // namespace

// --nets entries, each with its own environment (a variable set both there
// and in the environment is refused); false after printing why.
bool parse_specs(const std::vector<std::string>& nets,
                 std::vector<uccl::tools::NetSpec>* specs, bool* has_uccl) {
  for (const std::string& net : nets) {
    auto spec = uccl::tools::parse_net_spec(net);
    if (!spec.ok()) {
      std::fprintf(stderr, "nccl_perf: --nets: %s\n",
                   spec.status().to_string().c_str());
      return false;
    }
    for (const auto& kv : spec->env) {
      if (std::getenv(kv.first.c_str()) != nullptr) {
        std::fprintf(stderr,
                     "nccl_perf: %s is set in the environment and in --nets "
                     "entry '%s'; unset it\n",
                     kv.first.c_str(), net.c_str());
        return false;
      }
      g_variant_vars.push_back(kv.first);
    }
    *has_uccl = *has_uccl || spec->base == "UCCL";
    specs->push_back(std::move(*spec));
  }
  return true;
}

// Every round runs every net once, in order; results[net][round] = rows
// (empty for a failed run, so rounds stay aligned). True if any failed.
bool run_rounds(const std::vector<std::string>& nets,
                const std::vector<uccl::tools::NetSpec>& specs,
                const std::string& plugin,
                const uccl::tools::PerfRunConfig& cfg,
                std::vector<std::vector<std::vector<PerfRow>>>* results) {
  bool failed = false;
  for (uint32_t round = 0; round < FLAGS_rounds; ++round) {
    for (size_t k = 0; k < nets.size(); ++k) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<PerfRow> rows;
      std::string err = run_net(specs[k], plugin, cfg, &rows);
      double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (!err.empty()) {
        std::fprintf(stderr, "round %u/%u %s: FAILED: %s\n", round + 1,
                     FLAGS_rounds, nets[k].c_str(), err.c_str());
        failed = true;
        (*results)[k].emplace_back();  // keeps rounds aligned across nets
        continue;
      }
      uint64_t errors = 0;
      for (const PerfRow& r : rows) errors += r.errors;
      std::fprintf(stderr, "round %u/%u %s: %zu sizes in %.1f s, %s\n",
                   round + 1, FLAGS_rounds, nets[k].c_str(), rows.size(), s,
                   errors ? "WRONG RESULTS" : "results checked");
      if (errors) failed = true;
      (*results)[k].push_back(std::move(rows));
    }
  }
  return failed;
}

// The tables (time per call, latency, every round) and the JSON file;
// false if the JSON could not be written.
bool print_results(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results,
    uccl::tools::PerfColl coll) {
  bool ok = true;
  std::string table = uccl::tools::perf_table(nets, results, FLAGS_gpus, coll);
  std::fputs(table.c_str(), stdout);
  std::string lat = uccl::tools::perf_latency_table(nets, results);
  if (!lat.empty()) {
    std::printf(
        "\n# latency: one call at a time, issue to cudaStreamSynchronize, "
        "median of up to %u per size and run, then the median of the "
        "runs\n",
        FLAGS_lat_calls);
    std::fputs(lat.c_str(), stdout);
  }
  if (FLAGS_per_round && FLAGS_rounds > 1) {
    std::printf("\n# every round, time per call\n");
    std::fputs(uccl::tools::perf_rounds_table(nets, results).c_str(), stdout);
  }
  if (!FLAGS_json.empty()) {
    std::string js = uccl::tools::perf_json(nets, results);
    FILE* f = std::fopen(FLAGS_json.c_str(), "w");
    if (f == nullptr || std::fputs(js.c_str(), f) < 0) {
      std::fprintf(stderr, "nccl_perf: cannot write %s\n", FLAGS_json.c_str());
      ok = false;
    }
    if (f) std::fclose(f);
  }
  return ok;
}

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "nccl-tests-style all_reduce / sendrecv / all_to_all timing, UCCL vs "
      "NCCL's Socket transport.\n"
      "  nccl_perf [--coll=all_reduce|sendrecv|all_to_all] "
      "[--nets=UCCL,Socket,...]\n"
      "            [--sizes=4,64,1K,...] [--rounds=3] "
      "[--nccl_lib=/path/libnccl.so.2]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto sizes = uccl::tools::parse_sizes(FLAGS_sizes);
  if (!sizes.ok()) {
    std::fprintf(stderr, "nccl_perf: --sizes: %s\n",
                 sizes.status().to_string().c_str());
    return 1;
  }
  auto coll = uccl::tools::parse_coll(FLAGS_coll);
  if (!coll.ok()) {
    std::fprintf(stderr, "nccl_perf: --coll: %s\n",
                 coll.status().to_string().c_str());
    return 1;
  }
  std::vector<std::string> nets = uccl::tools::split_list(FLAGS_nets);
  if (nets.empty() || FLAGS_gpus < 2 || FLAGS_rounds == 0) {
    std::fprintf(stderr,
                 "nccl_perf: need --nets, --gpus >= 2, --rounds >= 1\n");
    return 1;
  }
  g_netns = uccl::tools::split_list(FLAGS_netns);
  if (!g_netns.empty() &&
      (FLAGS_procs == "one" || g_netns.size() != FLAGS_gpus)) {
    std::fprintf(stderr,
                 "nccl_perf: --netns gives one namespace per rank (%u), one "
                 "process per GPU\n",
                 FLAGS_gpus);
    return 1;
  }
  if (FLAGS_procs != "one" && FLAGS_procs != "per_gpu") {
    std::fprintf(stderr, "nccl_perf: --procs=%s: give one or per_gpu\n",
                 FLAGS_procs.c_str());
    return 1;
  }
  if (FLAGS_share_gpu && FLAGS_procs == "one") {
    std::fprintf(stderr,
                 "nccl_perf: --share_gpu runs one process per rank; not "
                 "with --procs=one\n");
    return 1;
  }
  std::string plugin =
      FLAGS_plugin.empty() ? default_plugin(argv[0]) : FLAGS_plugin;
  std::vector<uccl::tools::NetSpec> specs;
  bool has_uccl = false;
  if (!parse_specs(nets, &specs, &has_uccl)) return 1;
  for (const auto& spec : specs) {
    if (FLAGS_share_gpu && (spec.base == "SHM" || spec.base == "P2P")) {
      std::fprintf(stderr,
                   "nccl_perf: --share_gpu: %s needs the ranks on one host "
                   "and on GPUs of their own; leave it out\n",
                   spec.base.c_str());
      return 1;
    }
  }
  if (has_uccl && (plugin.empty() || plugin[0] != '/')) {
    std::fprintf(stderr,
                 "nccl_perf: UCCL needs --plugin=<absolute path of "
                 "libnccl-net-uccl.so> (none found next to this binary)\n");
    return 1;
  }
  if (has_uccl) std::printf("# plugin %s\n", plugin.c_str());
  std::printf(
      "# %s, %u ranks (%s); time per call from CUDA events over "
      "back-to-back calls\n",
      *coll == uccl::tools::PerfColl::kSendRecv
          ? "sendrecv ring, float32, each rank to the next"
      : *coll == uccl::tools::PerfColl::kAllToAll
          ? "all_to_all, float32, grouped sends and receives"
          : "all_reduce, float32 sum, out-of-place",
      FLAGS_gpus,
      FLAGS_share_gpu        ? "one process each, all on GPU 0, one NCCL "
                               "host each"
      : FLAGS_procs == "one" ? "one process drives every GPU"
                             : "one process per GPU");
  uccl::tools::PerfRunConfig cfg;
  cfg.sizes = *sizes;
  cfg.coll = *coll;
  cfg.nccl_lib = FLAGS_nccl_lib;
  cfg.iters = FLAGS_iters;
  cfg.warmup = FLAGS_warmup;
  cfg.lat_calls = FLAGS_lat_calls;
  cfg.bytes_per_size = FLAGS_bytes_per_size;
  cfg.lat_max_bytes = FLAGS_lat_max_bytes;
  cfg.share_gpu = FLAGS_share_gpu;
  std::vector<std::vector<std::vector<PerfRow>>> results(nets.size());
  bool failed = run_rounds(nets, specs, plugin, cfg, &results);
  bool any = false;
  for (const auto& net : results) {
    for (const auto& run : net) any = any || !run.empty();
  }
  if (!any) {
    std::fprintf(stderr, "nccl_perf: every run failed, no table\n");
    return 1;
  }
  if (!print_results(nets, results, *coll)) failed = true;
  return failed ? 1 : 0;
}
