// Scenarios of the engines: placement, steering NCCL's threads, engine
// counts, idle sleep, and the tuner.
#include "tests/collective/conformance/conformance.h"

namespace uccl::conformance {

// Two comm pairs in one process (4 comms, run with 4 engines): each comm's
// connection 0, which carries its small messages, has an engine of its own
// (UCCL_NCCL_SPREAD), and both pairs still carry data, byte-checked.
void scenario_placement(Api& a) {
  void *sc[2], *rc[2], *lc[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE(connect_pair(a, 0, &sc[i], &rc[i], &lc[i]), "connect/accept %d", i);
  }
  std::vector<uint8_t> sbufs[2], rbufs[2];
  CloseOnReturn closer(a, {sc[0], sc[1]}, {rc[0], rc[1]}, {lc[0], lc[1]});
  {
    std::lock_guard<std::mutex> lock(g_lanes_mu);
    REQUIRE(g_lanes.size() == 4, "%zu comms logged their engines",
            g_lanes.size());
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < i; ++j) {
        CHECK_THAT(g_lanes[i] != g_lanes[j],
                   "comms %d and %d both have connection 0 on engine %d", j, i,
                   g_lanes[i]);
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t>& sbuf = sbufs[i];
    std::vector<uint8_t>& rbuf = rbufs[i];
    sbuf.assign(3000, 0);
    rbuf.assign(4096, 0);
    for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 7 + i);
    exchange_once(a, sc[i], rc[i], sbuf, rbuf, i == 0 ? "pair 0" : "pair 1");
  }
  closer.dismiss();
  for (int i = 0; i < 2; ++i) {
    a.close_send(sc[i]);
    a.close_recv(rc[i]);
    a.close_listen(lc[i]);
  }
}

// UCCL_NCCL_STEER_THREADS (run with UCCL_NCCL_ENGINES=1 and a
// UCCL_CORE_LOCK_DIR of its own, so that other processes' claims on this
// host change nothing): a thread that connects and accepts, and one that
// only sends and receives, leave the cores engines are pinned to, this
// process's and those other processes claim in the lock directory
// (CONFORMANCE_STEER_CLAIM=1: this scenario holds the claim of the
// second-highest CPU, as another process would; files not named
// uccl-core-<n>.lock do not count), where other CPUs remain. The process's
// main thread (which loaded the plugin here, and calls none of those)
// keeps its CPUs through connect and accept and leaves those cores too at
// the first send or receive (not with UCCL_NCCL_STEER_MAIN=0). Off: nobody
// moves.
void scenario_steer(Api& a) {
  const char* knob = std::getenv("UCCL_NCCL_STEER_THREADS");
  const bool steer = knob == nullptr || std::strcmp(knob, "0") != 0;
  const char* main_knob = std::getenv("UCCL_NCCL_STEER_MAIN");
  const bool steer_main =
      steer && (main_knob == nullptr || std::strcmp(main_knob, "0") != 0);
  const char* dir = std::getenv("UCCL_CORE_LOCK_DIR");
  REQUIRE(dir != nullptr && *dir != 0 && std::strcmp(dir, "/dev/shm") != 0,
          "run with a UCCL_CORE_LOCK_DIR of its own");
  const char* claim = std::getenv("CONFORMANCE_STEER_CLAIM");
  const std::vector<int> cpus = uccl::allowed_cpus();
  REQUIRE(!cpus.empty(), "no allowed CPUs");
  std::vector<int> fds;
  std::vector<std::string> files;
  auto hold = [&](const std::string& name) {
    files.push_back(std::string(dir) + "/" + name);
    const int fd =
        open(files.back().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return false;
    fds.push_back(fd);
    return flock(fd, LOCK_EX | LOCK_NB) == 0;
  };
  // The engine takes the highest CPU; another process, the one below.
  const int other =
      claim != nullptr && std::strcmp(claim, "1") == 0 && cpus.size() >= 2
          ? cpus[cpus.size() - 2]
          : -1;
  if (other >= 0) {
    REQUIRE(hold("uccl-core-" + std::to_string(other) + ".lock"), "lock");
  }
  REQUIRE(hold("uccl-core-" + std::to_string(cpus.front()) + ".lockx") &&
              hold("uccl-core-x.lock"),
          "decoy locks");
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  std::vector<int> connector_cpus, sender_cpus;
  std::thread connector([&] {
    if (connect_pair(a, 0, &sc, &rc, &lc))
      connector_cpus = uccl::allowed_cpus();
  });
  connector.join();
  REQUIRE(sc != nullptr && rc != nullptr, "connect/accept");
  REQUIRE(syscall(SYS_gettid) == getpid(), "run on the main thread");
  const std::vector<int> main_after_connect = uccl::allowed_cpus();
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  std::vector<int> engines = uccl::testing::pinned_engine_cores(1);
  REQUIRE(engines.size() == 1, "%zu engine cores pinned, want 1",
          engines.size());
  std::vector<int> avoid = engines;
  if (other >= 0) avoid.push_back(other);
  std::vector<int> want;
  for (int c : cpus) {
    if (std::find(avoid.begin(), avoid.end(), c) == avoid.end()) {
      want.push_back(c);
    }
  }
  if (!steer || want.empty()) want = cpus;
  std::thread sender([&] {
    std::vector<uint8_t> sbuf(70000), rbuf(70000);
    for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 11 + 3);
    exchange_once(a, sc, rc, sbuf, rbuf, "sender thread");
    sender_cpus = uccl::allowed_cpus();
  });
  sender.join();
  CHECK_THAT(connector_cpus == want,
             "connecting thread may run on %s, want %s (engine on %d, "
             "other process's claim %d, steering %s)",
             uccl::format_cpu_list(connector_cpus).c_str(),
             uccl::format_cpu_list(want).c_str(), engines[0], other,
             steer ? "on" : "off");
  CHECK_THAT(sender_cpus == want, "sending thread may run on %s, want %s",
             uccl::format_cpu_list(sender_cpus).c_str(),
             uccl::format_cpu_list(want).c_str());
  CHECK_THAT(main_after_connect == cpus,
             "the main thread may run on %s after connect, had %s",
             uccl::format_cpu_list(main_after_connect).c_str(),
             uccl::format_cpu_list(cpus).c_str());
  const std::vector<int>& want_main = steer_main ? want : cpus;
  CHECK_THAT(uccl::allowed_cpus() == want_main,
             "the main thread may run on %s after the first send, want %s",
             uccl::format_cpu_list(uccl::allowed_cpus()).c_str(),
             uccl::format_cpu_list(want_main).c_str());
  closer.dismiss();
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
  for (int fd : fds) close(fd);
  for (const std::string& f : files) unlink(f.c_str());
}

// UCCL_NCCL_ENGINES=0 and UCCL_NCCL_CONNS=0 (run with LOCAL_WORLD_SIZE
// set): the plugin starts auto_engines() of this host's usable CPUs over
// the local ranks (three quarters of the share, 1 to 8), gives each comm
// auto_conns() of them (half, 1 to 6), and a message cut over all of them
// arrives whole. The rules themselves are unit-tested (stripe_test.cc);
// here the loaded plugin must follow them.
void scenario_auto_engines(Api& a) {
  const char* lws = std::getenv("LOCAL_WORLD_SIZE");
  REQUIRE(lws != nullptr && std::atoi(lws) > 0, "run with LOCAL_WORLD_SIZE");
  const int cpus = uccl::usable_cpu_count();  // affinity, or the cgroup's quota
  REQUIRE(cpus > 0, "no usable CPUs");
  const int want_engines = uccl::nccl::auto_engines(cpus, std::atoi(lws));
  const int want_conns = uccl::nccl::auto_conns(want_engines);
  CHECK_THAT(g_chosen_engines.load() == want_engines,
             "%d CPUs, %s local ranks: chose %d engines, want %d", cpus, lws,
             g_chosen_engines.load(), want_engines);
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  CHECK_THAT(g_started_engines.load() == want_engines,
             "the endpoint started %d engines, want %d",
             g_started_engines.load(), want_engines);
  CHECK_THAT(g_comm_conns.load() == want_conns, "%d connections, want %d",
             g_comm_conns.load(), want_conns);
  // Longer than every part's share: all connections carry bytes.
  std::vector<uint8_t> sbuf((size_t{2} << 20) + 333), rbuf(sbuf.size() + 4096);
  for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 13 + 5);
  exchange_once(a, sc, rc, sbuf, rbuf, "striped message");
  closer.dismiss();
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
}

// Idle engines (run with UCCL_NCCL_ENGINES=1; CONFORMANCE_IDLE_AFTER_MS and
// CONFORMANCE_IDLE_WAIT_US: the policy the endpoint must log). A comm pair
// exchanges six messages, byte-checked, the second after 300 ms idle and
// the others after 50 ms. Where the policy sleeps after less than 50 ms the
// engine must have slept, and commands or datagrams must have woken it
// early; where it sleeps after more than 300 ms, it must not have slept.
void scenario_idle(Api& a) {
  const char* after = std::getenv("CONFORMANCE_IDLE_AFTER_MS");
  const char* wait = std::getenv("CONFORMANCE_IDLE_WAIT_US");
  REQUIRE(after && wait, "run with CONFORMANCE_IDLE_AFTER_MS/_WAIT_US");
  void *sc, *rc, *lc;
  REQUIRE(connect_pair(a, 0, &sc, &rc, &lc), "connect/accept");
  CloseOnReturn closer(a, {sc}, {rc}, {lc});
  CHECK_THAT(g_idle_after_ms.load() == std::atoi(after) &&
                 g_idle_wait_us.load() == std::atoi(wait),
             "the endpoint logged sleeps after %d ms, %d us per wait; want "
             "%s ms, %s us",
             g_idle_after_ms.load(), g_idle_wait_us.load(), after, wait);
  std::vector<uint8_t> sbuf(1000), rbuf(4096);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(i == 1 ? 300 : 50));
    for (size_t k = 0; k < sbuf.size(); ++k) sbuf[k] = uint8_t(k * 3 + i);
    exchange_once(a, sc, rc, sbuf, rbuf, "after idle");
  }
  closer.dismiss();
  a.close_send(sc);
  a.close_recv(rc);
  a.close_listen(lc);
  const int after_ms = std::atoi(after);
  if (after_ms < 50) {
    CHECK_THAT(g_idle_sleeps.load() > 0, "the engine slept %d times",
               g_idle_sleeps.load());
    CHECK_THAT(g_idle_wakes.load() > 0, "no sleep of %d was woken early",
               g_idle_sleeps.load());
  } else if (after_ms > 300) {
    CHECK_THAT(g_idle_sleeps.load() == 0,
               "the engine slept %d times, idle for 300 ms at most",
               g_idle_sleeps.load());
  }
}

// The tuner exported beside the net plugin (ncclTunerPlugin_v4), driven the
// way NCCL drives it: init per communicator, getCollInfo per collective on
// a float[7][3] cost table, destroy. The net plugin is initialised first
// (NCCL loads the tuner after the net), so its devices are known.
void scenario_tuner(Api&) {
  void* lib = dlopen(g_plugin.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != nullptr, "plugin not loaded");
  auto* t = static_cast<const TunerV4*>(dlsym(lib, "ncclTunerPlugin_v4"));
  REQUIRE(t != nullptr && t->init && t->getCollInfo && t->destroy,
          "no ncclTunerPlugin_v4");
  CHECK_THAT(std::strcmp(t->name, "UCCL") == 0, "name %s", t->name);
  const char* kb = std::getenv("UCCL_NCCL_LL_MAX_KB");
  const char* on = std::getenv("UCCL_NCCL_TUNER");
  const bool off = on != nullptr && std::strcmp(on, "0") == 0;
  const size_t max_per_rank = (kb ? std::atoi(kb) : 64) * size_t{1024};
  const char* tb = std::getenv("UCCL_NCCL_TREE_MAX_BYTES");
  const size_t tree_max = tb ? std::strtoull(tb, nullptr, 10) : 512;
  constexpr int kAlgos = 7, kProtos = 3;
  // A table with every entry allowed except Tree/LL128 and CollNet (2, 3).
  auto fresh = [](float* tab) {
    for (int i = 0; i < kAlgos * kProtos; ++i) tab[i] = 10.0f + i;
    tab[0 * kProtos + kProtoLL128] = kAlgoProtoIgnore;
    for (int p = 0; p < kProtos; ++p) {
      tab[2 * kProtos + p] = tab[3 * kProtos + p] = kAlgoProtoIgnore;
    }
  };
  // One getCollInfo on `tab`, which must leave nChannels alone.
  auto call = [&](void* ctx, int coll, size_t bytes, float* tab) {
    int nch = 77;
    CHECK_THAT(
        t->getCollInfo(ctx, coll, bytes, 1, reinterpret_cast<float**>(tab),
                       kAlgos, kProtos, 0, &nch) == kSuccess,
        "getCollInfo");
    CHECK_THAT(nch == 77, "nChannels changed to %d", nch);
  };
  // Calls getCollInfo; returns whether it left LL/LL128 disallowed
  // everywhere while Simple, nChannels and the ignored entries are as given.
  auto run = [&](void* ctx, int coll, size_t bytes, bool* changed) {
    float tab[kAlgos * kProtos], want[kAlgos * kProtos];
    fresh(tab);
    fresh(want);
    call(ctx, coll, bytes, tab);
    bool all_ll_off = true, same = true;
    for (int a = 0; a < kAlgos; ++a) {
      for (int p = 0; p < kProtos; ++p) {
        const int i = a * kProtos + p;
        if (tab[i] != want[i]) same = false;
        if (p == kProtoSimple) {
          CHECK_THAT(tab[i] == want[i], "Simple cost of algo %d changed", a);
        } else if (tab[i] != kAlgoProtoIgnore) {
          all_ll_off = false;
        }
      }
    }
    CHECK_THAT(same || all_ll_off, "LL/LL128 only partly disallowed");
    *changed = !same;
  };
  // Calls getCollInfo on a table where Tree/LL is allowed but not the
  // cheapest (`tree_cost` < 0: disallowed); returns whether the table
  // changed, checking that a change makes Tree/LL the one cheapest entry
  // and touches nothing else.
  auto run_tree = [&](void* ctx, int coll, size_t bytes, float tree_cost,
                      bool* changed) {
    float tab[kAlgos * kProtos], want[kAlgos * kProtos];
    fresh(tab);
    tab[0 * kProtos + kProtoLL] = tree_cost;
    std::memcpy(want, tab, sizeof(tab));
    call(ctx, coll, bytes, tab);
    *changed = false;
    for (int i = 1; i < kAlgos * kProtos; ++i) {
      CHECK_THAT(tab[i] == want[i], "%zu B: entry %d changed", bytes, i);
    }
    if (tab[0] == want[0]) return;
    *changed = true;
    for (int i = 1; i < kAlgos * kProtos; ++i) {
      CHECK_THAT(tab[i] < 0 || tab[0] < tab[i],
                 "%zu B: Tree/LL %.2f is not below entry %d (%.2f)", bytes,
                 tab[0], i, tab[i]);
    }
    CHECK_THAT(tab[0] >= 0, "Tree/LL disallowed");
  };
  auto with = [&](size_t nranks, size_t nnodes,
                  const std::function<void(void*)>& body) {
    void* ctx = nullptr;
    REQUIRE(t->init(nranks, nnodes, logger, &ctx) == kSuccess && ctx,
            "tuner init");
    body(ctx);
    CHECK_THAT(t->destroy(ctx) == kSuccess, "tuner destroy");
  };
  for (const char* v : {"NCCL_PROTO", "NCCL_ALGO", "NCCL_NET",
                        "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"}) {
    unsetenv(v);
  }
  bool ch = false;
  if ((max_per_rank == 0 && tree_max == 0) || off) {  // the tuner is off
    with(2, 2, [&](void* ctx) {
      run(ctx, kFuncAllReduce, size_t{1} << 30, &ch);
      CHECK_THAT(!ch, "tuner acted while off");
      run_tree(ctx, kFuncAllReduce, 4, 50.0f, &ch);
      CHECK_THAT(!ch, "tuner moved a 4 B all_reduce to Tree while off");
    });
    return;
  }
  // Tiny all_reduce: Tree/LL where NCCL allows it, nothing else changed.
  for (size_t nranks : {2, 8}) {
    with(nranks, 2, [&](void* ctx) {
      for (size_t bytes : {size_t{0}, size_t{4}, tree_max}) {
        run_tree(ctx, kFuncAllReduce, bytes, 50.0f, &ch);
        CHECK_THAT(ch == (tree_max > 0), "%zu B all_reduce: Tree %s", bytes,
                   ch ? "chosen" : "not chosen");
      }
      run_tree(ctx, kFuncAllReduce, tree_max + 4, 50.0f, &ch);
      CHECK_THAT(!ch, "%zu B all_reduce moved to Tree", tree_max + 4);
      run_tree(ctx, kFuncAllReduce, 4, kAlgoProtoIgnore, &ch);
      CHECK_THAT(!ch, "disallowed Tree/LL allowed");
      run_tree(ctx, kFuncAllReduce, 4, 5.0f, &ch);  // already the cheapest
      CHECK_THAT(!ch, "Tree/LL changed though NCCL already chose it");
      run_tree(ctx, 2 /* all_gather */, 4, 50.0f, &ch);
      CHECK_THAT(!ch, "all_gather moved to Tree");
    });
  }
  if (max_per_rank == 0) {  // only the Tree rule: large sizes keep LL
    with(2, 2, [&](void* ctx) {
      run(ctx, kFuncAllReduce, size_t{1} << 30, &ch);
      CHECK_THAT(!ch, "LL disallowed with UCCL_NCCL_LL_MAX_KB=0");
    });
    return;
  }
  // Two nodes: all_reduce above the limit per rank moves off LL, at or
  // below it (and every other collective) keeps NCCL's table.
  for (size_t nranks : {2, 8}) {
    with(nranks, 2, [&](void* ctx) {
      const size_t limit = max_per_rank * nranks;
      run(ctx, kFuncAllReduce, limit + nranks, &ch);
      CHECK_THAT(ch, "%zu ranks: all_reduce of %zu B kept LL", nranks,
                 limit + nranks);
      run(ctx, kFuncAllReduce, limit, &ch);
      CHECK_THAT(!ch, "%zu ranks: all_reduce of %zu B changed", nranks, limit);
      run(ctx, 2 /* all_gather */, limit * 16, &ch);
      CHECK_THAT(!ch, "all_gather changed");
    });
  }
  // No Simple anywhere: NCCL keeps its only choices.
  with(2, 2, [&](void* ctx) {
    float tab[kAlgos * kProtos];
    for (float& f : tab) f = 5.0f;
    for (int a = 0; a < kAlgos; ++a) tab[a * kProtos + kProtoSimple] = -1;
    int nch = 0;
    t->getCollInfo(ctx, kFuncAllReduce, size_t{1} << 30, 1,
                   reinterpret_cast<float**>(tab), kAlgos, kProtos, 0, &nch);
    CHECK_THAT(tab[kProtoLL] == 5.0f, "LL removed with no Simple left");
  });
  const size_t big = max_per_rank * 2 * 4;
  // One node: only when NCCL is kept off its GPU paths (then the net
  // carries the traffic, as in tools/nccl_test.py).
  with(2, 1, [&](void* ctx) {
    run(ctx, kFuncAllReduce, big, &ch);
    CHECK_THAT(!ch, "one node without P2P/SHM disabled: changed");
  });
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  with(2, 1, [&](void* ctx) {
    run(ctx, kFuncAllReduce, big, &ch);
    CHECK_THAT(ch, "one node, P2P and SHM disabled: unchanged");
  });
  // The user's own choices win.
  for (const char* kv : {"NCCL_PROTO=LL", "NCCL_ALGO=Ring", "NCCL_NET=IB"}) {
    std::string s(kv);
    const std::string k = s.substr(0, s.find('='));
    setenv(k.c_str(), s.substr(s.find('=') + 1).c_str(), 1);
    with(2, 2, [&](void* ctx) {
      run(ctx, kFuncAllReduce, big, &ch);
      CHECK_THAT(!ch, "changed with %s", kv);
    });
    unsetenv(k.c_str());
  }
  setenv("NCCL_NET", "uccl", 1);  // NCCL compares net names case-blind
  with(2, 2, [&](void* ctx) {
    run(ctx, kFuncAllReduce, big, &ch);
    CHECK_THAT(ch, "NCCL_NET=uccl: unchanged");
  });
  unsetenv("NCCL_NET");
}

}  // namespace uccl::conformance
