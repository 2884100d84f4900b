// wake_bench: what waking a thread that sleeps on a condition variable costs
// on this machine, against waking one that spins (the baseline, same run).
// It is what NCCL's host thread pays per collective when NCCL's proxy thread
// went to sleep after the previous one (ncclProxyPost signals it): on a VM
// the waker's futex wake and the sleeper's start include an IPI to a halted
// vCPU. A third mode (with --wakee_cpu) keeps the sleeper's CPU from
// halting with a SCHED_IDLE spinner, as guest halt polling would. One row per
// mode: the waker's time to signal (mutex, notify, unlock) and the time until
// the wakee runs, percentiles in us. Every wake is bounded (1 s); exit 1 if a
// wakee never ran, 2 on bad flags.
#include <gflags/gflags.h>
#include <sched.h>

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

// Spins at idle priority on `cpu` until `quit`: the CPU never halts, yet
// any other thread there preempts it at once. `state`: 1 once spinning, -1
// if the kernel refused the pin or SCHED_IDLE.
void idle_spin(int cpu, const std::atomic<bool>* quit,
               std::atomic<int>* state) {
  sched_param p{};
  if (!uccl::pin_current_thread(cpu).ok() ||
      sched_setscheduler(0, SCHED_IDLE, &p) != 0) {
    state->store(-1, std::memory_order_release);
    return;
  }
  state->store(1, std::memory_order_release);
  while (!quit->load(std::memory_order_relaxed)) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

// One mode: the wakee sleeps on a condition variable (sleeping) or spins on
// an atomic flag; with `keep_busy` an idle-priority spinner shares the
// sleeping wakee's CPU (no samples if it could not start). Returns false if
// a wakee did not run within 1 s.
bool run(bool sleeping, bool keep_busy, Samples* out) {
  std::mutex mu;
  std::condition_variable cv;
  bool posted = false;  // mu
  std::atomic<bool> flag{false}, quit{false};
  std::atomic<uint64_t> runs{0};
  std::atomic<double> ran_at_us{0};
  std::atomic<bool> stop_spinner{false};
  std::atomic<int> spinner_state{0};
  std::thread spinner;
  if (keep_busy) {
    spinner =
        std::thread(idle_spin, FLAGS_wakee_cpu, &stop_spinner, &spinner_state);
    const double give_up_us = now_us() + 1e6;
    while (spinner_state.load(std::memory_order_acquire) == 0 &&
           now_us() < give_up_us) {
    }
    if (spinner_state.load(std::memory_order_acquire) != 1) {
      stop_spinner.store(true, std::memory_order_relaxed);
      spinner.join();
      return true;  // no samples: the caller says why
    }
  }
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
  stop_spinner.store(true, std::memory_order_relaxed);
  if (spinner.joinable()) spinner.join();
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
  // The third mode needs the wakee's CPU known, to share it.
  const bool busy_mode = FLAGS_wakee_cpu >= 0;
  Samples spin, sleep, busy;
  if (!run(false, false, &spin) || !run(true, false, &sleep) ||
      (busy_mode && !run(true, true, &busy))) {
    std::fprintf(stderr, "wake_bench: a wakee did not run within 1 s\n");
    return 1;
  }
  const double base = pct(spin.cost_us, 0.5) + pct(spin.start_us, 0.5);
  std::vector<std::pair<const char*, Samples*>> rows = {
      {"spinning (baseline)", &spin},
      {"sleeping on a condition variable", &sleep}};
  if (busy_mode && !busy.cost_us.empty()) {
    rows.push_back(
        {"sleeping, its CPU kept busy by a SCHED_IDLE spinner", &busy});
  }
  for (const auto& [name, s] : rows) {
    const double sum = pct(s->cost_us, 0.5) + pct(s->start_us, 0.5);
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1fx |\n", name,
                pct(s->cost_us, 0.5), pct(s->cost_us, 0.9),
                pct(s->start_us, 0.5), pct(s->start_us, 0.9),
                base > 0 ? sum / base : 0.0);
  }
  if (busy_mode && busy.cost_us.empty()) {
    std::printf(
        "(no SCHED_IDLE spinner row: this process may not pin a thread to "
        "CPU %d or give it SCHED_IDLE)\n",
        FLAGS_wakee_cpu);
  }
  return 0;
}
