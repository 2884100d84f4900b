// Test helpers for the engine: a connected pair of endpoints on loopback
// (optionally with faults), registered buffers, and bounded waits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "engine/endpoint_impl.h"
#include "uccl/endpoint.h"
#include "util/knobs.h"
#include "util/pattern.h"

namespace uccl {
// Engine knobs the tests set (engine/endpoint_config.cc).
UCCL_DECLARE_KNOB(int64_t, knob_rto_min_us);
UCCL_DECLARE_KNOB(int64_t, knob_ack_delay_us);
UCCL_DECLARE_KNOB(bool, knob_cc_shared_floor);
UCCL_DECLARE_KNOB(bool, knob_tlp);
}  // namespace uccl

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

// Sets a knob for the endpoints this scope creates, and back afterwards.
template <typename T>
class KnobOverride {
 public:
  KnobOverride(Knob<T>& k, T v) : k_(k), old_(k.get()) {
    k_.set_for_testing(v);
  }
  ~KnobOverride() { k_.set_for_testing(old_); }
  KnobOverride(const KnobOverride&) = delete;
  KnobOverride& operator=(const KnobOverride&) = delete;

 private:
  Knob<T>& k_;
  T old_;
};
template <typename T, typename V>
KnobOverride(Knob<T>&, V) -> KnobOverride<T>;

// The Endpoint's test hooks (friend of Endpoint).
class EndpointTestAccess {
 public:
  // Engine `engine` damages the next eager header or receive descriptor it
  // writes as `fault` (a UcclRDMAEngine::WireFault) says.
  static Status inject_wire_fault(Endpoint* ep, int engine, uint32_t fault) {
    using engine::UcclRDMAEngine;
    UCCL_RETURN_IF_ERROR(
        ep->impl_->check_engine("inject_wire_fault", engine, nullptr));
    if (fault > static_cast<uint32_t>(UcclRDMAEngine::WireFault::kLast)) {
      return InvalidArgument("no such wire fault");
    }
    ep->impl_->engines[engine]->inject_wire_fault(
        static_cast<UcclRDMAEngine::WireFault>(fault));
    return Status::OK();
  }
  // True while the engine is blocked in its idle wait.
  static Result<bool> engine_waiting(const Endpoint* ep, int engine) {
    UCCL_RETURN_IF_ERROR(
        ep->impl_->check_engine("engine_waiting", engine, nullptr));
    return ep->impl_->engines[engine]->waiting();
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

// Sends each size client->server on connection `conn`, one message at a
// time (message k with pattern seed seed0 + 1 + k), and checks every byte.
inline void exchange(Pair* p, size_t conn, const std::vector<size_t>& sizes,
                     uint64_t seed0) {
  size_t max = 1;
  for (size_t s : sizes) max = std::max(max, s);
  Buf sb(p->client.get(), max), rb(p->server.get(), max);
  uint64_t seed = seed0;
  for (size_t len : sizes) {
    ++seed;
    fill_pattern(sb.ptr(), len, seed);
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[conn], rb.ptr(), max, rb.mh, &rr)
            .ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[conn], sb.ptr(), len, sb.mh, &sr)
            .ok());
    ASSERT_TRUE(p->client->wait(&sr, 60000).ok()) << sr.status();
    ASSERT_TRUE(p->server->wait(&rr, 60000).ok()) << rr.status();
    ASSERT_EQ(rr.size(0), len);
    ASSERT_EQ(sr.size(0), len);
    ASSERT_EQ(find_pattern_mismatch(rb.ptr(), len, seed), -1) << "len " << len;
  }
}

}  // namespace uccl::testing
