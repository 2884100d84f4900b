// The engine loop through the Endpoint: idle sleep and its knobs, wake-ups
// for commands and datagrams, idle connections left unvisited, thread
// names and the cores engines hold.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "tests/engine/engine_test_util.h"
#include "tests/engine_threads.h"
#include "util/cpu.h"

namespace uccl::testing {
namespace {

TEST(EndpointTest, IdleSleepIsConfigurable) {
  for (int64_t sleep_us : {int64_t{200000}, int64_t{0}, int64_t{-1}}) {
    EndpointConfig c = test_config(2, 1);
    c.idle_sleep_us = sleep_us;
    auto ep = Endpoint::create(c);
    ASSERT_TRUE(ep.ok()) << ep.status();
    const uint64_t want = sleep_us >= 0
                              ? static_cast<uint64_t>(sleep_us) * 1000
                              : (std::getenv("UCCL_IDLE_SLEEP_US")
                                     ? (*ep)->engine_stats()[0].idle_sleep_ns
                                     : 20000u);
    for (const EngineStats& s : (*ep)->engine_stats()) {
      EXPECT_EQ(s.idle_sleep_ns, want) << "idle_sleep_us " << sleep_us;
    }
    // One engine's stats alone, and a clear error for one it lacks.
    for (int i = 0; i < 2; ++i) {
      auto one = (*ep)->engine_stats(i);
      ASSERT_TRUE(one.ok()) << one.status();
      EXPECT_EQ(one->idle_sleep_ns, want) << "engine " << i;
    }
    auto none = (*ep)->engine_stats(2);
    EXPECT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("engine_stats: engine 2"),
              std::string::npos)
        << none.status();
    if (sleep_us > 0) {
      const EngineStats a = (*ep)->engine_stats()[0];
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      const EngineStats b = (*ep)->engine_stats()[0];
      EXPECT_LE(b.loops - a.loops, 20020u)
          << "an engine sleeping 200 ms per empty loop";
      // Its sleeps are idle time: only the loops that took the two stats
      // commands did work (busy meter, engine/busy_meter.h).
      EXPECT_GE(b.run_ns - a.run_ns, 500000000u);
      EXPECT_LT(b.busy_ns - a.busy_ns, (b.run_ns - a.run_ns) / 2);
    }
  }
}

// With idle_sleep_after_ms, an engine sleeps only once it has had nothing
// to do for that long, however many empty loops it ran before: one with a
// 100 ms threshold sleeps once past it, one with a one-minute threshold
// never sleeps in the test (it keeps polling and yielding). Both still carry
// a message afterwards. (Reading stats is a command, which is work: it
// restarts the idle time.)
TEST(EndpointTest, IdleSleepWaitsForIdleTime) {
  std::unique_ptr<Pair> pairs[2];
  const int64_t after_ms[2] = {100, 60000};
  for (int i = 0; i < 2; ++i) {
    EndpointConfig c = test_config(1, 1);
    c.idle_sleep_us = 1000;
    c.idle_sleep_after_ms = after_ms[i];
    // The idle time alone decides: 20000 empty loops (the default spin
    // before sleeping) can outlast the test where both CPUs are busy.
    c.idle_spin_loops = 0;
    pairs[i] = Pair::make(c, test_config(1, 1));
    ASSERT_TRUE(pairs[i]);
    EXPECT_EQ(pairs[i]->server->engine_stats()[0].idle_sleep_after_ns,
              static_cast<uint64_t>(after_ms[i]) * 1000000);
  }
  // Look again after longer and longer idle windows (each look is a
  // command, which restarts the idle time).
  EngineStats s[2];
  for (int window_ms = 600; window_ms <= 9600; window_ms *= 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
    for (int i = 0; i < 2; ++i) s[i] = pairs[i]->server->engine_stats()[0];
    if (s[0].idle_sleeps > 0) break;
  }
  EXPECT_GT(s[0].idle_sleeps, 0u) << "idle long past its 100 ms threshold";
  EXPECT_EQ(s[1].idle_sleeps, 0u) << "idle, but within its 1 min threshold";
  // Both still carry a message (the sleeper wakes within its 1 ms sleep).
  for (auto& p : pairs) {
    std::vector<uint8_t> src(4096), dst(4096, 0);
    fill_pattern(src.data(), src.size(), 9);
    auto smr = p->client->reg_mr(src.data(), src.size());
    auto rmr = p->server->reg_mr(dst.data(), dst.size());
    ASSERT_TRUE(smr.ok() && rmr.ok());
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], dst.data(), dst.size(), *rmr, &rr)
            .ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], src.data(), src.size(), *smr, &sr)
            .ok());
    ASSERT_TRUE(p->server->wait(&rr, 20000).ok());
    ASSERT_TRUE(p->client->wait(&sr, 20000).ok());
    EXPECT_EQ(find_pattern_mismatch(dst.data(), dst.size(), 9), -1);
  }
}

// An idle engine on the software NIC blocks until something arrives, not
// for its whole sleep: with 1 s sleeps (the longest allowed), a message
// posted while both engines wait still completes in well under half of
// one, ten times: the sender's engine wakes for the send command, the
// receiver's for the datagrams (its receive was posted before it went back
// to waiting). A sleep-through design takes up to a second per message, so
// at least one of the ten would miss. Destroying endpoints whose engines
// wait is as quick (stop() wakes them). The counts say the waits ended
// early.
TEST(EndpointTest, IdleEngineWakesForCommandsAndDatagrams) {
  EndpointConfig c = test_config(1, 1);
  c.idle_sleep_us = 1000000;
  c.idle_sleep_after_ms = 0;
  c.idle_spin_loops = 0;  // sleep at once: spins can outlast a busy host
  auto p = Pair::make(c, c);
  ASSERT_TRUE(p);
  auto both_waiting = [&] {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      auto a = EndpointTestAccess::engine_waiting(p->server.get(), 0);
      auto b = EndpointTestAccess::engine_waiting(p->client.get(), 0);
      if (!a.ok() || !b.ok()) return false;
      if (*a && *b) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  };
  EXPECT_FALSE(EndpointTestAccess::engine_waiting(p->server.get(), 1).ok());
  constexpr size_t kBytes = 100000;  // several datagrams
  std::vector<uint8_t> src(kBytes), dst(kBytes);
  auto smr = p->client->reg_mr(src.data(), src.size());
  auto rmr = p->server->reg_mr(dst.data(), dst.size());
  ASSERT_TRUE(smr.ok() && rmr.ok());
  constexpr int kRounds = 10;
  for (int round = 0; round < kRounds; ++round) {
    fill_pattern(src.data(), src.size(), 20 + round);
    std::fill(dst.begin(), dst.end(), 0);
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], dst.data(), dst.size(), *rmr, &rr)
            .ok());
    ASSERT_TRUE(both_waiting()) << "round " << round;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], src.data(), src.size(), *smr, &sr)
            .ok());
    ASSERT_TRUE(p->server->wait(&rr, 20000).ok());
    ASSERT_TRUE(p->client->wait(&sr, 20000).ok());
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
    EXPECT_LT(ms, 500) << "round " << round << ": engines slept through";
    EXPECT_EQ(find_pattern_mismatch(dst.data(), dst.size(), 20 + round), -1);
  }
  const EngineStats s = p->server->engine_stats()[0];
  const EngineStats k = p->client->engine_stats()[0];
  EXPECT_GE(s.idle_sleeps, static_cast<uint64_t>(kRounds));
  EXPECT_GE(s.idle_wakes, static_cast<uint64_t>(kRounds));
  EXPECT_GE(k.idle_wakes, static_cast<uint64_t>(kRounds));
  EXPECT_LE(s.idle_wakes, s.idle_sleeps);
  ASSERT_TRUE(both_waiting());
  const auto t0 = std::chrono::steady_clock::now();
  p.reset();
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0)
                .count(),
            500)
      << "stop() waited out the engines' sleeps";
}

// The engine loop's pass visits only connections with work: 32 connections
// that carried a message each and then went idle add no visits per loop
// (visiting every live one, as the loop used to, adds 32 per loop). The
// timers visit idle ones only in their 1 ms safety-net pass (the RTO scan,
// every 50 us, takes only connections with chunks out), and that pass never
// finds work no event activated. A message on one of them brings it back
// into the pass, and arrives intact.
TEST(EndpointTest, IdleConnectionsAreNotVisitedByTheLoop) {
  constexpr int kFlows = 32;
  auto p = Pair::make(test_config(1, 1), test_config(1, 1), kFlows);
  ASSERT_TRUE(p);
  const size_t len = 8192;
  std::vector<uint8_t> src(len), dst(len * kFlows, 0);
  fill_pattern(src.data(), len, 21);
  auto smr = p->client->reg_mr(src.data(), src.size());
  auto rmr = p->server->reg_mr(dst.data(), dst.size());
  ASSERT_TRUE(smr.ok() && rmr.ok());
  auto exchange = [&](int i) {
    Request rr, sr;
    uint8_t* d = dst.data() + static_cast<size_t>(i) * len;
    ASSERT_TRUE(p->server->recv_async(p->s_conns[i], d, len, *rmr, &rr).ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[i], src.data(), len, *smr, &sr).ok());
    ASSERT_TRUE(p->server->wait(&rr, 20000).ok());
    ASSERT_TRUE(p->client->wait(&sr, 20000).ok());
    EXPECT_EQ(find_pattern_mismatch(d, len, 21), -1) << "flow " << i;
  };
  for (int i = 0; i < kFlows; ++i) exchange(i);
  // Let the last ACKs settle, then count an idle window on both sides.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Endpoint* eps[2] = {p->server.get(), p->client.get()};
  EngineStats a[2], b[2];
  for (int s = 0; s < 2; ++s) a[s] = eps[s]->engine_stats()[0];
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int s = 0; s < 2; ++s) b[s] = eps[s]->engine_stats()[0];
  // At most one safety-net pass per ms of the window (with one to spare).
  const uint64_t window_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0)
          .count();
  for (int s = 0; s < 2; ++s) {
    const char* side = s ? "client" : "server";
    const uint64_t loops = b[s].loops - a[s].loops;
    ASSERT_GT(loops, 0u);
    EXPECT_LT(b[s].conn_visits - a[s].conn_visits, loops)
        << side << ": " << kFlows << " idle connections visited in " << loops
        << " loops";
    EXPECT_LE(b[s].timer_visits - a[s].timer_visits, kFlows * (window_ms + 2))
        << side << ": the timers visited idle connections more than once "
        << "per ms over " << window_ms << " ms";
    EXPECT_EQ(b[s].late_activations, 0u)
        << side << ": work that only the safety net found";
  }
  exchange(kFlows / 2);
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(eps[s]->engine_stats()[0].conn_visits, b[s].conn_visits)
        << "the busy connection joins the pass";
  }
}

// Engine threads carry their names ("uccl-eng-<index>") for top -H, ps -L
// and perf; a thread names itself as it starts, so wait for it (bounded).
TEST(EndpointTest, EngineThreadsAreNamed) {
  auto ep = Endpoint::create(test_config(2, 1));
  ASSERT_TRUE(ep.ok()) << ep.status();
  auto names = [] {
    std::multiset<std::string> out;
    DIR* d = opendir("/proc/self/task");
    if (d == nullptr) return out;
    while (dirent* e = readdir(d)) {
      std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
      std::string s;
      if (std::getline(f, s)) out.insert(s);
    }
    closedir(d);
    return out;
  };
  std::multiset<std::string> seen;
  for (int i = 0; i < 500; ++i) {  // at most 5 s
    seen = names();
    if (seen.count("uccl-eng-0") && seen.count("uccl-eng-1")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(seen.count("uccl-eng-0"), 1u);
  EXPECT_EQ(seen.count("uccl-eng-1"), 1u);
  (*ep).reset();
  EXPECT_EQ(names().count("uccl-eng-0"), 0u) << "stopped with the endpoint";
}

TEST(EndpointTest, EngineCoresOnHostListThisProcesssEngines) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  auto has = [](int core) {
    const std::vector<int> all = Endpoint::engine_cores_on_host();
    return std::find(all.begin(), all.end(), core) != all.end();
  };
  // Cores given in the config count, as do those chosen by default.
  EndpointConfig c = test_config(1, 1);
  c.engine_cores = {cpus.front()};
  auto given = Endpoint::create(c);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_TRUE(has(cpus.front()));
  auto chosen = Endpoint::create(test_config(2, 1));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  // Every engine thread (three) pins itself to one core once started.
  const std::vector<int> pinned = pinned_engine_cores(3);
  ASSERT_EQ(pinned.size(), 3u) << "engine threads pinned";
  for (int core : pinned) EXPECT_TRUE(has(core)) << "core " << core;
}

}  // namespace
}  // namespace uccl::testing
