// The engine layer's knobs (UCCL_*) and their resolution with the caller's
// EndpointConfig into the plain structs the endpoint and engines use.
#include "engine/endpoint_config.h"

#include <algorithm>

#include "cc/cc.h"
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
UCCL_KNOB(bool, knob_cc_shared_floor, "UCCL_CC_SHARED_FLOOR", true,
          "Flows to one peer host share the smallest delay any has seen, "
          "which Swift's target and TIMELY's thresholds count from (0: "
          "each flow learns its own).");
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
          "Maximum retransmission timeout (after backoff), microseconds.", 10,
          100000000);
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
UCCL_KNOB(int64_t, knob_inline_bytes, "UCCL_INLINE_BYTES", -1,
          "Inline sends: a send of at most this many bytes that finds its "
          "receive posted, on a connection with no send outstanding, goes "
          "whole in the connection's control message (one datagram, no "
          "chunk and no ACK; it completes when the control QP delivers it) "
          "instead of as a chunk: the latency path of small ping-pongs. "
          "The receiver copies it, so only to a peer that offers eager "
          "slots; never on verbs devices. 0: off; -1: 992 (the most) where "
          "eager sends are on, else 0.",
          -1, 992);
UCCL_KNOB(int64_t, knob_ctrl_ack_delay_us, "UCCL_CTRL_ACK_DELAY_US", 0,
          "Software NIC: how long a connection's control QP holds the ACK "
          "of a received control message for its own next control message "
          "(a receive descriptor, an inline reply) to carry back, us; it "
          "stops holding while replies come later than this. A C++ "
          "request/response loop of inline sends then makes one datagram "
          "per message (10: 256 B ping-pong ~1.5 us faster); a sender "
          "waiting on each send waits for the peer application's next "
          "receive instead (benchmark.py at depth 1: ~3 us slower). 0: ACK "
          "at once.",
          0, 1000);
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

namespace engine {
namespace {

// The caller's settings where given, else the knobs'; then the checks.
Status fill_and_check(EndpointConfig* c) {
  const EndpointConfig def = EndpointConfig::from_knobs();
  if (c->device.empty()) c->device = def.device;
  if (c->num_engines <= 0) c->num_engines = def.num_engines;
  if (c->engine_cores.empty()) c->engine_cores = def.engine_cores;
  if (c->chunk_bytes == 0) c->chunk_bytes = def.chunk_bytes;
  if (c->paths == 0) c->paths = def.paths;
  if (c->rc_mode < 0) c->rc_mode = def.rc_mode;
  if (c->cc.empty()) c->cc = def.cc;
  if (c->cc_params.empty()) c->cc_params = def.cc_params;
  if (c->bootstrap_timeout_ms <= 0) {
    c->bootstrap_timeout_ms = knob_bootstrap_timeout_ms().get();
  }
  if (c->idle_sleep_us < 0) c->idle_sleep_us = knob_idle_sleep_us().get();
  if (c->idle_sleep_after_ms < 0) {
    c->idle_sleep_after_ms = knob_idle_sleep_after_ms().get();
  }
  if (c->idle_spin_loops < 0) c->idle_spin_loops = knob_idle_spin().get();
  if (c->trace_file.empty()) c->trace_file = knob_trace_file().get();
  if (c->link_gbps <= 0) c->link_gbps = knob_link_gbps().get();
  if (c->num_engines > 16) return InvalidArgument("at most 16 engines");
  if (!c->engine_cores.empty()) {  // given: used as given, or refused
    if (c->engine_cores.size() < static_cast<size_t>(c->num_engines)) {
      return InvalidArgument(
          std::to_string(c->engine_cores.size()) + " engine core(s) given (" +
          format_cpu_list(c->engine_cores) + ") for " +
          std::to_string(c->num_engines) + " engines (UCCL_ENGINE_CORES)");
    }
    for (int core : c->engine_cores) {
      if (Status st = check_pinnable(core); !st.ok()) {
        return InvalidArgument("engine core " + std::to_string(core) +
                               " cannot be used: " + st.message() +
                               " (UCCL_ENGINE_CORES)");
      }
    }
  }
  if (c->paths > static_cast<uint32_t>(kMaxPaths)) {
    return InvalidArgument("at most " + std::to_string(kMaxPaths) + " paths");
  }
  if (c->chunk_bytes < 1024 || c->chunk_bytes > (64u << 20)) {
    return InvalidArgument("chunk size must be in [1 KiB, 64 MiB]");
  }
  if (c->idle_sleep_us > 1000000) {
    return InvalidArgument("idle sleep must be at most 1000000 us");
  }
  if (c->idle_sleep_after_ms > 3600000) {
    return InvalidArgument(
        "idle time before sleeping must be at most 3600000 ms");
  }
  return Status::OK();
}

// Eager sends: the caller's size, else the knob's, else 16 KiB on the
// software NIC (off with cc=credit, whose pacer grants per receive).
Result<uint32_t> eager_bytes(const EndpointConfig& c) {
  const bool soft = c.device.rfind("udp", 0) == 0;
  int64_t eager = c.eager_bytes >= 0 ? c.eager_bytes : knob_eager_bytes().get();
  if (eager > static_cast<int64_t>(kMaxEagerBytes)) {
    return InvalidArgument("eager size must be at most " +
                           std::to_string(kMaxEagerBytes) + " bytes");
  }
  if (eager > 0 && c.cc == "credit") {
    return InvalidArgument(
        "eager sends do not work with cc=credit (its pull pacer grants "
        "credit per posted receive); set UCCL_EAGER_BYTES=0");
  }
  if (eager < 0) eager = soft && c.cc != "credit" ? 16384 : 0;
  // Each engine clamps it to one chunk of the size it uses (engine.cc).
  return static_cast<uint32_t>(eager);
}

// Inline sends: the caller's size, else the knob's, else the most where
// eager sends are on (both need a peer whose receive buffers are host
// memory; neither works with cc=credit's per-receive grants).
Result<uint32_t> inline_bytes(const EndpointConfig& c, uint32_t eager) {
  int64_t v = c.inline_bytes >= 0 ? c.inline_bytes : knob_inline_bytes().get();
  if (v > static_cast<int64_t>(kMaxInlineBytes)) {
    return InvalidArgument("inline size must be at most " +
                           std::to_string(kMaxInlineBytes) + " bytes");
  }
  if (v > 0 && c.cc == "credit") {
    return InvalidArgument(
        "inline sends do not work with cc=credit (its pull pacer grants "
        "credit per posted receive); set UCCL_INLINE_BYTES=0");
  }
  if (v < 0) v = eager > 0 ? kMaxInlineBytes : 0;
  return static_cast<uint32_t>(v);
}

// Faults: the config's where set, else the knobs'; the config then says
// what the device uses.
Result<transport::DeviceOptions> device_options(EndpointConfig* c) {
  transport::DeviceOptions dopt;
  UCCL_ASSIGN_OR_RETURN(dopt.faults, transport::FaultOptions::from_knobs());
  if (!c->fault_tx.empty()) {
    UCCL_ASSIGN_OR_RETURN(dopt.faults.tx,
                          transport::FaultSpec::parse(c->fault_tx));
  } else if (dopt.faults.tx.any()) {
    c->fault_tx = dopt.faults.tx.to_string();
  }
  if (!c->fault_rx.empty()) {
    UCCL_ASSIGN_OR_RETURN(dopt.faults.rx,
                          transport::FaultSpec::parse(c->fault_rx));
  } else if (dopt.faults.rx.any()) {
    c->fault_rx = dopt.faults.rx.to_string();
  }
  UCCL_RETURN_IF_ERROR(dopt.faults.validate().with_context("fault_rx"));
  if (c->fault_seed) dopt.faults.seed = c->fault_seed;
  c->fault_seed = dopt.faults.seed;
  dopt.faults_from_knobs = false;
  dopt.rate_gbps = c->nic_rate_gbps;
  dopt.backend_params = c->nic_params;
  // What the controller reads: arrival times (delay split into fabric and
  // endpoint) and hop limits (Swift's hop scaling). A bad name or
  // parameter is reported by engine_config().
  auto params = cc::CcParams::parse(c->cc_params);
  if (params.ok()) {
    auto probe = cc::make_cc(c->cc, *params, c->chunk_bytes, 100e9);
    if (probe.ok()) {
      dopt.rx_timestamps = (*probe)->uses_delay();
      dopt.hop_limits = (*probe)->uses_hops();
    }
  }
  return dopt;
}

// Every engine's settings but its index and core.
Result<EngineConfig> engine_config(const EndpointConfig& c) {
  EngineConfig ec;
  UCCL_ASSIGN_OR_RETURN(ec.cc_params, cc::CcParams::parse(c.cc_params));
  {  // validate the CC name and parameters once, here
    auto probe = cc::make_cc(c.cc, ec.cc_params, c.chunk_bytes, 100e9);
    if (!probe.ok()) return probe.status();
  }
  ec.cc_per_path = knob_cc_per_path().get();
  if (knob_cc_shared_floor().get()) {
    ec.delay_floors = std::make_shared<cc::DelayFloorTable>();
  }
  if (c.cc == "credit" && ec.cc_per_path) {
    return InvalidArgument("cc=credit is per flow; unset UCCL_CC_PER_PATH");
  }
  const bool soft = c.device.rfind("udp", 0) == 0;
  ec.chunk_bytes = c.chunk_bytes;
  ec.rc_mode = c.rc_mode == 1;
  ec.cc_name = c.cc;
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
  ec.idle_spin_loops = c.idle_spin_loops;
  ec.idle_yield_loops = knob_idle_yield().get();
  ec.idle_sleep_ns = static_cast<uint64_t>(c.idle_sleep_us) * 1000;
  ec.idle_sleep_after_ns =
      static_cast<uint64_t>(c.idle_sleep_after_ms) * 1000000;
  ec.drive_nic = knob_drive_nic().get();
  UCCL_ASSIGN_OR_RETURN(ec.eager_bytes, eager_bytes(c));
  UCCL_ASSIGN_OR_RETURN(ec.inline_bytes, inline_bytes(c, ec.eager_bytes));
  ec.ctrl_ack_delay_ns =
      static_cast<uint32_t>(knob_ctrl_ack_delay_us().get() * 1000);
  ec.trace_file = c.trace_file;
  ec.stats_interval_s = knob_stats_interval().get();
  return ec;
}

}  // namespace

Result<ResolvedConfig> resolve_config(const EndpointConfig& in) {
  UCCL_RETURN_IF_ERROR(check_knobs());
  for (const std::string& u : unknown_uccl_env_vars()) {
    LOG(WARNING) << u << " is set but is not a UCCL knob (typo?)";
  }
  if (auto kc = parse_cpu_list(knob_engine_cores().get()); !kc.ok()) {
    return kc.status().with_context("UCCL_ENGINE_CORES");
  }
  ResolvedConfig r;
  r.cfg = in;
  UCCL_RETURN_IF_ERROR(fill_and_check(&r.cfg));
  UCCL_ASSIGN_OR_RETURN(r.engine, engine_config(r.cfg));
  UCCL_ASSIGN_OR_RETURN(r.dev, device_options(&r.cfg));
  r.link_gbps = r.cfg.link_gbps;
  return r;
}

std::string core_lock_dir() { return knob_core_lock_dir().get(); }

}  // namespace engine
}  // namespace uccl
