// tools/testbed/netns.sh as the netns benchmarks use it: a shaped veth pair
// keeps each flow in order (RPS), as a real NIC does, unless --reorder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "tests/subprocess.h"
#include "tests/tools/testbed_util.h"

namespace uccl::testing {
namespace {

const std::string kScript = testbed_script();
const std::string kSocketBench = UCCL_SOCKET_BENCH_BIN;

// The integer after "key": in `json`, or -1.
long long json_int(const std::string& json, const std::string& key) {
  const size_t k = json.find("\"" + key + "\":");
  if (k == std::string::npos) return -1;
  return std::atoll(json.c_str() + k + key.size() + 3);
}

// The RPS mask of side's veth receive queue 0 ("0" when RPS is off).
std::string rps_cpus(const Testbed& tb, const std::string& side) {
  std::string out;
  tb.exec(side,
          {"/bin/cat",
           "/sys/class/net/" + tb.name + "-v" + side + "/queues/rx-0/rps_cpus"},
          &out);
  return out;
}

bool all_zero_mask(const std::string& mask) {
  return mask.find_first_not_of("0,\n") == std::string::npos;
}

// socket_bench's UDP streams of 8000-byte datagrams from side a to side
// b's server (its `server_flags` added) for `seconds`.
struct UdpRun {
  bool server_ready = false;
  int client_rc = -1, server_rc = -1;
  std::string client_out, server_out;
};
UdpRun udp_a_to_b(const Testbed& tb, int streams, int port, int seconds,
                  const std::vector<std::string>& server_flags = {}) {
  UdpRun r;
  const std::string s = "--streams=" + std::to_string(streams);
  const std::string p = "--port=" + std::to_string(port);
  std::vector<std::string> srv = {kSocketBench, "--server", "--proto=udp", s,
                                  p};
  srv.insert(srv.end(), server_flags.begin(), server_flags.end());
  Subprocess server(tb.in("b", srv));
  r.server_ready = server.wait_for_output("streams on ports", 20000);
  if (!r.server_ready) {
    r.server_out = server.output();
    return r;
  }
  r.client_rc =
      tb.exec("a",
              {kSocketBench, "--serverip=10.199.0.2", "--proto=udp", s, p,
               "--msize=8000", "--duration_s=" + std::to_string(seconds)},
              &r.client_out);
  r.server_rc = server.wait(20000);
  r.server_out = server.output();
  return r;
}

// Datagrams of 4 streams, numbered, through a 1 Gb/s tbf for 2 s: with 4
// sending CPUs and the tbf timer handing packets over from any of them,
// a veth without RPS delivers some of them after later ones of their flow
// (thousands in 2 s on two CPUs); the testbed keeps every flow in order.
TEST(Testbed, KeepsEachFlowInOrderThroughTheBottleneck) {
  Testbed tb("uccltb", {"--rate=1gbit", "--queue_kb=512"});
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  ASSERT_EQ(tb.up_rc, 0) << tb.up_out;
  EXPECT_NE(tb.up_out.find("flow order kept"), std::string::npos) << tb.up_out;
  EXPECT_FALSE(all_zero_mask(rps_cpus(tb, "a"))) << rps_cpus(tb, "a");
  EXPECT_FALSE(all_zero_mask(rps_cpus(tb, "b"))) << rps_cpus(tb, "b");

  const UdpRun run = udp_a_to_b(tb, 4, 19990, 2, {"--json"});
  ASSERT_TRUE(run.server_ready) << run.server_out;
  EXPECT_EQ(run.client_rc, 0) << run.client_out;
  EXPECT_EQ(run.server_rc, 0) << run.server_out;
  const std::string& out = run.server_out;
  const size_t j = out.rfind("{\"role\":\"server\"");
  ASSERT_NE(j, std::string::npos) << out;
  const std::string json = out.substr(j);
  EXPECT_GT(json_int(json, "datagrams"), 5000) << json;
  EXPECT_EQ(json_int(json, "reordered"), 0) << json;
}

// The tbf bucket in bytes from `netns.sh qdisc` ("burst 153125b", "Kb",
// "Mb"), or -1.
long long tbf_burst_bytes(const std::string& qdisc) {
  const size_t k = qdisc.find(" burst ");
  if (k == std::string::npos) return -1;
  char* end = nullptr;
  const double v = std::strtod(qdisc.c_str() + k + 7, &end);
  if (end == nullptr || (*end != 'b' && *end != 'K' && *end != 'M')) return -1;
  return static_cast<long long>(*end == 'K'   ? v * 1024
                                : *end == 'M' ? v * 1024 * 1024
                                              : v);
}

// The bucket holds 50 us of the rate (two packets of a 9000-byte MTU were
// 6 us at 25 Gb/s, and the link carried ~0.8 of its rate, raw UDP too);
// --burst_kb sets it; a rate or bucket that is no number is refused before
// anything is made. (tc shows the bucket rounded to its clock: 156250 B as
// 153125 B.)
TEST(Testbed, TheBucketHoldsFiftyMicrosecondsOfTheRate) {
  for (const auto& [flags, lo, hi] :
       std::vector<std::tuple<std::vector<std::string>, long, long>>{
           {{"--rate=25gbit"}, 140000, 160000},  // 156250 B
           {{"--rate=1gbit"}, 18000, 20000},     // two packets: 19600 B
           {{"--rate=25gbit", "--burst_kb=64"}, 55000, 66000}}) {
    Testbed tb("uccltk", flags);
    if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
    ASSERT_EQ(tb.up_rc, 0) << tb.up_out;
    Subprocess q({kScript, "qdisc", "--name=" + tb.name, "a"});
    ASSERT_EQ(q.wait(30000), 0) << q.output();
    const long long b = tbf_burst_bytes(q.output());
    EXPECT_GE(b, lo) << flags.back() << ": " << q.output();
    EXPECT_LE(b, hi) << flags.back() << ": " << q.output();
  }
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{
           {"--rate=2xbit"}, {"--rate=1gbit", "--burst_kb=-1"}}) {
    Testbed bad("uccltx", flags);
    if (!bad.skip.empty()) GTEST_SKIP() << bad.skip;
    EXPECT_EQ(bad.up_rc, 2) << bad.up_out;
    EXPECT_NE(bad.up_out.find(flags.back()), std::string::npos) << bad.up_out;
    Subprocess ls({"/bin/sh", "-c", "ip netns list | grep -c " + bad.name});
    ls.wait(10000);
    EXPECT_EQ(std::atoi(ls.output().c_str()), 0) << ls.output();
  }
}

// `qdrops` counts what the bottleneck's queue dropped on each side (iptables'
// `drops` does not see it): nothing before traffic, then what a sender
// offering far more than 100 Mb/s lost at side a's 32 KiB queue, and
// nothing at side b, which sent nothing.
TEST(Testbed, CountsWhatTheBottlenecksQueueDropped) {
  Testbed tb("uccltq", {"--rate=100mbit", "--queue_kb=32"});
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  ASSERT_EQ(tb.up_rc, 0) << tb.up_out;
  EXPECT_EQ(std::atoll(tb.qdrops("a").c_str()), 0) << tb.qdrops("a");
  const UdpRun run = udp_a_to_b(tb, 1, 19991, 1);
  ASSERT_TRUE(run.server_ready) << run.server_out;
  EXPECT_EQ(run.client_rc, 0) << run.client_out;
  EXPECT_GT(std::atoll(tb.qdrops("a").c_str()), 100)
      << tb.qdrops("a") << run.client_out;
  EXPECT_EQ(std::atoll(tb.qdrops("b").c_str()), 0) << tb.qdrops("b");
  EXPECT_EQ(std::atoll(tb.drops("a").c_str()), 0) << tb.drops("a");
}

// --reorder leaves the kernel's default: no RPS, and the testbed says so.
TEST(Testbed, ReorderLeavesTheKernelsDefault) {
  Testbed tb("uccltr", {"--rate=1gbit", "--reorder"});
  if (!tb.skip.empty()) GTEST_SKIP() << tb.skip;
  ASSERT_EQ(tb.up_rc, 0) << tb.up_out;
  EXPECT_NE(tb.up_out.find("flow order not kept (--reorder)"),
            std::string::npos)
      << tb.up_out;
  EXPECT_TRUE(all_zero_mask(rps_cpus(tb, "a"))) << rps_cpus(tb, "a");
  EXPECT_TRUE(all_zero_mask(rps_cpus(tb, "b"))) << rps_cpus(tb, "b");
}

}  // namespace
}  // namespace uccl::testing
