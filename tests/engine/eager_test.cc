// Eager sends (engine/wire.h) end to end over the software NIC on loopback:
// sends written before their receive is posted, matching by tag and order
// with rendezvous sends mixed in, truncation, loss, limits and shutdown.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "engine/imm.h"
#include "engine/wire.h"
#include "tests/engine/engine_test_util.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

constexpr size_t kEager = 16384;  // the software NIC's default

EndpointConfig eager_config(int64_t eager_bytes = kEager, uint32_t paths = 2) {
  EndpointConfig c = test_config(1, paths);
  c.eager_bytes = eager_bytes;
  return c;
}

Status recv_tagged(Endpoint* ep, ConnId c, void* data, size_t size,
                   MrHandle* mh, Request* req, int tag) {
  return ep->recv_async(c, 1, &data, &size, &tag, &mh, req);
}

FlowStats stats(Endpoint* ep, ConnId c) {
  auto s = ep->conn_stats(c);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : FlowStats{};
}

// Slots are granted after the receiver's first posted receive and again as
// they are emptied: waits (bounded) until the sender holds `n` free ones, so
// the next small send is eager by construction, not by timing.
void wait_slots(Endpoint* ep, ConnId c, uint64_t n) {
  const uint64_t deadline = monotonic_ns() + 20000000000ull;
  while (stats(ep, c).eager_slots_free < n) {
    ASSERT_LT(monotonic_ns(), deadline) << "eager slots never granted";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Waits (bounded) until the sender's engine has sent `n` messages eagerly:
// a send goes eager only if its engine takes it before the receive's
// descriptor arrives, which a fixed sleep does not ensure on a busy host.
void wait_eager_sends(Endpoint* ep, ConnId c, uint64_t n) {
  const uint64_t deadline = monotonic_ns() + 20000000000ull;
  while (stats(ep, c).sends_eager < n) {
    ASSERT_LT(monotonic_ns(), deadline) << "the send never went eager";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// One exchange so the receiver grants its slots, then waits for them.
void warm_up(Pair* p) {
  exchange(p, 0, {1}, 1);
  wait_slots(p->client.get(), p->c_conns[0], 16);
}

// The eager flag shares the trunc and one-sided bits (no message is both):
// each of the four combinations decodes to exactly what was encoded.
TEST(EagerTest, ImmediateEncodesEagerApartFromTruncAndOneSided) {
  for (int kind = 0; kind < 4; ++kind) {
    engine::Imm a;
    a.flow = 1023;
    a.csn = 2047;
    a.slot = 15;
    a.buf = 0;
    a.last = true;
    a.trunc = kind == 1;
    a.onesided = kind == 2;
    a.eager = kind == 3;
    const engine::Imm b = engine::Imm::decode(a.encode());
    EXPECT_EQ(b.flow, 1023u);
    EXPECT_EQ(b.csn, 2047u);
    EXPECT_EQ(b.slot, 15u);
    EXPECT_TRUE(b.last);
    EXPECT_EQ(b.trunc, kind == 1) << kind;
    EXPECT_EQ(b.onesided, kind == 2) << kind;
    EXPECT_EQ(b.eager, kind == 3) << kind;
  }
}

// A descriptor's entry count (buffers + grants) comes from the peer: a huge
// grant count must not wrap below the limit the receiver checks.
TEST(EagerTest, ControlEntryCountDoesNotWrap) {
  engine::CtrlMsg m{};
  m.type = static_cast<uint32_t>(engine::CtrlType::kRecvDesc);
  m.n = 1;
  m.region = 7;
  EXPECT_EQ(engine::ctrl_entries(m), 8u);
  m.region = 0xffffffffu;
  EXPECT_GT(engine::ctrl_entries(m),
            static_cast<uint64_t>(kMaxRecvsPerRequest));
  m.type = static_cast<uint32_t>(engine::CtrlType::kReadReq);  // region: id
  EXPECT_EQ(engine::ctrl_entries(m), 1u);
}

TEST(EagerTest, SendsBeforeTheReceiveAreEagerAndExact) {
  auto p = Pair::make(eager_config());
  ASSERT_TRUE(p);
  warm_up(p.get());
  Buf sb(p->client.get(), kEager + 1), rb(p->server.get(), kEager + 1);
  uint64_t seed = 100;
  for (size_t len : {size_t{0}, size_t{1}, size_t{4096}, kEager}) {
    const FlowStats c0 = stats(p->client.get(), p->c_conns[0]);
    const FlowStats s0 = stats(p->server.get(), p->s_conns[0]);
    fill_pattern(sb.ptr(), len, ++seed);
    Request sr, rr;
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), len, sb.mh, &sr).ok());
    // Its bytes are on the receiver before the receive exists: the eager
    // counters say so before the receive is posted.
    const uint64_t deadline = monotonic_ns() + 20000000000ull;
    while (stats(p->server.get(), p->s_conns[0]).eager_held == s0.eager_held) {
      ASSERT_LT(monotonic_ns(), deadline) << "eager message never arrived";
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_FALSE(sr.done()) << "an eager send completes once its receive is "
                               "posted (so truncation reaches both sides)";
    std::memset(rb.ptr(), 0xee, rb.data.size());
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kEager + 1, rb.mh, &rr)
            .ok());
    ASSERT_TRUE(p->server->wait(&rr, 30000).ok()) << rr.status();
    ASSERT_TRUE(p->client->wait(&sr, 30000).ok()) << sr.status();
    EXPECT_EQ(rr.size(0), len);
    EXPECT_EQ(sr.size(0), len);
    EXPECT_EQ(find_pattern_mismatch(rb.ptr(), len, seed), -1) << len;
    EXPECT_EQ(rb.data[len], 0xee) << "wrote past the message";
    const FlowStats c1 = stats(p->client.get(), p->c_conns[0]);
    const FlowStats s1 = stats(p->server.get(), p->s_conns[0]);
    EXPECT_EQ(c1.sends_eager, c0.sends_eager + 1) << len;
    EXPECT_EQ(c1.sends_matched, c0.sends_matched) << len;
    EXPECT_EQ(s1.eager_received, s0.eager_received + 1) << len;
    wait_slots(p->client.get(), p->c_conns[0], 16);  // the slot came back
  }
  // One byte over the limit waits for the receive, as before.
  const FlowStats c0 = stats(p->client.get(), p->c_conns[0]);
  Request sr, rr;
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), kEager + 1, sb.mh, &sr)
          .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(sr.done());
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), kEager + 1, rb.mh, &rr)
          .ok());
  ASSERT_TRUE(p->server->wait(&rr, 30000).ok()) << rr.status();
  ASSERT_TRUE(p->client->wait(&sr, 30000).ok()) << sr.status();
  const FlowStats c1 = stats(p->client.get(), p->c_conns[0]);
  EXPECT_EQ(c1.sends_eager, c0.sends_eager);
  EXPECT_EQ(c1.sends_matched, c0.sends_matched + 1);
  EXPECT_EQ(c1.sends_waited_for_recv, c0.sends_waited_for_recv + 1);
}

TEST(EagerTest, TruncationFailsBothSides) {
  auto p = Pair::make(eager_config());
  ASSERT_TRUE(p);
  warm_up(p.get());
  Buf sb(p->client.get(), 4096), rb(p->server.get(), 4096);
  Request sr, rr;
  const uint64_t eager0 = stats(p->client.get(), p->c_conns[0]).sends_eager;
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), 1000, sb.mh, &sr).ok());
  wait_eager_sends(p->client.get(), p->c_conns[0], eager0 + 1);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), 100, rb.mh, &rr).ok());
  Status a = p->client->wait(&sr, 10000);
  Status b = p->server->wait(&rr, 10000);
  EXPECT_EQ(a.code(), StatusCode::kTruncated) << a;
  EXPECT_EQ(b.code(), StatusCode::kTruncated) << b;
  EXPECT_NE(a.message().find("1000"), std::string::npos) << a;
  EXPECT_EQ(stats(p->client.get(), p->c_conns[0]).sends_eager, eager0 + 1);
  exchange(p.get(), 0, {5000, 100}, 77);  // the connection keeps working
}

TEST(EagerTest, GroupedReceivesTakeEagerMessagesByTagAndOrder) {
  auto p = Pair::make(eager_config());
  ASSERT_TRUE(p);
  warm_up(p.get());
  Buf sb(p->client.get(), 64 << 10), rb(p->server.get(), 64 << 10);
  // Five sends before any receive: tags 9, 8, 7 for one grouped receive,
  // then two with tag 5 for two separate receives (in send order).
  struct S {
    int tag;
    size_t off, len;
  } sends[5] = {{9, 0, 1000},
                {8, 2000, 0},
                {7, 4000, 5000},
                {5, 10000, 10},
                {5, 12000, 20}};
  Request sr[5];
  for (int i = 0; i < 5; ++i) {
    fill_pattern(sb.ptr(sends[i].off), sends[i].len, 300 + i);
    ASSERT_TRUE(p->client
                    ->send_async(p->c_conns[0], sb.ptr(sends[i].off),
                                 sends[i].len, sb.mh, &sr[i], sends[i].tag)
                    .ok());
  }
  const uint64_t deadline = monotonic_ns() + 20000000000ull;
  while (stats(p->server.get(), p->s_conns[0]).eager_received < 5) {
    ASSERT_LT(monotonic_ns(), deadline) << "eager messages never arrived";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void* bufs[3] = {rb.ptr(0), rb.ptr(8000), rb.ptr(16000)};
  size_t sizes[3] = {6000, 6000, 6000};
  int tags[3] = {7, 8, 9};
  MrHandle* mhs[3] = {rb.mh, rb.mh, rb.mh};
  Request rg, r5a, r5b;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], 3, bufs, sizes, tags, mhs, &rg)
          .ok());
  ASSERT_TRUE(recv_tagged(p->server.get(), p->s_conns[0], rb.ptr(30000), 100,
                          rb.mh, &r5a, 5)
                  .ok());
  ASSERT_TRUE(recv_tagged(p->server.get(), p->s_conns[0], rb.ptr(31000), 100,
                          rb.mh, &r5b, 5)
                  .ok());
  for (Request* r : {&rg, &r5a, &r5b})
    ASSERT_TRUE(p->server->wait(r, 30000).ok()) << r->status();
  for (Request& r : sr) ASSERT_TRUE(p->client->wait(&r, 30000).ok());
  EXPECT_EQ(rg.size(0), 5000u);
  EXPECT_EQ(rg.size(1), 0u);
  EXPECT_EQ(rg.size(2), 1000u);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(0), 5000, 302), -1);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(16000), 1000, 300), -1);
  EXPECT_EQ(r5a.size(0), 10u);
  EXPECT_EQ(r5b.size(0), 20u);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(30000), 10, 303), -1);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(31000), 20, 304), -1);
  EXPECT_EQ(stats(p->client.get(), p->c_conns[0]).sends_eager, 5u);
  EXPECT_EQ(stats(p->server.get(), p->s_conns[0]).eager_held, 5u);
}

// Eager and rendezvous sends of three tags interleaved, receives posted in
// send order at random moments (before, during, after their send), under
// loss, duplication and reordering: every receive gets the message the
// per-tag order assigns to it, byte for byte.
class EagerMixTest : public ::testing::TestWithParam<int> {};

TEST_P(EagerMixTest, EveryMessageReachesItsReceiveUnderFaults) {
  EndpointConfig cfg = eager_config(kEager, 2);
  cfg.rc_mode = GetParam();
  cfg.fault_tx = "drop=0.03,dup=0.02,reorder=0.03:4";
  cfg.fault_seed = 5;
  auto p = Pair::make(cfg);
  ASSERT_TRUE(p);
  constexpr int kMsgs = 300;
  constexpr size_t kMax = 40000;
  std::mt19937_64 rng(42);
  std::vector<size_t> len(kMsgs);
  std::vector<int> tag(kMsgs);
  for (int i = 0; i < kMsgs; ++i) {
    // Mostly eager sizes, some larger (rendezvous), some empty.
    const int kind = static_cast<int>(rng() % 10);
    len[i] = kind == 0 ? 0 : kind < 8 ? rng() % (kEager + 1) : rng() % kMax;
    tag[i] = static_cast<int>(rng() % 3);
  }
  Buf sb(p->client.get(), kMsgs * kMax), rb(p->server.get(), kMsgs * kMax);
  for (int i = 0; i < kMsgs; ++i)
    fill_pattern(sb.ptr(i * kMax), len[i], 1000 + i);
  std::vector<Request> sr(kMsgs), rr(kMsgs);
  // Sender: all sends, up to 48 outstanding, with random pauses.
  std::thread sender([&] {
    std::mt19937_64 r(7);
    for (int i = 0; i < kMsgs; ++i) {
      if (i >= 48) {
        ASSERT_TRUE(p->client->wait(&sr[i - 48], 60000).ok());
      }
      ASSERT_TRUE(p->client
                      ->send_async(p->c_conns[0], sb.ptr(i * kMax), len[i],
                                   sb.mh, &sr[i], tag[i])
                      .ok());
      if (r() % 4 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(r() % 300));
      }
    }
  });
  // Receiver: in send order, up to 16 outstanding, with random pauses.
  std::mt19937_64 r(9);
  for (int i = 0; i < kMsgs; ++i) {
    if (i >= 16) {
      ASSERT_TRUE(p->server->wait(&rr[i - 16], 60000).ok())
          << i - 16 << ": " << rr[i - 16].status();
    }
    ASSERT_TRUE(recv_tagged(p->server.get(), p->s_conns[0], rb.ptr(i * kMax),
                            kMax, rb.mh, &rr[i], tag[i])
                    .ok());
    if (r() % 3 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(r() % 400));
    }
  }
  sender.join();
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_TRUE(p->server->wait(&rr[i], 60000).ok()) << i;
    ASSERT_TRUE(p->client->wait(&sr[i], 60000).ok()) << i;
    ASSERT_EQ(rr[i].size(0), len[i]) << i;
    ASSERT_EQ(find_pattern_mismatch(rb.ptr(i * kMax), len[i], 1000 + i), -1)
        << "message " << i << " tag " << tag[i] << " len " << len[i];
  }
  const FlowStats c = stats(p->client.get(), p->c_conns[0]);
  EXPECT_EQ(c.sends_eager + c.sends_matched, static_cast<uint64_t>(kMsgs));
  EXPECT_GT(c.sends_eager, 0u);
  EXPECT_GT(c.sends_matched, 0u);
  // The faults happened (each kind counted where it was done), and were
  // repaired: by the engine's retransmissions in UC mode, by the NIC's
  // go-back-N resends in RC mode.
  const std::string nic = p->client->nic_counters() + p->server->nic_counters();
  EXPECT_GT(transport::counter_sum(nic, "fault_tx_dropped"), 0u) << nic;
  EXPECT_GT(transport::counter_sum(nic, "fault_tx_duplicated"), 0u) << nic;
  EXPECT_GT(transport::counter_sum(nic, "fault_tx_reordered"), 0u) << nic;
  if (cfg.rc_mode) {
    EXPECT_GT(transport::counter_sum(nic, "rc_retransmits"), 0u) << nic;
  } else {
    EXPECT_GT(c.fast_retransmits + c.rto_retransmits + c.tlp_retransmits, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EagerMixTest, ::testing::Values(0, 1),
                         [](const auto& info) {
                           return info.param ? "RC" : "UC";
                         });

TEST(EagerTest, OffWhenEitherSideTurnsItOff) {
  for (int off_side = 0; off_side < 2; ++off_side) {
    auto p = Pair::make(eager_config(off_side == 0 ? 0 : kEager),
                        eager_config(off_side == 1 ? 0 : kEager));
    ASSERT_TRUE(p);
    exchange(p.get(), 0, {1}, 1);
    Buf sb(p->client.get(), 100), rb(p->server.get(), 100);
    Request sr, rr;
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), 100, sb.mh, &sr).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(sr.done());
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), 100, rb.mh, &rr).ok());
    ASSERT_TRUE(p->server->wait(&rr, 30000).ok());
    ASSERT_TRUE(p->client->wait(&sr, 30000).ok());
    const FlowStats c = stats(p->client.get(), p->c_conns[0]);
    EXPECT_EQ(c.sends_eager, 0u) << off_side;
    EXPECT_EQ(c.eager_slots_free, 0u) << off_side;
  }
}

TEST(EagerTest, BadSettingsAreRefused) {
  EndpointConfig c = eager_config(65537);
  auto a = Endpoint::create(c);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  c = eager_config(4096);
  c.cc = "credit";
  auto b = Endpoint::create(c);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("UCCL_EAGER_BYTES=0"), std::string::npos)
      << b.status();
  c.eager_bytes = -1;  // the default turns itself off with cc=credit
  EXPECT_TRUE(Endpoint::create(c).ok());
}

// An eager send whose receive never comes fails when the peer closes; so
// does the receiver's side of a message it held.
TEST(EagerTest, PeerCloseFailsAnUnmatchedEagerSend) {
  auto p = Pair::make(eager_config());
  ASSERT_TRUE(p);
  warm_up(p.get());
  Buf sb(p->client.get(), 100);
  Request sr;
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), 100, sb.mh, &sr).ok());
  const uint64_t deadline = monotonic_ns() + 20000000000ull;
  while (stats(p->server.get(), p->s_conns[0]).eager_held == 0) {
    ASSERT_LT(monotonic_ns(), deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(p->server->close(p->s_conns[0]).ok());
  Status st = p->client->wait(&sr, 10000);
  EXPECT_EQ(st.code(), StatusCode::kRemoteError) << st;
}

}  // namespace
}  // namespace uccl::testing
