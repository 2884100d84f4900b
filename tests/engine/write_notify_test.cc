// Notifying one-sided writes (write_async's notify, writes_landed): the
// target counts each one once, and only once every byte of it is in place.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace uccl::testing {
namespace {

// Eight 512 KiB writes, the odd ones notifying, through 3% datagram loss
// (whole chunks resent, later chunks arriving before earlier ones): each
// time the target's count rises to k, the k-th notifying write and every
// write posted before it are byte-exact in its memory, and at the end the
// count is 4, whatever was resent.
TEST(WriteNotifyTest, ACountedWriteHasLandedWithEveryEarlierOne) {
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  cc.fault_tx = "drop=0.03";
  cc.fault_seed = 5;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  constexpr int kWrites = 8;
  constexpr size_t kLen = 512 << 10;
  Buf region(p->server.get(), kWrites * kLen);
  Buf local(p->client.get(), kWrites * kLen);
  auto adv = p->server->advertise(region.mh, region.ptr(), kWrites * kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  for (int i = 0; i < kWrites; ++i) {
    fill_pattern(local.ptr(i * kLen), kLen, 100 + i);
  }
  ASSERT_EQ(*p->server->writes_landed(p->s_conns[0]), 0u);

  std::vector<Request> w(kWrites);
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(p->client
                    ->write_async(p->c_conns[0], local.ptr(i * kLen), kLen,
                                  local.mh, *adv, i * kLen, &w[i], i % 2 == 1)
                    .ok());
  }
  // The target watches its count while the writes move.
  uint64_t seen = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (seen < kWrites / 2 && std::chrono::steady_clock::now() < deadline) {
    auto n = p->server->writes_landed(p->s_conns[0]);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_LE(*n, uint64_t{kWrites / 2});
    if (*n == seen) {
      std::this_thread::yield();
      continue;
    }
    seen = *n;
    // The seen-th notifying write is write 2 * seen - 1.
    for (int i = 0; i < 2 * static_cast<int>(seen); ++i) {
      ASSERT_EQ(find_pattern_mismatch(region.ptr(i * kLen), kLen, 100 + i), -1)
          << "write " << i << " not in place at count " << seen;
    }
  }
  EXPECT_EQ(seen, uint64_t{kWrites / 2});
  for (Request& r : w)
    ASSERT_TRUE(p->client->wait(&r, 30000).ok()) << r.status();
  EXPECT_EQ(*p->server->writes_landed(p->s_conns[0]), uint64_t{kWrites / 2});
  const FlowStats st = *p->client->conn_stats(p->c_conns[0]);
  EXPECT_GT(st.fast_retransmits + st.rto_retransmits + st.tlp_retransmits, 0u)
      << "the loss did not bite: the ordering went untested";
  // Nothing was written the other way.
  EXPECT_EQ(*p->client->writes_landed(p->c_conns[0]), 0u);
}

// The count says the bytes are in place, not that the write is over: until
// the writer's request completes, a retransmission (its ACK lost, say) may
// land again. Once it completes nothing of it lands again, so a target that
// rewrites the region only then keeps what it wrote. (The GPU channels'
// signals wait for that completion for this reason; rewriting as soon as
// the count rose found bytes landing again in 11 of 50 rounds here.)
TEST(WriteNotifyTest, NothingLandsAgainOnceTheWriterCompletes) {
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  sc.fault_tx = "drop=0.3";  // the target sends the ACKs
  sc.fault_seed = 3;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 256 << 10;
  Buf region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.mh, region.ptr(), kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  for (int round = 0; round < 30; ++round) {
    fill_pattern(local.ptr(), kLen, 7 + round);
    Request w;
    ASSERT_TRUE(p->client
                    ->write_async(p->c_conns[0], local.ptr(), kLen, local.mh,
                                  *adv, 0, &w, true)
                    .ok());
    ASSERT_TRUE(p->client->wait(&w, 30000).ok()) << w.status();
    EXPECT_EQ(*p->server->writes_landed(p->s_conns[0]),
              static_cast<uint64_t>(round + 1));
    EXPECT_EQ(find_pattern_mismatch(region.ptr(), kLen, 7 + round), -1);
    std::memset(region.ptr(), 0xab, kLen);  // the target moves on
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    size_t relanded = 0;
    for (size_t i = 0; i < kLen; ++i) relanded += region.ptr()[i] != 0xab;
    ASSERT_EQ(relanded, 0u) << "round " << round;
  }
}

TEST(WriteNotifyTest, AnEmptyWriteCountsAndAClosedConnectionIsRefused) {
  auto p = Pair::make(test_config(1, 1));
  ASSERT_TRUE(p);
  Buf region(p->server.get(), 4096), local(p->client.get(), 4096);
  auto adv = p->server->advertise(region.mh, region.ptr(), 4096);
  ASSERT_TRUE(adv.ok());
  Request w;
  ASSERT_TRUE(p->client
                  ->write_async(p->c_conns[0], local.ptr(), 0, local.mh, *adv,
                                0, &w, true)
                  .ok());
  ASSERT_TRUE(p->client->wait(&w, 10000).ok()) << w.status();
  EXPECT_EQ(*p->server->writes_landed(p->s_conns[0]), 1u);
  ASSERT_TRUE(p->server->close(p->s_conns[0]).ok());
  EXPECT_EQ(p->server->writes_landed(p->s_conns[0]).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uccl::testing
