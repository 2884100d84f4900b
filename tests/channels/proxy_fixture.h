// Two channel proxies over one p2p connection on loopback (the CPU
// stand-in: host memory, CPU threads calling the device API).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "channels/proxy.h"
#include "tests/p2p/p2p_fixture.h"

namespace uccl::channels {

// The device API as the tests' CPU threads call it.
using device::channel_flush;
using device::channel_put;
using device::channel_put_with_signal;
using device::channel_signal;
using device::channel_wait;
using device::ChannelHandle;
using device::kChannelFailed;
using device::kChannelOk;
using device::kChannelTimedOut;

// A stand-in device's page-locked host memory: aligned heap memory.
class TestDeviceMemory : public p2p::DeviceMemory {
 public:
  Result<void*> alloc_host(size_t len) override {
    void* p = std::aligned_alloc(4096, (len + 4095) & ~size_t{4095});
    if (p == nullptr) return ResourceExhausted("no memory");
    return p;
  }
  void free_host(void* p) override { std::free(p); }
};

// One more connection from `client` to `server` (listening already): the
// client's end and the server's.
inline Result<std::pair<p2p::ConnHandle, p2p::ConnHandle>> connect_more(
    p2p::Endpoint* server, p2p::Endpoint* client) {
  UCCL_ASSIGN_OR_RETURN(std::string where, server->metadata());
  Result<p2p::ConnHandle> acc = Unavailable("");
  std::thread t([&] { acc = server->accept(20000); });
  auto conn = client->connect_by_metadata(where, 20000);
  t.join();
  if (!conn.ok()) return conn.status();
  if (!acc.ok()) return acc.status();
  return std::make_pair(*conn, *acc);
}

inline ProxyConfig test_proxy_config() {
  ProxyConfig c;
  c.fifo_slots = 64;
  c.num_semaphores = 8;
  c.piece_bytes = 64 << 10;
  c.buffers = 4;
  c.timeout_ns = 20000000000ull;
  return c;
}

// Two proxies over one p2p connection; memory 0 of each side: `bytes`.
struct ProxyPair {
  // Declared first, so freed last: the engines may still place a peer's
  // datagrams into registered memory until the endpoints are gone.
  std::vector<uint8_t> mem_a, mem_b;
  std::unique_ptr<p2p::Pair> p2p;
  std::unique_ptr<ChannelProxy> a, b;  // client side, server side
  device::ChannelHandle ha{}, hb{};

  static std::unique_ptr<ProxyPair> make(
      size_t bytes, const ProxyConfig& cfg = test_proxy_config(),
      const p2p::Config& pc = p2p::test_config(1)) {
    auto p = std::make_unique<ProxyPair>();
    p->p2p = p2p::Pair::make(pc);
    if (!p->p2p) return nullptr;
    auto a = ChannelProxy::create(p->p2p->client.get(), cfg);
    auto b = ChannelProxy::create(p->p2p->server.get(), cfg);
    EXPECT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    if (!a.ok() || !b.ok()) return nullptr;
    p->a = std::move(*a);
    p->b = std::move(*b);
    p->mem_a.assign(bytes, 0);
    p->mem_b.assign(bytes, 0);
    EXPECT_EQ(*p->a->register_memory(p->mem_a.data(), bytes), 0u);
    EXPECT_EQ(*p->b->register_memory(p->mem_b.data(), bytes), 0u);
    auto ca = p->a->add_channel(p->p2p->c_conn, p->b->descriptor());
    auto cb = p->b->add_channel(p->p2p->s_conn, p->a->descriptor());
    EXPECT_TRUE(ca.ok() && cb.ok()) << ca.status() << cb.status();
    if (!ca.ok() || !cb.ok()) return nullptr;
    p->ha = *p->a->handle(*ca);
    p->hb = *p->b->handle(*cb);
    return p;
  }
  bool start() { return a->start().ok() && b->start().ok(); }
};

}  // namespace uccl::channels
