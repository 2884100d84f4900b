// Striped transfers (uccl/striped.h) between two endpoints on loopback:
// byte-exact messages of every size around the stripe in each parts mode,
// FIFO order under many outstanding messages, early completion, bad input.
#include "uccl/striped.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/engine/engine_test_util.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

constexpr int kConns = 3;
constexpr size_t kStripe = 100000;  // not whole chunks: short last chunks

struct Groups {
  std::unique_ptr<Pair> pair;
  std::unique_ptr<StripedConn> tx, rx;
};

Groups make_groups(PartsMode mode, int max_requests = 8,
                   size_t rx_stripe = kStripe) {
  Groups g;
  g.pair = Pair::make(test_config(2, 2), kConns);
  if (!g.pair) return g;
  auto tx = StripedConn::create(g.pair->client.get(), g.pair->c_conns, kStripe,
                                mode, max_requests);
  auto rx = StripedConn::create(g.pair->server.get(), g.pair->s_conns,
                                rx_stripe, mode, max_requests);
  EXPECT_TRUE(tx.ok()) << tx.status();
  EXPECT_TRUE(rx.ok()) << rx.status();
  if (tx.ok()) g.tx = std::move(*tx);
  if (rx.ok()) g.rx = std::move(*rx);
  return g;
}

// Tests the send `s` and the receive `r` until both are done (at most
// 20 s), as NCCL's proxy threads drive both sides at once: a receiver posts
// a striped message's later parts from test(), and the sender's parts wait
// for them. The completions' statuses go to *ss and *rs.
void finish(Groups& g, StripedRequest* s, size_t* sent, Status* ss,
            StripedRequest* r, size_t* got, Status* rs) {
  const uint64_t until = monotonic_ns() + 20000000000ull;
  bool s_done = false, r_done = false;
  *ss = *rs = Status(StatusCode::kTimedOut, "not done in 20 s");
  while ((!s_done || !r_done) && monotonic_ns() < until) {
    if (!s_done) {
      Status st = g.tx->test(s, &s_done, sent);
      if (s_done || !st.ok()) *ss = st, s_done = true;
    }
    if (!r_done) {
      Status st = g.rx->test(r, &r_done, got);
      if (r_done || !st.ok()) *rs = st, r_done = true;
    }
    std::this_thread::yield();
  }
}

// Posts until taken (an engine queue may be full for a moment).
template <typename Post>
void post(Post p) {
  const uint64_t until = monotonic_ns() + 20000000000ull;
  bool taken = false;
  while (!taken && monotonic_ns() < until) {
    ASSERT_TRUE(p(&taken).ok());
    if (!taken) std::this_thread::yield();
  }
  ASSERT_TRUE(taken);
}

class StripedModes : public ::testing::TestWithParam<PartsMode> {};

TEST_P(StripedModes, EverySizeAroundTheStripeArrivesByteExact) {
  Groups g = make_groups(GetParam());
  ASSERT_TRUE(g.tx && g.rx);
  const size_t kBuf = kConns * kStripe + 4096;
  std::vector<uint8_t> out(kBuf), in(kBuf);
  auto out_mr = g.pair->client->reg_mr(out.data(), out.size());
  auto in_mr = g.pair->server->reg_mr(in.data(), in.size());
  ASSERT_TRUE(out_mr.ok() && in_mr.ok());
  const size_t sizes[] = {0,
                          1,
                          kStripe - 1,
                          kStripe,
                          kStripe + 1,
                          2 * kStripe + 7,
                          kConns * kStripe,
                          kBuf};
  uint32_t seed = 1;
  for (size_t len : sizes) {
    fill_pattern(out.data(), len, seed);
    std::memset(in.data(), 0xEE, in.size());
    StripedRequest s, r;
    post([&](bool* t) {
      return g.rx->recv(&r, in.data(), in.size(), *in_mr, 0, t);
    });
    post([&](bool* t) {
      return g.tx->send(&s, out.data(), len, *out_mr, 0, t);
    });
    size_t sent = 0, got = 0;
    Status ss, rs;
    finish(g, &s, &sent, &ss, &r, &got, &rs);
    ASSERT_TRUE(ss.ok()) << len << ": " << ss;
    ASSERT_TRUE(rs.ok()) << len << ": " << rs;
    EXPECT_EQ(sent, len);
    EXPECT_EQ(got, len);
    EXPECT_EQ(find_pattern_mismatch(in.data(), len, seed), -1) << len;
    if (len < in.size()) {
      EXPECT_EQ(in[len], 0xEE) << "wrote past " << len;
    }
    // An early completion's empty parts finish too.
    const uint64_t until = monotonic_ns() + 20000000000ull;
    while ((!g.tx->reusable(&s) || !g.rx->reusable(&r)) &&
           monotonic_ns() < until) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(g.tx->reusable(&s) && g.rx->reusable(&r));
    ++seed;
  }
  EXPECT_TRUE(g.tx->broken().ok());
  EXPECT_TRUE(g.rx->broken().ok());
  g.pair->client->dereg_mr(*out_mr);
  g.pair->server->dereg_mr(*in_mr);
}

TEST_P(StripedModes, ManyOutstandingMessagesPairUpInOrder) {
  // Up to 8 messages in flight each way, sizes alternating around the
  // stripe (kAuto switches per message), each landing in its own buffer.
  constexpr int kMsgs = 48, kDepth = 8;
  Groups g = make_groups(GetParam(), kDepth);
  ASSERT_TRUE(g.tx && g.rx);
  const size_t kBuf = kConns * kStripe;
  std::vector<std::vector<uint8_t>> out(kDepth, std::vector<uint8_t>(kBuf)),
      in(kDepth, std::vector<uint8_t>(kBuf));
  std::vector<MrHandle*> out_mr, in_mr;
  for (int i = 0; i < kDepth; ++i) {
    out_mr.push_back(*g.pair->client->reg_mr(out[i].data(), kBuf));
    in_mr.push_back(*g.pair->server->reg_mr(in[i].data(), kBuf));
  }
  auto len_of = [&](int m) -> size_t {
    return (m / 5) % 2 ? 2 * kStripe + m : 1000 + m;
  };
  std::vector<StripedRequest> s(kDepth), r(kDepth);
  for (int m = 0; m < kMsgs + kDepth; ++m) {
    const int slot = m % kDepth;
    if (m >= kDepth) {  // the message that used this slot finishes
      const int old = m - kDepth;
      size_t sent = 0, got = 0;
      Status ss, rs;
      finish(g, &s[slot], &sent, &ss, &r[slot], &got, &rs);
      ASSERT_TRUE(ss.ok()) << old << ": " << ss;
      ASSERT_TRUE(rs.ok()) << old << ": " << rs;
      ASSERT_EQ(got, len_of(old)) << old;
      ASSERT_EQ(find_pattern_mismatch(in[slot].data(), got, 100 + old), -1)
          << old;
      const uint64_t until = monotonic_ns() + 20000000000ull;
      while ((!g.tx->reusable(&s[slot]) || !g.rx->reusable(&r[slot])) &&
             monotonic_ns() < until) {
        std::this_thread::yield();
      }
    }
    if (m >= kMsgs) continue;
    fill_pattern(out[slot].data(), len_of(m), 100 + m);
    post([&](bool* t) {
      return g.rx->recv(&r[slot], in[slot].data(), kBuf, in_mr[slot], 0, t);
    });
    post([&](bool* t) {
      return g.tx->send(&s[slot], out[slot].data(), len_of(m), out_mr[slot], 0,
                        t);
    });
  }
  EXPECT_EQ(g.tx->counters().messages, static_cast<uint64_t>(kMsgs));
  EXPECT_EQ(g.rx->counters().messages, static_cast<uint64_t>(kMsgs));
  if (GetParam() == PartsMode::kFirst) {
    EXPECT_EQ(g.rx->counters().all_parts_messages, 0u);
  } else if (GetParam() == PartsMode::kAll) {
    EXPECT_EQ(g.rx->counters().all_parts_messages,
              static_cast<uint64_t>(kMsgs));
    // Every message shorter than a stripe is done with its part 0.
    uint64_t small = 0;
    for (int m = 0; m < kMsgs; ++m) small += len_of(m) < kStripe;
    EXPECT_EQ(g.rx->counters().early_messages, small);
    EXPECT_EQ(g.tx->counters().early_messages, small);
  } else {
    // kAuto: all parts where the message 32 before was striped.
    uint64_t want = 0;
    for (int m = kPartsHistory; m < kMsgs; ++m) {
      want += len_of(m - kPartsHistory) >= kStripe;
    }
    EXPECT_EQ(g.rx->counters().all_parts_messages, want);
    EXPECT_EQ(g.tx->counters().all_parts_messages, want);
  }
  for (int i = 0; i < kDepth; ++i) {
    g.pair->client->dereg_mr(out_mr[i]);
    g.pair->server->dereg_mr(in_mr[i]);
  }
}

std::string mode_name(const ::testing::TestParamInfo<PartsMode>& i) {
  static const char* const kNames[] = {"first", "all", "auto"};
  return kNames[static_cast<int>(i.param)];
}

INSTANTIATE_TEST_SUITE_P(Modes, StripedModes,
                         ::testing::Values(PartsMode::kFirst, PartsMode::kAll,
                                           PartsMode::kAuto),
                         mode_name);

TEST(Striped, BadGroupsAreRefused) {
  auto p = Pair::make(test_config(1, 1), 1);
  ASSERT_TRUE(p);
  Endpoint* ep = p->client.get();
  EXPECT_FALSE(
      StripedConn::create(nullptr, p->c_conns, 1024, PartsMode::kFirst, 1)
          .ok());
  EXPECT_FALSE(StripedConn::create(ep, {}, 1024, PartsMode::kFirst, 1).ok());
  EXPECT_FALSE(StripedConn::create(ep, std::vector<ConnId>(17, p->c_conns[0]),
                                   1024, PartsMode::kFirst, 1)
                   .ok());
  EXPECT_FALSE(
      StripedConn::create(ep, p->c_conns, 0, PartsMode::kFirst, 1).ok());
  EXPECT_FALSE(
      StripedConn::create(ep, p->c_conns, 1024, PartsMode::kFirst, 0).ok());
  EXPECT_FALSE(
      StripedConn::create(ep, p->c_conns, 1024, static_cast<PartsMode>(3), 1)
          .ok());
}

TEST(Striped, MismatchedStripesFailTheReceiveNotTheProcess) {
  // The receiver cuts at a smaller stripe than the sender: a message the
  // sender sends whole on connection 0 does not fit the receiver's part 0.
  Groups g = make_groups(PartsMode::kFirst, 8, kStripe / 2);
  ASSERT_TRUE(g.tx && g.rx);
  std::vector<uint8_t> out(kStripe), in(kConns * kStripe);
  auto out_mr = g.pair->client->reg_mr(out.data(), out.size());
  auto in_mr = g.pair->server->reg_mr(in.data(), in.size());
  StripedRequest s, r;
  post([&](bool* t) {
    return g.rx->recv(&r, in.data(), in.size(), *in_mr, 0, t);
  });
  post([&](bool* t) {
    return g.tx->send(&s, out.data(), kStripe - 1, *out_mr, 0, t);
  });
  size_t got = 0, sent = 0;
  Status ss, rs;
  finish(g, &s, &sent, &ss, &r, &got, &rs);
  EXPECT_EQ(rs.code(), StatusCode::kTruncated) << rs;
  EXPECT_EQ(ss.code(), StatusCode::kTruncated) << ss;
  g.pair->client->dereg_mr(*out_mr);
  g.pair->server->dereg_mr(*in_mr);
}

}  // namespace
}  // namespace uccl::testing
