// Endpoint::Impl: the endpoint's engines, connection records, pending
// handshakes and registrations, shared by the endpoint_*.cc files.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/bootstrap.h"
#include "engine/endpoint_config.h"
#include "engine/engine.h"
#include "uccl/endpoint.h"
#include "util/logging.h"

namespace uccl {

struct MrHandle {
  void* addr = nullptr;
  size_t len = 0;
  std::vector<std::unique_ptr<transport::MemoryRegion>> mrs;  // per engine
  // Regions advertised from this memory and their windows: invalidated by
  // dereg_mr so no peer (or late retransmission) can touch freed memory.
  std::vector<uint32_t> regions;
  std::vector<std::unique_ptr<transport::MemoryWindow>> windows;
};

// ConnId: index (10 bits) | engine (8 bits) | generation.
constexpr int kEngineShift = 10;
constexpr int kGenShift = 18;

inline uint64_t make_conn_id(uint32_t engine, uint32_t idx, uint64_t gen) {
  return (gen << kGenShift) | (static_cast<uint64_t>(engine) << kEngineShift) |
         idx;
}

inline bool covers(const MrHandle* mh, const void* p, size_t len) {
  if (mh == nullptr) return false;
  uint64_t a = reinterpret_cast<uint64_t>(p);
  uint64_t b = reinterpret_cast<uint64_t>(mh->addr);
  return a >= b && a - b <= mh->len && len <= mh->len - (a - b);
}

struct Endpoint::Impl {
  EndpointConfig cfg;
  std::vector<std::unique_ptr<engine::UcclRDMAEngine>> engines;
  std::vector<std::unique_ptr<engine::ConnRecord[]>> records;
  std::unique_ptr<engine::Region[]> regions;
  std::vector<int> cores;       // pinned engines, released on destruction
  std::vector<int> core_locks;  // flock'ed files claiming them
  std::atomic<uint32_t> next_region{0};
  std::atomic<uint64_t> next_gen{1};
  std::atomic<uint32_t> rr{0};
  uint64_t nonce = 0;

  std::mutex mu;  // control path: listen/connect/accept/close/reg
  int listen_fd = -1;
  std::map<uint64_t, std::unique_ptr<engine::Handshake>> connects;
  uint64_t next_pending = 1;
  std::vector<std::unique_ptr<engine::Handshake>> accepts;
  // Incoming connections dropped before they identified as a UCCL peer
  // (engine::Handshake::identified()): garbage, port scans, silence.
  std::atomic<uint64_t> rejected{0};
  // Handshakes that advance in parallel; past this, the oldest one not yet
  // identified makes room (a real peer identifies with its first bytes).
  static constexpr size_t kMaxPendingAccepts = 256;
  // Accepted connections (and failed handshakes) waiting for an
  // accept_poll() of their tag.
  struct Ready {
    uint64_t tag;
    ConnId conn;  // 0: the handshake failed with `status`
    Status status;
  };
  std::deque<Ready> ready;
  std::vector<MrHandle*> mrs;
  // Connections per engine, counted when a handshake picks the engine, so
  // connections set up together land on different engines.
  std::unique_ptr<std::atomic<int>[]> engine_load;
  // Placements asked for with place_accepts(): handshake tag -> engine.
  std::map<uint64_t, int> accept_engine;

  engine::HandshakeParams hs_params() const {
    engine::HandshakeParams p;
    p.paths = cfg.paths;
    p.chunk_bytes = cfg.chunk_bytes;
    p.rc_mode = cfg.rc_mode == 1;
    p.nonce = nonce;
    p.timeout_ns = static_cast<uint64_t>(cfg.bootstrap_timeout_ms) * 1000000;
    return p;
  }

  // A handshake that failed before it identified its peer: logged (the
  // first few, then every 1000th), counted, dropped.
  void reject(const engine::Handshake& h, const Status& st) {
    const uint64_t n = rejected.fetch_add(1) + 1;
    if (n <= 10 || n % 1000 == 0) {
      LOG(WARNING) << "accept: dropped a connection from " << h.peer()
                   << " that is not a UCCL peer (" << n
                   << " so far; still listening): " << st;
    }
  }

  // `want` when it names an engine, else the one with the fewest
  // connections (ties: round robin).
  engine::UcclRDMAEngine* pick_engine(int want) {
    const uint32_t n = static_cast<uint32_t>(engines.size());
    if (want >= 0 && static_cast<uint32_t>(want) < n) {
      engine_load[want].fetch_add(1);
      return engines[want].get();
    }
    const uint32_t start = rr.fetch_add(1);
    uint32_t best = start % n;
    for (uint32_t k = 1; k < n; ++k) {
      const uint32_t e = (start + k) % n;
      if (engine_load[e].load() < engine_load[best].load()) best = e;
    }
    engine_load[best].fetch_add(1);
    return engines[best].get();
  }
  // A connecting handshake goes where its caller asked (`want`); an
  // accepted one where place_accepts() put its tag. Handshakes run under
  // `mu`, so the lookup needs no lock of its own.
  engine::Handshake::EnginePicker picker(int want) {
    return [this, want](uint64_t tag) {
      if (want >= 0) return pick_engine(want);
      auto it = accept_engine.find(tag);
      return pick_engine(it == accept_engine.end() ? -1 : it->second);
    };
  }
  // A handshake that picked an engine and then failed gives the slot back.
  void unpick(const engine::Handshake* h) {
    if (h->engine()) engine_load[h->engine()->index()].fetch_sub(1);
  }

  engine::ConnRecord* lookup(ConnId id, uint32_t* engine, uint32_t* idx) const {
    uint32_t e = (id >> kEngineShift) & 0xff;
    uint32_t i = id & ((1u << kEngineShift) - 1);
    if (id == 0 || e >= engines.size()) return nullptr;
    engine::ConnRecord* r = &records[e][i];
    if (r->id.load(std::memory_order_acquire) != id) return nullptr;
    *engine = e;
    *idx = i;
    return r;
  }

  // Finishes a handshake: publishes the connection and returns its id.
  ConnId publish(engine::Handshake* h) {
    uint32_t e = static_cast<uint32_t>(h->engine()->index());
    engine::ConnRecord& r = records[e][h->conn()];
    r.peer_engine = h->peer_engine();
    r.peer_ip = h->peer();
    r.tx_outstanding.store(0);
    r.rx_outstanding.store(0);
    r.failed.store(false);
    ConnId id = make_conn_id(e, h->conn(), next_gen.fetch_add(1));
    r.id.store(id, std::memory_order_release);
    VLOG(kVlogLifecycle) << "connection " << id << " to " << h->peer()
                         << " on engine " << e;
    return id;
  }

  // `engine` must name one of ours; -1 too where `none` says what it does.
  Status check_engine(const char* what, int engine, const char* none) const {
    const int n = static_cast<int>(engines.size());
    if (engine >= 0 ? engine < n : (none != nullptr && engine == -1)) {
      return Status::OK();
    }
    return InvalidArgument(std::string(what) + ": engine " +
                           std::to_string(engine) + " (this endpoint has " +
                           std::to_string(n) + " engines" +
                           (none ? std::string("; -1 ") + none : "") + ")");
  }

  // Creates the engines (each opens the device); cfg's chunk size becomes
  // the one they use (whole packets of the device's MTU).
  Status create_engines(const engine::ResolvedConfig& rc);
  // Pins the engines (the given cores, or the highest allowed ones near the
  // NIC), tells them the line rate and starts them.
  void start_engines(double link_gbps);

  Status submit(engine::UcclRDMAEngine* e, const engine::Command& c) {
    if (!e->submit(c)) {
      return ResourceExhausted("engine command queue full (" +
                               std::to_string(engine::kCommandQueueDepth) +
                               "); retry");
    }
    return Status::OK();
  }
};

}  // namespace uccl
