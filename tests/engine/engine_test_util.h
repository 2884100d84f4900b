// Test helpers for the engine: a connected pair of endpoints on loopback
// (optionally with faults), registered buffers, and bounded waits.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "uccl/endpoint.h"
#include "util/pattern.h"

namespace uccl::testing {

inline EndpointConfig test_config(int engines = 1, uint32_t paths = 2) {
  EndpointConfig c;
  c.device = "udp:lo";
  c.num_engines = engines;
  c.paths = paths;
  c.chunk_bytes = 64 * 1024;
  return c;
}

struct Pair {
  std::unique_ptr<Endpoint> server, client;
  std::vector<ConnId> s_conns, c_conns;  // s_conns[i] <-> c_conns[i]

  // Creates two endpoints and `flows` connections between them.
  static std::unique_ptr<Pair> make(const EndpointConfig& scfg,
                                    const EndpointConfig& ccfg, int flows = 1) {
    auto p = std::make_unique<Pair>();
    auto s = Endpoint::create(scfg);
    auto c = Endpoint::create(ccfg);
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(c.ok()) << c.status();
    if (!s.ok() || !c.ok()) return nullptr;
    p->server = std::move(*s);
    p->client = std::move(*c);
    auto port = p->server->listen(0);
    EXPECT_TRUE(port.ok()) << port.status();
    for (int i = 0; i < flows; ++i) {
      Result<ConnId> acc = Status(StatusCode::kUnavailable, "");
      std::thread t([&] { acc = p->server->accept(20000); });
      auto cc = p->client->connect("127.0.0.1", *port, 20000);
      t.join();
      EXPECT_TRUE(cc.ok()) << cc.status();
      EXPECT_TRUE(acc.ok()) << acc.status();
      if (!cc.ok() || !acc.ok()) return nullptr;
      p->c_conns.push_back(*cc);
      p->s_conns.push_back(*acc);
    }
    return p;
  }
  static std::unique_ptr<Pair> make(const EndpointConfig& cfg, int flows = 1) {
    return make(cfg, cfg, flows);
  }
};

// A registered host buffer.
struct Buf {
  std::vector<uint8_t> data;
  MrHandle* mh = nullptr;
  Endpoint* ep = nullptr;
  Buf(Endpoint* e, size_t n) : data(n), ep(e) {
    auto r = e->reg_mr(data.data(), n);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) mh = *r;
  }
  ~Buf() {
    if (mh) ep->dereg_mr(mh);
  }
  uint8_t* ptr(size_t off = 0) { return data.data() + off; }
};

}  // namespace uccl::testing
