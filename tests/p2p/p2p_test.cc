// The p2p engine end to end: two endpoints on loopback, connections over
// every engine, two-sided and one-sided transfers byte for byte, and each
// kind of misuse answered with its own error.
#include "uccl/p2p.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/p2p/p2p_fixture.h"
#include "transport/nic.h"
#include "util/clock.h"
#include "util/pattern.h"

namespace uccl::p2p {
namespace {

TEST(P2p, SendRecvEverySizeByteForByte) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  // 0 and 1 byte, a page, striped over both engines, and past K stripes.
  send_recv(p.get(), {0, 1, 4096, 1 << 20, 3 << 20, 5000}, 10);
}

// A message one segment (stripe x engines) and a little long, received
// into a buffer of exactly its size and into a larger one: every byte, and
// the size the receiver is told is the message's.
TEST(P2p, MessagesJustPastASegmentArriveWhole) {
  auto p = Pair::make(test_config(4));
  ASSERT_TRUE(p);
  const size_t seg = 4 * (256 << 10);
  for (size_t len : {seg + 32, seg + 1, 2 * seg + 4097, seg - 1}) {
    for (size_t cap : {len, len + 8192}) {
      SCOPED_TRACE("len " + std::to_string(len) + " cap " +
                   std::to_string(cap));
      Mem sb(p->client.get(), len), rb(p->server.get(), cap);
      fill_pattern(sb.ptr(), len, len + cap);
      auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(), cap);
      auto s = p->client->send_async(p->c_conn, sb.id, sb.ptr(), len);
      ASSERT_TRUE(r.ok() && s.ok()) << r.status() << s.status();
      size_t sent = 0, got = 0;
      wait_both(p.get(), *s, *r, &sent, &got);
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
      EXPECT_EQ(sent, len);
      EXPECT_EQ(got, len);
      EXPECT_EQ(find_pattern_mismatch(rb.ptr(), len, len + cap), -1);
    }
  }
}

// Receives longer than a segment posted ahead, messages of mixed sizes
// (short ones end their receive early): each lands whole in its own
// receive, in order.
TEST(P2p, ShortAndLongMessagesIntoLongReceivesPostedAhead) {
  auto p = Pair::make(test_config(4));
  ASSERT_TRUE(p);
  const size_t seg = 4 * (256 << 10), cap = seg + 32;
  const std::vector<size_t> lens = {32, seg + 32, 32, 32, seg + 32, 7, seg};
  const size_t n = lens.size();
  Mem sb(p->client.get(), n * cap), rb(p->server.get(), n * cap);
  std::vector<XferHandle> rs, ss;
  for (size_t i = 0; i < n; ++i) {
    auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(i * cap), cap);
    ASSERT_TRUE(r.ok()) << r.status();
    rs.push_back(*r);
  }
  for (size_t i = 0; i < n; ++i) {
    fill_pattern(sb.ptr(i * cap), lens[i], 100 + i);
    auto s = p->client->send_async(p->c_conn, sb.id, sb.ptr(i * cap), lens[i]);
    ASSERT_TRUE(s.ok()) << s.status();
    ss.push_back(*s);
  }
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    size_t sent = 0, got = 0;
    wait_both(p.get(), ss[i], rs[i], &sent, &got);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_EQ(got, lens[i]);
    EXPECT_EQ(find_pattern_mismatch(rb.ptr(i * cap), lens[i], 100 + i), -1);
  }
}

// Both sides at once, each with receives posted ahead: a message a little
// past a segment then a short one, each way, round after round, as two
// channel proxies exchange them (each side polls only its own endpoint).
TEST(P2p, LongAndShortMessagesBothWaysWithReceivesPostedAhead) {
  auto p = Pair::make(test_config(4));
  ASSERT_TRUE(p);
  const size_t seg = 4 * (256 << 10), cap = seg + 32;
  constexpr int kAhead = 4, kRounds = 24;
  auto side = [&](Endpoint* ep, ConnHandle c, int id) {
    Mem sb(ep, 2 * cap), rb(ep, kAhead * cap);
    std::vector<XferHandle> rs(kAhead);
    for (int i = 0; i < kAhead; ++i) {
      rs[i] = *ep->recv_async(c, rb.id, rb.ptr(i * cap), cap);
    }
    int next = 0;  // the oldest receive
    for (int i = 0; i < kRounds; ++i) {
      fill_pattern(sb.ptr(0), cap, 1000 * id + i);
      fill_pattern(sb.ptr(cap), 32, 5000 * id + i);
      auto s1 = ep->send_async(c, sb.id, sb.ptr(0), cap);
      auto s2 = ep->send_async(c, sb.id, sb.ptr(cap), 32);
      ASSERT_TRUE(s1.ok() && s2.ok()) << s1.status() << s2.status();
      for (int m = 0; m < 2; ++m) {
        const size_t want = m == 0 ? cap : 32;
        const uint64_t seed =
            m == 0 ? 1000 * (1 - id) + i : 5000 * (1 - id) + i;
        size_t got = 0;
        ASSERT_TRUE(ep->wait(rs[next], 20000, &got).ok())
            << "round " << i << " message " << m;
        EXPECT_EQ(got, want);
        ASSERT_EQ(find_pattern_mismatch(rb.ptr(next * cap), want, seed), -1)
            << "round " << i << " message " << m;
        rs[next] = *ep->recv_async(c, rb.id, rb.ptr(next * cap), cap);
        next = (next + 1) % kAhead;
      }
      ASSERT_TRUE(ep->wait(*s1, 20000).ok()) << "round " << i;
      ASSERT_TRUE(ep->wait(*s2, 20000).ok()) << "round " << i;
    }
  };
  std::thread t([&] { side(p->server.get(), p->s_conn, 1); });
  side(p->client.get(), p->c_conn, 0);
  t.join();
}

TEST(P2p, ManyTransfersOutstandingCompleteInOrder) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  constexpr int kDepth = 16;
  constexpr size_t kLen = 300000;
  Mem sb(p->client.get(), kLen * kDepth), rb(p->server.get(), kLen * kDepth);
  std::vector<XferHandle> sends, recvs;
  for (int i = 0; i < kDepth; ++i) {
    fill_pattern(sb.ptr(i * kLen), kLen, 100 + i);
    auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(i * kLen), kLen);
    auto s = p->client->send_async(p->c_conn, sb.id, sb.ptr(i * kLen), kLen);
    ASSERT_TRUE(r.ok() && s.ok()) << r.status() << s.status();
    recvs.push_back(*r);
    sends.push_back(*s);
  }
  for (int i = 0; i < kDepth; ++i) {
    wait_both(p.get(), sends[i], recvs[i]);
    if (HasFatalFailure()) return;
    EXPECT_EQ(find_pattern_mismatch(rb.ptr(i * kLen), kLen, 100 + i), -1) << i;
  }
}

TEST(P2p, WriteAndReadAnAdvertisedRegion) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  constexpr size_t kLen = 3 << 20;
  Mem region(p->server.get(), kLen + 8192), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.id, 4096, kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  // The descriptor travels as bytes.
  auto desc = RegionDesc::from_bytes(adv->to_bytes());
  ASSERT_TRUE(desc.ok()) << desc.status();
  fill_pattern(local.ptr(), kLen - 100, 7);
  auto w = p->client->write_async(p->c_conn, local.id, local.ptr(), kLen - 100,
                                  *desc, 100);
  ASSERT_TRUE(w.ok()) << w.status();
  size_t n = 0;
  ASSERT_TRUE(p->client->wait(*w, 30000, &n).ok());
  EXPECT_EQ(n, kLen - 100);
  // The target learns of the write from a message sent after it.
  send_recv(p.get(), {8}, 50);
  EXPECT_EQ(find_pattern_mismatch(region.ptr(4096 + 100), kLen - 100, 7), -1);
  // Read it back into a cleared buffer.
  std::memset(local.ptr(), 0, kLen);
  auto r = p->client->read_async(p->c_conn, local.id, local.ptr(), kLen - 100,
                                 *desc, 100);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(p->client->wait(*r, 30000, &n).ok());
  EXPECT_EQ(n, kLen - 100);
  EXPECT_EQ(find_pattern_mismatch(local.ptr(), kLen - 100, 7), -1);
}

// A notifying write is counted in parts at both ends: once the target's
// landed count reaches the writer's sent count, the data is in place,
// without a message after the write.
TEST(P2p, NotifyingWritesAreCountedInPartsAtBothEnds) {
  Config cfg = test_config(4);
  auto p = Pair::make(cfg);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 2 << 20;  // cut over the 4 engine connections
  Mem region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.id, 0, kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  fill_pattern(local.ptr(), kLen, 9);
  EXPECT_EQ(*p->client->notified_parts_sent(p->c_conn), 0u);
  auto plain =
      p->client->write_async(p->c_conn, local.id, local.ptr(), 4096, *adv, 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*p->client->notified_parts_sent(p->c_conn), 0u);
  auto w = p->client->write_async(p->c_conn, local.id, local.ptr(), kLen, *adv,
                                  0, true);
  ASSERT_TRUE(w.ok()) << w.status();
  const uint64_t sent = *p->client->notified_parts_sent(p->c_conn);
  EXPECT_EQ(sent, 4u);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t landed = 0;
  while (landed < sent && std::chrono::steady_clock::now() < deadline) {
    landed = *p->server->notified_parts_landed(p->s_conn);
  }
  ASSERT_EQ(landed, sent);
  EXPECT_EQ(find_pattern_mismatch(region.ptr(), kLen, 9), -1);
  ASSERT_TRUE(p->client->wait(*plain, 30000).ok());
  ASSERT_TRUE(p->client->wait(*w, 30000).ok());
  EXPECT_EQ(*p->server->notified_parts_landed(p->s_conn), sent);
  EXPECT_EQ(p->server->notified_parts_landed(ConnHandle{12345}).status().code(),
            StatusCode::kInvalidArgument);
}

// A mark says which parts landed, a total only how many: after one write
// of a part per engine connection, a mark of two parts on the first
// connection has not landed though the total has reached two; the write's
// own mark has. Marks taken before any write have landed at once, and a
// mark of another connection's shape is refused.
TEST(P2p, AWriteMarkCountsPartsPerEngineConnection) {
  auto p = Pair::make(test_config(2));
  ASSERT_TRUE(p);
  constexpr size_t kLen = 2 << 20;  // a part on each engine connection
  Mem region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.id, 0, kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  auto m0 = p->client->notified_mark(p->c_conn);
  ASSERT_TRUE(m0.ok()) << m0.status();
  EXPECT_EQ(m0->n, 2u);
  EXPECT_TRUE(*p->server->landed(p->s_conn, *m0));
  fill_pattern(local.ptr(), kLen, 21);
  auto w = p->client->write_async(p->c_conn, local.id, local.ptr(), kLen, *adv,
                                  0, true);
  ASSERT_TRUE(w.ok()) << w.status();
  const WriteMark m1 = *p->client->notified_mark(p->c_conn);
  ASSERT_EQ(m1.n, 2u);
  EXPECT_EQ(m1.parts[0], 1u);
  EXPECT_EQ(m1.parts[1], 1u);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!*p->server->landed(p->s_conn, m1)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
  }
  EXPECT_EQ(find_pattern_mismatch(region.ptr(), kLen, 21), -1);
  ASSERT_TRUE(p->client->wait(*w, 30000).ok());
  WriteMark skewed = m1;  // two parts on connection 0, none on 1
  skewed.parts[0] = 2;
  skewed.parts[1] = 0;
  EXPECT_EQ(*p->server->notified_parts_landed(p->s_conn), 2u);
  EXPECT_FALSE(*p->server->landed(p->s_conn, skewed));
  WriteMark wide = m1;
  wide.n = 3;
  EXPECT_EQ(p->server->landed(p->s_conn, wide).status().code(),
            StatusCode::kInvalidArgument);
  WriteMark odd = m1;
  odd.reserved = 1;
  EXPECT_EQ(p->server->landed(p->s_conn, odd).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p->server->landed(ConnHandle{12345}, m1).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(P2p, MisuseGetsItsOwnError) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  Mem sb(p->client.get(), 4096);
  std::vector<uint8_t> unregistered(4096);
  EXPECT_EQ(p->client->send_async(p->c_conn, sb.id, unregistered.data(), 10)
                .status()
                .code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(
      p->client->send_async(p->c_conn, sb.id, sb.ptr(), 5000).status().code(),
      StatusCode::kOutOfRange);
  EXPECT_EQ(p->client->send_async(p->c_conn, 999, sb.ptr(), 10).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p->client->send_async(999, sb.id, sb.ptr(), 10).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p->client->poll(12345).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(RegionDesc::from_bytes("short").ok());
  EXPECT_FALSE(RegionDesc::from_bytes(std::string(kRegionDescBytes, 'x')).ok());
  Mem region(p->server.get(), 8192);
  auto adv = p->server->advertise(region.id, 0, 8192);
  ASSERT_TRUE(adv.ok());
  EXPECT_EQ(p->server->advertise(region.id, 4096, 8192).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(p->client->write_async(p->c_conn, sb.id, sb.ptr(), 4096, *adv, 8000)
                .status()
                .code(),
            StatusCode::kOutOfRange);
  // A spent handle is refused; a receive that is too small fails both sides.
  send_recv(p.get(), {100}, 60);
  Mem big(p->client.get(), 10000), small(p->server.get(), 100);
  auto r = p->server->recv_async(p->s_conn, small.id, small.ptr(), 100);
  auto s = p->client->send_async(p->c_conn, big.id, big.ptr(), 10000);
  ASSERT_TRUE(r.ok() && s.ok());
  EXPECT_EQ(p->server->wait(*r, 10000).code(), StatusCode::kTruncated);
  EXPECT_EQ(p->client->wait(*s, 10000).code(), StatusCode::kTruncated);
  EXPECT_EQ(p->client->poll(*s).status().code(), StatusCode::kInvalidArgument);
  // Memory with a transfer outstanding stays registered.
  auto pending = p->server->recv_async(p->s_conn, small.id, small.ptr(), 100);
  ASSERT_TRUE(pending.ok());
  EXPECT_EQ(p->server->dereg(small.id).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(p->client->dereg(big.id).ok());
  EXPECT_EQ(p->client->dereg(big.id).code(), StatusCode::kInvalidArgument);
}

TEST(P2p, MetadataConnectsAndBadMetadataIsRefused) {
  auto s = Endpoint::create(test_config(1));
  auto c = Endpoint::create(test_config(1));
  ASSERT_TRUE(s.ok() && c.ok());
  EXPECT_EQ((*s)->metadata().status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE((*s)->listen(0).ok());
  auto md = (*s)->metadata();
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->rfind("127.0.0.1:", 0), 0u) << *md;
  for (const char* bad :
       {"", "127.0.0.1", ":5", "127.0.0.1:0", "h:99999", "127.0.0.1:12x"}) {
    EXPECT_EQ((*c)->connect_by_metadata(bad, 1000).status().code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
  Result<ConnHandle> acc = Unavailable("");
  std::thread t([&] { acc = (*s)->accept(20000); });
  auto conn = (*c)->connect_by_metadata(*md, 20000);
  t.join();
  ASSERT_TRUE(conn.ok() && acc.ok()) << conn.status() << acc.status();
}

TEST(P2p, ClosedConnectionFailsItsTransfersOnBothSides) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  Mem rb(p->server.get(), 1 << 20), cb(p->client.get(), 1 << 20);
  auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(), 1 << 20);
  auto peer = p->client->recv_async(p->c_conn, cb.id, cb.ptr(), 1 << 20);
  ASSERT_TRUE(r.ok() && peer.ok());
  ASSERT_TRUE(p->server->close(p->s_conn).ok());
  EXPECT_EQ(p->server->close(p->s_conn).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(p->server->wait(*r, 10000).ok());
  EXPECT_FALSE(p->client->wait(*peer, 10000).ok());
  EXPECT_EQ(
      p->server->recv_async(p->s_conn, rb.id, rb.ptr(), 10).status().code(),
      StatusCode::kInvalidArgument);
}

// An engine endpoint that is not a p2p one (it never sends a hello).
Result<std::unique_ptr<uccl::Endpoint>> raw_endpoint() {
  EndpointConfig ec = test_config(1).engine;
  ec.num_engines = 1;
  return uccl::Endpoint::create(ec);
}

// Something that is not a p2p peer (an engine connection with a bad hello)
// is dropped and counted; the server goes on accepting real peers.
TEST(P2p, ABadHelloIsDroppedAndAcceptGoesOn) {
  auto s = Endpoint::create(test_config(1));
  ASSERT_TRUE(s.ok());
  auto port = (*s)->listen(0);
  ASSERT_TRUE(port.ok());
  auto raw = raw_endpoint();
  ASSERT_TRUE(raw.ok());
  Result<ConnHandle> first = Unavailable("");
  std::thread t([&] { first = (*s)->accept(3000); });
  auto rc = (*raw)->connect("127.0.0.1", *port, 10000);
  ASSERT_TRUE(rc.ok()) << rc.status();
  std::vector<uint8_t> junk(24, 0xAB);
  auto mh = (*raw)->reg_mr(junk.data(), junk.size());
  ASSERT_TRUE(mh.ok());
  Request req;
  ASSERT_TRUE(
      (*raw)->send_async(*rc, junk.data(), junk.size(), *mh, &req).ok());
  // The send ends either way: acknowledged, or failed by the server's
  // closing the connection first (it drops a bad hello at once).
  const Status sent = (*raw)->wait(&req, 10000);
  EXPECT_TRUE(req.done()) << sent;
  t.join();
  EXPECT_EQ(first.status().code(), StatusCode::kTimedOut) << first.status();
  EXPECT_EQ((*s)->rejected_connections(), 1u);
  auto c = Endpoint::create(test_config(1));
  ASSERT_TRUE(c.ok());
  Result<ConnHandle> acc = Unavailable("");
  std::thread t2([&] { acc = (*s)->accept(20000); });
  auto conn = (*c)->connect("127.0.0.1", *port, 20000);
  t2.join();
  EXPECT_TRUE(conn.ok() && acc.ok()) << conn.status() << acc.status();
}

TEST(P2p, NotificationsArriveInOrderBesideTransfers) {
  auto p = Pair::make();
  ASSERT_TRUE(p);
  constexpr int kCount = 20;  // more than the slots: the sender waits its turn
  std::vector<std::string> got;
  const uint64_t deadline = monotonic_ns() + 30000000000ull;
  for (int i = 0; i < kCount; ++i) {
    for (;;) {
      Status st = p->client->send_notif(p->c_conn, "n" + std::to_string(i));
      if (st.ok()) break;
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
      ASSERT_LT(monotonic_ns(), deadline);
      for (const Notif& n : p->server->get_notifs()) {
        EXPECT_EQ(n.conn, p->s_conn);
        got.push_back(n.data);
      }
    }
  }
  while (got.size() < kCount && monotonic_ns() < deadline) {
    for (const Notif& n : p->server->get_notifs()) got.push_back(n.data);
  }
  ASSERT_EQ(got.size(), static_cast<size_t>(kCount));
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(got[i], "n" + std::to_string(i));
  // Transfers go on beside them; misuse is refused.
  send_recv(p.get(), {1 << 20}, 70);
  EXPECT_EQ(
      p->client->send_notif(p->c_conn, std::string(kMaxNotifBytes + 1, 'x'))
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(p->client->send_notif(777, "x").code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(p->client->get_notifs().empty());
}

// A peer that opens an engine connection and says nothing holds it only
// for hello_timeout_ms.
TEST(P2p, ASilentConnectionIsClosedAfterTheHelloTimeout) {
  Config cfg = test_config(1);
  cfg.hello_timeout_ms = 200;
  auto s = Endpoint::create(cfg);
  ASSERT_TRUE(s.ok());
  auto port = (*s)->listen(0);
  ASSERT_TRUE(port.ok());
  auto raw = raw_endpoint();
  ASSERT_TRUE(raw.ok());
  Result<ConnHandle> first = Unavailable("");
  std::thread t([&] { first = (*s)->accept(1500); });
  auto rc = (*raw)->connect("127.0.0.1", *port, 10000);
  ASSERT_TRUE(rc.ok()) << rc.status();
  t.join();
  EXPECT_EQ(first.status().code(), StatusCode::kTimedOut);
  EXPECT_EQ((*s)->rejected_connections(), 1u);
  // Its engine connection was closed: a receive there fails.
  std::vector<uint8_t> b(64);
  auto mh = (*raw)->reg_mr(b.data(), b.size());
  ASSERT_TRUE(mh.ok());
  Request r;
  Status st = (*raw)->recv_async(*rc, b.data(), b.size(), *mh, &r);
  if (st.ok()) st = (*raw)->wait(&r, 10000);
  EXPECT_FALSE(st.ok());
}

// Under 2% injected loss on every packet the client sends (16 KiB chunks:
// hundreds of packets, so drops are certain), transfers both ways still
// arrive byte for byte: the engines' recovery repairs them.
TEST(P2p, TransfersSurviveInjectedLoss) {
  Config cfg = test_config();
  cfg.engine.chunk_bytes = 16 << 10;
  cfg.engine.fault_tx = "drop=0.02";
  cfg.engine.fault_seed = 23;
  auto p = Pair::make(cfg);
  ASSERT_TRUE(p);
  send_recv(p.get(), {1, 65536, 1 << 20, 8 << 20}, 80);
  if (HasFatalFailure()) return;
  constexpr size_t kLen = 2 << 20;
  Mem region(p->server.get(), kLen), local(p->client.get(), kLen);
  auto adv = p->server->advertise(region.id, 0, kLen);
  ASSERT_TRUE(adv.ok());
  fill_pattern(local.ptr(), kLen, 81);
  auto w =
      p->client->write_async(p->c_conn, local.id, local.ptr(), kLen, *adv, 0);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(p->client->wait(*w, 30000).ok());
  send_recv(p.get(), {8}, 90);
  EXPECT_EQ(find_pattern_mismatch(region.ptr(), kLen, 81), -1);
  const std::string nic = p->client->engine_endpoint()->nic_counters();
  EXPECT_GT(transport::counter_sum(nic, "fault_tx_dropped"), 0u) << nic;
}

TEST(P2p, ShortMessagesAfterLongOnesReuseFinishingRequests) {
  // After kPartsHistory messages of a stripe or more, the group posts every
  // part of the next ones at once: a short message then completes with
  // part 0 while its empty parts finish, and its slot waits for them. Far
  // more short messages than that follow, each byte for byte.
  auto p = Pair::make();
  ASSERT_TRUE(p);
  std::vector<size_t> sizes(40, 300000);
  for (int i = 0; i < 200; ++i) sizes.push_back(1 + i * 37 % 5000);
  send_recv(p.get(), sizes, 900);
  // And long ones again after them.
  send_recv(p.get(), {300000, 2 << 20, 7}, 1900);
}

TEST(P2p, AnEmptyBufferNeedsNoAddress) {
  // torch hands an empty tensor's data pointer as 0.
  auto p = Pair::make();
  ASSERT_TRUE(p);
  Mem sb(p->client.get(), 64), rb(p->server.get(), 64);
  auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(), 64);
  auto s = p->client->send_async(p->c_conn, sb.id, nullptr, 0);
  ASSERT_TRUE(r.ok() && s.ok()) << r.status() << s.status();
  size_t got = 1;
  wait_both(p.get(), *s, *r, nullptr, &got);
  EXPECT_EQ(got, 0u);
  // Only the empty one: one byte at address 0 is outside the memory.
  EXPECT_EQ(p->client->send_async(p->c_conn, sb.id, nullptr, 1).status().code(),
            StatusCode::kOutOfRange);
}

// Connects `cpus`-engine clients one after another to `server` (listening
// on `port`); returns each accepted connection's engines at the server,
// after checking the client's own (part j on engine j).
std::vector<std::vector<int>> accepted_engines(Endpoint* server, uint16_t port,
                                               const std::vector<int>& cpus) {
  std::vector<std::vector<int>> out;
  std::vector<std::unique_ptr<Endpoint>> clients;
  for (int k : cpus) {
    SCOPED_TRACE("client with " + std::to_string(k) + " engines");
    auto c = Endpoint::create(test_config(k));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return out;
    Result<ConnHandle> acc = Unavailable("");
    std::thread t([&] { acc = server->accept(20000); });
    auto conn = (*c)->connect("127.0.0.1", port, 20000);
    t.join();
    EXPECT_TRUE(conn.ok() && acc.ok()) << conn.status() << acc.status();
    if (!conn.ok() || !acc.ok()) return out;
    std::vector<int> want;
    for (int j = 0; j < k; ++j) want.push_back(j);
    EXPECT_EQ(*(*c)->engines_of(*conn), want);
    out.push_back(*server->engines_of(*acc));
    clients.push_back(std::move(*c));
  }
  return out;
}

// An acceptor puts a peer's parts on consecutive engines of its own (from
// the rotation the connector names), so on distinct ones where it has as
// many; left to the fewest-connections rule, peers connecting at once
// could get two parts on one engine.
TEST(P2p, EachPeersPartsGoOnConsecutiveEnginesOfTheAcceptor) {
  auto server = Endpoint::create(test_config(2));
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = (*server)->listen(0);
  ASSERT_TRUE(port.ok()) << port.status();
  const std::vector<int> cpus = {2, 3, 2, 1, 2};
  auto got = accepted_engines(server->get(), *port, cpus);
  ASSERT_EQ(got.size(), cpus.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), static_cast<size_t>(cpus[i]));
    for (int j = 0; j < cpus[i]; ++j) {
      EXPECT_EQ(got[i][j], (got[i][0] + j) % 2) << "client " << i;
    }
  }
  EXPECT_EQ((*server)->engines_of(12345).status().code(),
            StatusCode::kInvalidArgument);
}

// Peers with fewer engines than the acceptor start at successive engines
// of it (a process's connections take successive rotations), so together
// they reach all of the acceptor's engines.
TEST(P2p, PeersWithFewerEnginesReachAllOfTheAcceptors) {
  auto server = Endpoint::create(test_config(4));
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = (*server)->listen(0);
  ASSERT_TRUE(port.ok()) << port.status();
  auto got = accepted_engines(server->get(), *port, {2, 2, 2, 2});
  ASSERT_EQ(got.size(), 4u);
  std::vector<int> firsts;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), 2u);
    EXPECT_EQ(got[i][1], (got[i][0] + 1) % 4) << "client " << i;
    if (i > 0) {
      EXPECT_EQ(got[i][0], (got[i - 1][0] + 1) % 4) << "client " << i;
    }
    firsts.push_back(got[i][0]);
  }
  std::sort(firsts.begin(), firsts.end());
  EXPECT_EQ(firsts, (std::vector<int>{0, 1, 2, 3}));
}

TEST(P2p, BadConfigIsRefused) {
  Config c = test_config();
  c.num_cpus = 0;
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kInvalidArgument);
  c = test_config();
  c.stripe_bytes = 100;
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kInvalidArgument);
  c = test_config();
  c.local_gpu_idx = 1000;  // no such GPU (nor, in CI, any CUDA runtime)
  EXPECT_EQ(Endpoint::create(c).status().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace uccl::p2p
