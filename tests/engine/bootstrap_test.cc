// The bootstrap handshake after the first message, live: a TCP proxy
// between a real client and a real server damages one byte of the client's
// stream (the QP message's magic or count, the ready byte); both sides fail
// with a clear error and the server goes on accepting real peers.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "engine/wire.h"
#include "tests/engine/engine_test_util.h"
#include "transport/nic.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

// Forwards one client connection to 127.0.0.1:`server_port` both ways for
// at most 10 s, XORing the byte at `offset` of the client-to-server stream
// with `mask`.
class CorruptingProxy {
 public:
  CorruptingProxy(uint16_t server_port, size_t offset, uint8_t mask)
      : server_port_(server_port), offset_(offset), mask_(mask) {
    lfd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(0);
    EXPECT_EQ(bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(lfd_, 1), 0);
    socklen_t len = sizeof(a);
    getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~CorruptingProxy() {
    stop_ = true;
    thread_.join();
    close(lfd_);
  }
  uint16_t port() const { return port_; }

 private:
  static sockaddr_in loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void run() {
    const uint64_t until = monotonic_ns() + 10000000000ull;
    pollfd lp{lfd_, POLLIN, 0};
    while (!stop_ && poll(&lp, 1, 10) == 0) {
      if (monotonic_ns() > until) return;
    }
    if (stop_) return;
    const int c = accept(lfd_, nullptr, nullptr);
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = loopback(server_port_);
    if (c < 0 || connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      if (c >= 0) close(c);
      close(s);
      return;
    }
    size_t seen = 0;  // client-to-server bytes forwarded
    pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
    uint8_t buf[4096];
    while (!stop_ && monotonic_ns() < until) {
      if (poll(p, 2, 10) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          closed = true;
          break;
        }
        if (i == 0 && offset_ >= seen && offset_ < seen + n) {
          buf[offset_ - seen] ^= mask_;
        }
        if (i == 0) seen += static_cast<size_t>(n);
        if (send(p[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
          closed = true;
        }
      }
      if (closed) break;
    }
    close(c);
    close(s);
  }

  uint16_t server_port_;
  size_t offset_;
  uint8_t mask_;
  int lfd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

constexpr uint32_t kPaths = 2;
// Where the client's stream holds each field: its hello, then its QP
// message (BootQps and kPaths QpInfos), then its ready byte.
constexpr size_t kQpsAt = sizeof(engine::BootHello);
constexpr size_t kReadyAt =
    kQpsAt + sizeof(engine::BootQps) + kPaths * sizeof(transport::QpInfo);

struct Damage {
  const char* name;
  size_t offset;
  uint8_t mask;
  const char* server_error;  // in the accept's status message
};

void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

class BootstrapDamage : public ::testing::TestWithParam<Damage> {};

TEST_P(BootstrapDamage, BothSidesFailClearlyAndTheServerGoesOn) {
  const Damage& d = GetParam();
  EndpointConfig cfg = test_config(1, kPaths);
  cfg.bootstrap_timeout_ms = 3000;
  auto server = Endpoint::create(cfg);
  auto client = Endpoint::create(cfg);
  ASSERT_TRUE(server.ok() && client.ok());
  auto port = (*server)->listen(0);
  ASSERT_TRUE(port.ok());
  {
    CorruptingProxy proxy(*port, d.offset, d.mask);
    Result<ConnId> acc = Status(StatusCode::kUnavailable, "");
    std::thread t([&] { acc = (*server)->accept(5000); });
    auto c = (*client)->connect("127.0.0.1", proxy.port(), 5000);
    t.join();
    if (c.ok()) {
      // The ready byte: the client may have its peer's ready byte before
      // the server reads the damaged one and hangs up; the connection is
      // dead then, which the first transfer learns.
      EXPECT_EQ(std::string(d.name), "ready_byte") << "connect must fail";
      std::vector<uint8_t> b(64);
      auto mr = (*client)->reg_mr(b.data(), b.size());
      Request r;
      Status st = (*client)->send_async(*c, b.data(), b.size(), *mr, &r);
      if (st.ok()) st = (*client)->wait(&r, 10000);
      EXPECT_FALSE(st.ok()) << "a connection the server refused moved data";
      (*client)->close(*c);
      (*client)->dereg_mr(*mr);
    }
    ASSERT_FALSE(acc.ok()) << "a damaged handshake was accepted";
    EXPECT_EQ(acc.status().code(), StatusCode::kProtocolError) << acc.status();
    EXPECT_NE(acc.status().message().find(d.server_error), std::string::npos)
        << acc.status();
  }
  // A real peer still gets in and moves bytes.
  Result<ConnId> acc = Status(StatusCode::kUnavailable, "");
  std::thread t([&] { acc = (*server)->accept(5000); });
  auto c = (*client)->connect("127.0.0.1", *port, 5000);
  t.join();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(acc.ok()) << acc.status();
  std::vector<uint8_t> out(4096), in(4096);
  fill_pattern(out.data(), out.size(), 9);
  auto omr = (*client)->reg_mr(out.data(), out.size());
  auto imr = (*server)->reg_mr(in.data(), in.size());
  Request sr, rr;
  ASSERT_TRUE(
      (*server)->recv_async(*acc, in.data(), in.size(), *imr, &rr).ok());
  ASSERT_TRUE(
      (*client)->send_async(*c, out.data(), out.size(), *omr, &sr).ok());
  ASSERT_TRUE((*client)->wait(&sr, 10000).ok()) << sr.status();
  ASSERT_TRUE((*server)->wait(&rr, 10000).ok()) << rr.status();
  EXPECT_EQ(find_pattern_mismatch(in.data(), in.size(), 9), -1);
}

INSTANTIATE_TEST_SUITE_P(
    Live, BootstrapDamage,
    ::testing::Values(Damage{"qp_magic", kQpsAt, 0x01, "bad QP message"},
                      Damage{"qp_count",
                             kQpsAt + offsetof(engine::BootQps, num_qps), 0x04,
                             "QPs, agreed on"},
                      Damage{"qp_engine",
                             kQpsAt + offsetof(engine::BootQps, engine) + 3,
                             0x80, "out of range"},
                      Damage{"ready_byte", kReadyAt, 0xFF, "bad ready byte"}),
    [](const ::testing::TestParamInfo<Damage>& i) {
      return std::string(i.param.name);
    });

}  // namespace
}  // namespace uccl::testing
