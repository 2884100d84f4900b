// open_channel: descriptors swapped over the channel's own connection (the
// regions in them differ per process, so a write lands only if they were
// really swapped); a peer announcing a bad size or sending nothing fails it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_cores.h"
#include "tests/channels/proxy_fixture.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/knobs.h"
#include "util/pattern.h"

namespace uccl {
UCCL_DECLARE_KNOB(std::string, knob_core_lock_dir);
}  // namespace uccl

namespace uccl::channels {
namespace {

bool has(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// A proxy pinned to a core an engine of this process has says so (and
// logs a warning); one on a core no engine has does not, and counts it as
// used while it runs, so endpoints made meanwhile keep their engines off
// it.
TEST(ChannelSetup, AProxyOnAnEnginesCoreSaysSo) {
  if (allowed_cpus().size() < 2 || !has(allowed_cpus(), 0) ||
      !has(allowed_cpus(), 1)) {
    GTEST_SKIP() << "needs cores 0 and 1";
  }
  // This process's engines only: other tests' engines may hold cores.
  struct NoLockDir {
    std::string old = knob_core_lock_dir().get();
    NoLockDir() { knob_core_lock_dir().set_for_testing(""); }
    ~NoLockDir() { knob_core_lock_dir().set_for_testing(old); }
  } no_lock_dir;
  {
    p2p::Config pc = p2p::test_config(1);
    pc.engine.engine_cores = {0};  // both endpoints' engines
    auto pair = p2p::Pair::make(pc);
    ASSERT_NE(pair, nullptr);
    ProxyConfig on = test_proxy_config(), off = test_proxy_config();
    on.core = 0;
    off.core = 1;
    auto a = ChannelProxy::create(pair->client.get(), on);
    auto b = ChannelProxy::create(pair->server.get(), off);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ASSERT_FALSE(has(engine::cores_claimed_on_host(), 1));
    ASSERT_TRUE((*a)->start().ok());
    ASSERT_TRUE((*b)->start().ok());
    EXPECT_TRUE((*a)->core_shared());
    EXPECT_FALSE((*b)->core_shared());
    EXPECT_TRUE(has(engine::cores_claimed_on_host(), 1));
    ASSERT_TRUE((*b)->stop().ok());
    EXPECT_FALSE(has(engine::cores_claimed_on_host(), 1));
    ASSERT_TRUE((*a)->stop().ok());
  }
}

struct Sides {
  std::vector<uint8_t> mem_a, mem_b;  // first, so freed last (ProxyPair)
  std::unique_ptr<p2p::Pair> p2p;
  std::unique_ptr<ChannelProxy> a, b;
};

Sides make_sides(size_t bytes, int extra_mems_b) {
  Sides s;
  s.p2p = p2p::Pair::make(p2p::test_config(2));
  EXPECT_NE(s.p2p, nullptr);
  if (!s.p2p) return s;
  s.a = std::move(
      *ChannelProxy::create(s.p2p->client.get(), test_proxy_config()));
  s.b = std::move(
      *ChannelProxy::create(s.p2p->server.get(), test_proxy_config()));
  s.mem_a.assign(bytes, 0);
  s.mem_b.assign(bytes, 0);
  EXPECT_TRUE(s.a->register_memory(s.mem_a.data(), bytes).ok());
  EXPECT_TRUE(s.b->register_memory(s.mem_b.data(), bytes).ok());
  // The sides' tables need not be the same length.
  for (int i = 0; i < extra_mems_b; ++i) {
    EXPECT_TRUE(s.b->register_memory(s.mem_b.data(), 64).ok());
  }
  return s;
}

TEST(ChannelSetup, OpenChannelSwapsDescriptorsAndWritesLand) {
  constexpr size_t kBytes = 1 << 20;  // a write (over write_min_bytes)
  Sides s = make_sides(kBytes, 3);
  ASSERT_NE(s.p2p, nullptr);
  Result<uint32_t> cb = Unavailable("");
  std::thread t([&] { cb = s.b->open_channel(s.p2p->s_conn, 10000); });
  auto ca = s.a->open_channel(s.p2p->c_conn, 10000);
  t.join();
  ASSERT_TRUE(ca.ok() && cb.ok()) << ca.status() << cb.status();
  ASSERT_TRUE(s.a->start().ok() && s.b->start().ok());
  const auto ha = *s.a->handle(*ca);
  const auto hb = *s.b->handle(*cb);
  fill_pattern(s.mem_a.data(), kBytes, 3);
  ASSERT_EQ(channel_put_with_signal(ha, 0, 0, 0, 0, kBytes, 0), kChannelOk);
  ASSERT_EQ(channel_wait(hb, 0, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(s.mem_b.data(), kBytes, 3), -1);
  EXPECT_EQ(s.a->stats().writes, 1u);
}

// The peer is a plain p2p program: it announces a descriptor of 2^40
// bytes, sends one that is not a descriptor, or sends nothing at all.
TEST(ChannelSetup, ABadOrSilentPeerFailsOpenChannel) {
  Sides s = make_sides(4096, 0);
  ASSERT_NE(s.p2p, nullptr);
  uint64_t huge = uint64_t{1} << 40, sink = 0;
  auto mr = s.p2p->server->reg(&huge, sizeof(huge));
  auto sink_mr = s.p2p->server->reg(&sink, sizeof(sink));
  ASSERT_TRUE(mr.ok() && sink_mr.ok());
  auto r = s.p2p->server->recv_async(s.p2p->s_conn, *sink_mr, &sink, 8);
  auto w = s.p2p->server->send_async(s.p2p->s_conn, *mr, &huge, 8);
  ASSERT_TRUE(r.ok() && w.ok());
  auto bad = s.a->open_channel(s.p2p->c_conn, 10000);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status();
  EXPECT_NE(bad.status().message().find("1099511627776"), std::string::npos)
      << "names the size: " << bad.status();
  (void)s.p2p->server->wait(*r, 10000);
  (void)s.p2p->server->wait(*w, 10000);

  // A descriptor of the right size that is not one: refused, and the
  // connection closed (the peer's next transfer on it fails).
  Sides g = make_sides(4096, 0);
  ASSERT_NE(g.p2p, nullptr);
  uint64_t len = sizeof(DescHead) + sizeof(DescMem);
  std::vector<uint8_t> junk(len, 0x5a);
  auto len_mr = g.p2p->server->reg(&len, sizeof(len));
  auto junk_mr = g.p2p->server->reg(junk.data(), junk.size());
  auto g_sink = g.p2p->server->reg(&sink, sizeof(sink));
  ASSERT_TRUE(len_mr.ok() && junk_mr.ok() && g_sink.ok());
  std::vector<uint8_t> their(4096);
  auto their_mr = g.p2p->server->reg(their.data(), their.size());
  ASSERT_TRUE(their_mr.ok());
  auto r1 = g.p2p->server->recv_async(g.p2p->s_conn, *g_sink, &sink, 8);
  auto w1 = g.p2p->server->send_async(g.p2p->s_conn, *len_mr, &len, 8);
  auto r2 = g.p2p->server->recv_async(g.p2p->s_conn, *their_mr, their.data(),
                                      their.size());
  auto w2 = g.p2p->server->send_async(g.p2p->s_conn, *junk_mr, junk.data(),
                                      junk.size());
  ASSERT_TRUE(r1.ok() && w1.ok() && r2.ok() && w2.ok());
  auto junk_ch = g.a->open_channel(g.p2p->c_conn, 10000);
  EXPECT_EQ(junk_ch.status().code(), StatusCode::kInvalidArgument)
      << junk_ch.status();
  for (auto h : {*r1, *w1, *r2, *w2}) (void)g.p2p->server->wait(h, 10000);
  auto after = g.p2p->server->send_async(g.p2p->s_conn, *len_mr, &len, 8);
  const Status after_st =
      after.ok() ? g.p2p->server->wait(*after, 5000) : after.status();
  EXPECT_FALSE(after_st.ok());
  EXPECT_NE(after_st.code(), StatusCode::kTimedOut)
      << "the connection is closed, not left open: " << after_st;

  Sides q = make_sides(4096, 0);
  ASSERT_NE(q.p2p, nullptr);
  const uint64_t t0 = monotonic_ns();
  auto silent = q.a->open_channel(q.p2p->c_conn, 300);
  EXPECT_EQ(silent.status().code(), StatusCode::kTimedOut) << silent.status();
  EXPECT_LT(monotonic_ns() - t0, 5000000000ull);
}

// stop() right after a put: what was pushed still goes out (as messages,
// and as a write) before the connection closes.
TEST(ChannelSetup, StopSendsWhatWasPushedBeforeIt) {
  constexpr size_t kBytes = 1 << 20;
  for (size_t write_min : {size_t{0}, size_t{128} << 10}) {
    ProxyConfig cfg = test_proxy_config();
    cfg.write_min_bytes = write_min;
    auto p = ProxyPair::make(kBytes, cfg);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(p->start());
    fill_pattern(p->mem_a.data(), kBytes, 12);
    ASSERT_EQ(channel_put_with_signal(p->ha, 0, 0, 0, 0, kBytes, 0),
              kChannelOk);
    ASSERT_TRUE(p->a->stop().ok());
    ASSERT_EQ(channel_wait(p->hb, 0, 1), kChannelOk)
        << "write_min " << write_min << ": " << p->b->channel_status(0);
    EXPECT_EQ(find_pattern_mismatch(p->mem_b.data(), kBytes, 12), -1);
  }
}

}  // namespace
}  // namespace uccl::channels
