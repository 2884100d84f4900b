// Scenarios across processes: a sender in a second process, and a peer
// killed mid-transfer.
#include "tests/collective/conformance/conformance.h"

namespace uccl::conformance {

// Two processes: the parent receives, a child (this program again) sends;
// the handle crosses through the child's command line, as NCCL's bootstrap
// would carry it.
std::string hex(const void* p, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t b = static_cast<const uint8_t*>(p)[i];
    s += k[b >> 4];
    s += k[b & 15];
  }
  return s;
}
bool unhex(const std::string& s, void* out, size_t n) {
  if (s.size() != 2 * n) return false;
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i < n; ++i)
    static_cast<uint8_t*>(out)[i] =
        static_cast<uint8_t>(v(s[2 * i]) << 4 | v(s[2 * i + 1]));
  return true;
}

// On any failure of the scenario, what the child process said (after it
// ends, or `wait_ms`).
struct ShowChildOnFailure {
  uccl::testing::Subprocess* c;
  const char* who;
  int wait_ms;
  ~ShowChildOnFailure() {
    if (g_failures) {
      c->wait(wait_ms);
      std::fprintf(stderr, "---- %s process ----\n%s\n", who,
                   c->output().c_str());
    }
  }
};

const int kTwoProcSteps = 64;

void twoproc_sender(Api& a, const std::string& hexhandle) {
  char handle[kHandleMaxSize];
  REQUIRE(unhex(hexhandle, handle, sizeof(handle)), "handle");
  void* sc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while (sc == nullptr && uccl::monotonic_ns() < until) {
    REQUIRE(a.connect(0, handle, &sc) == kSuccess, "connect");
  }
  REQUIRE(sc != nullptr, "connect did not finish");
  std::vector<std::vector<uint8_t>> bufs(32, std::vector<uint8_t>(4 << 20));
  CloseOnReturn closer(a, {sc}, {}, {});
  std::vector<void*> mhs;
  for (auto& b : bufs) {
    void* mh;
    REQUIRE(a.reg_mr(sc, b.data(), b.size(), kPtrHost, &mh) == kSuccess,
            "regMr");
    mhs.push_back(mh);
  }
  std::vector<void*> req(kTwoProcSteps, nullptr);
  int sent = 0, done = 0;
  const uint64_t end = uccl::monotonic_ns() + 120000000000ull;
  while (done < kTwoProcSteps && uccl::monotonic_ns() < end) {
    if (sent < kTwoProcSteps && sent - done < 32) {
      auto& b = bufs[sent % 32];
      uccl::fill_pattern(b.data(), step_size(sent), 2000 + sent);
      REQUIRE(a.isend(sc, b.data(), step_size(sent), 0, mhs[sent % 32],
                      &req[sent]) == kSuccess,
              "isend");
      if (req[sent]) ++sent;
    }
    if (done < sent) {
      int dn = 0;
      REQUIRE(a.test(req[done], &dn, nullptr) == kSuccess, "send test %d",
              done);
      if (dn) ++done;
    }
  }
  CHECK_THAT(done == kTwoProcSteps, "sent %d", done);
  closer.dismiss();
  for (void* mh : mhs) a.dereg_mr(sc, mh);
  a.close_send(sc);
}

// CONFORMANCE_SENDER_ENV="VAR=value,..." gives the sending process its own
// settings (a rank whose UCCL_* knobs differ from the receiver's).
void scenario_twoproc(Api& a, const std::string& self) {
  char handle[kHandleMaxSize];
  void* lc = nullptr;
  REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
  std::vector<std::string> argv = {"/usr/bin/env"};
  if (const char* e = std::getenv("CONFORMANCE_SENDER_ENV")) {
    std::string s = e;
    for (size_t at = 0; at < s.size();) {
      size_t comma = s.find(',', at);
      if (comma == std::string::npos) comma = s.size();
      if (comma > at) argv.push_back(s.substr(at, comma - at));
      at = comma + 1;
    }
  }
  argv.insert(argv.end(),
              {self, "--scenario=twoproc_sender", "--plugin=" + g_plugin,
               "--version=" + std::to_string(a.version),
               "--handle=" + hex(handle, sizeof(handle))});
  uccl::testing::Subprocess child(argv);
  REQUIRE(child.started(), "spawn");
  ShowChildOnFailure show{&child, "sender", 20000};
  void* rc = nullptr;
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  while (rc == nullptr && uccl::monotonic_ns() < until) {
    REQUIRE(a.accept(lc, &rc) == kSuccess, "accept");
  }
  REQUIRE(rc != nullptr, "accept did not finish:\n%s", child.output().c_str());
  const size_t kSlot = 4 << 20;
  std::vector<uint8_t> big(8 * kSlot);
  CloseOnReturn closer(a, {}, {rc}, {lc});
  void* mh;
  REQUIRE(a.reg_mr(rc, big.data(), big.size(), kPtrHost, &mh) == kSuccess,
          "regMr");
  std::vector<void*> req(kTwoProcSteps, nullptr);
  int posted = 0, done = 0;
  const uint64_t end = uccl::monotonic_ns() + 120000000000ull;
  while (done < kTwoProcSteps && uccl::monotonic_ns() < end) {
    if (posted < kTwoProcSteps && posted - done < 8) {
      void* d = big.data() + (posted % 8) * kSlot;
      size_t sz = kSlot;
      int tag = 0;
      REQUIRE(a.irecv(rc, 1, &d, &sz, &tag, &mh, &req[posted]) == kSuccess,
              "irecv");
      if (req[posted]) ++posted;
    }
    if (done < posted) {
      int dn = 0, size = -1;
      REQUIRE(a.test(req[done], &dn, &size) == kSuccess, "recv test %d", done);
      if (dn) {
        const size_t n = step_size(done);
        CHECK_THAT(size == static_cast<int>(n), "size %d want %zu", size, n);
        CHECK_THAT(uccl::find_pattern_mismatch(big.data() + (done % 8) * kSlot,
                                               n, 2000 + done) < 0,
                   "bytes of message %d", done);
        ++done;
      }
    }
  }
  CHECK_THAT(done == kTwoProcSteps, "received %d", done);
  closer.dismiss();
  const int rc_child = child.wait(60000);
  CHECK_THAT(rc_child == 0, "sender process exited %d:\n%s", rc_child,
             child.output().c_str());
  a.dereg_mr(rc, mh);
  a.close_recv(rc);
  a.close_listen(lc);
  std::printf("  %d messages from another process checked\n", done);
}

// A peer process that dies (SIGKILL) with a request pending: the request
// fails, with an error, within seconds (the engine sees the bootstrap
// socket close), not never; later calls fail too, and the close succeeds.
// Both ways: the child sends and this process receives, then the reverse.
// The child does two exchanges first (the connection works), says so on
// its output, and then waits to be killed.
const int kKilledWarmup = 2;
const size_t kKilledBytes = 65536;

void killed_child(Api& a, const std::string& role, const std::string& hexh) {
  const bool sends = role == "send";
  void* comm = nullptr;
  void* lc = nullptr;
  char handle[kHandleMaxSize];
  const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
  if (sends) {
    REQUIRE(unhex(hexh, handle, sizeof(handle)), "handle");
    while (comm == nullptr && uccl::monotonic_ns() < until) {
      REQUIRE(a.connect(0, handle, &comm) == kSuccess, "connect");
    }
  } else {
    REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
    std::printf("HANDLE=%s\n", hex(handle, sizeof(handle)).c_str());
    std::fflush(stdout);
    while (comm == nullptr && uccl::monotonic_ns() < until) {
      REQUIRE(a.accept(lc, &comm) == kSuccess, "accept");
    }
  }
  REQUIRE(comm != nullptr, "no connection");
  std::vector<uint8_t> buf(kKilledWarmup * kKilledBytes);
  void* mh = nullptr;
  REQUIRE(a.reg_mr(comm, buf.data(), buf.size(), kPtrHost, &mh) == kSuccess,
          "regMr");
  for (int i = 0; i < kKilledWarmup; ++i) {
    uint8_t* p = buf.data() + i * kKilledBytes;
    void* r = nullptr;
    if (sends) {
      uccl::fill_pattern(p, kKilledBytes, 3000 + i);
      REQUIRE(a.isend(comm, p, kKilledBytes, 0, mh, &r) == kSuccess && r,
              "isend");
    } else {
      void* d = p;
      size_t sz = kKilledBytes;
      int tag = 0;
      REQUIRE(a.irecv(comm, 1, &d, &sz, &tag, &mh, &r) == kSuccess && r,
              "irecv");
    }
    REQUIRE(wait_req(a, r, nullptr) == kSuccess, "exchange %d", i);
    if (!sends) {
      REQUIRE(uccl::find_pattern_mismatch(p, kKilledBytes, 4000 + i) < 0,
              "bytes of message %d", i);
    }
  }
  std::printf("WARMED\n");
  std::fflush(stdout);
  sleep(120);  // the parent kills us long before
}

void scenario_killed_peer(Api& a, const std::string& self) {
  for (const std::string role : {"send", "recv"}) {
    // role: what the child does; this process does the other.
    const bool child_sends = role == "send";
    char handle[kHandleMaxSize];
    void* lc = nullptr;
    std::vector<std::string> argv = {self, "--scenario=killed_child",
                                     "--role=" + role, "--plugin=" + g_plugin,
                                     "--version=" + std::to_string(a.version)};
    if (child_sends) {
      REQUIRE(a.listen(0, handle, &lc) == kSuccess, "listen");
      argv.push_back("--handle=" + hex(handle, sizeof(handle)));
    }
    uccl::testing::Subprocess child(argv);
    REQUIRE(child.started(), "spawn");
    ShowChildOnFailure show{&child, "child", 5000};
    void* comm = nullptr;
    const uint64_t until = uccl::monotonic_ns() + 20000000000ull;
    if (child_sends) {
      while (comm == nullptr && uccl::monotonic_ns() < until) {
        REQUIRE(a.accept(lc, &comm) == kSuccess, "accept");
      }
    } else {
      REQUIRE(child.wait_for_output("HANDLE=", 20000), "no handle from child");
      const std::string& out = child.output();
      const size_t at = out.find("HANDLE=") + 7;
      REQUIRE(unhex(out.substr(at, 2 * sizeof(handle)), handle, sizeof(handle)),
              "handle");
      while (comm == nullptr && uccl::monotonic_ns() < until) {
        REQUIRE(a.connect(0, handle, &comm) == kSuccess, "connect");
      }
    }
    REQUIRE(comm != nullptr, "connection to the child did not finish");
    std::vector<uint8_t> buf((kKilledWarmup + 2) * kKilledBytes);
    CloseOnReturn closer(
        a, child_sends ? std::vector<void*>{} : std::vector<void*>{comm},
        child_sends ? std::vector<void*>{comm} : std::vector<void*>{},
        lc ? std::vector<void*>{lc} : std::vector<void*>{});
    void* mh = nullptr;
    REQUIRE(a.reg_mr(comm, buf.data(), buf.size(), kPtrHost, &mh) == kSuccess,
            "regMr");
    // Posts exchange i from our side: a receive if the child sends.
    auto post = [&](int i, void** r) {
      uint8_t* p = buf.data() + i * kKilledBytes;
      if (child_sends) {
        void* d = p;
        size_t sz = kKilledBytes;
        int tag = 0;
        return a.irecv(comm, 1, &d, &sz, &tag, &mh, r);
      }
      uccl::fill_pattern(p, kKilledBytes, 4000 + i);
      return a.isend(comm, p, kKilledBytes, 0, mh, r);
    };
    for (int i = 0; i < kKilledWarmup; ++i) {
      void* r = nullptr;
      REQUIRE(post(i, &r) == kSuccess && r, "post %d", i);
      REQUIRE(wait_req(a, r, nullptr, 20000) == kSuccess, "exchange %d", i);
      if (child_sends) {
        CHECK_THAT(uccl::find_pattern_mismatch(buf.data() + i * kKilledBytes,
                                               kKilledBytes, 3000 + i) < 0,
                   "bytes of message %d", i);
      }
    }
    REQUIRE(child.wait_for_output("WARMED", 20000), "child not warmed up");
    // One more request that the child will never match, then the crash.
    void* pending = nullptr;
    REQUIRE(post(kKilledWarmup, &pending) == kSuccess && pending, "post");
    child.kill_now();
    const uint64_t t0 = uccl::monotonic_ns();
    const int g0 = g_warnings.load();
    const int r = wait_req(a, pending, nullptr, 20000);
    const double took_s = (uccl::monotonic_ns() - t0) / 1e9;
    CHECK_THAT(r != kSuccess && r != -1,
               "%s: the pending request must fail once the peer is killed "
               "(test returned %d after %.1f s)",
               role.c_str(), r, took_s);
    CHECK_THAT(took_s < 10, "%s: the failure took %.1f s", role.c_str(),
               took_s);
    CHECK_THAT(g_warnings.load() > g0, "%s: the failure must be logged (WARN)",
               role.c_str());
    // Later requests on the dead comm fail too (at the call or the test).
    void* late = nullptr;
    const int pr = post(kKilledWarmup + 1, &late);
    CHECK_THAT(pr != kSuccess ||
                   (late != nullptr && wait_req(a, late, nullptr, 20000) > 0),
               "%s: a request posted after the failure must fail",
               role.c_str());
    closer.dismiss();
    CHECK_THAT(a.dereg_mr(comm, mh) == kSuccess, "deregMr");
    CHECK_THAT(
        (child_sends ? a.close_recv(comm) : a.close_send(comm)) == kSuccess,
        "close after the peer died");
    if (lc) CHECK_THAT(a.close_listen(lc) == kSuccess, "closeListen");
    std::printf("  child %s killed: pending request failed after %.3f s\n",
                role.c_str(), took_s);
  }
}

}  // namespace uccl::conformance
