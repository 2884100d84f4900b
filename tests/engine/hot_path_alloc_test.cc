// The engine's hot path allocates nothing and takes no lock: after a
// warm-up, a thousand more transfers of each kind (inline, eager, chunked,
// write, read; lossless, under injected loss, with congestion control) make
// no heap allocation and take no mutex, on an engine thread or in the
// application's posts and waits.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "tests/alloc_counter.h"
#include "tests/engine/engine_test_util.h"

namespace uccl::testing {
namespace {

enum class Kind { kSend, kWrite, kRead };

struct Case {
  const char* name;
  Kind kind;
  size_t len;
  int depth;          // transfers outstanding at once
  const char* cc;     // congestion control ("" = default)
  const char* fault;  // injected on both sides' transmit ("" = none)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// `rounds` rounds of `depth` transfers each (requests in sr and rr, sized
// by the caller, so the loop itself allocates nothing), every byte of the
// last round checked. Returns false (with a failure recorded) on an error.
bool run_rounds(Pair* p, const Case& c, Buf* sb, Buf* rb,
                const RemoteRegion& region, int rounds, uint64_t seed,
                std::vector<Request>& sr, std::vector<Request>& rr) {
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < c.depth; ++k) {
      uint8_t* src = sb->ptr(k * c.len);
      uint8_t* dst = rb->ptr(k * c.len);
      Status st;
      switch (c.kind) {
        case Kind::kSend:
          st = p->server->recv_async(p->s_conns[0], dst, c.len, rb->mh, &rr[k]);
          if (st.ok()) {
            st = p->client->send_async(p->c_conns[0], src, c.len, sb->mh,
                                       &sr[k]);
          }
          break;
        case Kind::kWrite:
          st = p->client->write_async(p->c_conns[0], src, c.len, sb->mh, region,
                                      k * c.len, &sr[k]);
          break;
        case Kind::kRead:  // from the server's rb into the client's sb
          st = p->client->read_async(p->c_conns[0], src, c.len, sb->mh, region,
                                     k * c.len, &sr[k]);
          break;
      }
      if (!st.ok()) {
        ADD_FAILURE() << c.name << ": post: " << st;
        return false;
      }
    }
    for (int k = 0; k < c.depth; ++k) {
      Status st = p->client->wait(&sr[k], 60000);
      if (st.ok() && c.kind == Kind::kSend) st = p->server->wait(&rr[k], 60000);
      if (!st.ok()) {
        ADD_FAILURE() << c.name << ": round " << r << ": " << st;
        return false;
      }
    }
  }
  // The pattern of the last round survived (the writes and sends carried
  // sb's pattern into rb; the reads carried rb's into sb).
  Buf* to = c.kind == Kind::kRead ? sb : rb;
  const int64_t bad = find_pattern_mismatch(to->ptr(), c.len * c.depth, seed);
  EXPECT_EQ(bad, -1) << c.name;
  return bad == -1;
}

// The counter itself: it sees what an engine-named thread allocates and
// locks, and nothing of other threads (so a zero above means something).
TEST(AllocCounterTest, CountsEngineThreadsOnly) {
  std::mutex mu;
  auto work = [&](const char* name) {
    pthread_setname_np(pthread_self(), name);
    std::lock_guard<std::mutex> lock(mu);
    delete new int(1);
  };
  alloc::arm();
  std::thread(work, "uccl-eng-9").join();
  std::thread(work, "someone-else").join();
  const uint64_t n = alloc::disarm();
  EXPECT_EQ(n, 1u);
  if (alloc::kCountsLocks) {
    EXPECT_EQ(alloc::locks(), 1u);
  }
}

class HotPathAllocTest : public ::testing::TestWithParam<Case> {};

TEST_P(HotPathAllocTest, NoAllocationAfterWarmUp) {
  const Case& c = GetParam();
  EndpointConfig cfg = test_config(1, 2);
  if (*c.cc) cfg.cc = c.cc;
  EndpointConfig scfg = cfg, ccfg = cfg;
  if (*c.fault) {
    scfg.fault_tx = ccfg.fault_tx = c.fault;
    scfg.fault_seed = 5;
    ccfg.fault_seed = 6;
  }
  auto p = Pair::make(scfg, ccfg);
  ASSERT_NE(p, nullptr);
  const size_t total = c.len * c.depth;
  Buf sb(p->client.get(), total), rb(p->server.get(), total);
  const uint64_t seed = 42;
  fill_pattern(c.kind == Kind::kRead ? rb.ptr() : sb.ptr(), total, seed);
  auto region = p->server->advertise(rb.mh, rb.ptr(), total);
  ASSERT_TRUE(region.ok()) << region.status();

  // Warm-up: every ring, pool and table reaches the size this load needs.
  std::vector<Request> sr(c.depth), rr(c.depth);
  ASSERT_TRUE(run_rounds(p.get(), c, &sb, &rb, *region, 200, seed, sr, rr));
  uint64_t n = 0;
  {
    alloc::CountingScope app(true);  // the posts and waits count too
    alloc::arm();
    const bool ok =
        run_rounds(p.get(), c, &sb, &rb, *region, 1000, seed, sr, rr);
    n = alloc::disarm();
    ASSERT_TRUE(ok);
  }
  const uint64_t locks = alloc::locks();
  EXPECT_EQ(n, 0u) << c.name << ": heap allocations on the hot path\n"
                   << alloc::stacks();
  EXPECT_EQ(locks, 0u) << c.name << ": mutex locks on the hot path\n"
                       << alloc::stacks();
}

const Case kCases[] = {
    {"inline_256B", Kind::kSend, 256, 1, "", ""},
    {"inline_256B_depth8", Kind::kSend, 256, 8, "", ""},
    {"eager_8KiB", Kind::kSend, 8192, 4, "", ""},
    {"chunked_256KiB", Kind::kSend, 256 * 1024, 4, "", ""},
    {"write_256KiB", Kind::kWrite, 256 * 1024, 4, "", ""},
    {"read_256KiB", Kind::kRead, 256 * 1024, 4, "", ""},
    {"chunked_swift", Kind::kSend, 256 * 1024, 4, "swift", ""},
    {"chunked_timely", Kind::kSend, 64 * 1024, 4, "timely", ""},
    {"chunked_loss_1pct", Kind::kSend, 256 * 1024, 4, "", "drop=0.01"},
    {"inline_loss_1pct", Kind::kSend, 256, 4, "", "drop=0.01"},
};

INSTANTIATE_TEST_SUITE_P(Kinds, HotPathAllocTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace uccl::testing
