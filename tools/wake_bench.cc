// wake_bench: what waking a thread that sleeps on a condition variable costs
// on this machine, against waking one that spins (the baseline, same run).
// It is what NCCL's host thread pays per collective when NCCL's proxy thread
// went to sleep after the previous one (ncclProxyPost signals it): on a VM
// the waker's futex wake and the sleeper's start include an IPI to a halted
// vCPU. One row per mode: the waker's time to signal (mutex, notify,
// unlock) and the time until the wakee runs, percentiles in us. Every wake
// is bounded (1 s); exit 1 if a wakee never ran, 2 on bad flags.
#include <gflags/gflags.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "util/cpu.h"

DEFINE_int32(waker_cpu, 0, "CPU of the waking thread (-1: not pinned).");
DEFINE_int32(wakee_cpu, 1, "CPU of the woken thread (-1: not pinned).");
DEFINE_double(gap_us, 30,
              "Waker's busy time between wakes, us (a PyTorch loop's host "
              "time per tiny collective is 20-50).");
DEFINE_uint32(iterations, 2000, "Wakes per mode.");

namespace {

using Clock = std::chrono::steady_clock;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             Clock::now().time_since_epoch())
      .count();
}

struct Samples {
  std::vector<double> cost_us, start_us;  // the waker's; until the wakee ran
};

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

// One mode: the wakee sleeps on a condition variable (sleeping) or spins on
// an atomic flag. Returns false if a wakee did not run within 1 s.
bool run(bool sleeping, Samples* out) {
  std::mutex mu;
  std::condition_variable cv;
  bool posted = false;  // mu
  std::atomic<bool> flag{false}, quit{false};
  std::atomic<uint64_t> runs{0};
  std::atomic<double> ran_at_us{0};
  std::thread wakee([&] {
    if (FLAGS_wakee_cpu >= 0) (void)uccl::pin_current_thread(FLAGS_wakee_cpu);
    while (!quit.load(std::memory_order_acquire)) {
      if (sleeping) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return posted || quit.load(); });
        if (!posted) break;
        posted = false;
      } else {
        if (!flag.exchange(false, std::memory_order_acq_rel)) continue;
      }
      ran_at_us.store(now_us(), std::memory_order_relaxed);
      runs.fetch_add(1, std::memory_order_release);
    }
  });
  bool ok = true;
  for (uint32_t i = 0; i < FLAGS_iterations && ok; ++i) {
    const double busy_until = now_us() + FLAGS_gap_us;
    while (now_us() < busy_until) {
    }
    const uint64_t before = runs.load(std::memory_order_acquire);
    const double t0 = now_us();
    if (sleeping) {
      std::lock_guard<std::mutex> lock(mu);
      posted = true;
      cv.notify_one();
    } else {
      flag.store(true, std::memory_order_release);
    }
    const double t1 = now_us();
    while (runs.load(std::memory_order_acquire) == before) {
      if (now_us() - t0 > 1e6) {
        ok = false;
        break;
      }
    }
    if (!ok) break;
    out->cost_us.push_back(t1 - t0);
    out->start_us.push_back(ran_at_us.load(std::memory_order_relaxed) - t0);
  }
  quit.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_one();
  }
  wakee.join();
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "wake_bench [--waker_cpu=N] [--wakee_cpu=N] [--gap_us=US] "
      "[--iterations=N]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const std::vector<int> cpus = uccl::allowed_cpus();
  auto allowed = [&](int c) {
    return c < 0 || std::find(cpus.begin(), cpus.end(), c) != cpus.end();
  };
  if (FLAGS_iterations == 0 || FLAGS_gap_us < 0 || !allowed(FLAGS_waker_cpu) ||
      !allowed(FLAGS_wakee_cpu)) {
    std::fprintf(stderr,
                 "wake_bench: --iterations must be positive, --gap_us not "
                 "negative, and the CPUs allowed here (%s) or -1\n",
                 uccl::format_cpu_list(cpus).c_str());
    return 2;
  }
  if (FLAGS_waker_cpu >= 0) (void)uccl::pin_current_thread(FLAGS_waker_cpu);
  std::printf(
      "wake_bench: waker on CPU %d, wakee on CPU %d, %.0f us between "
      "wakes, %u wakes per mode\n",
      FLAGS_waker_cpu, FLAGS_wakee_cpu, FLAGS_gap_us, FLAGS_iterations);
  std::printf(
      "| wakee | waker's cost p50 us | p90 | wakee runs after p50 us | p90 "
      "| vs spinning (p50 sum) |\n|---|---:|---:|---:|---:|---:|\n");
  Samples spin, sleep;
  if (!run(false, &spin) || !run(true, &sleep)) {
    std::fprintf(stderr, "wake_bench: a wakee did not run within 1 s\n");
    return 1;
  }
  const double base = pct(spin.cost_us, 0.5) + pct(spin.start_us, 0.5);
  for (const auto& [name, s] :
       {std::make_pair("spinning (baseline)", &spin),
        std::make_pair("sleeping on a condition variable", &sleep)}) {
    const double sum = pct(s->cost_us, 0.5) + pct(s->start_us, 0.5);
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1fx |\n", name,
                pct(s->cost_us, 0.5), pct(s->cost_us, 0.9),
                pct(s->start_us, 0.5), pct(s->start_us, 0.9),
                base > 0 ? sum / base : 0.0);
  }
  return 0;
}
