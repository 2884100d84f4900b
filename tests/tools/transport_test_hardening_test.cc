// tools/transport_test against what users and attackers do to it: port
// scans of an idle server, two clients at once, knobs that flags must not
// override, and bad flag values, each a clear error with the usage code.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/subprocess.h"
#include "uccl/endpoint.h"

namespace uccl::testing {
namespace {

const std::string kBin = UCCL_TRANSPORT_TEST_BIN;
const std::vector<std::string> kSmall = {"--engines=1", "--paths=2"};

// Starts a server with `flags` (port chosen by the kernel); its port, or 0.
int start_server(Subprocess* s) {
  const std::string tag = "listening on port ";
  if (!s->wait_for_output(tag, 20000)) {
    ADD_FAILURE() << "server did not listen:\n" << s->output();
    return 0;
  }
  const std::string& so = s->output();
  return std::atoi(so.c_str() + so.find(tag) + tag.size());
}

std::vector<std::string> client_args(int port,
                                     const std::vector<std::string>& more) {
  std::vector<std::string> c = {kBin, "--serverip=127.0.0.1",
                                "--oobport=" + std::to_string(port)};
  c.insert(c.end(), kSmall.begin(), kSmall.end());
  c.insert(c.end(), more.begin(), more.end());
  return c;
}

// Opens a TCP connection to `port`, sends `bytes` (if any) and returns it.
int knock(int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (!bytes.empty()) {
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), 0),
              static_cast<ssize_t>(bytes.size()));
  }
  return fd;
}

// A port scan (connects that close at once, an HTTP request, a connection
// left silent) does not end an idle server: it logs and counts each and
// then serves a real client.
TEST(TransportTestHardening, PortScanDoesNotEndAnIdleServer) {
  std::vector<std::string> s = {kBin, "--server", "--oobport=0"};
  s.insert(s.end(), kSmall.begin(), kSmall.end());
  Subprocess server(s);
  const int port = start_server(&server);
  ASSERT_GT(port, 0);
  for (int i = 0; i < 5; ++i) close(knock(port, ""));
  close(knock(port, "GET / HTTP/1.0\r\n\r\n"));
  const int silent = knock(port, "");
  ASSERT_TRUE(server.wait_for_output("not a UCCL peer", 10000))
      << server.output();
  EXPECT_TRUE(server.running()) << server.output();
  Subprocess client(client_args(
      port, {"--perftype=basic", "--iterations=2", "--msize=100000"}));
  EXPECT_EQ(client.wait(60000), 0) << client.output();
  EXPECT_EQ(server.wait(20000), 0) << server.output();
  EXPECT_NE(server.output().find("iteration 1: OK"), std::string::npos)
      << server.output();
  close(silent);
}

// Two clients started together against one server: each session has its
// own connections (tagged with its session id), both verify every byte,
// and the server serves them concurrently.
TEST(TransportTestHardening, TwoClientsAtOnceBothFinishAndVerify) {
  std::vector<std::string> s = {kBin, "--server", "--oobport=0", "--json",
                                "--sessions=2"};
  s.insert(s.end(), kSmall.begin(), kSmall.end());
  Subprocess server(s);
  const int port = start_server(&server);
  ASSERT_GT(port, 0);
  const std::vector<std::string> test = {"--perftype=basic", "--nflow=4",
                                         "--iterations=6", "--json"};
  Subprocess a(client_args(port, [&] {
    auto v = test;
    v.push_back("--msize=1000000");
    return v;
  }()));
  Subprocess b(client_args(port, [&] {
    auto v = test;
    v.push_back("--msize=64");
    return v;
  }()));
  EXPECT_EQ(a.wait(90000), 0) << a.output();
  EXPECT_EQ(b.wait(90000), 0) << b.output();
  EXPECT_EQ(server.wait(20000), 0) << server.output();
  const std::string& so = server.output();
  EXPECT_EQ(so.find("expected"), std::string::npos) << "sizes mixed:\n" << so;
  // One summary per session: 4 flows x 6 iterations of each client's size.
  EXPECT_NE(so.find("\"session\":1"), std::string::npos) << so;
  EXPECT_NE(so.find("\"session\":2"), std::string::npos) << so;
  EXPECT_NE(so.find("\"rx_bytes\":24000000,"), std::string::npos) << so;
  EXPECT_NE(so.find("\"rx_bytes\":1536,"), std::string::npos) << so;
}

// A UCCL peer that completes the handshake and then sends garbage instead
// of a client's parameters is dropped; the server serves the next client.
TEST(TransportTestHardening, BadParametersDropOnlyThatClient) {
  std::vector<std::string> s = {kBin, "--server", "--oobport=0"};
  s.insert(s.end(), kSmall.begin(), kSmall.end());
  Subprocess server(s);
  const int port = start_server(&server);
  ASSERT_GT(port, 0);
  {
    EndpointConfig cfg;
    cfg.device = "udp:lo";
    cfg.num_engines = 1;
    cfg.paths = 2;
    auto ep = Endpoint::create(cfg);
    ASSERT_TRUE(ep.ok()) << ep.status();
    auto c = (*ep)->connect("127.0.0.1", static_cast<uint16_t>(port), 10000);
    ASSERT_TRUE(c.ok()) << c.status();
    std::vector<uint8_t> junk(72, 0x5a);
    auto mh = (*ep)->reg_mr(junk.data(), junk.size());
    ASSERT_TRUE(mh.ok());
    Request r;
    ASSERT_TRUE((*ep)->send_async(*c, junk.data(), junk.size(), *mh, &r).ok());
    EXPECT_TRUE((*ep)->wait(&r, 10000).ok()) << r.status();
    ASSERT_TRUE(server.wait_for_output("bad parameters", 10000))
        << server.output();
  }
  EXPECT_TRUE(server.running()) << server.output();
  Subprocess good(client_args(
      port, {"--perftype=basic", "--iterations=2", "--msize=1000"}));
  EXPECT_EQ(good.wait(60000), 0) << good.output();
  EXPECT_EQ(server.wait(20000), 0) << server.output();
}

// Knobs apply where no flag is given (flags win only when given), and a
// malformed knob is refused by name.
TEST(TransportTestHardening, KnobsApplyUnlessAFlagIsGiven) {
  std::vector<std::string> s = {
      "/usr/bin/env", "UCCL_FAULT_SEED=77", "UCCL_CC=swift", "UCCL_PATHS=3",
      kBin,           "--server",           "--oobport=0",   "--engines=1",
      "--loss=0.001"};
  Subprocess server(s);
  const int port = start_server(&server);
  ASSERT_GT(port, 0);
  const std::string& so = server.output();
  EXPECT_NE(so.find("cc swift"), std::string::npos) << so;
  EXPECT_NE(so.find("3 paths"), std::string::npos) << so;
  EXPECT_NE(so.find("seed 77"), std::string::npos) << so;
  // Given flags win over the knobs.
  std::vector<std::string> c = {"/usr/bin/env",
                                "UCCL_FAULT_SEED=77",
                                "UCCL_CC=swift",
                                kBin,
                                "--serverip=127.0.0.1",
                                "--oobport=" + std::to_string(port),
                                "--engines=1",
                                "--paths=2",
                                "--cc=none",
                                "--loss=0.001",
                                "--fault_seed=5",
                                "--perftype=basic",
                                "--iterations=1",
                                "--msize=1000"};
  Subprocess client(c);
  EXPECT_EQ(client.wait(60000), 0) << client.output();
  const std::string& co = client.output();
  EXPECT_NE(co.find("cc none"), std::string::npos) << co;
  EXPECT_NE(co.find("2 paths"), std::string::npos) << co;
  EXPECT_NE(co.find("seed 5"), std::string::npos) << co;
  EXPECT_EQ(server.wait(20000), 0) << server.output();
  Subprocess bad(
      {"/usr/bin/env", "UCCL_CC=foo", kBin, "--server", "--oobport=0"});
  EXPECT_EQ(bad.wait(20000), 3) << bad.output();
  EXPECT_NE(bad.output().find("UCCL_CC"), std::string::npos) << bad.output();
}

// Out-of-range values are refused with the usage code, never replaced.
TEST(TransportTestHardening, OutOfRangeFlagsAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--oobport=70000", "--oobport"},
      {"--msize=-1", "msize"},
      {"--msize=abc", "msize"},
      {"--paths=0", "--paths"},
      {"--chunk_kb=0", "--chunk_kb"},
      {"--engines=0", "--engines"},
      {"--engine_cores=99999", "engine core 99999"},
      {"--loss=2", "--loss"},
  };
  for (const auto& [flag, says] : cases) {
    SCOPED_TRACE(flag);
    Subprocess p({kBin, "--serverip=127.0.0.1", flag});
    EXPECT_EQ(p.wait(20000), 3) << p.output();
    EXPECT_NE(p.output().find(says), std::string::npos) << p.output();
  }
}

}  // namespace
}  // namespace uccl::testing
