// One-sided writes at their target: a notifying write is counted once, once
// every byte of it is in place, and no copy of it lands after that.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace uccl::testing {
namespace {

// What a target writes over a region once it is done with a write; a byte
// that is anything else afterwards landed again.
constexpr uint8_t kMovedOn = 0xab;

size_t bytes_not(const uint8_t* p, size_t n, uint8_t v) {
  return static_cast<size_t>(
      std::count_if(p, p + n, [v](uint8_t b) { return b != v; }));
}

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

// Once counted, a write is final: the writer's request may still be
// waiting for an ACK that was lost, and its retransmissions (tail probes,
// RTOs) still reach the target, but the target's engine refuses copies of
// chunks it has accounted, so a target that rewrites the region as soon as
// the count rises keeps what it wrote. (Before that guard, bytes landed
// again after the count in 11 of 50 rounds here.)
TEST(WriteNotifyTest, NothingLandsAgainOnceCounted) {
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
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (*p->server->writes_landed(p->s_conns[0]) <
           static_cast<uint64_t>(round + 1)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << round;
      std::this_thread::yield();
    }
    EXPECT_EQ(find_pattern_mismatch(region.ptr(), kLen, 7 + round), -1);
    std::memset(region.ptr(), kMovedOn, kLen);  // the target moves on at once
    ASSERT_TRUE(p->client->wait(&w, 30000).ok()) << w.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const size_t relanded = bytes_not(region.ptr(), kLen, kMovedOn);
    ASSERT_EQ(relanded, 0u) << "round " << round;
  }
  const FlowStats st = *p->client->conn_stats(p->c_conns[0]);
  EXPECT_GT(st.tlp_retransmits + st.rto_retransmits, 0u)
      << "no ACK was lost: nothing was resent after the count";
}

// A copy of a chunk can outlive its acknowledgement: held in the network
// (here, 20 ms in the target's receive path, a quarter of its datagrams)
// while a resend of the chunk lands, is acknowledged, and the writer's
// request completes. The target's engine refuses such copies before its
// NIC places them (engine::UcclRDMAEngine::ChunkGuard), so a region the
// target rewrites once the write completed keeps what it wrote. Without the
// guard, held first fragments landed after the completion in most rounds.
TEST(WriteNotifyTest, ACopyHeldPastTheCompletionNeverLands) {
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  sc.fault_rx = "delay=0.25:20000";
  sc.fault_seed = 11;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 256 << 10;  // four chunks
  constexpr int kRounds = 12;
  Buf region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.mh, region.ptr(), kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  for (int round = 0; round < kRounds; ++round) {
    fill_pattern(local.ptr(), kLen, 50 + round);
    Request w;
    ASSERT_TRUE(p->client
                    ->write_async(p->c_conns[0], local.ptr(), kLen, local.mh,
                                  *adv, 0, &w, false)
                    .ok());
    ASSERT_TRUE(p->client->wait(&w, 30000).ok()) << w.status();
    ASSERT_EQ(find_pattern_mismatch(region.ptr(), kLen, 50 + round), -1);
    std::memset(region.ptr(), kMovedOn, kLen);  // the target moves on
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // > 20 ms
    const size_t relanded = bytes_not(region.ptr(), kLen, kMovedOn);
    ASSERT_EQ(relanded, 0u) << "round " << round << "\n"
                            << p->server->nic_counters();
  }
  // The held copies met the guard (not a re-keyed window: drop_bad_rkey).
  const std::string nic = p->server->nic_counters();
  EXPECT_GT(transport::counter_sum(nic, "fault_rx_delayed"), 0u) << nic;
  EXPECT_GT(transport::counter_sum(nic, "drop_refused"), 0u) << nic;
  EXPECT_EQ(transport::counter_sum(nic, "drop_bad_rkey"), 0u) << nic;
}

// A copy held while more chunks went on than the immediate's 11-bit CSN
// can tell apart (here, 0.3% of the target's datagrams held until 1,400
// more have passed, at one datagram per 4 KiB chunk): its wrapped CSN falls
// inside the receive window, ahead. Only the whole CSN that the engine
// tags its chunks with (SendWr::guard_tag, RxWindow::holds_csn) tells it
// from the chunk 2,048 later. Taken for that chunk, the copy landed on the
// region and the real chunk was refused as its duplicate: without the tag
// the writes came out wrong within the first rounds.
TEST(WriteNotifyTest, ACopyHeldPastTheCsnWrapIsRefused) {
  EndpointConfig sc = test_config(1, 1), cc = test_config(1, 1);
  sc.chunk_bytes = cc.chunk_bytes = 4096;
  sc.fault_rx = "reorder=0.003:1400:1000000";
  sc.fault_seed = 17;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 256 << 10;  // 64 chunks
  constexpr int kRounds = 120;
  Buf region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.mh, region.ptr(), kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  for (int round = 0; round < kRounds; ++round) {
    fill_pattern(local.ptr(), kLen, 200 + round);
    Request w;
    ASSERT_TRUE(p->client
                    ->write_async(p->c_conns[0], local.ptr(), kLen, local.mh,
                                  *adv, 0, &w, false)
                    .ok());
    ASSERT_TRUE(p->client->wait(&w, 30000).ok()) << w.status();
    ASSERT_EQ(find_pattern_mismatch(region.ptr(), kLen, 200 + round), -1)
        << "round " << round << "\n"
        << p->server->nic_counters();
    std::memset(region.ptr(), kMovedOn, kLen);  // the target moves on
  }
  const std::string nic = p->server->nic_counters();
  EXPECT_GT(transport::counter_sum(nic, "fault_rx_reordered"), 5u) << nic;
  EXPECT_GT(transport::counter_sum(nic, "drop_refused"), 0u) << nic;
  EXPECT_EQ(transport::counter_sum(nic, "drop_bad_rkey"), 0u) << nic;
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
