// The engine over the null NIC (tools/engine_bench's set-up): every message
// completes with its size in UC and RC modes; truncation still fails both.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/engine/engine_test_util.h"

namespace uccl::testing {
namespace {

EndpointConfig null_config(bool rc) {
  EndpointConfig c = test_config(1, 4);
  c.device = "null";
  c.rc_mode = rc ? 1 : 0;
  c.cc = "none";
  return c;
}

class NullNicEngineTest : public ::testing::TestWithParam<bool> {};

TEST_P(NullNicEngineTest, MessagesCompleteWithTheirSizes) {
  auto p = Pair::make(null_config(GetParam()));
  ASSERT_TRUE(p);
  constexpr size_t kMax = 4 << 20;
  constexpr int kWindow = 8, kMessages = 300;
  Buf sb(p->client.get(), kMax), rb(p->server.get(), kMax);
  std::memset(rb.ptr(), 0x5C, kMax);
  std::mt19937_64 rng(42);
  Request rr[kWindow], sr[kWindow];
  size_t lens[kWindow] = {};
  uint64_t chunks = 0;
  int posted = 0, done = 0;
  const uint32_t chunk = 64 * 1024;
  while (done < kMessages) {
    // Keep kWindow messages in flight; complete them in order.
    while (posted < kMessages && posted - done < kWindow) {
      const int i = posted % kWindow;
      lens[i] = posted % 10 == 0 ? 0 : rng() % kMax;
      chunks += lens[i] == 0 ? 1 : (lens[i] + chunk - 1) / chunk;
      ASSERT_TRUE(
          p->server->recv_async(p->s_conns[0], rb.ptr(), kMax, rb.mh, &rr[i])
              .ok());
      ASSERT_TRUE(
          p->client->send_async(p->c_conns[0], sb.ptr(), lens[i], sb.mh, &sr[i])
              .ok());
      ++posted;
    }
    const int i = done % kWindow;
    ASSERT_TRUE(p->client->wait(&sr[i], 20000).ok())
        << sr[i].status() << "\n"
        << p->client->stats_text() << p->client->nic_counters();
    ASSERT_TRUE(p->server->wait(&rr[i], 20000).ok()) << rr[i].status();
    ASSERT_EQ(rr[i].size(0), lens[i]) << "message " << done;
    ++done;
  }
  auto st = p->server->conn_stats(p->s_conns[0]);
  ASSERT_TRUE(st.ok());
  EXPECT_GE(st->rx_chunks, chunks - kMessages / 10);  // zero-byte: no chunk
  // The null NIC moves no payload: the receive buffer is untouched.
  for (size_t k = 0; k < kMax; k += 4093) ASSERT_EQ(rb.ptr()[k], 0x5C);
}

TEST_P(NullNicEngineTest, TruncationFailsBothSides) {
  auto p = Pair::make(null_config(GetParam()));
  ASSERT_TRUE(p);
  Buf sb(p->client.get(), 1 << 20), rb(p->server.get(), 1 << 20);
  Request rr, sr;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), 1000, rb.mh, &rr).ok());
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), 300000, sb.mh, &sr).ok());
  EXPECT_EQ(p->client->wait(&sr, 10000).code(), StatusCode::kTruncated);
  EXPECT_EQ(p->server->wait(&rr, 10000).code(), StatusCode::kTruncated);
}

INSTANTIATE_TEST_SUITE_P(Modes, NullNicEngineTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "RC" : "UC";
                         });

}  // namespace
}  // namespace uccl::testing
