// Endpoint end to end in one process over the software NIC on loopback:
// 1 and 64 flows, sizes 0 B .. 1 GiB and random, grouped/tagged receives,
// one-sided write/read, truncation, API misuse, stale ids, statistics.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>

#include "tests/engine/engine_test_util.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

TEST(EndpointTest, OneFlowSizesAndRandom) {
  auto p = Pair::make(test_config(1, 4));
  ASSERT_TRUE(p);
  std::vector<size_t> sizes{0, 1, 7, 4096, 65535, 65536, 65537, 3 << 20};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 30; ++i) sizes.push_back(rng() % (2 << 20));
  exchange(p.get(), 0, sizes, 100);
}

#ifndef UCCL_SANITIZER_BUILD
TEST(EndpointTest, OneGiBMessage) {
  auto p = Pair::make(test_config(1, 4));
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {size_t{1} << 30}, 5);
}
#endif

TEST(EndpointTest, SixtyFourFlowsConcurrently) {
  auto p = Pair::make(test_config(2, 2), 64);
  ASSERT_TRUE(p);
  const size_t kLen = 300000;
  const int kRounds = 3;
  std::vector<std::unique_ptr<Buf>> sbs, rbs;
  for (int i = 0; i < 64; ++i) {
    sbs.push_back(std::make_unique<Buf>(p->client.get(), kLen));
    rbs.push_back(std::make_unique<Buf>(p->server.get(), kLen));
  }
  for (int r = 0; r < kRounds; ++r) {
    std::vector<Request> rr(64), sr(64);
    for (int i = 0; i < 64; ++i) {
      size_t len = kLen - i * 1000 - r;
      fill_pattern(sbs[i]->ptr(), len, i * 100 + r);
      ASSERT_TRUE(p->server
                      ->recv_async(p->s_conns[i], rbs[i]->ptr(), kLen,
                                   rbs[i]->mh, &rr[i])
                      .ok());
      ASSERT_TRUE(p->client
                      ->send_async(p->c_conns[i], sbs[i]->ptr(), len,
                                   sbs[i]->mh, &sr[i])
                      .ok());
    }
    for (int i = 0; i < 64; ++i) {
      size_t len = kLen - i * 1000 - r;
      ASSERT_TRUE(p->server->wait(&rr[i], 60000).ok()) << rr[i].status();
      ASSERT_TRUE(p->client->wait(&sr[i], 60000).ok());
      EXPECT_EQ(rr[i].size(0), len);
      EXPECT_EQ(find_pattern_mismatch(rbs[i]->ptr(), len, i * 100 + r), -1)
          << "flow " << i << " round " << r;
    }
  }
}

TEST(EndpointTest, BothDirectionsAndManyOutstanding) {
  auto p = Pair::make(test_config(1, 2));
  ASSERT_TRUE(p);
  // 32 receives posted at once each way, then 32 sends each way.
  const int kN = kMaxRequestsPerFlow;
  const size_t kLen = 20000;
  Buf cs(p->client.get(), kN * kLen), cr(p->client.get(), kN * kLen);
  Buf ss(p->server.get(), kN * kLen), sr(p->server.get(), kN * kLen);
  std::vector<Request> a(kN), b(kN), c(kN), d(kN);
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(
        p->server
            ->recv_async(p->s_conns[0], sr.ptr(i * kLen), kLen, sr.mh, &a[i])
            .ok());
    ASSERT_TRUE(
        p->client
            ->recv_async(p->c_conns[0], cr.ptr(i * kLen), kLen, cr.mh, &b[i])
            .ok());
  }
  // The 33rd receive is refused with a clear error.
  Request extra;
  Status st =
      p->server->recv_async(p->s_conns[0], sr.ptr(), kLen, sr.mh, &extra);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  for (int i = 0; i < kN; ++i) {
    fill_pattern(cs.ptr(i * kLen), kLen - i, 1000 + i);
    fill_pattern(ss.ptr(i * kLen), kLen - i, 2000 + i);
    ASSERT_TRUE(p->client
                    ->send_async(p->c_conns[0], cs.ptr(i * kLen), kLen - i,
                                 cs.mh, &c[i])
                    .ok());
    ASSERT_TRUE(p->server
                    ->send_async(p->s_conns[0], ss.ptr(i * kLen), kLen - i,
                                 ss.mh, &d[i])
                    .ok());
  }
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(p->server->wait(&a[i], 30000).ok());
    ASSERT_TRUE(p->client->wait(&b[i], 30000).ok());
    // Receives are matched in posting order.
    EXPECT_EQ(a[i].size(0), kLen - i);
    EXPECT_EQ(find_pattern_mismatch(sr.ptr(i * kLen), kLen - i, 1000 + i), -1);
    EXPECT_EQ(find_pattern_mismatch(cr.ptr(i * kLen), kLen - i, 2000 + i), -1);
    ASSERT_TRUE(p->client->wait(&c[i], 30000).ok());
    ASSERT_TRUE(p->server->wait(&d[i], 30000).ok());
  }
}

TEST(EndpointTest, GroupedReceivesMatchByTag) {
  auto p = Pair::make(test_config(1, 2));
  ASSERT_TRUE(p);
  Buf sb(p->client.get(), 1 << 20), rb(p->server.get(), 1 << 20);
  void* bufs[3] = {rb.ptr(0), rb.ptr(300000), rb.ptr(600000)};
  size_t sizes[3] = {300000, 300000, 300000};
  int tags[3] = {7, 8, 9};
  MrHandle* mhs[3] = {rb.mh, rb.mh, rb.mh};
  Request rr;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], 3, bufs, sizes, tags, mhs, &rr)
          .ok());
  // Sends in a different order than the buffers: tags pick the buffer.
  Request s9, s7, s8;
  fill_pattern(sb.ptr(0), 1000, 9);
  fill_pattern(sb.ptr(100000), 250000, 7);
  fill_pattern(sb.ptr(400000), 0, 8);
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(0), 1000, sb.mh, &s9, 9)
          .ok());
  ASSERT_TRUE(
      p->client
          ->send_async(p->c_conns[0], sb.ptr(100000), 250000, sb.mh, &s7, 7)
          .ok());
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(400000), 0, sb.mh, &s8, 8)
          .ok());
  ASSERT_TRUE(p->server->wait(&rr, 30000).ok()) << rr.status();
  EXPECT_EQ(rr.count(), 3);
  EXPECT_EQ(rr.size(0), 250000u);
  EXPECT_EQ(rr.size(1), 0u);
  EXPECT_EQ(rr.size(2), 1000u);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(0), 250000, 7), -1);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(600000), 1000, 9), -1);
  for (Request* r : {&s7, &s8, &s9})
    EXPECT_TRUE(p->client->wait(r, 10000).ok());
}

TEST(EndpointTest, TruncationFailsBothSides) {
  auto p = Pair::make(test_config(1, 1));
  ASSERT_TRUE(p);
  Buf sb(p->client.get(), 200000), rb(p->server.get(), 200000);
  Request rr, sr;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), 1000, rb.mh, &rr).ok());
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), 150000, sb.mh, &sr).ok());
  Status a = p->client->wait(&sr, 10000);
  Status b = p->server->wait(&rr, 10000);
  EXPECT_EQ(a.code(), StatusCode::kTruncated) << a;
  EXPECT_EQ(b.code(), StatusCode::kTruncated) << b;
  EXPECT_NE(a.message().find("150000"), std::string::npos) << a;
  // The connection keeps working after a truncation.
  exchange(p.get(), 0, {5000}, 77);
}

TEST(EndpointTest, OneSidedWriteAndRead) {
  auto p = Pair::make(test_config(1, 2));
  ASSERT_TRUE(p);
  const size_t kLen = 3 << 20;
  Buf region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.mh, region.ptr(4096), kLen - 8192);
  ASSERT_TRUE(adv.ok()) << adv.status();
  fill_pattern(local.ptr(), 1 << 20, 31);
  Request w;
  ASSERT_TRUE(p->client
                  ->write_async(p->c_conns[0], local.ptr(), 1 << 20, local.mh,
                                *adv, 1000, &w)
                  .ok());
  ASSERT_TRUE(p->client->wait(&w, 30000).ok()) << w.status();
  // The target learns of a one-sided write the usual way, from a message
  // sent after it completed (as NCCL and p2p users do). It also orders the
  // server engine's placement before this thread's check for TSan, which
  // cannot see the ordering through the kernel's sockets.
  exchange(p.get(), 0, {8}, 30);
  EXPECT_EQ(find_pattern_mismatch(region.ptr(4096 + 1000), 1 << 20, 31), -1);
  // Read from a second region. (In UC mode a late retransmission of a
  // completed one-sided write may land again, with the same bytes: a region
  // being written remotely is not rewritten locally at the same time.)
  Buf region2(p->server.get(), kLen);
  auto adv2 = p->server->advertise(region2.mh, region2.ptr(), kLen);
  ASSERT_TRUE(adv2.ok());
  fill_pattern(region2.ptr(4096), 2 << 20, 32);
  // The server's receive of this message (posted through its engine's
  // command ring) orders the fill before the engine reads the region; the
  // read request itself reaches that engine through sockets TSan cannot see.
  exchange(p.get(), 0, {8}, 40);
  Request r;
  ASSERT_TRUE(p->client
                  ->read_async(p->c_conns[0], local.ptr(), 2 << 20, local.mh,
                               *adv2, 4096, &r)
                  .ok());
  ASSERT_TRUE(p->client->wait(&r, 30000).ok()) << r.status();
  EXPECT_EQ(r.size(0), size_t{2} << 20);
  EXPECT_EQ(find_pattern_mismatch(local.ptr(), 2 << 20, 32), -1);
  // Out of the advertised range: refused up front.
  EXPECT_EQ(p->client
                ->write_async(p->c_conns[0], local.ptr(), 100, local.mh, *adv,
                              kLen, &w)
                .code(),
            StatusCode::kOutOfRange);
  // A forged region the peer never advertised: the read fails, no hang.
  RemoteRegion forged = *adv;
  forged.region = 4000;
  Request bad;
  ASSERT_TRUE(p->client
                  ->read_async(p->c_conns[0], local.ptr(), 100, local.mh,
                               forged, 0, &bad)
                  .ok());
  Status st = p->client->wait(&bad, 10000);
  EXPECT_EQ(st.code(), StatusCode::kRemoteError) << st;
}

TEST(EndpointTest, ApiMisuseGetsClearErrors) {
  auto p = Pair::make(test_config(1, 1));
  ASSERT_TRUE(p);
  Buf sb(p->client.get(), 4096);
  std::vector<uint8_t> unregistered(4096);
  Request r;
  Status st =
      p->client->send_async(p->c_conns[0], unregistered.data(), 100, sb.mh, &r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("registered"), std::string::npos) << st;
  st = p->client->send_async(p->c_conns[0], sb.ptr(4000), 200, sb.mh, &r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << "runs past the region";
  st = p->client->send_async(12345, sb.ptr(), 10, sb.mh, &r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      p->client->send_async(p->c_conns[0], sb.ptr(), 10, sb.mh, nullptr).code(),
      StatusCode::kInvalidArgument);
  // A request that is still pending cannot be reused.
  Request pending;
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), 10, sb.mh, &pending).ok());
  EXPECT_EQ(p->client->send_async(p->c_conns[0], sb.ptr(), 10, sb.mh, &pending)
                .code(),
            StatusCode::kInvalidArgument);
  void* d[1] = {sb.ptr()};
  size_t sz[1] = {10};
  MrHandle* m[1] = {sb.mh};
  EXPECT_EQ(
      p->client->recv_async(p->c_conns[0], 0, d, sz, nullptr, m, &r).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      p->client->recv_async(p->c_conns[0], 9, d, sz, nullptr, m, &r).code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(p->client->reg_mr(nullptr, 10).ok());
  EXPECT_FALSE(p->client->dereg_mr(reinterpret_cast<MrHandle*>(&r)).ok());
  EXPECT_EQ(p->client->wait(&r, 10).code(), StatusCode::kInvalidArgument)
      << "never posted";
  // Closed connections refuse further posts; the pending send is cancelled
  // or completed, never left hanging.
  ASSERT_TRUE(p->client->close(p->c_conns[0]).ok());
  EXPECT_EQ(
      p->client->send_async(p->c_conns[0], sb.ptr(), 10, sb.mh, &r).code(),
      StatusCode::kInvalidArgument);
  EXPECT_FALSE(p->client->close(p->c_conns[0]).ok());
  Status ps = p->client->wait(&pending, 10000);
  EXPECT_TRUE(ps.code() == StatusCode::kCancelled || ps.ok()) << ps;
}

TEST(EndpointTest, PeerCloseFailsPendingRequests) {
  auto p = Pair::make(test_config(1, 1));
  ASSERT_TRUE(p);
  Buf rb(p->server.get(), 4096);
  Request rr;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), 4096, rb.mh, &rr).ok());
  ASSERT_TRUE(p->client->close(p->c_conns[0]).ok());
  Status st = p->server->wait(&rr, 10000);
  EXPECT_EQ(st.code(), StatusCode::kRemoteError) << st;
  // Further posts say the connection failed.
  Request r2;
  EXPECT_EQ(
      p->server->recv_async(p->s_conns[0], rb.ptr(), 4096, rb.mh, &r2).code(),
      StatusCode::kRemoteError);
}

TEST(EndpointTest, StatisticsCountWhatHappened) {
  auto p = Pair::make(test_config(1, 2));
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {1 << 20, 1 << 20}, 3);
  auto cs = p->client->conn_stats(p->c_conns[0]);
  auto ss = p->server->conn_stats(p->s_conns[0]);
  ASSERT_TRUE(cs.ok() && ss.ok());
  EXPECT_EQ(cs->tx_bytes, 2u << 20);
  EXPECT_EQ(ss->rx_bytes, 2u << 20);
  // Whole datagrams: lo's payload MTU (65408 B, or 61440 B while splicing)
  // makes the chunk, so each message ends with a short one.
  const uint32_t chunk = p->client->config().chunk_bytes;
  ASSERT_TRUE(chunk == 65408 || chunk == 61440) << chunk;
  EXPECT_EQ(cs->tx_chunks, 2 * (((1u << 20) + chunk - 1) / chunk));
  EXPECT_GT(cs->acks_received, 0u);
  // Karn's rule: only chunks sent once give RTT samples. Without any
  // retransmission (always, on lossless loopback, unless a sanitizer build
  // on a loaded host stalls past the RTO) each message's last chunk gives one.
  if (cs->rto_retransmits == 0 && cs->fast_retransmits == 0) {
    EXPECT_GT(cs->rtt_p50_ns, 0u);
  }
  EXPECT_LE(cs->rtt_p50_ns, cs->rtt_p99_ns);
  EXPECT_NE(p->client->stats_text().find("engine 0"), std::string::npos);
  EXPECT_FALSE(p->client->conn_stats(999).ok());
  // Moving 2 MiB took loops that did work: some busy time, within the run.
  for (Endpoint* ep : {p->client.get(), p->server.get()}) {
    const EngineStats e = ep->engine_stats()[0];
    EXPECT_GT(e.busy_ns, 0u);
    EXPECT_LE(e.busy_ns, e.run_ns);
    EXPECT_GT(e.run_ns, 0u);
  }
  EXPECT_NE(p->client->stats_text().find("% of "), std::string::npos)
      << p->client->stats_text();
}

// Receiver-driven matching is observable: a send taken before the peer
// posted its receive counts as having waited (for no longer than the whole
// exchange took: when the engine took the send is not observable, so the
// 30 ms the receiver held back is no lower bound on a stalled host); one
// taken after the descriptor arrived does not.
TEST(EndpointTest, SendsThatWaitForTheReceiverAreCounted) {
  auto p = Pair::make(test_config(1, 1));
  ASSERT_TRUE(p);
  constexpr size_t kLen = 4096;
  Buf sb(p->client.get(), kLen), rb(p->server.get(), kLen);
  auto stats = [&] {
    auto s = p->client->conn_stats(p->c_conns[0]);
    EXPECT_TRUE(s.ok());
    return s.ok() ? *s : FlowStats{};
  };
  // 1. The send first; the receive 30 ms later.
  Request sr, rr;
  const uint64_t t0 = monotonic_ns();
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), kLen, sb.mh, &sr).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr).ok());
  ASSERT_TRUE(p->client->wait(&sr, 60000).ok()) << sr.status();
  ASSERT_TRUE(p->server->wait(&rr, 60000).ok()) << rr.status();
  const uint64_t elapsed_ns = monotonic_ns() - t0;
  FlowStats s1 = stats();
  EXPECT_EQ(s1.sends_matched, 1u);
  EXPECT_EQ(s1.sends_waited_for_recv, 1u);
  EXPECT_GT(s1.send_wait_ns, 0u);
  EXPECT_LE(s1.send_wait_ns, elapsed_ns) << "waited longer than it took";
  EXPECT_NE(p->client->stats_text().find("(1 waited for a receive)"),
            std::string::npos)
      << p->client->stats_text();
  // 2. The receive first, the send once its descriptor has arrived; the
  // arrival is not observable, so allow it up to 1.5 s over a few tries.
  bool matched_at_once = false;
  uint64_t waited = s1.sends_waited_for_recv, sends = 1;
  for (int ms = 100; ms <= 800 && !matched_at_once; ms *= 2) {
    Request sr2, rr2;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr2).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), kLen, sb.mh, &sr2).ok());
    ASSERT_TRUE(p->client->wait(&sr2, 60000).ok()) << sr2.status();
    ASSERT_TRUE(p->server->wait(&rr2, 60000).ok()) << rr2.status();
    FlowStats s = stats();
    EXPECT_EQ(s.sends_matched, ++sends);
    matched_at_once = s.sends_waited_for_recv == waited;
    waited = s.sends_waited_for_recv;
  }
  EXPECT_TRUE(matched_at_once);
}

// Connections go where their caller places them: connect_start's engine on
// the connecting side, place_accepts' tag placement on the accepting side;
// unplaced ones still spread by load. Placed connections carry data.
TEST(EndpointTest, ConnectionsGoToTheEnginesAskedFor) {
  auto s = Endpoint::create(test_config(4, 1));
  auto c = Endpoint::create(test_config(4, 1));
  ASSERT_TRUE(s.ok() && c.ok());
  auto port = (*s)->listen(0);
  ASSERT_TRUE(port.ok());
  // Connecting engines 3, 3, 1; accepting engines by tag 2, (none), 2.
  const int want_c[3] = {3, 3, 1};
  const int want_s[3] = {2, -1, 2};
  for (uint64_t tag = 0; tag < 3; ++tag) {
    if (want_s[tag] >= 0) {
      ASSERT_TRUE((*s)->place_accepts(100 + tag, want_s[tag]).ok());
    }
  }
  ASSERT_TRUE((*s)->place_accepts(100, 2).ok());  // again: still fine
  Pair p;
  for (uint64_t tag = 0; tag < 3; ++tag) {
    auto pend = (*c)->connect_start("127.0.0.1", *port, 100 + tag, want_c[tag]);
    ASSERT_TRUE(pend.ok()) << pend.status();
    Result<ConnId> cc = Status(StatusCode::kUnavailable, "");
    Result<ConnId> sc = Status(StatusCode::kUnavailable, "");
    const uint64_t until = monotonic_ns() + 20000000000ull;
    while ((!cc.ok() || !sc.ok()) && monotonic_ns() < until) {
      if (!cc.ok()) {
        cc = (*c)->connect_poll(*pend);
        ASSERT_TRUE(cc.ok() || cc.status().code() == StatusCode::kUnavailable)
            << cc.status();
      }
      if (!sc.ok()) {
        sc = (*s)->accept_poll(100 + tag);
        ASSERT_TRUE(sc.ok() || sc.status().code() == StatusCode::kUnavailable)
            << sc.status();
      }
    }
    ASSERT_TRUE(cc.ok() && sc.ok());
    EXPECT_EQ(*(*c)->engine_of(*cc), want_c[tag]) << "tag " << tag;
    if (want_s[tag] >= 0) {
      EXPECT_EQ(*(*s)->engine_of(*sc), want_s[tag]) << "tag " << tag;
    } else {  // by load: engines 0, 1, 3 have none
      EXPECT_NE(*(*s)->engine_of(*sc), 2) << "tag " << tag;
    }
    p.c_conns.push_back(*cc);
    p.s_conns.push_back(*sc);
  }
  p.client = std::move(*c);
  p.server = std::move(*s);
  for (size_t i = 0; i < 3; ++i) exchange(&p, i, {0, 5000, 200000}, 10 * i);

  // Bad placements and unknown connections are errors, not aborts.
  EXPECT_EQ(p.client->connect_start("127.0.0.1", *port, 0, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p.client->connect_start("127.0.0.1", *port, 0, -2).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p.server->place_accepts(1, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.server->engine_of(0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(p.server->place_accepts(100, -1).ok());  // forget
  EXPECT_TRUE(p.server->place_accepts(102, -1).ok());
  EXPECT_TRUE(p.server->place_accepts(999, -1).ok());  // never placed
  // The placement table is bounded.
  for (uint64_t t = 0; t < Endpoint::kMaxAcceptPlacements; ++t) {
    ASSERT_TRUE(p.server->place_accepts(1000 + t, 0).ok()) << t;
  }
  EXPECT_EQ(p.server->place_accepts(7, 0).code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(p.server->place_accepts(1000, 1).ok());  // a known tag: fine
}

TEST(EndpointTest, BadConfigurationIsRefused) {
  EndpointConfig c = test_config();
  c.device = "udp:nosuchif9";
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kNotFound);
  c = test_config();
  c.cc = "reno";
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kInvalidArgument);
  c = test_config();
  c.cc = "swift";
  c.cc_params = "max_mdf=2";
  EXPECT_FALSE(Endpoint::create(c).ok());
  c = test_config();
  c.paths = 100;
  EXPECT_FALSE(Endpoint::create(c).ok());
  c = test_config();
  c.chunk_bytes = 100;
  EXPECT_FALSE(Endpoint::create(c).ok());
  c = test_config();
  c.idle_sleep_us = 2000000;
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kInvalidArgument);
  c = test_config();
  c.fault_rx = "stall=0.1:100";  // a send call's fault, not a receive's
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kInvalidArgument);
}

// idle_sleep_us reaches every engine (0: never sleep, -1: the knob's 20 us),
// and an engine told to sleep does: after its 20000 spinning empty loops
// (UCCL_IDLE_SPIN_LOOPS) it sleeps 200 ms per empty loop, so a second holds
// at most 20000 + 5 loops. (Reading the stats is a command, which wakes the
// engine: hence the 20000.) Load can only lower that count; rates of a
// never-sleeping engine are not asserted, as sanitizers and a busy machine
// slow any loop down.
TEST(EndpointTest, RcModeWorksAndMismatchIsRefused) {
  EndpointConfig rc = test_config(1, 2);
  rc.rc_mode = 1;
  auto p = Pair::make(rc);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {0, 1, 1 << 20, 5 << 20}, 9);
  // A UC endpoint cannot talk to an RC one: clear error, no hang.
  auto uc = Endpoint::create(test_config(1, 2));
  ASSERT_TRUE(uc.ok());
  auto port = p->server->listen(0);  // already listening
  EXPECT_EQ(port.status().code(), StatusCode::kAlreadyExists);
  auto s2 = Endpoint::create(rc);
  ASSERT_TRUE(s2.ok());
  auto port2 = (*s2)->listen(0);
  ASSERT_TRUE(port2.ok());
  Result<ConnId> acc = Status(StatusCode::kUnavailable, "");
  std::thread t([&] { acc = (*s2)->accept(5000); });
  auto c = (*uc)->connect("127.0.0.1", *port2, 5000);
  t.join();
  EXPECT_FALSE(c.ok());
  EXPECT_FALSE(acc.ok());
  EXPECT_NE(acc.status().message().find("QP mode mismatch"), std::string::npos)
      << acc.status();
}

}  // namespace
}  // namespace uccl::testing
