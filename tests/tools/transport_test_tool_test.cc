// tools/transport_test as users run it: server and client as two processes
// on loopback, each perftype, under injected loss, and against no server.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/subprocess.h"
#include "tests/tools/testbed_util.h"

namespace uccl::testing {
namespace {

const std::string kBin = UCCL_TRANSPORT_TEST_BIN;

// The number after "key": in the last JSON line of `out` whose role is
// `role`; NaN when absent.
double json_value(const std::string& out, const std::string& role,
                  const std::string& key) {
  const std::string tag = "{\"role\":\"" + role + "\"";
  const size_t line = out.rfind(tag);
  if (line == std::string::npos) return std::nan("");
  const size_t end = out.find('\n', line);
  const std::string j = out.substr(line, end - line);
  const size_t k = j.find("\"" + key + "\":");
  if (k == std::string::npos) return std::nan("");
  return std::strtod(j.c_str() + k + key.size() + 3, nullptr);
}

struct PairResult {
  int server_rc = -1, client_rc = -1;
  std::string server_out, client_out;
  double client(const std::string& key) const {
    return json_value(client_out, "client", key);
  }
  double server(const std::string& key) const {
    return json_value(server_out, "server", key);
  }
};

// Runs a server (port chosen by the kernel) and a client with `flags` each;
// both must finish within `timeout_s`.
PairResult run_pair(const std::vector<std::string>& flags,
                    const std::vector<std::string>& client_only = {},
                    int timeout_s = 60) {
  PairResult r;
  std::vector<std::string> s = {kBin, "--server", "--oobport=0", "--json"};
  s.insert(s.end(), flags.begin(), flags.end());
  Subprocess server(s);
  EXPECT_TRUE(server.started());
  const std::string tag = "listening on port ";
  if (!server.wait_for_output(tag, 20000)) {
    ADD_FAILURE() << "server did not listen:\n" << server.output();
    return r;
  }
  const std::string& so = server.output();
  const int port = std::atoi(so.c_str() + so.find(tag) + tag.size());
  std::vector<std::string> c = {kBin, "--serverip=127.0.0.1",
                                "--oobport=" + std::to_string(port), "--json"};
  c.insert(c.end(), flags.begin(), flags.end());
  c.insert(c.end(), client_only.begin(), client_only.end());
  Subprocess client(c);
  r.client_rc = client.wait(timeout_s * 1000);
  r.server_rc = server.wait(15000);  // it leaves once the client is done
  r.client_out = client.output();
  r.server_out = server.output();
  return r;
}

#define EXPECT_CLEAN(r)                                           \
  do {                                                            \
    EXPECT_EQ((r).client_rc, 0) << "client:\n" << (r).client_out; \
    EXPECT_EQ((r).server_rc, 0) << "server:\n" << (r).server_out; \
    EXPECT_EQ((r).client("errors"), 0) << (r).client_out;         \
    EXPECT_EQ((r).server("errors"), 0) << (r).server_out;         \
  } while (0)

const std::vector<std::string> kSmall = {"--engines=1", "--paths=2"};

std::vector<std::string> with(std::vector<std::string> a,
                              const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TransportTestTool, BasicVerifiesEveryIteration) {
  auto r =
      run_pair(with(kSmall, {"--perftype=basic", "--nflow=2", "--iterations=4",
                             "--msize=300000", "--nmsg=2"}));
  EXPECT_CLEAN(r);
  EXPECT_NE(r.server_out.find("iteration 3: OK"), std::string::npos)
      << r.server_out;
  // 2 flows x 4 iterations x 2 messages x 300000 bytes, counted each side.
  EXPECT_EQ(r.client("tx_bytes"), 2 * 4 * 2 * 300000.0);
  EXPECT_EQ(r.server("rx_bytes"), 2 * 4 * 2 * 300000.0);
}

TEST(TransportTestTool, LatReportsOrderedPercentiles) {
  auto r = run_pair(
      with(kSmall, {"--perftype=lat", "--iterations=300", "--msize=64"}));
  EXPECT_CLEAN(r);
  const double mn = r.client("min"), p50 = r.client("p50"),
               p99 = r.client("p99"), mx = r.client("max");
  EXPECT_GT(mn, 0) << r.client_out;
  EXPECT_LE(mn, p50);
  EXPECT_LE(p50, p99);
  EXPECT_LE(p99, mx);
  EXPECT_NE(r.client_out.find("p999"), std::string::npos);
  EXPECT_EQ(r.server("rx_bytes"), 300 * 64.0);
}

TEST(TransportTestTool, TptCountsCompletedBytesAndReportsProgress) {
  auto r = run_pair(with(kSmall, {"--perftype=tpt", "--duration_s=1.5",
                                  "--msize=1000000", "--verify"}));
  EXPECT_CLEAN(r);
  EXPECT_GT(r.client("tx_bytes"), 0);
  // Bytes count on completion: the server received exactly what completed.
  EXPECT_EQ(r.client("tx_bytes"), r.server("rx_bytes"));
  EXPECT_GT(r.client("tx_gbps"), 0);
  EXPECT_NE(r.client_out.find("1.0s  TX"), std::string::npos) << r.client_out;
  EXPECT_NE(r.client_out.find("per-flow Gb/s"), std::string::npos);
}

TEST(TransportTestTool, BiMovesDataBothWays) {
  auto r = run_pair(with(kSmall, {"--perftype=bi", "--duration_s=1",
                                  "--nflow=2", "--msize=500000", "--verify"}));
  EXPECT_CLEAN(r);
  EXPECT_GT(r.client("tx_bytes"), 0);
  EXPECT_GT(r.client("rx_bytes"), 0);
  EXPECT_EQ(r.client("tx_bytes"), r.server("rx_bytes"));
  EXPECT_EQ(r.server("tx_bytes"), r.client("rx_bytes"));
}

TEST(TransportTestTool, OnePercentLossStillVerifiesEveryByte) {
  for (const char* mode : {"--rc_mode=false", "--rc_mode=true"}) {
    SCOPED_TRACE(mode);
    auto b = run_pair(with(kSmall, {"--perftype=basic", "--iterations=6",
                                    "--msize=2000000", "--loss=0.01", mode}));
    EXPECT_CLEAN(b);
    EXPECT_EQ(b.server("rx_bytes"), 4 * 6 * 2000000.0);  // 4 flows
    auto t = run_pair(with(kSmall, {"--perftype=tpt", "--duration_s=1",
                                    "--verify", "--loss=0.01", mode}));
    EXPECT_CLEAN(t);
    EXPECT_EQ(t.client("tx_bytes"), t.server("rx_bytes"));
    if (std::string(mode) == "--rc_mode=false") {
      EXPECT_GT(
          t.client("retx_fast") + t.client("retx_rto") + t.client("retx_tlp"),
          0)
          << "1% loss without a retransmission?\n"
          << t.client_out;
    }
  }
}

TEST(TransportTestTool, CorruptionIsReportedWithOffsetAndExitCode) {
  auto r = run_pair(
      with(kSmall, {"--perftype=basic", "--iterations=2", "--msize=4096"}), {});
  EXPECT_CLEAN(r);
  // The server verifies; corrupt one byte there (a testing flag).
  PairResult bad;
  {
    std::vector<std::string> s = {kBin, "--server", "--oobport=0", "--json",
                                  "--test_corrupt_rx_at=1234"};
    s.insert(s.end(), kSmall.begin(), kSmall.end());
    Subprocess server(s);
    ASSERT_TRUE(server.wait_for_output("listening on port ", 20000));
    const std::string& so = server.output();
    const int port = std::atoi(so.c_str() + so.find("listening on port ") + 18);
    std::vector<std::string> c = {kBin,
                                  "--serverip=127.0.0.1",
                                  "--oobport=" + std::to_string(port),
                                  "--perftype=basic",
                                  "--iterations=2",
                                  "--msize=4096"};
    c.insert(c.end(), kSmall.begin(), kSmall.end());
    Subprocess client(c);
    bad.client_rc = client.wait(60000);
    bad.server_rc = server.wait(15000);
    bad.client_out = client.output();
    bad.server_out = server.output();
  }
  EXPECT_EQ(bad.server_rc, 1) << bad.server_out;
  EXPECT_EQ(bad.client_rc, 1) << "the client learns of the peer's errors\n"
                              << bad.client_out;
  // The first message to complete is corrupted, on whichever of the 4 flows
  // it arrives first: one mismatch, at the offset given.
  const size_t at = bad.server_out.find("MISMATCH flow ");
  ASSERT_NE(at, std::string::npos) << bad.server_out;
  const char flow = bad.server_out[at + 14];
  EXPECT_TRUE(flow >= '0' && flow <= '3') << bad.server_out;
  EXPECT_EQ(
      bad.server_out.compare(at + 15, 34, " request 0 message 0: offset 1234 "),
      0)
      << bad.server_out;
  EXPECT_EQ(bad.server_out.find("MISMATCH"), bad.server_out.rfind("MISMATCH"))
      << bad.server_out;
}

// transport_test between the two sides of a testbed (tools/testbed/
// netns.sh up with `up_flags`), removed afterwards: 2 flows x 3 messages of
// 1 MB under `cc`. `skip` says why it could not run here (no root, no
// namespaces, no iproute2 or iptables).
struct TestbedRun {
  std::string skip;
  int up_rc = 0, client_rc = -1, server_rc = -1;
  std::string up_out, client_out, server_out, drops_b;
};
// The testbed came up, both sides exited 0, the server got every byte of
// the run (2 flows x 3 iterations x 1 MB) and the client saw no error.
void expect_all_delivered(const TestbedRun& r) {
  ASSERT_EQ(r.up_rc, 0) << r.up_out;
  EXPECT_EQ(r.client_rc, 0) << r.client_out;
  EXPECT_EQ(r.server_rc, 0) << r.server_out;
  EXPECT_EQ(json_value(r.server_out, "server", "rx_bytes"), 2 * 3 * 1e6);
  EXPECT_EQ(json_value(r.client_out, "client", "errors"), 0);
}

TestbedRun run_across_testbed(const std::string& tag,
                              const std::vector<std::string>& up_flags,
                              const std::string& cc) {
  TestbedRun r;
  const Testbed tb(tag, up_flags);
  r.skip = tb.skip;
  r.up_rc = tb.up_rc;
  r.up_out = tb.up_out;
  if (!r.skip.empty() || r.up_rc != 0) return r;
  const std::vector<std::string> common = {
      "--engines=1",     "--paths=2", "--perftype=basic", "--iterations=3",
      "--msize=1000000", "--nflow=2", "--cc=" + cc,       "--link_gbps=1",
      "--chunk_kb=16",   "--json"};
  std::vector<std::string> s = {kBin, "--server", "--oobport=0",
                                "--device=udp:10.199.0.2"};
  s.insert(s.end(), common.begin(), common.end());
  Subprocess server(tb.in("b", s));
  if (!server.wait_for_output("listening on port ", 20000)) {
    r.server_out = server.output();
    return r;
  }
  const std::string& so = server.output();
  const int port = std::atoi(so.c_str() + so.find("listening on port ") + 18);
  std::vector<std::string> c = {kBin, "--serverip=10.199.0.2",
                                "--device=udp:10.199.0.1",
                                "--oobport=" + std::to_string(port)};
  c.insert(c.end(), common.begin(), common.end());
  Subprocess client(tb.in("a", c));
  r.client_rc = client.wait(120000);
  r.client_out = client.output();
  r.server_rc = server.wait(15000);
  r.server_out = server.output();
  r.drops_b = tb.drops("b");
  return r;
}

// Two hosts: network namespaces joined by a veth pair with a 1 Gb/s tc
// bottleneck (tools/testbed/netns.sh), removed afterwards. Needs root.
TEST(TransportTestTool, AcrossNetworkNamespacesThroughABottleneck) {
  const TestbedRun r =
      run_across_testbed("ucclt", {"--rate=1gbit", "--queue_kb=512"}, "credit");
  if (!r.skip.empty()) GTEST_SKIP() << r.skip;
  expect_all_delivered(r);
}

// The same two hosts with 2% of the packets arriving at each side dropped
// (netns.sh --loss: iptables' statistic match): every byte still arrives,
// and the drops happened.
TEST(TransportTestTool, AcrossNetworkNamespacesThroughALossyLink) {
  const TestbedRun r = run_across_testbed(
      "ucclL", {"--rate=1gbit", "--queue_kb=512", "--loss=0.02"}, "none");
  if (!r.skip.empty()) GTEST_SKIP() << r.skip;
  expect_all_delivered(r);
  EXPECT_GT(std::atoi(r.drops_b.c_str()), 0) << r.drops_b;
}

TEST(TransportTestTool, DeadServerFailsClearlyWithinSeconds) {
  // A port with no listener: bind one, learn it, close it.
  Subprocess probe({kBin, "--server", "--oobport=0"});
  ASSERT_TRUE(probe.wait_for_output("listening on port ", 20000));
  const std::string& po = probe.output();
  const int port = std::atoi(po.c_str() + po.find("listening on port ") + 18);
  probe.wait(1);  // killed: nothing listens there now
  const auto t0 = std::chrono::steady_clock::now();
  Subprocess c({kBin, "--serverip=127.0.0.1",
                "--oobport=" + std::to_string(port), "--connect_timeout_s=3"});
  const int rc = c.wait(30000);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(rc, 2) << c.output();
  EXPECT_LT(secs, 10);
  EXPECT_NE(c.output().find("cannot connect to 127.0.0.1"), std::string::npos)
      << c.output();
}

TEST(TransportTestTool, BadFlagsAreUsageErrors) {
  Subprocess a({kBin, "--serverip=127.0.0.1", "--perftype=fast"});
  EXPECT_EQ(a.wait(20000), 3);
  EXPECT_NE(a.output().find("--perftype must be"), std::string::npos)
      << a.output();
  Subprocess b({kBin});
  EXPECT_EQ(b.wait(20000), 3);
  EXPECT_NE(b.output().find("--server"), std::string::npos) << b.output();
  Subprocess c({kBin, "--serverip=127.0.0.1", "--nreq=0"});
  EXPECT_EQ(c.wait(20000), 3);
}

}  // namespace
}  // namespace uccl::testing
