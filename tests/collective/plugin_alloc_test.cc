// The NCCL plugin's data path allocates nothing and takes no lock: after a
// warm-up, NCCL's pattern of isend/irecv/test makes no heap allocation and
// takes no mutex on the calling (proxy) thread or on an engine thread.
//
// The plugin's objects are linked into this binary (not dlopened), so the
// counting operator new and pthread_mutex_lock of tests/alloc_counter.h see
// its calls. Knobs are read once per process: ctest runs the binary twice,
// with UCCL_NCCL_MAX_RECVS unset (one receive per request, striped) and =8
// (NCCL's grouped receives, tags picking buffers).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collective/net_plugin.h"
#include "tests/alloc_counter.h"
#include "util/clock.h"
#include "util/knobs.h"
#include "util/pattern.h"

namespace uccl::nccl {

UCCL_DECLARE_KNOB(int64_t, knob_engines);
UCCL_DECLARE_KNOB(std::string, knob_devices);

namespace {

using namespace ncclabi;  // NOLINT
namespace alloc = uccl::testing::alloc;

// What the profiler callback saw: starts and stops must pair up, and the
// callback itself allocates nothing.
struct ProfSeen {
  std::atomic<uint64_t> starts{0}, stops{0}, updates{0};
  int handle = 0;  // eHandles point here
};
ProfSeen g_prof;

int prof_cb(void** e, int type, void* parent, int64_t, void*) {
  if (type == kProfilerStart) {
    if (parent == nullptr) return 0;
    *e = &g_prof.handle;
    g_prof.starts.fetch_add(1);
  } else if (type == kProfilerStop) {
    g_prof.stops.fetch_add(1);
  } else {
    g_prof.updates.fetch_add(1);
  }
  return 0;
}

NetPlugin& plugin() {
  // Loopback and two engines (the test's own thread needs a core on a
  // 2-core machine), unless the environment says otherwise; the knobs were
  // read at load, so they are set through their test hooks.
  if (std::getenv("UCCL_NCCL_ENGINES") == nullptr) {
    knob_engines().set_for_testing(2);
  }
  if (std::getenv("UCCL_NCCL_DEVICES") == nullptr) {
    knob_devices().set_for_testing("udp:lo");
  }
  NetPlugin& p = NetPlugin::get();
  EXPECT_EQ(p.init(nullptr, &prof_cb), kSuccess);
  return p;
}

struct Comms {
  void* sc = nullptr;
  void* rc = nullptr;
  void* lc = nullptr;
};

// listen/connect/accept looped (none may block) until both comms exist.
bool connect_pair(NetPlugin& p, Comms* c) {
  char handle[kHandleMaxSize] = {};
  if (p.listen(0, handle, &c->lc) != kSuccess) return false;
  const uint64_t until = monotonic_ns() + 20000000000ull;
  while ((c->sc == nullptr || c->rc == nullptr) && monotonic_ns() < until) {
    if (c->sc == nullptr && p.connect(0, handle, &c->sc) != kSuccess) {
      return false;
    }
    if (c->rc == nullptr && p.accept(c->lc, &c->rc) != kSuccess) return false;
  }
  return c->sc != nullptr && c->rc != nullptr;
}

// Message i's size: 0 B, small, eager-sized, one chunk, and striped over
// the comm's connections.
size_t size_of(int i) {
  static constexpr size_t kSizes[] = {0, 8, 1000, 8192, 65536, 262144 + 12};
  return kSizes[i % 6];
}

constexpr int kRecvDepth = 8;   // NCCL_STEPS: receives posted at a time
constexpr int kSendDepth = 32;  // NCCL_NET_MAX_REQUESTS
constexpr size_t kSlot = 512 << 10;

// Fixed-size state of one run: request slots and registered buffers.
struct Traffic {
  NetPlugin* p;
  Comms c;
  int group;  // receives per irecv (1: striped)
  std::vector<uint8_t> sbuf, rbuf;
  void *smh = nullptr, *rmh = nullptr;
  std::vector<void*> sreq, rreq;
  int sent = 0, recvd = 0, sdone = 0, rdone = 0;
  int phandle = 0;  // the parent handle NCCL would pass

  // The sender's slot for message i, and the receiver's.
  uint8_t* sslot(int i) { return sbuf.data() + (i % kSendDepth) * kSlot; }
  uint8_t* rslot(int i) { return rbuf.data() + (i % kRecvDepth) * kSlot; }
};

// Posts and tests until `until_msg` messages are through both ways, every
// byte checked. False (with a failure recorded) on an error.
bool run_until(Traffic& t, int until_msg) {
  const uint64_t deadline = monotonic_ns() + 120000000000ull;
  while ((t.sdone < until_msg || t.rdone < until_msg) &&
         monotonic_ns() < deadline) {
    // A request carries `group` messages; tags tell them apart.
    if (t.recvd < until_msg && t.recvd - t.rdone + t.group <= kRecvDepth) {
      void* data[kRecvDepth];
      size_t sizes[kRecvDepth];
      int tags[kRecvDepth];
      void* mhs[kRecvDepth];
      void* phs[kRecvDepth];
      for (int k = 0; k < t.group; ++k) {
        data[k] = t.rslot(t.recvd + k);
        sizes[k] = kSlot;
        tags[k] = (t.recvd + k) % t.group;
        mhs[k] = t.rmh;
        phs[k] = (t.recvd & 1) ? &t.phandle : nullptr;
      }
      void* req = nullptr;
      if (t.p->irecv(t.c.rc, t.group, data, sizes, tags, mhs, phs, &req) !=
          kSuccess) {
        ADD_FAILURE() << "irecv of message " << t.recvd;
        return false;
      }
      if (req != nullptr) {
        t.rreq[(t.recvd / t.group) % kRecvDepth] = req;
        t.recvd += t.group;
      }
    }
    if (t.sent < until_msg && t.sent - t.sdone < kSendDepth) {
      const size_t n = size_of(t.sent);
      fill_pattern(t.sslot(t.sent), n, 7000 + t.sent);
      void* req = nullptr;
      if (t.p->isend(t.c.sc, t.sslot(t.sent), n, t.sent % t.group, t.smh,
                     (t.sent & 1) ? &t.phandle : nullptr, &req) != kSuccess) {
        ADD_FAILURE() << "isend of message " << t.sent;
        return false;
      }
      if (req != nullptr) t.sreq[t.sent++ % kSendDepth] = req;
    }
    if (t.sdone < t.sent) {
      int done = 0, size = -1;
      if (t.p->test(t.sreq[t.sdone % kSendDepth], &done, &size) != kSuccess) {
        ADD_FAILURE() << "test of send " << t.sdone;
        return false;
      }
      if (done) ++t.sdone;
    }
    if (t.rdone < t.recvd) {
      int done = 0;
      int sizes[kRecvDepth];
      if (t.p->test(t.rreq[(t.rdone / t.group) % kRecvDepth], &done, sizes) !=
          kSuccess) {
        ADD_FAILURE() << "test of receive " << t.rdone;
        return false;
      }
      if (!done) continue;
      for (int k = 0; k < t.group; ++k) {
        const int i = t.rdone + k;
        const size_t n = size_of(i);
        EXPECT_EQ(sizes[k], static_cast<int>(n)) << "message " << i;
        const int64_t bad = find_pattern_mismatch(t.rslot(i), n, 7000 + i);
        if (bad != -1) {
          ADD_FAILURE() << "message " << i << ": bad byte at " << bad;
          return false;
        }
      }
      t.rdone += t.group;
    }
  }
  if (t.sdone < until_msg || t.rdone < until_msg) {
    ADD_FAILURE() << "timed out: sends " << t.sdone << ", receives " << t.rdone
                  << " of " << until_msg;
    return false;
  }
  return true;
}

TEST(PluginAllocTest, NcclStepsAllocateNothingAndTakeNoLock) {
  NetPlugin& p = plugin();
  Traffic t;
  t.p = &p;
  t.group = p.max_recvs() >= 4 ? 4 : 1;
  std::printf("  %d receive(s) per irecv (maxRecvs %d)\n", t.group,
              p.max_recvs());
  ASSERT_TRUE(connect_pair(p, &t.c));
  t.sbuf.assign(kSendDepth * kSlot, 0);
  t.rbuf.assign(kRecvDepth * kSlot, 0);
  ASSERT_EQ(p.reg_mr(t.c.sc, t.sbuf.data(), t.sbuf.size(), kPtrHost, &t.smh),
            kSuccess);
  ASSERT_EQ(p.reg_mr(t.c.rc, t.rbuf.data(), t.rbuf.size(), kPtrHost, &t.rmh),
            kSuccess);
  t.sreq.assign(kSendDepth, nullptr);
  t.rreq.assign(kRecvDepth, nullptr);
  ASSERT_TRUE(run_until(t, 240));  // warm-up: first-use setup, lazy state

  const uint64_t starts = g_prof.starts.load();
  uint64_t allocs = 0;
  {
    alloc::CountingScope scope(/*locks_too=*/true);
    alloc::arm();
    const bool ok = run_until(t, 240 + 1200);
    allocs = alloc::disarm();
    ASSERT_TRUE(ok);
  }
  EXPECT_EQ(allocs, 0u) << alloc::stacks();
  EXPECT_EQ(alloc::locks(), 0u) << alloc::stacks();
  // Half the requests carried a parent handle: each was started and stopped.
  EXPECT_GE(g_prof.starts.load() - starts, 1200u / t.group / 2);
  EXPECT_EQ(g_prof.starts.load(), g_prof.stops.load());

  EXPECT_EQ(p.dereg_mr(t.c.sc, t.smh), kSuccess);
  EXPECT_EQ(p.dereg_mr(t.c.rc, t.rmh), kSuccess);
  EXPECT_EQ(p.close_comm(t.c.sc), kSuccess);
  EXPECT_EQ(p.close_comm(t.c.rc), kSuccess);
  EXPECT_EQ(p.close_listen(t.c.lc), kSuccess);
}

// The counter sees the plugin's allocations: a control-path call that
// allocates (regMr makes a handle) is counted inside a scope.
TEST(PluginAllocTest, CounterSeesThePluginsAllocations) {
  NetPlugin& p = plugin();
  Comms c;
  ASSERT_TRUE(connect_pair(p, &c));
  std::vector<uint8_t> buf(4096);
  void* mh = nullptr;
  uint64_t allocs = 0;
  {
    alloc::CountingScope scope(/*locks_too=*/true);
    alloc::arm();
    EXPECT_EQ(p.reg_mr(c.sc, buf.data(), buf.size(), kPtrHost, &mh), kSuccess);
    allocs = alloc::disarm();
  }
  EXPECT_GT(allocs, 0u);
  if (alloc::kCountsLocks) {
    EXPECT_GT(alloc::locks(), 0u);  // mrs_mu
  }
  EXPECT_EQ(p.dereg_mr(c.sc, mh), kSuccess);
  EXPECT_EQ(p.close_comm(c.sc), kSuccess);
  EXPECT_EQ(p.close_comm(c.rc), kSuccess);
  EXPECT_EQ(p.close_listen(c.lc), kSuccess);
}

}  // namespace
}  // namespace uccl::nccl
