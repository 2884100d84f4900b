// Raw kernel-socket throughput (TCP streams, UDP blast): the baseline every
// transport_test benchmark prints next to its own figure, from the same run.
//
//   socket_bench --proto=tcp --streams=4 --duration_s=5      # loopback pair
//   socket_bench --server --proto=tcp --port=19998           # receiver host
//   socket_bench --serverip=10.199.0.2 --proto=tcp --port=19998  # sender
//
// The receiver counts bytes (UDP: what arrived, losses excluded) and prints
// the rate; --json adds one machine-readable line. UDP datagrams carry a
// sequence number per stream in their first 8 bytes, so the receiver also
// counts the ones lost and the ones that arrived after a later one of their
// stream (a path that reorders a flow, e.g. a veth behind a tbf without RPS).
#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

DEFINE_bool(server, false, "Receive (the server side).");
DEFINE_string(serverip, "", "Client: the receiver's address.");
DEFINE_string(proto, "tcp", "tcp (reliable streams) or udp (raw datagrams).");
DEFINE_uint32(port, 0, "First port (stream i uses port+i); 0: pick (pair).");
DEFINE_uint32(streams, 4, "Parallel streams (threads, sockets).");
DEFINE_uint64(msize, 0,
              "Bytes per write (TCP, default 1 MB) or datagram (UDP, "
              "default 65000).");
DEFINE_double(duration_s, 5, "Seconds the sender sends.");
DEFINE_uint32(sockbuf_kb, 4096, "SO_SNDBUF / SO_RCVBUF, KiB.");
DEFINE_bool(json, false, "Also print one JSON line.");
DEFINE_bool(lat, false,
            "UDP ping-pong latency instead of throughput (loopback pair): "
            "one-way (RTT/2) percentiles of --msize-byte datagrams.");
DEFINE_uint64(iterations, 20000, "--lat: round trips measured.");
DEFINE_bool(lat_poll, false,
            "--lat: both sides busy-poll their socket (recv with "
            "MSG_DONTWAIT in a loop), as UCCL's engines poll theirs, instead "
            "of blocking in recv (which adds a sleep and a wake-up per trip).");
DEFINE_bool(lat_rxq_ovfl, false,
            "--lat: set SO_RXQ_OVFL on both sockets and receive with recvmsg "
            "and a control buffer: what a per-datagram drop-count control "
            "message costs (the software NIC stopped using one).");

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "socket_bench: %s\n", m.c_str());
  std::exit(2);
}

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

void set_bufs(int fd) {
  int b = static_cast<int>(FLAGS_sockbuf_kb * 1024);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &b, sizeof(b)) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &b, sizeof(b)) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
}

sockaddr_in addr_of(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1)
    die("bad address " + ip);
  return a;
}

bool tcp() { return FLAGS_proto == "tcp"; }

// One UDP stream's arrivals by sequence number (the datagram's first 8
// bytes, host order: both ends are one machine or one architecture).
// Datagrams are never duplicated on these paths, so what the highest
// number says was sent and did not arrive is lost; one below the highest
// seen arrived after a later one.
struct UdpOrder {
  uint64_t received = 0, reordered = 0, next = 0;  // next: highest + 1
  void add(const char* datagram) {
    uint64_t seq;
    std::memcpy(&seq, datagram, sizeof(seq));
    ++received;
    if (seq < next) {
      ++reordered;
    } else {
      next = seq + 1;
    }
  }
  uint64_t lost() const { return next > received ? next - received : 0; }
};

// Receiver: binds `streams` sockets from `port`, reports bytes and rate.
// Writes "ready\n" to `ready_fd` (pair mode) once bound.
int run_server(uint16_t port, int ready_fd) {
  const uint32_t n = FLAGS_streams;
  std::vector<int> fds(n);
  for (uint32_t i = 0; i < n; ++i) {
    fds[i] = socket(AF_INET, tcp() ? SOCK_STREAM : SOCK_DGRAM, 0);
    int one = 1;
    setsockopt(fds[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    set_bufs(fds[i]);
    sockaddr_in a = addr_of("0.0.0.0", static_cast<uint16_t>(port + i));
    if (bind(fds[i], reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
      die("bind port " + std::to_string(port + i) + ": " + strerror(errno));
    if (tcp() && listen(fds[i], 1) != 0) die("listen");
  }
  std::printf("[server] %s, %u streams on ports %u..%u\n", FLAGS_proto.c_str(),
              n, port, port + n - 1);
  std::fflush(stdout);
  if (ready_fd >= 0) {
    (void)!write(ready_fd, "r", 1);
    close(ready_fd);
  }
  std::atomic<uint64_t> bytes{0}, datagrams{0}, lost{0}, reordered{0};
  std::atomic<double> first{0}, last{0};
  std::vector<std::thread> th;
  for (uint32_t i = 0; i < n; ++i) {
    th.emplace_back([&, i] {
      std::vector<char> buf(4 << 20);
      int fd = fds[i];
      if (tcp()) {
        fd = accept(fds[i], nullptr, nullptr);
        if (fd < 0) return;
        set_bufs(fd);
      } else {
        timeval tv{1, 0};  // UDP: the sender is done after 1 s of silence
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      }
      uint64_t mine = 0;
      UdpOrder order;
      for (;;) {
        ssize_t r = recv(fd, buf.data(), buf.size(), 0);
        if (r <= 0) break;
        const double t = now_s();
        double f = 0;
        first.compare_exchange_strong(f, t);
        last.store(t);
        mine += static_cast<uint64_t>(r);
        if (!tcp() && r >= 8) order.add(buf.data());
      }
      bytes += mine;
      datagrams += order.received;
      lost += order.lost();
      reordered += order.reordered;
      close(fd);
    });
  }
  for (auto& t : th) t.join();
  const double secs = last.load() - first.load();
  const double gbps = secs > 0 ? bytes.load() * 8 / secs / 1e9 : 0;
  std::printf("[server] received %llu bytes in %.2f s: %.2f Gb/s\n",
              static_cast<unsigned long long>(bytes.load()), secs, gbps);
  if (!tcp()) {
    std::printf("[server] udp: %" PRIu64 " datagrams, %" PRIu64
                " lost, %" PRIu64 " arrived after a later one\n",
                datagrams.load(), lost.load(), reordered.load());
  }
  if (FLAGS_json) {
    std::printf(
        "{\"role\":\"server\",\"proto\":\"%s\",\"streams\":%u,\"bytes\":%llu,"
        "\"seconds\":%.4f,\"rx_gbps\":%.4f,\"datagrams\":%" PRIu64
        ",\"lost\":%" PRIu64 ",\"reordered\":%" PRIu64 "}\n",
        FLAGS_proto.c_str(), n, static_cast<unsigned long long>(bytes.load()),
        secs, gbps, datagrams.load(), lost.load(), reordered.load());
  }
  std::fflush(stdout);
  return bytes.load() > 0 ? 0 : 1;
}

int run_client(const std::string& ip, uint16_t port) {
  const uint32_t n = FLAGS_streams;
  const uint64_t msize =
      FLAGS_msize ? FLAGS_msize : (tcp() ? (1u << 20) : 65000u);
  if (!tcp() && msize > 65507) die("--msize: a UDP datagram is <= 65507 B");
  if (!tcp() && msize < 8)
    die("--msize: a UDP datagram is >= 8 B (its number)");
  std::atomic<uint64_t> sent{0};
  const double end = now_s() + FLAGS_duration_s;
  std::vector<std::thread> th;
  for (uint32_t i = 0; i < n; ++i) {
    th.emplace_back([&, i] {
      std::vector<char> buf(msize, static_cast<char>('a' + i));
      int fd = socket(AF_INET, tcp() ? SOCK_STREAM : SOCK_DGRAM, 0);
      set_bufs(fd);
      sockaddr_in a = addr_of(ip, static_cast<uint16_t>(port + i));
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
        die("connect to " + ip + ":" + std::to_string(port + i) + ": " +
            strerror(errno));
      uint64_t mine = 0, seq = 0;
      while (now_s() < end) {
        if (!tcp()) std::memcpy(buf.data(), &seq, sizeof(seq));
        ssize_t w = send(fd, buf.data(), buf.size(), 0);
        if (w > 0) mine += static_cast<uint64_t>(w);
        if (w > 0 || errno == ENOBUFS) ++seq;  // ENOBUFS: dropped, not kept
        if (w < 0 && errno != ENOBUFS && errno != EAGAIN &&
            errno != ECONNREFUSED)
          break;
      }
      sent += mine;
      close(fd);
    });
  }
  for (auto& t : th) t.join();
  std::printf("[client] sent %llu bytes in %.2f s: %.2f Gb/s offered\n",
              static_cast<unsigned long long>(sent.load()), FLAGS_duration_s,
              sent.load() * 8 / FLAGS_duration_s / 1e9);
  std::fflush(stdout);
  return 0;
}

// UDP ping-pong on loopback: a child echoes, the parent times round trips
// with blocking sockets (the kernel's best case for one message in flight).
int run_lat() {
  const size_t len = FLAGS_msize ? FLAGS_msize : 64;
  if (len > 65507) die("--msize: a UDP datagram is <= 65507 B");
  int a = socket(AF_INET, SOCK_DGRAM, 0), b = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in any = addr_of("127.0.0.1", 0);
  if (bind(a, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      bind(b, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0)
    die("bind");
  sockaddr_in aa{}, ba{};
  socklen_t sl = sizeof(aa);
  getsockname(a, reinterpret_cast<sockaddr*>(&aa), &sl);
  sl = sizeof(ba);
  getsockname(b, reinterpret_cast<sockaddr*>(&ba), &sl);
  connect(a, reinterpret_cast<sockaddr*>(&ba), sizeof(ba));
  connect(b, reinterpret_cast<sockaddr*>(&aa), sizeof(aa));
  const uint64_t warm = FLAGS_iterations / 10 + 1, n = FLAGS_iterations;
  // One datagram into buf; with --lat_poll by spinning (5 s at most), else
  // blocking under the sockets' 5 s SO_RCVTIMEO. <= 0: nothing came.
  if (FLAGS_lat_rxq_ovfl) {
    int one = 1;
    setsockopt(a, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
    setsockopt(b, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
  }
  // recv, or recvmsg reading the drop count from its control message.
  auto recv1 = [](int fd, std::vector<char>& buf, int flags) -> ssize_t {
    if (!FLAGS_lat_rxq_ovfl) return recv(fd, buf.data(), buf.size(), flags);
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(uint32_t))];
    iovec iov{buf.data(), buf.size()};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    ssize_t r = recvmsg(fd, &m, flags);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); r >= 0 && c; c = CMSG_NXTHDR(&m, c)) {
      uint32_t drops;
      if (c->cmsg_type == SO_RXQ_OVFL) std::memcpy(&drops, CMSG_DATA(c), 4);
    }
    return r;
  };
  auto receive = [&](int fd, std::vector<char>& buf) -> ssize_t {
    if (!FLAGS_lat_poll) return recv1(fd, buf, 0);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (;;) {
      ssize_t r = recv1(fd, buf, MSG_DONTWAIT);
      if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return r;
      if (Clock::now() > deadline) return -1;
    }
  };
  pid_t pid = fork();
  std::vector<char> buf(len + 1, 'x');
  if (pid == 0) {
    timeval tv{5, 0};
    setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (uint64_t i = 0; i < warm + n; ++i) {
      ssize_t r = receive(b, buf);
      if (r <= 0) std::_Exit(1);
      (void)!send(b, buf.data(), static_cast<size_t>(r), 0);
    }
    std::_Exit(0);
  }
  timeval tv{5, 0};
  setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<double> us;
  us.reserve(n);
  for (uint64_t i = 0; i < warm + n; ++i) {
    const auto t0 = Clock::now();
    if (send(a, buf.data(), len, 0) < 0 || receive(a, buf) <= 0)
      die("ping-pong failed");
    const double d =
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= warm) us.push_back(d / 2);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  std::sort(us.begin(), us.end());
  auto q = [&](double x) {
    return us[std::min(us.size() - 1, size_t(x * us.size()))];
  };
  std::printf(
      "UDP ping-pong one-way (RTT/2) of %zu-byte datagrams, %s%s, %zu "
      "samples, us:\n  min %.2f  p50 %.2f  p90 %.2f  p99 %.2f  p999 %.2f  "
      "max %.2f\n",
      len, FLAGS_lat_poll ? "busy-polled recv" : "blocking recv",
      FLAGS_lat_rxq_ovfl ? " with SO_RXQ_OVFL" : "", us.size(), us.front(),
      q(0.5), q(0.9), q(0.99), q(0.999), us.back());
  if (FLAGS_json) {
    std::printf(
        "{\"role\":\"lat\",\"poll\":%s,\"msize\":%zu,"
        "\"lat_us\":{\"min\":%.3f,"
        "\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
        "\"max\":%.3f}}\n",
        FLAGS_lat_poll ? "true" : "false", len, us.front(), q(0.5), q(0.9),
        q(0.99), q(0.999), us.back());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Raw socket throughput baseline. Without --server/--serverip it runs a "
      "receiver and a sender on loopback (two processes).");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (!tcp() && FLAGS_proto != "udp") die("--proto must be tcp or udp");
  if (FLAGS_streams < 1 || FLAGS_streams > 64) die("--streams: 1..64");
  if (!(FLAGS_duration_s > 0)) die("--duration_s must be positive");
  if (FLAGS_lat) return run_lat();
  if (FLAGS_server) return run_server(FLAGS_port ? FLAGS_port : 19998, -1);
  if (!FLAGS_serverip.empty())
    return run_client(FLAGS_serverip, FLAGS_port ? FLAGS_port : 19998);
  // Pair on loopback: the receiver in a child process.
  uint16_t port =
      static_cast<uint16_t>(FLAGS_port ? FLAGS_port : 20000 + getpid() % 20000);
  int p[2];
  if (pipe(p) != 0) die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::_Exit(run_server(port, p[1]));
  }
  close(p[1]);
  char c;
  if (read(p[0], &c, 1) != 1) die("the receiver did not start");
  close(p[0]);
  run_client("127.0.0.1", port);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
