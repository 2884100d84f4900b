// p2p_pingpong: one-way latency of uccl::p2p send/recv from C++ (no Python),
// against a raw UDP ping-pong over loopback in the same run (the baseline).
// Two endpoints in this process, a thread each: the client sends --size
// bytes, the server echoes them; one-way = half the round trip. Both sides
// post their next receive before waiting on their send, as
// p2p/benchmark.py's ping-pong does. One row per path, percentiles in us;
// the UDP row only where one datagram holds the message (65,507 bytes).
// Exit 1 on a transfer error or a lost datagram, 2 on bad flags.
#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "uccl/p2p.h"

DEFINE_uint64(size, 256, "Message bytes.");
DEFINE_uint32(iterations, 20000, "Round trips per path.");
DEFINE_int32(num_cpus, 1, "Engines per endpoint.");
DEFINE_string(nic, "udp:lo", "NIC device of both endpoints.");

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTimeoutMs = 10000;
constexpr size_t kMaxUdpPayload = 65507;  // an IPv4 UDP datagram's

struct Row {
  std::vector<double> one_way_us;
};

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

void print(const char* name, const Row& r) {
  std::printf("%-22s p50 %7.2f  p90 %7.2f  p99 %7.2f us one-way\n", name,
              pct(r.one_way_us, 0.5), pct(r.one_way_us, 0.9),
              pct(r.one_way_us, 0.99));
}

// The raw baseline: two UDP sockets on loopback, each side busy-polling.
bool udp_pingpong(size_t n, uint32_t iters, Row* row) {
  int a = socket(AF_INET, SOCK_DGRAM, 0), b = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in sa{}, sb{};
  sa.sin_family = sb.sin_family = AF_INET;
  sa.sin_addr.s_addr = sb.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (a < 0 || b < 0 || bind(a, reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
      bind(b, reinterpret_cast<sockaddr*>(&sb), len) != 0 ||
      getsockname(a, reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      getsockname(b, reinterpret_cast<sockaddr*>(&sb), &len) != 0 ||
      connect(a, reinterpret_cast<sockaddr*>(&sb), sizeof(sb)) != 0 ||
      connect(b, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return false;
  }
  // A buffer per side: the two threads are ordered only through the
  // sockets, which a race detector cannot see.
  std::vector<char> buf(std::max<size_t>(n, 1)), echo_buf(buf.size());
  // A lost datagram (loopback drops under memory pressure) must not spin
  // forever: each wait gives up after kTimeoutMs and fails the run.
  std::atomic<bool> failed{false};
  auto spin_recv = [&](int fd, std::vector<char>* into) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(kTimeoutMs);
    for (uint32_t k = 1; recv(fd, into->data(), into->size(), MSG_DONTWAIT) < 0;
         ++k) {
      if (k % 1024 == 0 &&
          (failed.load(std::memory_order_relaxed) || Clock::now() > deadline)) {
        failed = true;
        return false;
      }
    }
    return true;
  };
  std::thread echo([&] {
    for (uint32_t i = 0; i < iters; ++i) {
      if (!spin_recv(b, &echo_buf) || send(b, echo_buf.data(), n, 0) < 0) {
        failed = true;
        return;
      }
    }
  });
  for (uint32_t i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    if (send(a, buf.data(), n, 0) < 0 || !spin_recv(a, &buf)) {
      failed = true;
      break;
    }
    row->one_way_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
        2);
  }
  echo.join();
  close(a);
  close(b);
  return !failed;
}

bool p2p_pingpong(size_t n, uint32_t iters, Row* row) {
  using namespace uccl::p2p;
  Config cfg;
  cfg.num_cpus = FLAGS_num_cpus;
  cfg.engine.device = FLAGS_nic;
  auto s = Endpoint::create(cfg), c = Endpoint::create(cfg);
  if (!s.ok() || !c.ok()) {
    std::fprintf(stderr, "p2p_pingpong: %s %s\n",
                 s.status().to_string().c_str(),
                 c.status().to_string().c_str());
    return false;
  }
  auto port = (*s)->listen(0);
  uccl::Result<ConnHandle> sc = uccl::Unavailable("");
  std::thread acc([&] { sc = (*s)->accept(kTimeoutMs); });
  auto cc = port.ok() ? (*c)->connect("127.0.0.1", *port, kTimeoutMs)
                      : uccl::Result<ConnHandle>(port.status());
  acc.join();
  if (!cc.ok() || !sc.ok()) return false;
  const size_t cap = std::max<size_t>(n, 1);
  std::vector<uint8_t> sbuf(2 * cap), cbuf(2 * cap);
  auto smr = (*s)->reg(sbuf.data(), sbuf.size());
  auto cmr = (*c)->reg(cbuf.data(), cbuf.size());
  if (!smr.ok() || !cmr.ok()) return false;
  bool ok = true;
  std::thread echo([&] {
    Endpoint* ep = s->get();
    auto h = ep->recv_async(*sc, *smr, sbuf.data(), cap);
    for (uint32_t i = 0; i < iters && h.ok(); ++i) {
      size_t got = 0;
      uint8_t* in = sbuf.data() + (i % 2) * cap;
      if (!ep->wait(*h, kTimeoutMs, &got).ok()) break;
      auto snd = ep->send_async(*sc, *smr, in, got);
      if (i + 1 < iters) {
        h = ep->recv_async(*sc, *smr, sbuf.data() + ((i + 1) % 2) * cap, cap);
      }
      if (!snd.ok() || !ep->wait(*snd, kTimeoutMs).ok()) break;
    }
  });
  Endpoint* ep = c->get();
  for (uint32_t i = 0; i < iters && ok; ++i) {
    const auto t0 = Clock::now();
    auto h = ep->recv_async(*cc, *cmr, cbuf.data() + cap, cap);
    auto snd = ep->send_async(*cc, *cmr, cbuf.data(), n);
    ok = h.ok() && snd.ok() && ep->wait(*h, kTimeoutMs).ok();
    row->one_way_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
        2);
    ok = ok && ep->wait(*snd, kTimeoutMs).ok();
  }
  echo.join();
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("uccl::p2p ping-pong latency against raw UDP");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_iterations == 0 || FLAGS_num_cpus < 1) {
    std::fprintf(stderr,
                 "p2p_pingpong: need --iterations > 0, --num_cpus > 0\n");
    return 2;
  }
  Row udp, p2p;
  const bool baseline = FLAGS_size <= kMaxUdpPayload;
  if (baseline && !udp_pingpong(FLAGS_size, FLAGS_iterations, &udp)) {
    std::fprintf(stderr, "p2p_pingpong: the UDP ping-pong failed\n");
    return 1;
  }
  if (!p2p_pingpong(FLAGS_size, FLAGS_iterations, &p2p)) {
    std::fprintf(stderr, "p2p_pingpong: a p2p transfer failed\n");
    return 1;
  }
  std::printf("%zu-byte ping-pong, %u round trips each\n",
              static_cast<size_t>(FLAGS_size), FLAGS_iterations);
  if (!baseline) {
    std::printf("raw UDP: left out (a datagram holds at most %zu bytes)\n",
                kMaxUdpPayload);
    print("uccl::p2p (C++)", p2p);
    return 0;
  }
  print("raw UDP (busy-polled)", udp);
  print("uccl::p2p (C++)", p2p);
  std::printf("ratio p50: %.2f\n",
              pct(p2p.one_way_us, 0.5) / pct(udp.one_way_us, 0.5));
  return 0;
}
