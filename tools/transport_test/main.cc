// transport_test: UCCL's server/client performance and integrity tool
// (perftypes basic, lat, tpt, bi), in the spirit of perftest.
// Run `transport_test --help` for the flags; exit 0 ok, 1 integrity error,
// 2 transport/connection error, 3 bad usage (also --help).
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tools/transport_test/protocol.h"
#include "tools/transport_test/runner.h"
#include "uccl/endpoint.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/logging.h"

DEFINE_bool(server, false, "Run as the server (the receiver in tpt).");
DEFINE_string(serverip, "", "Client: the server's address.");
DEFINE_uint32(sessions, 1,
              "Server: client sessions to serve, then exit (0: until "
              "killed). Clients that come at the same time are served "
              "concurrently, each on its own connections.");
DEFINE_string(perftype, "tpt",
              "basic (patterned data, every byte verified), lat (ping-pong "
              "latency), tpt (throughput client -> server), bi (both ways).");
DEFINE_bool(warmup, false, "Run a short warm-up before measuring.");
DEFINE_uint32(nflow, 4, "Connections (flows) between client and server.");
DEFINE_uint32(nmsg, 1, "Messages per request (one grouped receive), 1..8.");
DEFINE_uint32(nreq, 2, "Outstanding requests per flow.");
DEFINE_uint64(msize, 1000000, "Bytes per message.");
DEFINE_uint64(iterations, 0,
              "basic/lat: iterations (0: 8 for basic, 10000 for lat); "
              "tpt/bi: requests per flow instead of --duration_s (0: time).");
DEFINE_bool(flush, false, "Flush after each receive (as NCCL does for GPUs).");
DEFINE_bool(bi, false, "Same as --perftype=bi.");
DEFINE_bool(verify, false, "tpt/bi: check every received byte (basic always).");
// The endpoint's settings: each flag, when given, overrides its UCCL_* knob;
// when not given, the knob (or its default, shown here) applies.
DEFINE_string(device, "udp",
              "NIC: udp (software NIC), udp:<if>, udp:<ip>, or a verbs "
              "device (UCCL_DEVICE).");
DEFINE_int32(engines, 1, "Engine threads, 1..16 (UCCL_ENGINES).");
DEFINE_string(engine_cores, "",
              "Engine cores, e.g. '2,3' (UCCL_ENGINE_CORES; default: free "
              "cores near the NIC).");
DEFINE_uint32(chunk_kb, 64, "Largest chunk, KiB, 1..65536 (UCCL_CHUNK_KB).");
DEFINE_uint32(paths, 4, "QPs (paths) per connection, 1..64 (UCCL_PATHS).");
DEFINE_string(cc, "none",
              "Congestion control: none, timely, timely_patched, swift, "
              "credit (UCCL_CC).");
DEFINE_string(cc_params, "",
              "Congestion-control parameters 'key=value,...' "
              "(UCCL_CC_PARAMS).");
DEFINE_bool(rc_mode, false,
            "RC QPs (the NIC retransmits) instead of UC (UCCL_RC_MODE).");
DEFINE_double(duration_s, 5.0, "tpt/bi: seconds to run.");
DEFINE_uint32(oobport, 19999,
              "TCP port of the server's bootstrap listener (server: 0 picks "
              "one and prints it).");
DEFINE_double(loss, 0.0, "Inject this packet loss probability on transmit.");
DEFINE_string(fault_tx, "", "Transmit fault spec (UCCL_FAULT_TX).");
DEFINE_string(fault_rx, "", "Receive fault spec (UCCL_FAULT_RX).");
DEFINE_uint64(fault_seed, 1, "Fault injection seed (UCCL_FAULT_SEED).");
DEFINE_double(link_gbps, 0,
              "Line rate the congestion control assumes, Gb/s (credit grants "
              "at it; 0: the device's link speed). Set it to a bottleneck's "
              "rate (UCCL_LINK_GBPS).");
DEFINE_double(nic_rate_gbps, 0,
              "Software NIC line-rate limit, Gb/s (0: none; "
              "UCCL_SOFTNIC_RATE_GBPS).");
DEFINE_double(connect_timeout_s, 10, "Client: give up connecting after this.");
DEFINE_uint64(seed, 42, "Data pattern seed.");
DEFINE_bool(json, false, "Also print the summary as one JSON line.");
DEFINE_int64(test_corrupt_rx_at, -1,
             "Testing only: flip the byte at this offset of the first "
             "received message before it is verified (exercises the "
             "mismatch report and exit code).");
DEFINE_bool(flow_stats, false,
            "Print each flow's transport statistics (CC state, RTT, "
            "retransmissions) in the summary.");

// gflags' exit hook (gflags.cc): a flag it cannot parse ends the process
// through it, with status 1, which here means an integrity error.
namespace google {
extern void (*gflags_exitfunc)(int);
}

namespace {

using namespace uccl;
using namespace uccl::tt;

[[noreturn]] void die(int code, const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "transport_test: %s\n", msg.c_str());
  std::_Exit(code);
}

bool given(const char* flag) {
  return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default;
}

Params params_from_flags() {
  Params p{};
  p.magic = kParamsMagic;
  p.version = kParamsVersion;
  std::string t = FLAGS_bi ? "bi" : FLAGS_perftype;
  p.perftype = 99;  // invalid unless one matches
  for (uint32_t i = 0; i <= kBi; ++i) {
    if (t == kPerfNames[i]) p.perftype = i;
  }
  p.nflow = FLAGS_nflow;
  p.nmsg = FLAGS_nmsg;
  p.nreq = FLAGS_nreq;
  p.msize = FLAGS_msize;
  p.iterations = FLAGS_iterations;
  p.seed = FLAGS_seed;
  p.duration_s = FLAGS_duration_s;
  p.flush = FLAGS_flush;
  p.verify = FLAGS_verify;
  p.warmup = FLAGS_warmup;
  std::random_device rd;
  do {
    p.session = ((uint64_t{rd()} << 32) ^ rd() ^ monotonic_ns()) & kSessionMask;
  } while (p.session == 0);
  return p;
}

// The endpoint's flags, each only where given (the knobs decide the rest);
// values out of range are refused rather than replaced.
EndpointConfig config_from_flags() {
  EndpointConfig c;
  if (given("device")) c.device = FLAGS_device;
  if (given("engines")) {
    if (FLAGS_engines < 1 || FLAGS_engines > 16)
      die(kExitUsage, "--engines must be in [1, 16]");
    c.num_engines = FLAGS_engines;
  }
  if (given("engine_cores")) {
    auto cores = parse_cpu_list(FLAGS_engine_cores);
    if (!cores.ok() || cores->empty()) {
      die(kExitUsage,
          "--engine_cores: " + (cores.ok() ? std::string("empty list")
                                           : cores.status().to_string()));
    }
    c.engine_cores = *cores;
  }  // else: the endpoint claims free cores (UCCL_CORE_LOCK_DIR), so a
     // client and a server on one host do not share them
  if (given("chunk_kb")) {
    if (FLAGS_chunk_kb < 1 || FLAGS_chunk_kb > 65536)
      die(kExitUsage, "--chunk_kb must be in [1, 65536]");
    c.chunk_bytes = FLAGS_chunk_kb * 1024;
  }
  if (given("paths")) {
    if (FLAGS_paths < 1 || FLAGS_paths > static_cast<uint32_t>(kMaxPaths))
      die(kExitUsage,
          "--paths must be in [1, " + std::to_string(kMaxPaths) + "]");
    c.paths = FLAGS_paths;
  }
  if (given("rc_mode")) c.rc_mode = FLAGS_rc_mode ? 1 : 0;
  if (given("cc")) c.cc = FLAGS_cc;
  if (given("cc_params")) c.cc_params = FLAGS_cc_params;
  std::string tx = FLAGS_fault_tx;
  if (given("loss")) {
    if (!(FLAGS_loss >= 0 && FLAGS_loss <= 1))
      die(kExitUsage, "--loss must be in [0, 1]");
    if (FLAGS_loss > 0) {
      tx += (tx.empty() ? "" : ",") + std::string("drop=") +
            std::to_string(FLAGS_loss);
    }
  }
  c.fault_tx = tx;
  c.fault_rx = FLAGS_fault_rx;
  if (given("fault_seed")) {
    if (FLAGS_fault_seed == 0) die(kExitUsage, "--fault_seed must be >= 1");
    c.fault_seed = FLAGS_fault_seed;
  }
  if (FLAGS_nic_rate_gbps < 0) die(kExitUsage, "--nic_rate_gbps must be >= 0");
  if (given("nic_rate_gbps")) c.nic_rate_gbps = FLAGS_nic_rate_gbps;
  if (FLAGS_link_gbps < 0) die(kExitUsage, "--link_gbps must be >= 0");
  c.link_gbps = FLAGS_link_gbps;
  return c;
}

RunOptions options(bool server, int session) {
  RunOptions o;
  o.server = server;
  o.session = session;
  o.role = !server               ? "client"
           : FLAGS_sessions == 1 ? "server"
                                 : "server " + std::to_string(session);
  o.json = FLAGS_json;
  o.flow_stats = FLAGS_flow_stats;
  o.corrupt_rx_at = FLAGS_test_corrupt_rx_at;
  return o;
}

// ", faults tx '...' rx '...' seed N" where the endpoint injects any.
std::string faults_text(const EndpointConfig& c) {
  if (c.fault_tx.empty() && c.fault_rx.empty()) return "";
  return ", faults tx '" + c.fault_tx + "' rx '" + c.fault_rx + "' seed " +
         std::to_string(c.fault_seed);
}

// Connects (blocking, bounded) with `tag`.
Result<ConnId> connect_tagged(Endpoint* ep, uint64_t tag, int timeout_ms) {
  UCCL_ASSIGN_OR_RETURN(
      uint64_t pending,
      ep->connect_start(FLAGS_serverip, static_cast<uint16_t>(FLAGS_oobport),
                        tag));
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1000000;
  for (;;) {
    auto c = ep->connect_poll(pending);
    if (c.ok() || c.status().code() != StatusCode::kUnavailable) return c;
    if (monotonic_ns() > deadline) {
      return TimedOut("not connected within " + std::to_string(timeout_ms) +
                      " ms");
    }
    usleep(50);
  }
}

// Sends `len` bytes on `c` and waits for completion.
Status send_blocking(Endpoint* ep, ConnId c, const void* data, size_t len) {
  std::vector<uint8_t> buf(static_cast<const uint8_t*>(data),
                           static_cast<const uint8_t*>(data) + len);
  UCCL_ASSIGN_OR_RETURN(MrHandle * mh, ep->reg_mr(buf.data(), buf.size()));
  Request r;
  Status st = ep->send_async(c, buf.data(), buf.size(), mh, &r);
  if (st.ok()) st = ep->wait(&r, 30000);
  if (r.pending()) (void)ep->close(c);  // completes it before buf goes
  while (r.pending()) usleep(100);
  (void)ep->dereg_mr(mh);
  return st;
}

int run_client(Endpoint* ep, const Params& p) {
  const int timeout_ms = static_cast<int>(FLAGS_connect_timeout_s * 1000);
  auto ctl = connect_tagged(ep, kControlTag, timeout_ms);
  if (!ctl.ok()) {
    die(kExitTransport, "cannot connect to " + FLAGS_serverip + ":" +
                            std::to_string(FLAGS_oobport) + ": " +
                            ctl.status().to_string());
  }
  Status st = send_blocking(ep, *ctl, &p, sizeof(p));
  if (!st.ok()) die(kExitTransport, "sending parameters: " + st.to_string());
  std::vector<ConnId> conns;
  for (uint32_t i = 0; i < p.nflow; ++i) {
    auto d = connect_tagged(ep, flow_tag(p.session, i), timeout_ms);
    if (!d.ok()) die(kExitTransport, "connect flow: " + d.status().to_string());
    conns.push_back(*d);
  }
  const EndpointConfig& c = ep->config();
  std::printf(
      "[client] connected %u flows to %s (%s, %s mode, %u paths, cc %s, "
      "%d engine(s), chunk %u B%s)\n",
      p.nflow, FLAGS_serverip.c_str(), kPerfNames[p.perftype],
      c.rc_mode == 1 ? "RC" : "UC", c.paths, c.cc.c_str(), c.num_engines,
      c.chunk_bytes, faults_text(c).c_str());
  std::fflush(stdout);
  try {
    Runner runner(ep, *ctl, conns, p, options(false, 1));
    return runner.run();
  } catch (const RunError& e) {
    die(e.code, e.message);
  }
}

// The server's sessions: each runs in a thread of its own; the exit code is
// the worst of theirs.
class Server {
 public:
  explicit Server(Endpoint* ep) : ep_(ep) {}
  int serve();

 private:
  void session(ConnId ctl, int index);
  // Reads and checks the client's Params; false (logged) if unusable.
  bool read_params(ConnId ctl, const std::string& who, Params* p);
  void note(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  Endpoint* ep_;
  std::mutex mu_;
  std::atomic<uint32_t> claimed_{0};   // sessions with valid parameters
  std::atomic<uint32_t> finished_{0};  // of those, done
  std::atomic<int> worst_{kExitOk};
};

bool Server::read_params(ConnId ctl, const std::string& who, Params* p) {
  std::vector<uint8_t> buf(sizeof(Params));
  auto mh = ep_->reg_mr(buf.data(), buf.size());
  if (!mh.ok()) return false;
  Request r;
  Status st = ep_->recv_async(ctl, buf.data(), buf.size(), *mh, &r);
  if (st.ok()) st = ep_->wait(&r, 30000);
  if (r.pending()) (void)ep_->close(ctl);  // completes it before buf goes
  while (r.pending()) usleep(100);
  (void)ep_->dereg_mr(*mh);
  if (!st.ok()) {
    note("[server] client " + who + ": no parameters (" + st.to_string() +
         "); dropped");
    return false;
  }
  std::memcpy(p, buf.data(), sizeof(*p));
  std::string why;
  if (r.size(0) != sizeof(Params) || p->magic != kParamsMagic) {
    why = "not transport_test parameters";
  } else if (p->version != kParamsVersion) {
    why = "client speaks transport_test protocol " +
          std::to_string(p->version) + ", this server " +
          std::to_string(kParamsVersion);
  } else {
    why = params_problem(*p);
  }
  if (!why.empty()) {
    note("[server] client " + who + ": bad parameters (" + why + "); dropped");
    return false;
  }
  return true;
}

void Server::session(ConnId ctl, int index) {
  const std::string who = ep_->peer_ip(ctl);
  Params p;
  if (!read_params(ctl, who, &p)) {
    (void)ep_->close(ctl);
    return;
  }
  if (FLAGS_sessions != 0 && claimed_.fetch_add(1) >= FLAGS_sessions) {
    note("[server] client " + who + ": refused, already serving " +
         std::to_string(FLAGS_sessions) + " session(s) (--sessions)");
    (void)ep_->close(ctl);
    return;
  }
  if (FLAGS_sessions == 0) claimed_.fetch_add(1);
  int rc = kExitOk;
  std::vector<ConnId> conns;
  const uint64_t deadline = monotonic_ns() + 30000000000ull;
  for (uint32_t i = 0; i < p.nflow && rc == kExitOk;) {
    auto d = ep_->accept_poll(flow_tag(p.session, i));
    if (d.ok()) {
      conns.push_back(*d);
      ++i;
    } else if (d.status().code() != StatusCode::kUnavailable ||
               monotonic_ns() > deadline) {
      note("[server] client " + who + ": flow " + std::to_string(i) +
           " did not connect: " + d.status().to_string());
      rc = kExitTransport;
    } else {
      usleep(50);
    }
  }
  if (rc == kExitOk) {
    RunOptions o = options(true, index);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "[%s] client %s: %s, %u flows, nreq %u, nmsg %u, msize %llu",
                  o.role.c_str(), who.c_str(), kPerfNames[p.perftype], p.nflow,
                  p.nreq, p.nmsg, static_cast<unsigned long long>(p.msize));
    note(line);
    try {
      Runner runner(ep_, ctl, conns, p, o);
      rc = runner.run();
    } catch (const RunError& e) {
      note("[" + o.role + "] session failed: " + e.message);
      rc = e.code;
    }
  } else {
    for (ConnId c : conns) (void)ep_->close(c);
    (void)ep_->close(ctl);
  }
  int w = worst_.load();
  while (rc > w && !worst_.compare_exchange_weak(w, rc)) {
  }
  finished_.fetch_add(1);
}

int Server::serve() {
  auto port = ep_->listen(static_cast<uint16_t>(FLAGS_oobport));
  if (!port.ok()) die(kExitTransport, port.status().to_string());
  const EndpointConfig& c = ep_->config();
  std::printf(
      "[server] listening on port %u (device %s, %s mode, %u paths, cc %s, "
      "%d engine(s), chunk %u B%s)\n",
      *port, c.device.c_str(), c.rc_mode == 1 ? "RC" : "UC", c.paths,
      c.cc.c_str(), c.num_engines, c.chunk_bytes, faults_text(c).c_str());
  std::fflush(stdout);
  // Session threads; finished ones are joined as the loop goes.
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Running> running;
  int started = 0;
  // Until the wanted sessions have all started (valid parameters) and
  // ended; sessions still reading their parameters count as neither.
  while (FLAGS_sessions == 0 || claimed_.load() < FLAGS_sessions ||
         finished_.load() < std::min(claimed_.load(), FLAGS_sessions)) {
    auto c = ep_->accept_poll(kControlTag);
    if (c.ok()) {
      auto done = std::make_shared<std::atomic<bool>>(false);
      const int index = ++started;
      running.push_back({std::thread([this, ctl = *c, index, done] {
                           session(ctl, index);
                           done->store(true);
                         }),
                         done});
    } else if (c.status().code() != StatusCode::kUnavailable) {
      // A UCCL peer whose handshake failed (e.g. another QP mode); it was
      // told why. Anything else that connects is dropped by the endpoint.
      note("[server] a client could not connect: " + c.status().to_string());
    } else {
      // New clients are rare: a waking accept loop would take CPU time
      // from the engines and sessions on a small host. A client connecting
      // meanwhile waits in the kernel's backlog for at most this long.
      usleep(5000);
    }
    for (size_t i = 0; i < running.size();) {
      if (!running[i].done->load()) {
        ++i;
        continue;
      }
      running[i].thread.join();
      running.erase(running.begin() + i);
    }
  }
  for (Running& r : running) r.thread.join();
  return worst_.load();
}

}  // namespace

int main(int argc, char** argv) {
  google::gflags_exitfunc = [](int code) {
    std::fflush(stdout);
    std::_Exit(code == 0 ? kExitOk : kExitUsage);
  };
  gflags::SetUsageMessage(
      "UCCL transport test.\n"
      "  server: transport_test --server [--oobport=19999] [--sessions=1]\n"
      "  client: transport_test --serverip=<ip> [--perftype=tpt|basic|lat|bi] "
      "...\n"
      "The client's test flags (perftype, nflow, nmsg, nreq, msize, "
      "iterations,\n"
      "duration_s, verify, flush, seed) are sent to the server, which follows "
      "them.\nExit status: 0 ok, 1 data integrity error, 2 transport or "
      "connection error,\n3 bad usage.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  init_logging(argv[0]);
  if (!FLAGS_server && FLAGS_serverip.empty()) {
    die(kExitUsage, "give --server, or --serverip=<address> for the client");
  }
  if (FLAGS_oobport > 65535) die(kExitUsage, "--oobport must be <= 65535");
  if (!FLAGS_server && FLAGS_oobport == 0) {
    die(kExitUsage, "--oobport: the client needs the server's port");
  }
  Params p = params_from_flags();
  if (!FLAGS_server) {
    const std::string why = params_problem(p);
    if (!why.empty()) die(kExitUsage, why);
  }
  auto ep = Endpoint::create(config_from_flags());
  if (!ep.ok()) die(kExitUsage, "cannot start: " + ep.status().to_string());
  const int rc =
      FLAGS_server ? Server(ep->get()).serve() : run_client(ep->get(), p);
  std::fflush(stdout);
  ep->reset();
  return rc;
}
