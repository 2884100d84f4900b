// engine_bench: the engine's own CPU cost per chunk, from a one-way stream
// over the null NIC, with the same stream over the software NIC as baseline.
// Two endpoints in this process, one engine each on its own core, one flow.
// The null NIC moves no payload, so the chunk rate it reaches is what the
// engine loop (and the app thread feeding it) can do; ns/chunk = 1e9 / rate.
// Each side's busy share (loops that did work) says which engine limits.
// The last line is "engine_ns_per_chunk=<null NIC> ratio_vs_udp=<null/udp>".
#include <gflags/gflags.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "uccl/endpoint.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/logging.h"

DEFINE_string(devices, "null,udp:lo",
              "Devices to measure, in order; the first is reported, the "
              "second is the baseline.");
DEFINE_uint64(msize, 1 << 20, "Bytes per message.");
DEFINE_uint32(chunk_kb, 64, "Chunk size, KiB.");
DEFINE_uint32(paths, 4, "QPs (paths) per connection.");
DEFINE_uint32(window, 32, "Messages in flight.");
DEFINE_double(duration_s, 3.0, "Seconds per device.");
DEFINE_string(cc, "none", "Congestion control (none, timely, swift, credit).");
DEFINE_bool(rc_mode, false, "RC data QPs instead of UC + software SACK/RTO.");
DEFINE_bool(counters, false,
            "Print both endpoints' engine statistics and NIC counters after "
            "each device's run (to stderr).");
DEFINE_string(cores, "",
              "Cores 'client_engine,server_engine,app' (default: the first "
              "three allowed; two are shared when fewer exist).");

namespace {

using namespace uccl;

struct Run {
  std::string device;
  double seconds = 0;
  uint64_t chunks = 0, bytes = 0, retransmits = 0;
  double busy_tx = 0, busy_rx = 0;  // share of engine loops that did work
  bool ok = false;
};

double busy(const std::vector<EngineStats>& a,
            const std::vector<EngineStats>& b) {
  if (a.empty() || b.empty()) return 0;
  const double loops = static_cast<double>(b[0].loops - a[0].loops);
  const double idle = static_cast<double>(b[0].idle_loops - a[0].idle_loops);
  return loops > 0 ? 1.0 - idle / loops : 0;
}

struct BenchPair {
  std::unique_ptr<Endpoint> server, client;
  ConnId conn = 0, acc = 0;
};

// Two endpoints of one engine each (client on cores[0], server on
// cores[1]) and one connection between them; false after printing why.
bool open_pair(const std::string& device, const std::vector<int>& cores,
               BenchPair* p) {
  EndpointConfig cfg;
  cfg.device = device;
  cfg.num_engines = 1;
  cfg.paths = FLAGS_paths;
  cfg.chunk_bytes = FLAGS_chunk_kb * 1024;
  cfg.cc = FLAGS_cc;
  cfg.rc_mode = FLAGS_rc_mode ? 1 : 0;
  cfg.nic_rate_gbps = 0;
  EndpointConfig scfg = cfg, ccfg = cfg;
  ccfg.engine_cores = {cores[0]};
  scfg.engine_cores = {cores[1]};
  auto server = Endpoint::create(scfg);
  auto client = Endpoint::create(ccfg);
  if (!server.ok() || !client.ok()) {
    std::fprintf(
        stderr, "engine_bench: %s: %s\n", device.c_str(),
        (!server.ok() ? server.status() : client.status()).to_string().c_str());
    return false;
  }
  auto port = (*server)->listen(0);
  if (!port.ok()) {
    std::fprintf(stderr, "engine_bench: listen: %s\n",
                 port.status().to_string().c_str());
    return false;
  }
  Result<ConnId> acc = Status(StatusCode::kUnavailable, "");
  std::thread t([&] { acc = (*server)->accept(20000); });
  auto conn = (*client)->connect("127.0.0.1", *port, 20000);
  t.join();
  if (!conn.ok() || !acc.ok()) {
    std::fprintf(
        stderr, "engine_bench: connect: %s\n",
        (!conn.ok() ? conn.status() : acc.status()).to_string().c_str());
    return false;
  }
  p->server = std::move(*server);
  p->client = std::move(*client);
  p->conn = *conn;
  p->acc = *acc;
  return true;
}

Run measure(const std::string& device, const std::vector<int>& cores) {
  Run r;
  r.device = device;
  // Requests and buffers outlive the endpoints (declared first, destroyed
  // last): an endpoint that closes completes what is still pending.
  const size_t n = FLAGS_msize;
  std::vector<uint8_t> sbuf(std::max<size_t>(n, 1)), rbuf(sbuf.size());
  const uint32_t w = std::max(FLAGS_window, 1u);
  std::vector<Request> sr(w), rr(w);
  BenchPair pair;
  if (!open_pair(device, cores, &pair)) return r;
  Endpoint* server = pair.server.get();
  Endpoint* client = pair.client.get();
  const ConnId conn = pair.conn, acc = pair.acc;
  auto smh = client->reg_mr(sbuf.data(), sbuf.size());
  auto rmh = server->reg_mr(rbuf.data(), rbuf.size());
  if (!smh.ok() || !rmh.ok()) {
    std::fprintf(stderr, "engine_bench: reg_mr failed\n");
    return r;
  }
  if (cores.size() > 2) {
    Status st = pin_current_thread(cores[2]);
    if (!st.ok())
      std::fprintf(stderr, "engine_bench: app thread: %s\n",
                   st.to_string().c_str());
  }

  auto post = [&](uint64_t i) {
    const uint32_t k = static_cast<uint32_t>(i % w);
    Status a = server->recv_async(acc, rbuf.data(), n, *rmh, &rr[k]);
    Status b =
        a.ok() ? client->send_async(conn, sbuf.data(), n, *smh, &sr[k]) : a;
    return b;
  };
  uint64_t posted = 0, done = 0;
  // Warm-up: one window, not counted.
  for (uint32_t i = 0; i < w; ++i) {
    if (!post(posted++).ok()) return r;
  }
  auto s0 = client->engine_stats();
  auto r0 = server->engine_stats();
  auto f0 = client->conn_stats(conn);
  const uint64_t t0 = monotonic_ns();
  const uint64_t end = t0 + static_cast<uint64_t>(FLAGS_duration_s * 1e9);
  uint64_t next_progress = t0 + 1000000000ull;
  while (true) {
    const uint32_t k = static_cast<uint32_t>(done % w);
    Status a = client->wait(&sr[k], 20000);
    Status b = server->wait(&rr[k], 20000);
    if (!a.ok() || !b.ok()) {
      std::fprintf(stderr, "engine_bench: %s: %s\n", device.c_str(),
                   (!a.ok() ? a : b).to_string().c_str());
      return r;
    }
    ++done;
    const uint64_t now = monotonic_ns();
    if (now >= end) break;
    if (now >= next_progress) {
      std::fprintf(stderr, "  %s: %.0f s, %llu messages\n", device.c_str(),
                   (now - t0) / 1e9, static_cast<unsigned long long>(done));
      next_progress += 1000000000ull;
    }
    if (!post(posted++).ok()) return r;
  }
  r.seconds = (monotonic_ns() - t0) / 1e9;
  auto s1 = client->engine_stats();
  auto r1 = server->engine_stats();
  auto f1 = client->conn_stats(conn);
  if (!f0.ok() || !f1.ok()) {
    std::fprintf(stderr, "engine_bench: conn_stats failed\n");
    return r;
  }
  // Chunks the client's engine sent in the interval (retransmits included).
  r.chunks = f1->tx_chunks - f0->tx_chunks;
  r.bytes = f1->tx_bytes - f0->tx_bytes;
  auto retx = [](const FlowStats& s) {
    return s.fast_retransmits + s.rto_retransmits + s.tlp_retransmits;
  };
  r.retransmits = retx(*f1) - retx(*f0);
  if (FLAGS_counters) {
    std::fprintf(stderr, "client:\n%s%s\nserver:\n%s%s\n",
                 client->stats_text().c_str(), client->nic_counters().c_str(),
                 server->stats_text().c_str(), server->nic_counters().c_str());
  }
  r.busy_tx = busy(s0, s1);
  r.busy_rx = busy(r0, r1);
  // Drain what is still in flight so the endpoints close cleanly.
  for (; done < posted; ++done) {
    client->wait(&sr[done % w], 20000);
    server->wait(&rr[done % w], 20000);
  }
  client->dereg_mr(*smh);
  server->dereg_mr(*rmh);
  r.ok = true;
  return r;
}

std::vector<int> pick_cores() {
  std::vector<int> out;
  if (!FLAGS_cores.empty()) {
    size_t p = 0;
    while (p <= FLAGS_cores.size()) {
      size_t q = FLAGS_cores.find(',', p);
      if (q == std::string::npos) q = FLAGS_cores.size();
      out.push_back(std::atoi(FLAGS_cores.substr(p, q - p).c_str()));
      p = q + 1;
    }
  } else {
    out = allowed_cpus();
  }
  while (out.size() < 3) out.push_back(out.empty() ? 0 : out.back());
  out.resize(3);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "engine CPU cost per chunk over the null NIC, with a software-NIC "
      "baseline from the same run");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  uccl::init_logging(argv[0]);
  if (FLAGS_msize == 0 || FLAGS_chunk_kb == 0 || FLAGS_duration_s <= 0) {
    std::fprintf(stderr,
                 "engine_bench: msize, chunk_kb and duration_s must "
                 "be positive\n");
    return 3;
  }
  std::vector<std::string> devices;
  for (size_t p = 0; p <= FLAGS_devices.size();) {
    size_t q = FLAGS_devices.find(',', p);
    if (q == std::string::npos) q = FLAGS_devices.size();
    if (q > p) devices.push_back(FLAGS_devices.substr(p, q - p));
    p = q + 1;
  }
  if (devices.empty()) {
    std::fprintf(stderr, "engine_bench: --devices is empty\n");
    return 3;
  }
  const std::vector<int> cores = pick_cores();
  std::printf(
      "engine_bench: %llu B messages, %u KiB chunks, %u paths, window %u, "
      "cc %s, %s, %.1f s per device; cores client engine %d, server engine "
      "%d, app %d\n",
      static_cast<unsigned long long>(FLAGS_msize), FLAGS_chunk_kb, FLAGS_paths,
      FLAGS_window, FLAGS_cc.c_str(), FLAGS_rc_mode ? "RC" : "UC",
      FLAGS_duration_s, cores[0], cores[1], cores[2]);
  std::printf(
      "| device | chunks/s | ns/chunk | Gb/s | busy tx | busy rx | "
      "retransmits |\n|---|---:|---:|---:|---:|---:|---:|\n");
  std::vector<Run> runs;
  for (const std::string& d : devices) {
    Run r = measure(d, cores);
    if (!r.ok) return 2;
    const double rate = r.chunks / r.seconds;
    std::printf("| %s | %.0f | %.0f | %.1f | %.2f | %.2f | %llu |\n", d.c_str(),
                rate, 1e9 / rate, r.bytes * 8 / r.seconds / 1e9, r.busy_tx,
                r.busy_rx, static_cast<unsigned long long>(r.retransmits));
    std::fflush(stdout);
    runs.push_back(r);
  }
  const double ns0 = runs[0].seconds * 1e9 / runs[0].chunks;
  if (runs.size() > 1) {
    const double ns1 = runs[1].seconds * 1e9 / runs[1].chunks;
    std::printf("engine_ns_per_chunk=%.0f ratio_vs_%s=%.3f\n", ns0,
                runs[1].device.c_str(), ns0 / ns1);
  } else {
    std::printf("engine_ns_per_chunk=%.0f\n", ns0);
  }
  return 0;
}
