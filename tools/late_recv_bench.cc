// late_recv_bench: what eager sends buy when the receiver is late. Each
// iteration posts a send, waits --gap_us, then posts its receive and times
// receive post -> receive done (and -> send done), with eager sends on and,
// as the baseline from the same run, off (rendezvous: the receive's
// descriptor must reach the sender before the data moves). One endpoint
// pair at a time in this process over the software NIC (made afresh for
// each mode of each round, so only two engines run), rounds interleaved.
// The last line is "recv_done_p50_us=<eager> ratio_vs_rendezvous=<e/r>".
#include <gflags/gflags.h>

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

DEFINE_string(device, "udp:lo", "Software NIC device.");
DEFINE_uint64(msize, 64, "Bytes per message (at most --eager_bytes).");
DEFINE_int64(eager_bytes, 16384, "Eager limit of the eager pair.");
DEFINE_uint32(gap_us, 100, "Receive posted this long after the send, us.");
DEFINE_uint32(iters, 2000, "Messages per round per mode.");
DEFINE_uint32(rounds, 3, "Interleaved rounds (eager, then rendezvous).");
DEFINE_uint32(paths, 2, "QPs (paths) per connection.");

namespace {

using namespace uccl;

struct PairRun {
  std::unique_ptr<Endpoint> server, client;
  ConnId sc = 0, cc = 0;
  MrHandle *smr = nullptr, *cmr = nullptr;
  std::vector<uint8_t> sbuf, rbuf;
  std::vector<double> recv_us, send_us;  // from the receive's post
  uint64_t sends = 0, eager_sends = 0;
};

Status connect_pair(PairRun* p, int64_t eager) {
  EndpointConfig c;
  c.device = FLAGS_device;
  c.num_engines = 1;
  c.paths = FLAGS_paths;
  c.eager_bytes = eager;
  UCCL_ASSIGN_OR_RETURN(p->server, Endpoint::create(c));
  UCCL_ASSIGN_OR_RETURN(p->client, Endpoint::create(c));
  UCCL_ASSIGN_OR_RETURN(uint16_t port, p->server->listen(0));
  Result<ConnId> acc = Status(StatusCode::kUnavailable, "");
  std::thread t([&] { acc = p->server->accept(20000); });
  auto con = p->client->connect("127.0.0.1", port, 20000);
  t.join();
  if (!con.ok()) return con.status();
  if (!acc.ok()) return acc.status();
  p->cc = *con;
  p->sc = *acc;
  p->sbuf.assign(FLAGS_msize + 1, 0x5a);
  p->rbuf.assign(FLAGS_msize + 1, 0);
  UCCL_ASSIGN_OR_RETURN(p->cmr,
                        p->client->reg_mr(p->sbuf.data(), p->sbuf.size()));
  UCCL_ASSIGN_OR_RETURN(p->smr,
                        p->server->reg_mr(p->rbuf.data(), p->rbuf.size()));
  // Warm-up, receive first: its descriptor carries the eager slot grants,
  // so the first timed send can go eager too.
  Request sr, rr;
  UCCL_RETURN_IF_ERROR(
      p->server->recv_async(p->sc, p->rbuf.data(), FLAGS_msize, p->smr, &rr));
  UCCL_RETURN_IF_ERROR(
      p->client->send_async(p->cc, p->sbuf.data(), FLAGS_msize, p->cmr, &sr));
  UCCL_RETURN_IF_ERROR(p->server->wait(&rr, 10000));
  UCCL_RETURN_IF_ERROR(p->client->wait(&sr, 10000));
  return Status();
}

Status round(PairRun* p) {
  for (uint32_t i = 0; i < FLAGS_iters; ++i) {
    Request sr, rr;
    UCCL_RETURN_IF_ERROR(
        p->client->send_async(p->cc, p->sbuf.data(), FLAGS_msize, p->cmr, &sr));
    const uint64_t until = monotonic_ns() + FLAGS_gap_us * 1000ull;
    while (monotonic_ns() < until) {
    }
    const uint64_t t0 = monotonic_ns();
    UCCL_RETURN_IF_ERROR(
        p->server->recv_async(p->sc, p->rbuf.data(), FLAGS_msize, p->smr, &rr));
    uint64_t t_recv = 0, t_send = 0;
    const uint64_t deadline = t0 + 10000000000ull;
    while (t_recv == 0 || t_send == 0) {
      const uint64_t now = monotonic_ns();
      if (now > deadline) return TimedOut("message did not complete in 10 s");
      if (t_recv == 0 && rr.done()) t_recv = now;
      if (t_send == 0 && sr.done()) t_send = now;
    }
    if (!rr.status().ok()) return rr.status();
    if (!sr.status().ok()) return sr.status();
    p->recv_us.push_back((t_recv - t0) / 1e3);
    p->send_us.push_back((std::max(t_send, t0) - t0) / 1e3);
  }
  return Status();
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "receive posted after the send: eager sends vs rendezvous, same run");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  uccl::init_logging(argv[0]);
  if (FLAGS_eager_bytes <= 0 ||
      FLAGS_msize > static_cast<uint64_t>(FLAGS_eager_bytes) ||
      FLAGS_iters == 0 || FLAGS_rounds == 0) {
    std::fprintf(stderr,
                 "late_recv_bench: need 0 < msize <= eager_bytes, iters and "
                 "rounds > 0\n");
    return 3;
  }
  PairRun eager, rdv;
  std::printf(
      "late_recv_bench: %llu B messages on %s, receive posted %u us after "
      "the send, %u x %u rounds per mode\n",
      static_cast<unsigned long long>(FLAGS_msize), FLAGS_device.c_str(),
      FLAGS_gap_us, FLAGS_iters, FLAGS_rounds);
  if (allowed_cpus().size() < 3) {
    std::printf(
        "note: %zu cores for two engines and this (spinning) thread: the "
        "figures measure the scheduler\n",
        allowed_cpus().size());
  }
  for (uint32_t r = 0; r < FLAGS_rounds; ++r) {
    for (auto [p, e] : {std::pair{&eager, FLAGS_eager_bytes}, {&rdv, 0L}}) {
      Status st = connect_pair(p, e);
      if (st.ok()) st = round(p);
      if (st.ok()) {
        auto s = p->client->conn_stats(p->cc);
        if (s.ok()) {  // less the warm-up send
          p->eager_sends += s->sends_eager;
          p->sends += s->sends_eager + s->sends_matched - 1;
        }
      }
      p->client.reset();  // the pair's engines stop before the next runs
      p->server.reset();
      if (!st.ok()) {
        std::fprintf(stderr, "late_recv_bench: %s\n", st.to_string().c_str());
        return 2;
      }
    }
  }
  std::printf(
      "| mode | recv post -> recv done p50 / p99 (us) | recv post -> send "
      "done p50 / p99 (us) |\n|---|---:|---:|\n");
  for (auto [name, p] : {std::pair{"eager", &eager}, {"rendezvous", &rdv}}) {
    std::printf("| %s | %.2f / %.2f | %.2f / %.2f |\n", name,
                pct(p->recv_us, 0.5), pct(p->recv_us, 0.99),
                pct(p->send_us, 0.5), pct(p->send_us, 0.99));
  }
  std::printf("eager sends: %llu of %llu\n",
              static_cast<unsigned long long>(eager.eager_sends),
              static_cast<unsigned long long>(eager.sends));
  const double e = pct(eager.recv_us, 0.5), b = pct(rdv.recv_us, 0.5);
  std::printf("recv_done_p50_us=%.2f ratio_vs_rendezvous=%.3f\n", e,
              b > 0 ? e / b : 0.0);
  return 0;
}
