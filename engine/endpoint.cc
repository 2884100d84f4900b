// Endpoint: the app-facing, thread-safe API. Validates every call (errors
// are Status values), turns it into an engine command, and runs the
// bootstrap handshakes. Knobs (UCCL_*) that configure it are defined here.
#include "uccl/endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "engine/bootstrap.h"
#include "engine/engine.h"
#include "uccl/params.h"
#include "util/cpu.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace uccl {

UCCL_KNOB(std::string, knob_device, "UCCL_DEVICE", "udp",
          "NIC device: 'udp' (software NIC on every interface), "
          "'udp:<ifname>', 'udp:<ipv4>', or a verbs device such as mlx5_0.");
UCCL_KNOB(int64_t, knob_engines, "UCCL_ENGINES", 1,
          "Engine threads per endpoint (each pinned to a core).", 1, 16);
UCCL_KNOB(std::string, knob_engine_cores, "UCCL_ENGINE_CORES", "",
          "Cores for the engine threads, e.g. '8-11' (empty: the highest "
          "allowed cores on the NIC's NUMA node not taken by another UCCL "
          "process, see UCCL_CORE_LOCK_DIR).");
UCCL_KNOB(std::string, knob_core_lock_dir, "UCCL_CORE_LOCK_DIR", "/dev/shm",
          "Where engines of different processes on one host (NCCL ranks, "
          "transport_test client and server) claim cores with lock files "
          "(uccl-core-<n>.lock, released when the process exits); empty: "
          "no cross-process claims.");
UCCL_KNOB(
    int64_t, knob_chunk_kb, "UCCL_CHUNK_KB", 64,
    "Largest chunk in KiB: each chunk is one RDMA_WRITE_WITH_IMM. At most "
    "one packet to a peer on this host (the software NIC: lo's payload "
    "MTU, 61440 B while splicing) and rounded down to whole packets of "
    "the device's payload MTU (the software NIC on lo: 65408 B copied, "
    "so 64 KiB gives one datagram per chunk).",
    1, 4096);
UCCL_KNOB(int64_t, knob_paths, "UCCL_PATHS", 4,
          "Queue pairs (paths) per connection; chunks are sprayed over them.",
          1, kMaxPaths);
UCCL_KNOB(bool, knob_rc_mode, "UCCL_RC_MODE", false,
          "Use RC queue pairs (the NIC retransmits) instead of UC with "
          "UCCL's software SACK/RTO reliability.");
const char* const kCcNames[] = {"none",  "timely", "timely_patched",
                                "swift", "credit", nullptr};
UCCL_KNOB(std::string, knob_cc, "UCCL_CC", "none",
          "Congestion control: none, timely, timely_patched, swift, credit.",
          kCcNames);
UCCL_KNOB(std::string, knob_cc_params, "UCCL_CC_PARAMS", "",
          "Congestion-control parameters, 'key=value,...' (see cc/*.h).");
UCCL_KNOB(bool, knob_cc_per_path, "UCCL_CC_PER_PATH", false,
          "One congestion controller per path instead of per flow.");
UCCL_KNOB(double, knob_link_gbps, "UCCL_LINK_GBPS", 0.0,
          "Line rate for congestion control in Gb/s (0: the device's).", 0.0,
          100000.0);
// The software NIC runs on kernel sockets and ordinary threads, whose
// scheduling stalls reach milliseconds on busy hosts; a 1 ms floor there
// fires spurious timeouts (measured: ~100/s with 4 flows on 2 cores).
UCCL_KNOB(int64_t, knob_rto_min_us, "UCCL_RTO_MIN_US", 0,
          "Minimum retransmission timeout, microseconds (0: 1000 on verbs "
          "devices, 5000 on the software NIC).",
          0, 10000000);
UCCL_KNOB(int64_t, knob_rto_max_us, "UCCL_RTO_MAX_US", 100000,
          "Maximum retransmission timeout (after backoff), microseconds.",
          10, 100000000);
// The dead-peer budget: with the backoff capped at UCCL_RTO_MAX_US, 60
// timeouts are ~5.7 s on the software NIC (5 ms floor) and ~5.4 s on verbs.
// 12 (0.9 s) failed healthy connections when a loaded 2-core CI VM stalled
// both processes for ~0.9 s. A peer whose process exits is found at once
// (its bootstrap socket closes); this budget is for silent peers.
UCCL_KNOB(int64_t, knob_max_retries, "UCCL_MAX_RETRIES", 60,
          "RTO retransmissions of one chunk, with no progress in between, "
          "before the connection fails (60: ~5.5 s).",
          1, 255);
UCCL_KNOB(int64_t, knob_dup_ack, "UCCL_DUP_ACK_THRESHOLD", 3,
          "Duplicate ACKs (with SACK holes) before fast retransmit. Raise it "
          "when paths reorder a lot (adaptive routing).",
          1, 100000);
UCCL_KNOB(int64_t, knob_path_queue, "UCCL_PATH_QUEUE", 16,
          "Most chunks per path handed to the NIC and not yet sent (RC: not "
          "yet acknowledged); the rest wait in the engine.",
          1, 1000);
UCCL_KNOB(int64_t, knob_nic_queue, "UCCL_NIC_QUEUE", 32,
          "Most chunks one engine keeps inside its NIC, over all its "
          "connections (connections take turns); the rest wait in the engine.",
          1, 100000);
UCCL_KNOB(int64_t, knob_window_kb, "UCCL_ENGINE_WINDOW_KB", -1,
          "Most KiB one engine has sent and not had acknowledged over all "
          "its flows, so the peer's host does not drop what it cannot "
          "buffer (the software NIC: a full socket) and its queue, hence "
          "RTTs, stays short. -1: an eighth of the device's receive buffer "
          "(UCCL_SOFTNIC_SOCKBUF_KB as the kernel counts it, twice that: "
          "4 MiB by default; the peer's is taken to be as large), none on "
          "verbs devices; 0: no limit.",
          -1, int64_t{1} << 30);
UCCL_KNOB(bool, knob_tlp, "UCCL_TLP", true,
          "Tail loss probe (RFC 8985): after max(2 x srtt, srtt + 4 x "
          "rttvar) + the ACK delay with no ACK or transmission, resend the "
          "newest unacknowledged chunk (past window and pacing) and ask for "
          "an ACK, so a lost tail is repaired before the RTO.");
UCCL_KNOB(int64_t, knob_ack_every, "UCCL_ACK_EVERY", 4,
          "Receiver: ACK at least every N chunks.", 1, 1024);
UCCL_KNOB(int64_t, knob_ack_delay_us, "UCCL_ACK_DELAY_US", 20,
          "Receiver: longest delay of an ACK for a received chunk, us.", 0,
          1000000);
UCCL_KNOB(bool, knob_drive_nic, "UCCL_ENGINE_DRIVES_NIC", true,
          "Software NIC: the engine drives it once per loop: receive and "
          "handle everything, then send the loop's posts in one round, "
          "receive descriptors and ACKs after data (the doorbell). 0: every "
          "CQ poll receives and sends, in post order, as before (for A/B "
          "runs; the loop still takes commands after receiving).");
UCCL_KNOB(
    int64_t, knob_eager_bytes, "UCCL_EAGER_BYTES", -1,
    "Eager sends: a send of at most this many bytes that finds no "
    "receive posted yet is written at once into one of 16 bounce "
    "slots the receiver offers per connection (and copied into the "
    "receive when it is posted) instead of waiting for the receive's "
    "descriptor. Both sides must enable it. Memory: 16 slots of this + 16 "
    "bytes (rounded up to 64) per connection. At most a chunk less 16 "
    "bytes (larger values are lowered to that). 0: off; -1: 16384 on the "
    "software NIC, 0 on verbs devices (the receiver copies with the "
    "CPU, so every receive buffer must be host memory) and with "
    "cc=credit (whose pull pacer grants credit per posted receive).",
    -1, 65536);
UCCL_KNOB(int64_t, knob_idle_spin, "UCCL_IDLE_SPIN_LOOPS", 20000,
          "Engine: empty loops before it starts sleeping between polls.", 0,
          1LL << 40);
UCCL_KNOB(int64_t, knob_idle_yield, "UCCL_IDLE_YIELD_LOOPS", 64,
          "Engine: empty loops before it yields its core once per empty "
          "loop (sched_yield; matters when it shares a core).",
          0, 1LL << 40);
UCCL_KNOB(int64_t, knob_idle_sleep_us, "UCCL_IDLE_SLEEP_US", 20,
          "Engine: sleep per empty loop once idle, us (0 = always spin). On "
          "the software NIC the engine blocks instead until a datagram or a "
          "command arrives, or this long at most; verbs devices sleep it "
          "through. The NCCL plugin: 1000 on the software NIC.",
          0, 1000000);
// The NCCL plugin sets 10 on the software NIC (with UCCL_IDLE_SLEEP_US
// 1000) and 1000 on verbs devices unless these are given
// (collective/net_plugin.cc): its engines sleep only after that long idle.
UCCL_KNOB(int64_t, knob_idle_sleep_after_ms, "UCCL_IDLE_SLEEP_AFTER_MS", 0,
          "Engine: sleep only once idle this long as well, ms (0: "
          "UCCL_IDLE_SPIN_LOOPS empty loops alone decide; the NCCL plugin: "
          "10 on the software NIC, 1000 on verbs devices).",
          0, 3600000);
UCCL_KNOB(
    std::string, knob_trace_file, "UCCL_TRACE_FILE", "",
    "Write a Chrome trace of chunk events to <file>.<pid>.<n>.<engine>.json.");
UCCL_KNOB(double, knob_stats_interval, "UCCL_STATS_INTERVAL_S", 0.0,
          "Log one statistics line per engine every N seconds (0 = off).", 0.0,
          86400.0);
UCCL_KNOB(int64_t, knob_bootstrap_timeout_ms, "UCCL_BOOTSTRAP_TIMEOUT_MS",
          30000, "Handshake deadline for connect/accept, ms.", 1, 3600000);

using engine::CmdType;
using engine::Command;
using engine::ConnRecord;
using engine::Handshake;
using engine::RequestAccess;
using engine::UcclRDMAEngine;

struct MrHandle {
  void* addr = nullptr;
  size_t len = 0;
  std::vector<std::unique_ptr<transport::MemoryRegion>> mrs;  // per engine
  // Regions advertised from this memory and their windows: invalidated by
  // dereg_mr so no peer (or late retransmission) can touch freed memory.
  std::vector<uint32_t> regions;
  std::vector<std::unique_ptr<transport::MemoryWindow>> windows;
};

EndpointConfig EndpointConfig::from_knobs() {
  EndpointConfig c;
  c.device = knob_device().get();
  c.num_engines = static_cast<int>(knob_engines().get());
  auto cores = parse_cpu_list(knob_engine_cores().get());
  if (cores.ok()) c.engine_cores = *cores;
  c.chunk_bytes = static_cast<uint32_t>(knob_chunk_kb().get() * 1024);
  c.paths = static_cast<uint32_t>(knob_paths().get());
  c.rc_mode = knob_rc_mode().get() ? 1 : 0;
  c.cc = knob_cc().get();
  c.cc_params = knob_cc_params().get();
  // Only when set, so a caller can tell "not asked for" (-1) apart.
  if (knob_idle_sleep_us().info().from_env) {
    c.idle_sleep_us = knob_idle_sleep_us().get();
  }
  if (knob_idle_sleep_after_ms().info().from_env) {
    c.idle_sleep_after_ms = knob_idle_sleep_after_ms().get();
  }
  return c;
}

namespace {

// ConnId: index (10 bits) | engine (8 bits) | generation.
constexpr int kEngineShift = 10;
constexpr int kGenShift = 18;

uint64_t make_conn_id(uint32_t engine, uint32_t idx, uint64_t gen) {
  return (gen << kGenShift) | (static_cast<uint64_t>(engine) << kEngineShift) |
         idx;
}

// Engines of all endpoints in this process spread over cores: each takes
// the least-used core in its preference order.
std::mutex g_core_mu;
std::map<int, int> g_core_users;

// The file through which a process claims `core` in lock directory `dir`.
std::string core_lock_path(const std::string& dir, int core) {
  return dir + "/uccl-core-" + std::to_string(core) + ".lock";
}

// Takes an flock on <dir>/uccl-core-<core>.lock; -1 if another process
// holds it (the kernel drops the lock when that process exits).
int try_lock_core(const std::string& dir, int core) {
  if (dir.empty()) return -2;  // claims disabled: every core is free
  const std::string path = core_lock_path(dir, core);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return -2;  // no lock directory: do without
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Picks n cores in preference order: first cores no engine of this process
// uses and no other UCCL process has claimed, then (all taken) the ones
// this process uses least. Lock fds to hold go to *locks.
std::vector<int> claim_cores(int n, const std::vector<int>& preference,
                             std::vector<int>* locks) {
  std::lock_guard<std::mutex> lock(g_core_mu);
  const std::string dir = knob_core_lock_dir().get();
  std::vector<int> out;
  for (int i = 0; i < n && !preference.empty(); ++i) {
    int best = -1;
    for (int c : preference) {
      if (g_core_users[c] > 0) continue;
      const int fd = try_lock_core(dir, c);
      if (fd == -1) continue;
      if (fd >= 0) locks->push_back(fd);
      best = c;
      break;
    }
    if (best < 0) {
      best = preference[0];
      for (int c : preference) {
        if (g_core_users[c] < g_core_users[best]) best = c;
      }
    }
    ++g_core_users[best];
    out.push_back(best);
  }
  return out;
}

// Cores given in the config (UCCL_ENGINE_CORES) count as used too.
void use_cores(const std::vector<int>& cores) {
  std::lock_guard<std::mutex> lock(g_core_mu);
  for (int c : cores) ++g_core_users[c];
}

void release_cores(const std::vector<int>& cores) {
  std::lock_guard<std::mutex> lock(g_core_mu);
  for (int c : cores) --g_core_users[c];
}

bool covers(const MrHandle* mh, const void* p, size_t len) {
  if (mh == nullptr) return false;
  uint64_t a = reinterpret_cast<uint64_t>(p);
  uint64_t b = reinterpret_cast<uint64_t>(mh->addr);
  return a >= b && a - b <= mh->len && len <= mh->len - (a - b);
}

}  // namespace

struct Endpoint::Impl {
  EndpointConfig cfg;
  std::vector<std::unique_ptr<UcclRDMAEngine>> engines;
  std::vector<std::unique_ptr<ConnRecord[]>> records;
  std::unique_ptr<engine::Region[]> regions;
  std::vector<int> cores;       // pinned engines, released on destruction
  std::vector<int> core_locks;  // flock'ed files claiming them
  std::atomic<uint32_t> next_region{0};
  std::atomic<uint64_t> next_gen{1};
  std::atomic<uint32_t> rr{0};
  uint64_t nonce = 0;

  std::mutex mu;  // control path: listen/connect/accept/close/reg
  int listen_fd = -1;
  std::map<uint64_t, std::unique_ptr<Handshake>> connects;
  uint64_t next_pending = 1;
  std::vector<std::unique_ptr<Handshake>> accepts;
  // Incoming connections dropped before they identified as a UCCL peer
  // (Handshake::identified()): garbage, port scans, silence.
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
  void reject(const Handshake& h, const Status& st) {
    const uint64_t n = rejected.fetch_add(1) + 1;
    if (n <= 10 || n % 1000 == 0) {
      LOG(WARNING) << "accept: dropped a connection from " << h.peer()
                   << " that is not a UCCL peer (" << n
                   << " so far; still listening): " << st;
    }
  }

  // `want` when it names an engine, else the one with the fewest
  // connections (ties: round robin).
  UcclRDMAEngine* pick_engine(int want) {
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
  Handshake::EnginePicker picker(int want) {
    return [this, want](uint64_t tag) {
      if (want >= 0) return pick_engine(want);
      auto it = accept_engine.find(tag);
      return pick_engine(it == accept_engine.end() ? -1 : it->second);
    };
  }
  // A handshake that picked an engine and then failed gives the slot back.
  void unpick(const Handshake* h) {
    if (h->engine()) engine_load[h->engine()->index()].fetch_sub(1);
  }

  ConnRecord* lookup(ConnId id, uint32_t* engine, uint32_t* idx) const {
    uint32_t e = (id >> kEngineShift) & 0xff;
    uint32_t i = id & ((1u << kEngineShift) - 1);
    if (id == 0 || e >= engines.size()) return nullptr;
    ConnRecord* r = &records[e][i];
    if (r->id.load(std::memory_order_acquire) != id) return nullptr;
    *engine = e;
    *idx = i;
    return r;
  }

  // Finishes a handshake: publishes the connection and returns its id.
  ConnId publish(Handshake* h) {
    uint32_t e = static_cast<uint32_t>(h->engine()->index());
    ConnRecord& r = records[e][h->conn()];
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

  Status submit(UcclRDMAEngine* e, const Command& c) {
    if (!e->submit(c)) {
      return ResourceExhausted("engine command queue full (" +
                               std::to_string(engine::kCommandQueueDepth) +
                               "); retry");
    }
    return Status::OK();
  }
};

Endpoint::Endpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Endpoint>> Endpoint::create(const EndpointConfig& in) {
  init_logging("uccl");
  UCCL_RETURN_IF_ERROR(check_knobs());
  for (const std::string& u : unknown_uccl_env_vars()) {
    LOG(WARNING) << u << " is set but is not a UCCL knob (typo?)";
  }
  auto impl = std::make_unique<Impl>();
  if (auto kc = parse_cpu_list(knob_engine_cores().get()); !kc.ok()) {
    return kc.status().with_context("UCCL_ENGINE_CORES");
  }
  EndpointConfig def = EndpointConfig::from_knobs();
  EndpointConfig& c = impl->cfg;
  c = in;
  if (c.device.empty()) c.device = def.device;
  if (c.num_engines <= 0) c.num_engines = def.num_engines;
  if (c.engine_cores.empty()) c.engine_cores = def.engine_cores;
  if (c.chunk_bytes == 0) c.chunk_bytes = def.chunk_bytes;
  if (c.paths == 0) c.paths = def.paths;
  if (c.rc_mode < 0) c.rc_mode = def.rc_mode;
  if (c.cc.empty()) c.cc = def.cc;
  if (c.cc_params.empty()) c.cc_params = def.cc_params;
  if (c.bootstrap_timeout_ms <= 0) {
    c.bootstrap_timeout_ms = knob_bootstrap_timeout_ms().get();
  }
  if (c.num_engines > 16) return InvalidArgument("at most 16 engines");
  if (!c.engine_cores.empty()) {  // given: used as given, or refused
    if (c.engine_cores.size() < static_cast<size_t>(c.num_engines)) {
      return InvalidArgument(
          std::to_string(c.engine_cores.size()) + " engine core(s) given (" +
          format_cpu_list(c.engine_cores) + ") for " +
          std::to_string(c.num_engines) + " engines (UCCL_ENGINE_CORES)");
    }
    for (int core : c.engine_cores) {
      if (Status st = check_pinnable(core); !st.ok()) {
        return InvalidArgument("engine core " + std::to_string(core) +
                               " cannot be used: " + st.message() +
                               " (UCCL_ENGINE_CORES)");
      }
    }
  }
  if (c.paths > static_cast<uint32_t>(kMaxPaths)) {
    return InvalidArgument("at most " + std::to_string(kMaxPaths) + " paths");
  }
  if (c.chunk_bytes < 1024 || c.chunk_bytes > (64u << 20)) {
    return InvalidArgument("chunk size must be in [1 KiB, 64 MiB]");
  }
  auto ccp = cc::CcParams::parse(c.cc_params);
  if (!ccp.ok()) return ccp.status();
  {  // validate the CC name and parameters once, here
    auto probe = cc::make_cc(c.cc, *ccp, c.chunk_bytes, 100e9);
    if (!probe.ok()) return probe.status();
  }
  if (c.cc == "credit" && knob_cc_per_path().get()) {
    return InvalidArgument("cc=credit is per flow; unset UCCL_CC_PER_PATH");
  }
  if (c.idle_sleep_us > 1000000) {
    return InvalidArgument("idle sleep must be at most 1000000 us");
  }
  if (c.idle_sleep_after_ms > 3600000) {
    return InvalidArgument(
        "idle time before sleeping must be at most 3600000 ms");
  }
  const bool soft = c.device.rfind("udp", 0) == 0;
  int64_t eager = c.eager_bytes >= 0 ? c.eager_bytes : knob_eager_bytes().get();
  if (eager > static_cast<int64_t>(engine::kMaxEagerBytes)) {
    return InvalidArgument("eager size must be at most " +
                           std::to_string(engine::kMaxEagerBytes) + " bytes");
  }
  if (eager > 0 && c.cc == "credit") {
    return InvalidArgument(
        "eager sends do not work with cc=credit (its pull pacer grants "
        "credit per posted receive); set UCCL_EAGER_BYTES=0");
  }
  if (eager < 0) eager = soft && c.cc != "credit" ? 16384 : 0;
  // Each engine clamps it to one chunk of the size it uses (engine.cc).

  // Faults: the config's where set, else the knobs'; config() then says
  // what the device uses.
  transport::DeviceOptions dopt;
  {
    auto f = transport::FaultOptions::from_knobs();
    if (!f.ok()) return f.status();
    dopt.faults = *f;
    if (!c.fault_tx.empty()) {
      UCCL_ASSIGN_OR_RETURN(dopt.faults.tx,
                            transport::FaultSpec::parse(c.fault_tx));
    } else if (dopt.faults.tx.any()) {
      c.fault_tx = dopt.faults.tx.to_string();
    }
    if (!c.fault_rx.empty()) {
      UCCL_ASSIGN_OR_RETURN(dopt.faults.rx,
                            transport::FaultSpec::parse(c.fault_rx));
    } else if (dopt.faults.rx.any()) {
      c.fault_rx = dopt.faults.rx.to_string();
    }
    if (c.fault_seed) dopt.faults.seed = c.fault_seed;
    c.fault_seed = dopt.faults.seed;
    dopt.faults_from_knobs = false;
  }
  dopt.rate_gbps = c.nic_rate_gbps;
  dopt.splice = c.softnic_splice;

  std::random_device rd;
  impl->nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ monotonic_ns();
  impl->regions.reset(new engine::Region[engine::kMaxRegions]);
  impl->engine_load.reset(new std::atomic<int>[c.num_engines]);
  for (int i = 0; i < c.num_engines; ++i) impl->engine_load[i].store(0);
  // Cores: given, or the highest allowed ones near the NIC.
  std::vector<int> cores = c.engine_cores;
  for (int i = 0; i < c.num_engines; ++i) {
    impl->records.emplace_back(new ConnRecord[engine::Imm::kMaxFlows]);
    engine::EngineConfig ec;
    ec.index = i;
    ec.chunk_bytes = c.chunk_bytes;
    ec.rc_mode = c.rc_mode == 1;
    ec.cc_name = c.cc;
    ec.cc_params = *ccp;
    ec.cc_per_path = knob_cc_per_path().get();
    ec.rto_min_ns = knob_rto_min_us().get() > 0 ? knob_rto_min_us().get() * 1000
                                                : (soft ? 5000000 : 1000000);
    ec.rto_max_ns =
        std::max<uint64_t>(ec.rto_min_ns, knob_rto_max_us().get() * 1000);
    ec.rto_init_ns = std::max<uint64_t>(ec.rto_min_ns, 5000000);
    ec.max_retries = static_cast<uint32_t>(knob_max_retries().get());
    ec.dup_ack_threshold = static_cast<uint32_t>(knob_dup_ack().get());
    ec.path_queue = static_cast<uint32_t>(knob_path_queue().get());
    ec.nic_queue = static_cast<uint32_t>(knob_nic_queue().get());
    ec.window_bytes =
        knob_window_kb().get() < 0 ? -1 : knob_window_kb().get() * 1024;
    ec.ack_every = static_cast<uint32_t>(knob_ack_every().get());
    ec.tail_loss_probe = knob_tlp().get();
    ec.ack_delay_ns = knob_ack_delay_us().get() * 1000;
    ec.idle_spin_loops =
        c.idle_spin_loops >= 0 ? c.idle_spin_loops : knob_idle_spin().get();
    ec.idle_yield_loops = knob_idle_yield().get();
    ec.idle_sleep_ns = static_cast<uint64_t>(c.idle_sleep_us >= 0
                                                 ? c.idle_sleep_us
                                                 : knob_idle_sleep_us().get()) *
                       1000;
    ec.idle_sleep_after_ns =
        static_cast<uint64_t>(c.idle_sleep_after_ms >= 0
                                  ? c.idle_sleep_after_ms
                                  : knob_idle_sleep_after_ms().get()) *
        1000000;
    ec.drive_nic = knob_drive_nic().get();
    ec.eager_bytes = static_cast<uint32_t>(eager);
    ec.trace_file =
        c.trace_file.empty() ? knob_trace_file().get() : c.trace_file;
    ec.stats_interval_s = knob_stats_interval().get();
    auto e = UcclRDMAEngine::create(ec, c.device, dopt, impl->records[i].get(),
                                    impl->regions.get());
    if (!e.ok()) return e.status().with_context("engine " + std::to_string(i));
    impl->engines.push_back(std::move(*e));
  }
  const transport::DeviceInfo& di = impl->engines[0]->device_info();
  // What the engines use: whole packets of the device's MTU per chunk.
  c.chunk_bytes = impl->engines[0]->chunk_bytes();
  eager = impl->engines[0]->eager_bytes();
  double gbps = c.link_gbps > 0 ? c.link_gbps : knob_link_gbps().get();
  double line = gbps > 0 ? gbps * 1e9 : di.link_speed_mbps * 1e6;
  // Congestion control and the pull pacer count payload bytes: take the
  // headers each packet adds out of the line rate.
  // Per chunk: its payload over payload plus one header per packet.
  if (di.mtu_bytes > 0) {
    const double chunk = c.chunk_bytes;
    const double pkts = std::ceil(chunk / di.mtu_bytes);
    line *= chunk / (chunk + pkts * di.wire_overhead_bytes);
  }
  if (cores.empty()) {
    std::vector<int> allowed = allowed_cpus();
    cores = claim_cores(c.num_engines,
                        choose_engine_cores(static_cast<int>(allowed.size()),
                                            di.numa_node, allowed),
                        &impl->core_locks);
  } else {
    use_cores(cores);
  }
  impl->cores = cores;
  for (int i = 0; i < c.num_engines; ++i) {
    auto& e = impl->engines[i];
    (void)line;
    e->set_core(i < static_cast<int>(cores.size()) ? cores[i] : -1);
    e->set_line_rate(line);
    e->start();
  }
  LOG(INFO) << "UCCL endpoint: device " << c.device << " (" << di.name << ", "
            << di.link_speed_mbps << " Mb/s), " << c.num_engines
            << " engine(s) on cores " << format_cpu_list(cores) << ", "
            << c.paths << " paths, " << (c.rc_mode ? "RC" : "UC") << " mode, "
            << "chunk " << c.chunk_bytes << " B, cc " << c.cc << ", eager "
            << eager << " B"
            << (knob_drive_nic().get() ? "" : ", NIC driven by CQ polls");
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

std::vector<int> Endpoint::engine_cores_on_host() {
  std::set<int> cores;
  {
    std::lock_guard<std::mutex> lock(g_core_mu);
    for (const auto& [core, users] : g_core_users) {
      if (users > 0) cores.insert(core);
    }
  }
  const std::string dir = knob_core_lock_dir().get();
  const std::vector<FileId> held =
      dir.empty() ? std::vector<FileId>() : flocked_files();
  const long ncpus = held.empty() ? 0 : sysconf(_SC_NPROCESSORS_CONF);
  for (int core = 0; core < ncpus; ++core) {
    auto id = file_id(core_lock_path(dir, core));
    if (id.ok() && std::find(held.begin(), held.end(), *id) != held.end()) {
      cores.insert(core);
    }
  }
  return std::vector<int>(cores.begin(), cores.end());
}

Endpoint::~Endpoint() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->connects.clear();
    impl_->accepts.clear();
    if (impl_->listen_fd >= 0) close(impl_->listen_fd);
    impl_->listen_fd = -1;
  }
  for (auto& e : impl_->engines) e->stop();
  for (MrHandle* m : impl_->mrs) delete m;
  impl_->engines.clear();
  release_cores(impl_->cores);
  for (int fd : impl_->core_locks) close(fd);
}

const EndpointConfig& Endpoint::config() const { return impl_->cfg; }
std::string Endpoint::device_name() const {
  return impl_->engines[0]->device_info().name;
}
uint64_t Endpoint::link_speed_mbps() const {
  return impl_->engines[0]->device_info().link_speed_mbps;
}
int Endpoint::numa_node() const {
  return impl_->engines[0]->device_info().numa_node;
}
std::string Endpoint::pci_path() const {
  return impl_->engines[0]->device_info().pci_path;
}

// ---------------------------------------------------------- connections

Result<uint16_t> Endpoint::listen(uint16_t port) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->listen_fd >= 0)
    return AlreadyExists("endpoint is already listening");
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a;
  std::memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, 128) != 0) {
    Status st = ErrnoStatus("listen on port " + std::to_string(port), errno);
    close(fd);
    return st;
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  impl_->listen_fd = fd;
  return ntohs(a.sin_port);
}

Result<uint64_t> Endpoint::connect_start(const std::string& ip, uint16_t port,
                                         uint64_t tag, int engine) {
  UCCL_RETURN_IF_ERROR(impl_->check_engine("connect", engine, "picks one"));
  sockaddr_in a;
  std::memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    return InvalidArgument("'" + ip + "' is not an IPv4 address");
  }
  if (port == 0) return InvalidArgument("port 0");
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  engine::tune_tcp_socket(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 &&
      errno != EINPROGRESS) {
    Status st =
        ErrnoStatus("connect to " + ip + ":" + std::to_string(port), errno);
    close(fd);
    return st;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  uint64_t id = impl_->next_pending++;
  engine::HandshakeParams hp = impl_->hs_params();
  hp.tag = tag;
  impl_->connects[id] = std::make_unique<Handshake>(
      Handshake::Role::kConnect, fd, ip + ":" + std::to_string(port),
      impl_->picker(engine), hp);
  return id;
}

Result<ConnId> Endpoint::connect_poll(uint64_t pending) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->connects.find(pending);
  if (it == impl_->connects.end()) {
    return InvalidArgument("unknown pending connection");
  }
  Status st = it->second->poll();
  if (st.code() == StatusCode::kUnavailable) return st;
  if (!st.ok()) {
    impl_->unpick(it->second.get());
    impl_->connects.erase(it);
    return st;
  }
  ConnId id = impl_->publish(it->second.get());
  impl_->connects.erase(it);
  return id;
}

Result<ConnId> Endpoint::connect(const std::string& ip, uint16_t port,
                                 int timeout_ms) {
  UCCL_ASSIGN_OR_RETURN(uint64_t p, connect_start(ip, port));
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  for (;;) {
    auto r = connect_poll(p);
    if (r.ok() || r.status().code() != StatusCode::kUnavailable) return r;
    if (monotonic_ns() > deadline) {
      std::lock_guard<std::mutex> lock(impl_->mu);
      auto it = impl_->connects.find(p);
      if (it != impl_->connects.end()) {
        impl_->unpick(it->second.get());
        impl_->connects.erase(it);
      }
      return TimedOut("connect to " + ip + ":" + std::to_string(port) +
                      " timed out after " + std::to_string(timeout_ms) + " ms");
    }
    usleep(50);
  }
}

Status Endpoint::place_accepts(uint64_t tag, int engine) {
  UCCL_RETURN_IF_ERROR(
      impl_->check_engine("place_accepts", engine, "forgets the placement"));
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (engine < 0) {
    impl_->accept_engine.erase(tag);
    return Status::OK();
  }
  if (impl_->accept_engine.size() >= kMaxAcceptPlacements &&
      impl_->accept_engine.count(tag) == 0) {
    return ResourceExhausted(
        "place_accepts: " + std::to_string(kMaxAcceptPlacements) +
        " placements already; forget some first");
  }
  impl_->accept_engine[tag] = engine;
  return Status::OK();
}

Result<int> Endpoint::engine_of(ConnId c) const {
  uint32_t e, i;
  if (impl_->lookup(c, &e, &i) == nullptr) {
    return InvalidArgument("engine_of: unknown connection");
  }
  return static_cast<int>(e);
}

Result<ConnId> Endpoint::accept_poll() { return accept_impl(false, 0); }

Result<ConnId> Endpoint::accept_poll(uint64_t tag) {
  return accept_impl(true, tag);
}

Result<ConnId> Endpoint::accept_impl(bool by_tag, uint64_t tag) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->listen_fd < 0)
    return InvalidArgument("accept: call listen() first");
  for (;;) {
    sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = accept4(impl_->listen_fd, reinterpret_cast<sockaddr*>(&a), &len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    engine::tune_tcp_socket(fd);
    if (impl_->accepts.size() >= Impl::kMaxPendingAccepts) {
      auto it = std::find_if(
          impl_->accepts.begin(), impl_->accepts.end(),
          [](const std::unique_ptr<Handshake>& h) { return !h->identified(); });
      if (it == impl_->accepts.end()) {  // all identified: refuse this one
        close(fd);
        impl_->rejected.fetch_add(1);
        continue;
      }
      impl_->reject(**it, ResourceExhausted("too many pending handshakes"));
      impl_->accepts.erase(it);
    }
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof(ip));
    impl_->accepts.push_back(std::make_unique<Handshake>(
        Handshake::Role::kAccept, fd,
        std::string(ip) + ":" + std::to_string(ntohs(a.sin_port)),
        impl_->picker(-1), impl_->hs_params()));
  }
  // Advance every handshake; finished ones wait in `ready` for their tag.
  for (size_t i = 0; i < impl_->accepts.size();) {
    Status st = impl_->accepts[i]->poll();
    if (st.code() == StatusCode::kUnavailable) {
      ++i;
      continue;
    }
    std::unique_ptr<Handshake> h = std::move(impl_->accepts[i]);
    impl_->accepts.erase(impl_->accepts.begin() + i);
    if (!st.ok() && !h->identified()) {
      impl_->reject(*h, st);
      continue;
    }
    if (!st.ok()) {
      LOG(WARNING) << "accept: " << st;
      impl_->unpick(h.get());
      // Kept for the accept_poll of its tag (bounded: failures nobody asks
      // about, e.g. port scans, must not pile up).
      size_t failed = 0;
      for (const auto& r : impl_->ready) failed += r.conn == 0;
      if (failed >= 64) {
        for (auto it = impl_->ready.begin(); it != impl_->ready.end(); ++it) {
          if (it->conn == 0) {
            impl_->ready.erase(it);
            break;
          }
        }
      }
      impl_->ready.push_back({h->tag(), 0, st});
    } else {
      impl_->ready.push_back({h->tag(), impl_->publish(h.get()), Status()});
    }
  }
  for (auto it = impl_->ready.begin(); it != impl_->ready.end(); ++it) {
    if (by_tag && it->tag != tag) continue;
    Impl::Ready r = std::move(*it);
    impl_->ready.erase(it);
    if (r.conn == 0) return r.status;
    return r.conn;
  }
  return Unavailable("no connection ready");
}

Result<ConnId> Endpoint::accept(int timeout_ms) {
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  for (;;) {
    auto r = accept_poll();
    if (r.ok() || r.status().code() != StatusCode::kUnavailable) return r;
    if (monotonic_ns() > deadline) {
      return TimedOut("no connection accepted within " +
                      std::to_string(timeout_ms) + " ms");
    }
    usleep(50);
  }
}

uint64_t Endpoint::rejected_handshakes() const {
  return impl_->rejected.load();
}

std::string Endpoint::peer_ip(ConnId c) const {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr) return "";
  std::string s = r->peer_ip;
  return s.substr(0, s.rfind(':'));
}

Status Endpoint::close(ConnId c) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr) return InvalidArgument("unknown or closed connection");
  r->id.store(0, std::memory_order_release);
  impl_->engine_load[e].fetch_sub(1);
  Command cmd{};
  cmd.type = CmdType::kCloseConn;
  cmd.conn = i;
  while (!impl_->engines[e]->submit(cmd)) sched_yield();
  return Status::OK();
}

// -------------------------------------------------------------- memory

Result<MrHandle*> Endpoint::reg_mr(void* addr, size_t len) {
  if (addr == nullptr || len == 0)
    return InvalidArgument("reg_mr: empty region");
  auto mh = std::make_unique<MrHandle>();
  mh->addr = addr;
  mh->len = len;
  for (auto& e : impl_->engines) {
    auto mr = e->pd()->reg_mr(addr, len,
                              transport::kAccessLocalWrite |
                                  transport::kAccessRemoteWrite |
                                  transport::kAccessRemoteRead);
    if (!mr.ok()) return mr.status().with_context("reg_mr");
    mh->mrs.push_back(std::move(*mr));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->mrs.push_back(mh.get());
  return mh.release();
}

Status Endpoint::dereg_mr(MrHandle* mh) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = std::find(impl_->mrs.begin(), impl_->mrs.end(), mh);
    if (it == impl_->mrs.end())
      return InvalidArgument("dereg_mr: unknown handle");
    impl_->mrs.erase(it);
  }
  // A receive posted just before may still sit in an engine's queue with a
  // pointer to this registration: let every engine drain past it first.
  // Requests already handed to the NIC keep only keys, which now fail
  // cleanly (local protection error, or the peer's write is dropped).
  for (auto& e : impl_->engines) (void)e->sync();
  delete mh;
  return Status::OK();
}

Result<RemoteRegion> Endpoint::advertise(MrHandle* mh, void* addr, size_t len) {
  if (!covers(mh, addr, len) || len == 0) {
    return InvalidArgument(
        "advertise: range is not inside the registered region");
  }
  uint32_t id = impl_->next_region.fetch_add(1);
  if (id >= engine::kMaxRegions) {
    return ResourceExhausted("advertise: too many regions");
  }
  engine::Region& r = impl_->regions[id];
  RemoteRegion out;
  out.addr = reinterpret_cast<uint64_t>(addr);
  out.len = len;
  out.num_engines = static_cast<uint32_t>(impl_->engines.size());
  out.region = id;
  r.addr = out.addr;
  r.len = len;
  std::lock_guard<std::mutex> lock(impl_->mu);
  mh->regions.push_back(id);
  for (size_t e = 0; e < impl_->engines.size(); ++e) {
    r.lkeys.push_back(mh->mrs[e]->lkey());
    uint32_t rkey = mh->mrs[e]->rkey();
    // A window limits the peer to exactly this range where supported.
    auto w = impl_->engines[e]->pd()->alloc_mw();
    if (w.ok()) {
      auto k = (*w)->bind(*mh->mrs[e], out.addr, len,
                          transport::kAccessRemoteWrite |
                              transport::kAccessRemoteRead |
                              transport::kAccessLocalWrite);
      if (k.ok()) {
        rkey = *k;
        mh->windows.push_back(std::move(*w));
      }
    }
    out.rkeys[e] = rkey;
  }
  r.valid.store(true, std::memory_order_release);
  return out;
}

// ------------------------------------------------------------ transfers

namespace {
Status check_request(Request* req) {
  if (req == nullptr) return InvalidArgument("null request");
  if (RequestAccess::pending(req)) {
    return InvalidArgument("request is still in use (not completed)");
  }
  return Status::OK();
}
}  // namespace

Status Endpoint::send_async(ConnId c, const void* data, size_t len,
                            MrHandle* mh, Request* req, int tag) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("send: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (r->failed.load(std::memory_order_acquire)) {
    return RemoteError("send: the connection has failed; close it");
  }
  if (len > 0 && !covers(mh, data, len)) {
    return InvalidArgument("send: buffer is not inside the registered region");
  }
  if (r->tx_outstanding.load(std::memory_order_relaxed) >=
      static_cast<int>(engine::kMaxPendingSends)) {
    return ResourceExhausted(
        "send: " + std::to_string(engine::kMaxPendingSends) +
        " sends already outstanding on this connection");
  }
  RequestAccess::start(req, e, i, 1);
  Command cmd{};
  cmd.type = CmdType::kSend;
  cmd.conn = i;
  cmd.req = req;
  cmd.addr = reinterpret_cast<uint64_t>(data);
  cmd.len = len;
  cmd.lkey = len ? mh->mrs[e]->lkey() : 0;
  cmd.tag = tag;
  r->tx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::recv_async(ConnId c, int n, void* const* data,
                            const size_t* sizes, const int* tags,
                            MrHandle* const* mhs, Request* req) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("recv: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (n < 1 || n > kMaxRecvsPerRequest) {
    return InvalidArgument("recv: n must be in [1, " +
                           std::to_string(kMaxRecvsPerRequest) + "]");
  }
  if (r->failed.load(std::memory_order_acquire)) {
    return RemoteError("recv: the connection has failed; close it");
  }
  Command cmd{};
  cmd.type = CmdType::kRecv;
  cmd.conn = i;
  cmd.req = req;
  cmd.n = static_cast<uint8_t>(n);
  for (int k = 0; k < n; ++k) {
    if (sizes[k] > 0 && !covers(mhs[k], data[k], sizes[k])) {
      return InvalidArgument("recv: buffer " + std::to_string(k) +
                             " is not inside its registered region");
    }
    if (sizes[k] > (1ull << 40))
      return InvalidArgument("recv: buffer too large");
    cmd.bufs[k] = engine::CmdBuf{reinterpret_cast<uint64_t>(data[k]), sizes[k],
                                 sizes[k] ? mhs[k]->mrs[e].get() : nullptr,
                                 tags ? tags[k] : 0, 0};
  }
  if (r->rx_outstanding.load(std::memory_order_relaxed) >=
      kMaxRequestsPerFlow) {
    return ResourceExhausted(
        "recv: " + std::to_string(kMaxRequestsPerFlow) +
        " receives already outstanding on this connection");
  }
  RequestAccess::start(req, e, i, n);
  r->rx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::flush_async(ConnId c, int n, void* const* data,
                             const size_t* sizes, MrHandle* const* mhs,
                             Request* req) {
  uint32_t e, i;
  if (impl_->lookup(c, &e, &i) == nullptr) {
    return InvalidArgument("flush: unknown or closed connection");
  }
  UCCL_RETURN_IF_ERROR(check_request(req));
  for (int k = 0; k < n; ++k) {
    if (sizes[k] > 0 && !covers(mhs[k], data[k], sizes[k])) {
      return InvalidArgument(
          "flush: buffer is not inside its registered region");
    }
  }
  // Host memory: the engine placed the bytes before completing the receive,
  // so nothing is left to flush. (GPU memory would need a read-back here.)
  RequestAccess::start(req, e, i, n);
  RequestAccess::complete(req, Status::OK());
  return Status::OK();
}

Status Endpoint::write_async(ConnId c, const void* src, size_t len,
                             MrHandle* mh, const RemoteRegion& dst,
                             uint64_t dst_offset, Request* req) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("write: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (len > 0 && !covers(mh, src, len)) {
    return InvalidArgument("write: source is not inside the registered region");
  }
  if (dst_offset > dst.len || len > dst.len - dst_offset) {
    return OutOfRange(
        "write: [offset, offset+len) is outside the remote region");
  }
  if (r->peer_engine >= dst.num_engines) {
    return InvalidArgument("write: remote region is from another endpoint");
  }
  if (r->tx_outstanding.load(std::memory_order_relaxed) >=
      static_cast<int>(engine::kMaxPendingSends)) {
    return ResourceExhausted("write: too many outstanding operations");
  }
  RequestAccess::start(req, e, i, 1);
  Command cmd{};
  cmd.type = CmdType::kWrite;
  cmd.conn = i;
  cmd.req = req;
  cmd.addr = reinterpret_cast<uint64_t>(src);
  cmd.len = len;
  cmd.lkey = len ? mh->mrs[e]->lkey() : 0;
  cmd.remote_addr = dst.addr + dst_offset;
  cmd.remote_key = dst.rkeys[r->peer_engine];
  r->tx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::read_async(ConnId c, void* dst, size_t len, MrHandle* mh,
                            const RemoteRegion& src, uint64_t src_offset,
                            Request* req) {
  uint32_t e, i;
  ConnRecord* r = impl_->lookup(c, &e, &i);
  if (r == nullptr)
    return InvalidArgument("read: unknown or closed connection");
  UCCL_RETURN_IF_ERROR(check_request(req));
  if (len > 0 && !covers(mh, dst, len)) {
    return InvalidArgument(
        "read: destination is not inside the registered region");
  }
  if (src_offset > src.len || len > src.len - src_offset) {
    return OutOfRange(
        "read: [offset, offset+len) is outside the remote region");
  }
  if (r->rx_outstanding.load(std::memory_order_relaxed) >=
      kMaxRequestsPerFlow) {
    return ResourceExhausted("read: too many outstanding receives and reads");
  }
  RequestAccess::start(req, e, i, 1);
  Command cmd{};
  cmd.type = CmdType::kRead;
  cmd.conn = i;
  cmd.req = req;
  cmd.addr = reinterpret_cast<uint64_t>(dst);
  cmd.len = len;
  cmd.mr = len ? mh->mrs[e].get() : nullptr;
  cmd.remote_addr = src.addr + src_offset;
  cmd.remote_key = src.region;
  r->rx_outstanding.fetch_add(1, std::memory_order_relaxed);
  Status st = impl_->submit(impl_->engines[e].get(), cmd);
  if (!st.ok()) {
    r->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::state(req).store(0, std::memory_order_release);
  }
  return st;
}

Status Endpoint::wait(Request* req, int timeout_ms) {
  if (req == nullptr) return InvalidArgument("null request");
  if (RequestAccess::state(req).load(std::memory_order_acquire) == 0) {
    return InvalidArgument("wait: request was never posted");
  }
  // Spin briefly, then yield a while, then sleep on the futex. Yielding
  // (not pausing) matters when this thread shares a core with an engine:
  // a pause loop holds the core the engine needs to complete the request.
  for (int i = 0; i < 64; ++i) {
    if (req->done()) return req->status();
    __builtin_ia32_pause();
  }
  for (int i = 0; i < 2000; ++i) {
    if (req->done()) return req->status();
    sched_yield();
  }
  const uint64_t ns =
      timeout_ms < 0 ? UINT64_MAX : uint64_t(timeout_ms) * 1000000;
  if (!RequestAccess::wait(req, ns)) {
    return TimedOut("request did not complete within " +
                    std::to_string(timeout_ms) + " ms");
  }
  return req->status();
}

int Endpoint::poll(Request* const* reqs, int n) const {
  int done = 0;
  for (int i = 0; i < n; ++i) done += reqs[i] && reqs[i]->done();
  return done;
}

// ----------------------------------------------------------- statistics

std::string Endpoint::nic_counters() const {
  std::ostringstream os;
  for (size_t i = 0; i < impl_->engines.size(); ++i) {
    os << "[engine " << i << "]\n" << impl_->engines[i]->device_counters();
  }
  return os.str();
}

Result<FlowStats> Endpoint::conn_stats(ConnId c) const {
  uint32_t e, i;
  if (impl_->lookup(c, &e, &i) == nullptr) {
    return InvalidArgument("stats: unknown or closed connection");
  }
  return impl_->engines[e]->conn_stats(i);
}

std::vector<EngineStats> Endpoint::engine_stats() const {
  std::vector<EngineStats> out;
  for (auto& e : impl_->engines) out.push_back(e->stats());
  return out;
}

Result<EngineStats> Endpoint::engine_stats(int engine) const {
  UCCL_RETURN_IF_ERROR(impl_->check_engine("engine_stats", engine, nullptr));
  return impl_->engines[engine]->stats();
}

Result<bool> Endpoint::engine_waiting(int engine) const {
  UCCL_RETURN_IF_ERROR(impl_->check_engine("engine_waiting", engine, nullptr));
  return impl_->engines[engine]->waiting();
}

Status Endpoint::inject_wire_fault(int engine, uint32_t fault) {
  UCCL_RETURN_IF_ERROR(
      impl_->check_engine("inject_wire_fault", engine, nullptr));
  if (fault > static_cast<uint32_t>(UcclRDMAEngine::WireFault::kLast)) {
    return InvalidArgument("no such wire fault");
  }
  impl_->engines[engine]->inject_wire_fault(
      static_cast<UcclRDMAEngine::WireFault>(fault));
  return Status::OK();
}

std::string Endpoint::stats_text() const {
  std::ostringstream os;
  auto all = engine_stats();
  for (size_t i = 0; i < all.size(); ++i) {
    const FlowStats& f = all[i].total;
    os << "engine " << i << ": tx " << f.tx_bytes << " B / " << f.tx_chunks
       << " chunks, rx " << f.rx_bytes << " B, retx fast " << f.fast_retransmits
       << " rto " << f.rto_retransmits << " tlp " << f.tlp_retransmits << " ("
       << f.rtos << " RTOs, " << f.spurious_rtos << " spurious), dup "
       << f.duplicate_chunks << ", sends " << f.sends_matched << " ("
       << f.sends_waited_for_recv << " waited for a receive) eager "
       << f.sends_eager << ", rtt p50 " << f.rtt_p50_ns / 1000.0 << " us p99 "
       << f.rtt_p99_ns / 1000.0 << " us, busy " << all[i].busy_percent()
       << "% of " << all[i].run_ns / 1e9 << " s, protocol errors "
       << all[i].protocol_errors << ", " << f.cc_state << "\n";
  }
  return os.str();
}

}  // namespace uccl
