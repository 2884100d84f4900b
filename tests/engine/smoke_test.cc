// First engine checks: one connection, messages of many sizes both ways.
#include <gtest/gtest.h>

#include "tests/engine/engine_test_util.h"

namespace uccl::testing {
namespace {

TEST(EngineSmoke, SendRecvManySizes) {
  auto p = Pair::make(test_config());
  ASSERT_TRUE(p);
  const size_t kMax = 8 << 20;
  Buf sb(p->client.get(), kMax), rb(p->server.get(), kMax);
  uint64_t seed = 0;
  for (size_t len : {size_t{0}, size_t{1}, size_t{100}, size_t{65536},
                     size_t{65537}, size_t{1} << 20, kMax}) {
    ++seed;
    fill_pattern(sb.ptr(), len, seed);
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kMax, rb.mh, &rr).ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), len, sb.mh, &sr).ok());
    ASSERT_TRUE(p->client->wait(&sr, 20000).ok())
        << sr.status() << "\nclient:\n"
        << p->client->stats_text() << p->client->nic_counters() << "\nserver:\n"
        << p->server->stats_text() << p->server->nic_counters();
    ASSERT_TRUE(p->server->wait(&rr, 20000).ok()) << rr.status();
    EXPECT_EQ(rr.size(0), len);
    EXPECT_EQ(find_pattern_mismatch(rb.ptr(), len, seed), -1) << len;
  }
}

}  // namespace
}  // namespace uccl::testing
