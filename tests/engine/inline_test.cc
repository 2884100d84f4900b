// Inline sends (engine/wire.h, "Inline messages") over the software NIC on
// loopback: which sends go inline, exact bytes, order among eager and
// chunked messages, loss, configuration errors, and the record format.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine/wire.h"
#include "tests/engine/engine_test_util.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

using engine::CtrlMsg;
using engine::CtrlType;
using engine::kCtrlHeaderBytes;
using engine::kMaxInlineBytes;

FlowStats stats(Endpoint* ep, ConnId c) {
  auto s = ep->conn_stats(c);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : FlowStats{};
}

// The server offers eager slots (its receive buffers are host memory); the
// client sends inline but never eagerly, so a send taken before its
// receive's descriptor waits for it and then goes inline, whatever the
// timing.
std::unique_ptr<Pair> inline_pair(int64_t inline_bytes = -1) {
  EndpointConfig s = test_config(1, 2);
  s.eager_bytes = 16384;
  EndpointConfig c = s;
  c.eager_bytes = 0;
  c.inline_bytes = inline_bytes < 0 ? kMaxInlineBytes : inline_bytes;
  auto p = Pair::make(s, c);
  if (p) exchange(p.get(), 0, {1}, 1);  // the server's grants arrive
  return p;
}

// One send of `len` bytes into a receive of `cap`; returns the statuses.
void send_one(Pair* p, size_t len, size_t cap, uint64_t seed, Status* ss,
              Status* rs, size_t* got) {
  Buf sb(p->client.get(), std::max<size_t>(len, 1));
  Buf rb(p->server.get(), std::max<size_t>(cap, 1));
  fill_pattern(sb.ptr(), len, seed);
  Request sr, rr;
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), len, sb.mh, &sr).ok());
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), cap, rb.mh, &rr).ok());
  *ss = p->client->wait(&sr, 60000);
  *rs = p->server->wait(&rr, 60000);
  *got = rr.size(0);
  if (rs->ok()) {
    ASSERT_EQ(find_pattern_mismatch(rb.ptr(), len, seed), -1) << "len " << len;
  }
}

TEST(InlineWireTest, RecordsArePaddedBoundedAndParsedInPlace) {
  uint8_t batch[engine::kCtrlBatchBytes] = {};
  CtrlMsg h{};
  h.type = static_cast<uint32_t>(CtrlType::kInline);
  h.slot = 3;
  h.n = 1;
  h.read_len = 5;
  ASSERT_EQ(engine::ctrl_record_bytes(h), kCtrlHeaderBytes + 8u);
  std::memcpy(batch, &h, kCtrlHeaderBytes);
  std::memcpy(batch + kCtrlHeaderBytes, "hello", 5);
  CtrlMsg d{};  // a descriptor right after it
  d.type = static_cast<uint32_t>(CtrlType::kRecvDesc);
  d.slot = 4;
  d.n = 1;
  d.bufs[0] = engine::RecvBuf{0x1000, 64, 7, 0};
  const uint32_t dlen = static_cast<uint32_t>(engine::ctrl_record_bytes(d));
  std::memcpy(batch + 40, &d, dlen);
  CtrlMsg m;
  ASSERT_EQ(engine::parse_ctrl_msg(batch, 40 + dlen, &m), 40u);
  EXPECT_EQ(m.type, h.type);
  EXPECT_EQ(m.read_len, 5u);
  EXPECT_EQ(m.bufs[0].addr, 0u) << "the payload is no entry";
  EXPECT_EQ(engine::ctrl_msg_problem(m), nullptr);
  ASSERT_EQ(engine::parse_ctrl_msg(batch + 40, dlen, &m), dlen);
  EXPECT_EQ(m.bufs[0].addr, 0x1000u);
  // Cut short, or claiming more payload than a SEND holds: refused.
  EXPECT_EQ(engine::parse_ctrl_msg(batch, 39, &m), 0u);
  h.read_len = kMaxInlineBytes + 1;
  std::memcpy(batch, &h, kCtrlHeaderBytes);
  EXPECT_EQ(engine::parse_ctrl_msg(batch, sizeof(batch), &m), 0u);
  h.read_len = 0xfffffff9u;  // padding must not wrap the length
  std::memcpy(batch, &h, kCtrlHeaderBytes);
  EXPECT_EQ(engine::parse_ctrl_msg(batch, sizeof(batch), &m), 0u);
  // A buffer index or slot outside the peer's space is a problem.
  h.read_len = 5;
  h.n = kMaxRecvsPerRequest;
  EXPECT_NE(engine::ctrl_msg_problem(h), nullptr);
  h.n = 0;
  h.slot = engine::Imm::kSlots;
  EXPECT_NE(engine::ctrl_msg_problem(h), nullptr);
}

// Up to the limit a send to a posted receive goes inline: no chunk, no
// engine ACK, every byte there. One byte more goes as a chunk, as does a
// send larger than its receive (which reports the truncation on both
// sides as before).
TEST(InlineTest, SmallSendsToAPostedReceiveGoInlineWithNoChunkOrAck) {
  auto p = inline_pair();
  ASSERT_TRUE(p);
  uint64_t seed = 10;
  for (size_t len : {size_t{0}, size_t{1}, size_t{255}, size_t{992}}) {
    const FlowStats c0 = stats(p->client.get(), p->c_conns[0]);
    const FlowStats s0 = stats(p->server.get(), p->s_conns[0]);
    Status ss, rs;
    size_t got = 0;
    send_one(p.get(), len, 4096, ++seed, &ss, &rs, &got);
    ASSERT_TRUE(ss.ok()) << ss;
    ASSERT_TRUE(rs.ok()) << rs;
    EXPECT_EQ(got, len);
    const FlowStats c1 = stats(p->client.get(), p->c_conns[0]);
    const FlowStats s1 = stats(p->server.get(), p->s_conns[0]);
    EXPECT_EQ(c1.sends_inline, c0.sends_inline + 1) << len;
    EXPECT_EQ(c1.tx_chunks, c0.tx_chunks) << len;
    EXPECT_EQ(s1.inline_received, s0.inline_received + 1) << len;
    EXPECT_EQ(s1.acks_sent, s0.acks_sent) << len;
  }
  const FlowStats c0 = stats(p->client.get(), p->c_conns[0]);
  Status ss, rs;
  size_t got = 0;
  send_one(p.get(), 993, 4096, ++seed, &ss, &rs, &got);
  ASSERT_TRUE(ss.ok() && rs.ok()) << ss << " " << rs;
  EXPECT_EQ(got, 993u);
  send_one(p.get(), 500, 100, ++seed, &ss, &rs, &got);
  EXPECT_EQ(ss.code(), StatusCode::kTruncated) << ss;
  EXPECT_EQ(rs.code(), StatusCode::kTruncated) << rs;
  const FlowStats c1 = stats(p->client.get(), p->c_conns[0]);
  EXPECT_EQ(c1.sends_inline, c0.sends_inline);
  EXPECT_EQ(c1.tx_chunks, c0.tx_chunks + 2);
}

TEST(InlineTest, OffWhenConfiguredOff) {
  auto p = inline_pair(0);
  ASSERT_TRUE(p);
  Status ss, rs;
  size_t got = 0;
  send_one(p.get(), 100, 4096, 3, &ss, &rs, &got);
  ASSERT_TRUE(ss.ok() && rs.ok()) << ss << " " << rs;
  EXPECT_EQ(stats(p->client.get(), p->c_conns[0]).sends_inline, 0u);
}

// Default settings on both sides (eager and inline on): batches of sends
// of every kind (inline, eager, chunked) posted before or after their
// receives, in a seeded random mix; each receive gets its own message.
// An eager send must not take the receive an inline one before it names.
TEST(InlineTest, InlineEagerAndChunkedMessagesMatchInSendOrder) {
  EndpointConfig cfg = test_config(1, 2);
  auto p = Pair::make(cfg);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {1}, 1);
  const size_t kMax = 70000;
  std::vector<std::unique_ptr<Buf>> sbufs, rbufs;
  for (int i = 0; i < 4; ++i) {
    sbufs.push_back(std::make_unique<Buf>(p->client.get(), kMax));
    rbufs.push_back(std::make_unique<Buf>(p->server.get(), kMax));
  }
  std::mt19937 rng(42);
  const size_t kinds[] = {0, 200, 992, 5000, 16384, kMax};
  uint64_t seed = 1000;
  for (int round = 0; round < 150; ++round) {
    const int n = 1 + static_cast<int>(rng() % 4);
    const bool recv_first = rng() % 2;
    size_t len[4];
    Request sr[4], rr[4];
    auto post_recvs = [&] {
      for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(p->server
                        ->recv_async(p->s_conns[0], rbufs[i]->ptr(), kMax,
                                     rbufs[i]->mh, &rr[i])
                        .ok());
      }
    };
    if (recv_first) post_recvs();
    for (int i = 0; i < n; ++i) {
      len[i] = kinds[rng() % 6];
      fill_pattern(sbufs[i]->ptr(), len[i], seed + i);
      ASSERT_TRUE(p->client
                      ->send_async(p->c_conns[0], sbufs[i]->ptr(), len[i],
                                   sbufs[i]->mh, &sr[i])
                      .ok());
    }
    if (!recv_first) post_recvs();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(p->client->wait(&sr[i], 60000).ok()) << sr[i].status();
      ASSERT_TRUE(p->server->wait(&rr[i], 60000).ok()) << rr[i].status();
      ASSERT_EQ(rr[i].size(0), len[i]) << "round " << round << " msg " << i;
      ASSERT_EQ(find_pattern_mismatch(rbufs[i]->ptr(), len[i], seed + i), -1)
          << "round " << round << " msg " << i;
    }
    seed += n;
  }
}

// The order hazard itself, by construction: S1 goes inline into R1 (its
// descriptor is known), S2 right behind it has no receive yet and would go
// eager. Written at once, S2's chunk leaves in the same NIC round ahead of
// the control SEND (data first) and the receiver, seeing R1 unclaimed,
// would give it R1. So S2 waits for S1 to complete: R1 gets S1, R2 gets
// S2, and the connection stays up.
TEST(InlineTest, AnEagerSendWaitsForTheInlineOneBeforeIt) {
  auto p = Pair::make(test_config(1, 2));
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {1}, 1);  // the server's eager slots are granted
  Endpoint* client = p->client.get();
  Endpoint* server = p->server.get();
  for (int round = 0; round < 20; ++round) {
    Buf s1(client, 300), s2(client, 300), r1(server, 300), r2(server, 300);
    fill_pattern(s1.ptr(), 300, 2 * round + 1);
    fill_pattern(s2.ptr(), 300, 2 * round + 2);
    const FlowStats c0 = stats(client, p->c_conns[0]);
    Request rr1, rr2, sr1, sr2;
    ASSERT_TRUE(
        server->recv_async(p->s_conns[0], r1.ptr(), 300, r1.mh, &rr1).ok());
    const uint64_t deadline = monotonic_ns() + 20000000000ull;
    while (stats(client, p->c_conns[0]).recv_descs_received ==
           c0.recv_descs_received) {
      ASSERT_LT(monotonic_ns(), deadline) << "the descriptor never came";
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ASSERT_TRUE(
        client->send_async(p->c_conns[0], s1.ptr(), 300, s1.mh, &sr1).ok());
    ASSERT_TRUE(
        client->send_async(p->c_conns[0], s2.ptr(), 300, s2.mh, &sr2).ok());
    ASSERT_TRUE(client->wait(&sr1, 60000).ok()) << sr1.status();
    ASSERT_TRUE(
        server->recv_async(p->s_conns[0], r2.ptr(), 300, r2.mh, &rr2).ok());
    ASSERT_TRUE(client->wait(&sr2, 60000).ok()) << sr2.status();
    ASSERT_TRUE(server->wait(&rr1, 60000).ok()) << rr1.status();
    ASSERT_TRUE(server->wait(&rr2, 60000).ok()) << rr2.status();
    ASSERT_EQ(find_pattern_mismatch(r1.ptr(), 300, 2 * round + 1), -1);
    ASSERT_EQ(find_pattern_mismatch(r2.ptr(), 300, 2 * round + 2), -1);
    const FlowStats c1 = stats(client, p->c_conns[0]);
    EXPECT_EQ(c1.sends_inline, c0.sends_inline + 1) << round;
  }
}

// The control QP retransmits what the network loses: a ping-pong of inline
// messages under 5% loss each way arrives whole, in order.
TEST(InlineTest, PingPongSurvivesLoss) {
  EndpointConfig s = test_config(1, 2);
  s.eager_bytes = 16384;
  s.fault_tx = "drop=0.05";
  s.fault_seed = 5;
  EndpointConfig c = s;
  c.eager_bytes = 0;
  c.inline_bytes = kMaxInlineBytes;
  c.fault_seed = 6;
  auto p = Pair::make(s, c);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {1}, 1);
  std::vector<size_t> sizes;
  for (int i = 0; i < 200; ++i) sizes.push_back((i * 37) % 993);
  exchange(p.get(), 0, sizes, 77);
  EXPECT_GT(stats(p->client.get(), p->c_conns[0]).sends_inline, 150u);
}

TEST(InlineTest, BadSizesAreRefused) {
  EndpointConfig c = test_config(1, 2);
  c.inline_bytes = kMaxInlineBytes + 1;
  auto e = Endpoint::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  c.inline_bytes = 100;
  c.eager_bytes = 0;
  c.cc = "credit";
  e = Endpoint::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("inline"), std::string::npos);
}

}  // namespace
}  // namespace uccl::testing
