// Two p2p endpoints connected on loopback, registered buffers and a
// bounded poll of both sides, shared by the p2p tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "uccl/p2p.h"
#include "util/clock.h"
#include "util/pattern.h"

namespace uccl::p2p {

inline Config test_config(int cpus = 2) {
  Config c;
  c.num_cpus = cpus;
  c.stripe_bytes = 256 << 10;
  c.engine.device = "udp:lo";
  c.engine.chunk_bytes = 64 << 10;
  return c;
}

struct Pair {
  std::unique_ptr<Endpoint> server, client;
  ConnHandle s_conn = 0, c_conn = 0;

  static std::unique_ptr<Pair> make(const Config& cfg = test_config()) {
    auto p = std::make_unique<Pair>();
    auto s = Endpoint::create(cfg);
    auto c = Endpoint::create(cfg);
    EXPECT_TRUE(s.ok() && c.ok()) << s.status() << c.status();
    if (!s.ok() || !c.ok()) return nullptr;
    p->server = std::move(*s);
    p->client = std::move(*c);
    auto port = p->server->listen(0);
    EXPECT_TRUE(port.ok()) << port.status();
    if (!port.ok()) return nullptr;
    Result<ConnHandle> acc = Unavailable("");
    std::thread t([&] { acc = p->server->accept(20000); });
    auto conn = p->client->connect("127.0.0.1", *port, 20000);
    t.join();
    EXPECT_TRUE(conn.ok() && acc.ok()) << conn.status() << acc.status();
    if (!conn.ok() || !acc.ok()) return nullptr;
    p->c_conn = *conn;
    p->s_conn = *acc;
    return p;
  }
};

struct Mem {
  std::vector<uint8_t> data;
  MrId id = 0;
  Mem(Endpoint* ep, size_t n) : data(std::max<size_t>(n, 1)) {
    auto r = ep->reg(data.data(), data.size());
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) id = *r;
  }
  uint8_t* ptr(size_t off = 0) { return data.data() + off; }
};

// A receiver posts a striped message's later parts while it polls, so in
// one thread both sides are polled (bounded) until both are done.
inline void wait_both(Pair* p, XferHandle s, XferHandle r,
                      size_t* sent = nullptr, size_t* got = nullptr) {
  bool s_done = false, r_done = false;
  const uint64_t deadline = monotonic_ns() + 30000000000ull;
  while (!(s_done && r_done)) {
    ASSERT_LT(monotonic_ns(), deadline) << "transfers not done";
    if (!s_done) {
      auto d = p->client->poll(s, sent);
      ASSERT_TRUE(d.ok()) << d.status();
      s_done = *d;
    }
    if (!r_done) {
      auto d = p->server->poll(r, got);
      ASSERT_TRUE(d.ok()) << d.status();
      r_done = *d;
    }
  }
}

// Sends each size client->server and checks every byte and both counts.
inline void send_recv(Pair* p, const std::vector<size_t>& sizes,
                      uint64_t seed) {
  size_t max = 1;
  for (size_t s : sizes) max = std::max(max, s);
  Mem sb(p->client.get(), max), rb(p->server.get(), max);
  for (size_t len : sizes) {
    ++seed;
    fill_pattern(sb.ptr(), len, seed);
    auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(), max);
    auto s = p->client->send_async(p->c_conn, sb.id, sb.ptr(), len);
    ASSERT_TRUE(r.ok() && s.ok()) << r.status() << s.status();
    size_t sent = 0, got = 0;
    wait_both(p, *s, *r, &sent, &got);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(sent, len);
    EXPECT_EQ(got, len);
    ASSERT_EQ(find_pattern_mismatch(rb.ptr(), len, seed), -1) << "len " << len;
  }
}

}  // namespace uccl::p2p
