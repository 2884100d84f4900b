// The p2p layer's posts and polls allocate nothing in steady state: after
// a warm-up, a thousand more two-sided and one-sided transfers make no heap
// allocation on the application thread or on an engine thread.
#include <gtest/gtest.h>

#include <vector>

#include "tests/alloc_counter.h"
#include "tests/p2p/p2p_fixture.h"

namespace uccl::p2p {
namespace {

struct Case {
  const char* name;
  bool write;  // one-sided write, else send/recv
  size_t len;
  int depth;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// `rounds` rounds of `depth` transfers; handles in hs/hr, sized by the
// caller. False (with a failure recorded) on any error.
bool run_rounds(Pair* p, const Case& c, Mem* sb, Mem* rb,
                const RegionDesc& region, int rounds,
                std::vector<XferHandle>& hs, std::vector<XferHandle>& hr) {
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < c.depth; ++k) {
      const size_t off = k * c.len;
      if (c.write) {
        auto h = p->client->write_async(p->c_conn, sb->id, sb->ptr(off), c.len,
                                        region, off);
        if (!h.ok()) {
          ADD_FAILURE() << c.name << ": " << h.status();
          return false;
        }
        hs[k] = *h;
        continue;
      }
      auto rh = p->server->recv_async(p->s_conn, rb->id, rb->ptr(off), c.len);
      auto sh = p->client->send_async(p->c_conn, sb->id, sb->ptr(off), c.len);
      if (!rh.ok() || !sh.ok()) {
        ADD_FAILURE() << c.name << ": " << rh.status() << sh.status();
        return false;
      }
      hs[k] = *sh;
      hr[k] = *rh;
    }
    for (int k = 0; k < c.depth; ++k) {
      if (c.write) {
        Status st = p->client->wait(hs[k], 60000);
        if (!st.ok()) {
          ADD_FAILURE() << c.name << ": " << st;
          return false;
        }
      } else {
        wait_both(p, hs[k], hr[k]);
        if (::testing::Test::HasFailure()) return false;
      }
    }
  }
  return true;
}

class P2pAllocTest : public ::testing::TestWithParam<Case> {};

TEST_P(P2pAllocTest, NoAllocationAfterWarmUp) {
  const Case& c = GetParam();
  auto p = Pair::make();
  ASSERT_NE(p, nullptr);
  const size_t total = c.len * c.depth;
  Mem sb(p->client.get(), total), rb(p->server.get(), total);
  fill_pattern(sb.ptr(), total, 9);
  auto region = p->server->advertise(rb.id, 0, total);
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<XferHandle> hs(c.depth), hr(c.depth);
  ASSERT_TRUE(run_rounds(p.get(), c, &sb, &rb, *region, 200, hs, hr));
  uint64_t n = 0;
  {
    uccl::testing::alloc::CountingScope app;
    uccl::testing::alloc::arm();
    const bool ok = run_rounds(p.get(), c, &sb, &rb, *region, 1000, hs, hr);
    n = uccl::testing::alloc::disarm();
    ASSERT_TRUE(ok);
  }
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), total, 9), -1);
  const uint64_t locks = uccl::testing::alloc::locks();
  EXPECT_EQ(n, 0u) << c.name << ": heap allocations on the hot path\n"
                   << uccl::testing::alloc::stacks();
  EXPECT_EQ(locks, 0u) << c.name << ": mutex locks on an engine thread\n"
                       << uccl::testing::alloc::stacks();
}

const Case kCases[] = {
    {"send_256B", false, 256, 1},
    {"send_64KiB_depth4", false, 64 * 1024, 4},
    {"send_512KiB_striped", false, 512 * 1024, 1},
    {"write_256KiB_depth4", true, 256 * 1024, 4},
};

INSTANTIATE_TEST_SUITE_P(Kinds, P2pAllocTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace uccl::p2p
