// Congestion control is enforced, not just computed: a TIMELY rate cap, a
// Swift window and receiver-granted credit each bound what the sender does;
// and it hears what the NIC reports (hops).
// Time bounds here are one-sided (enforcement can only slow a transfer).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "tests/engine/engine_test_util.h"
#include "util/clock.h"

namespace uccl::testing {
namespace {

double transfer_seconds(Pair* p, size_t len, FlowStats* stats = nullptr) {
  Buf sb(p->client.get(), len), rb(p->server.get(), len);
  fill_pattern(sb.ptr(), len, 3);
  Request rr, sr;
  EXPECT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), len, rb.mh, &rr).ok());
  const uint64_t t0 = monotonic_ns();
  EXPECT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), len, sb.mh, &sr).ok());
  const Status rs = p->server->wait(&rr, 60000);
  const Status ss = p->client->wait(&sr, 60000);
  EXPECT_TRUE(rs.ok()) << rs;
  EXPECT_TRUE(ss.ok()) << ss;
  const double secs = (monotonic_ns() - t0) / 1e9;
  if (!rs.ok() || !ss.ok()) {
    // A request still pending holds its buffer, which goes when this
    // returns: closing the connection completes both first (kCancelled).
    EXPECT_TRUE(p->client->close(p->c_conns[0]).ok());
    EXPECT_TRUE(p->server->close(p->s_conns[0]).ok());
    EXPECT_FALSE(p->server->wait(&rr, 10000).code() == StatusCode::kTimedOut);
    EXPECT_FALSE(p->client->wait(&sr, 10000).code() == StatusCode::kTimedOut);
    return secs;
  }
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), len, 3), -1);
  if (stats) *stats = *p->client->conn_stats(p->c_conns[0]);
  return secs;
}

TEST(CcEnforcementTest, TimelyRateIsPaced) {
  EndpointConfig c = test_config(1, 2);
  c.cc = "timely";
  c.cc_params = "max_rate_gbps=0.2,min_rate_gbps=0.01";  // 25 MB/s
  auto p = Pair::make(c);
  ASSERT_TRUE(p);
  FlowStats st;
  double secs = transfer_seconds(p.get(), 4 << 20, &st);
  // 4 MiB at <= 25 MB/s takes >= 0.167 s (minus one chunk of head start).
  EXPECT_GE(secs, 0.15) << "rate computed but not enforced";
  EXPECT_LE(st.rate_bps, 0.2e9 + 1);
  EXPECT_NE(st.cc_state.find("rate_gbps"), std::string::npos) << st.cc_state;
}

TEST(CcEnforcementTest, SwiftWindowBoundsInflight) {
  EndpointConfig c = test_config(1, 4);
  c.cc = "swift";
  // At most 2 chunks in flight. The floor of 1 keeps the transfer quick where
  // endpoint delay is large (sanitizers, loaded CI), which Swift reads as
  // congestion; the bound under test is the ceiling.
  c.cc_params = "init_cwnd=2,max_cwnd=2,min_cwnd=1";
  auto p = Pair::make(c);
  ASSERT_TRUE(p);
  FlowStats st;
  transfer_seconds(p.get(), 8 << 20, &st);
  EXPECT_GT(st.max_inflight_bytes, 0u);
  EXPECT_LE(st.max_inflight_bytes, 2u * 64 * 1024) << "window not enforced";
  // Without CC the same transfer has far more in flight.
  auto q = Pair::make(test_config(1, 4));
  FlowStats free_st;
  transfer_seconds(q.get(), 8 << 20, &free_st);
  EXPECT_GT(free_st.max_inflight_bytes, 2u * 64 * 1024);
}

TEST(CcInputsTest, SwiftHearsTheHopsItsPeersAcksCrossed) {
  EndpointConfig s = test_config(1, 1);
  s.cc = "swift";
  s.nic_params = "ttl=62";  // the server's ACKs look two routers away
  EndpointConfig c = s;
  c.nic_params = "";
  c.cc_params = "min_cwnd=1";
  auto p = Pair::make(s, c);
  ASSERT_TRUE(p);
  FlowStats st;
  transfer_seconds(p.get(), 1 << 20, &st);
  EXPECT_EQ(st.hops, 2u);
  // Without hop scaling the client's NIC is not asked for hop limits.
  c.cc_params = "min_cwnd=1,hop_scale_us=0";
  auto q = Pair::make(s, c);
  ASSERT_TRUE(q);
  transfer_seconds(q.get(), 1 << 20, &st);
  EXPECT_EQ(st.hops, 0u);
}

// A receiver holding a delayed ACK while it has nothing else to do sends
// it before it yields or sleeps, so a one-chunk window waits an RTT per
// chunk rather than the ACK delay (20 ms here, under an RTO kept above
// it); otherwise that wait is also every sample's endpoint delay, which
// holds a delay-based controller down while the hosts are idle.
TEST(CcInputsTest, AnIdleReceiverDoesNotHoldItsAcks) {
  KnobOverride ack_delay(knob_ack_delay_us(), 20000);
  KnobOverride rto_min(knob_rto_min_us(), 200000);
  EndpointConfig c = test_config(1, 1);
  c.cc = "swift";
  c.cc_params = "init_cwnd=1,max_cwnd=1,min_cwnd=1";  // one chunk at a time
  auto p = Pair::make(c);
  ASSERT_TRUE(p);
  FlowStats st;
  transfer_seconds(p.get(), 16 * 64 * 1024, &st);
  EXPECT_GT(st.acks_received, 8u);
  EXPECT_LT(st.rtt_p50_ns, 10000000u) << "ACKs held for the ACK delay";
}

double swift_floor_us(const FlowStats& st) {
  const size_t at = st.cc_state.find("floor_us=");
  return at == std::string::npos ? -1 : std::stod(st.cc_state.substr(at + 9));
}

// A chunk that leaves alone in its NIC round is timed from the round's end
// (the software NIC's send call), as a NIC's transmit timestamp times it:
// a send call that takes long (here each of the client's stalls 30 ms, a
// host stack run cold or preempted) is in the round trip but not in the
// fabric delay Swift hears. One chunk in flight, so each leaves alone.
TEST(CcInputsTest, ALoneChunksSendCallIsNoFabricDelay) {
  KnobOverride rto_min(knob_rto_min_us(), 1000000);
  KnobOverride tlp(knob_tlp(), false);  // no probe while the call stalls
  EndpointConfig s = test_config(1, 1);
  s.cc = "swift";
  s.cc_params = "init_cwnd=1,max_cwnd=1,min_cwnd=1";
  EndpointConfig c = s;
  c.fault_tx = "stall=1:30000";
  auto p = Pair::make(s, c);
  ASSERT_TRUE(p);
  FlowStats st;
  transfer_seconds(p.get(), 6 * 64 * 1024, &st);
  EXPECT_GE(st.rtt_p50_ns, 30000000u) << "the stall is in the round trip";
  const size_t at = st.cc_state.find("fabric_us=");
  ASSERT_NE(at, std::string::npos) << st.cc_state;
  EXPECT_LT(std::stod(st.cc_state.substr(at + 10)), 15000) << st.cc_state;
}

// The connections to one peer share the floor Swift's target counts from
// (UCCL_CC_SHARED_FLOOR), across engines: one that has sent nothing yet
// aims from the floor another measured, so a flow that starts behind the
// others' queue does not take it for distance. Each learns its own with
// the knob off.
TEST(CcInputsTest, ConnectionsToOnePeerShareTheirDelayFloor) {
  EndpointConfig c = test_config(2, 1);
  c.cc = "swift";
  c.cc_params = "min_cwnd=1";
  c.link_gbps = 1000;  // a chunk's serialization (0.5 us) is not its delay
  // The client's packets wait 200 us in its NIC, which is fabric delay: a
  // floor of at least that, where loopback alone may measure 0.
  EndpointConfig client = c;
  client.fault_tx = "delay=1:200";
  for (bool shared : {true, false}) {
    KnobOverride k(knob_cc_shared_floor(), shared);
    auto p = Pair::make(c, client, 2);
    ASSERT_TRUE(p);
    FlowStats busy;
    transfer_seconds(p.get(), 1 << 20, &busy);
    const FlowStats idle = *p->client->conn_stats(p->c_conns[1]);
    EXPECT_EQ(idle.tx_chunks, 0u);
    ASSERT_GT(swift_floor_us(busy), 0) << busy.cc_state;
    if (shared) {
      EXPECT_EQ(swift_floor_us(idle), swift_floor_us(busy)) << idle.cc_state;
    } else {
      EXPECT_EQ(swift_floor_us(idle), 0) << idle.cc_state;
    }
  }
}

TEST(CcEnforcementTest, ReceiverCreditPacesTheSender) {
  EndpointConfig c = test_config(1, 2);
  c.cc = "credit";
  c.link_gbps = 0.2;  // the receiver grants at most 25 MB/s
  c.cc_params = "spec_bytes=262144";
  auto p = Pair::make(c);
  ASSERT_TRUE(p);
  double secs = transfer_seconds(p.get(), 4 << 20);
  // (4 MiB - 256 KiB speculative) at 25 MB/s >= 0.157 s.
  EXPECT_GE(secs, 0.14) << "credit granted faster than line rate";
}

// The receiver's grants ride in its ACKs, which a lossy path loses. Here
// every ACK sent only for a grant is lost. A grant made while chunks are
// out reaches the sender in their ACKs (cumulative); one made while the
// sender, its chunks all acknowledged, waits for credit comes in no other
// ACK: the receiver has granted all it was asked for and has nothing to
// acknowledge. The sender must ask, or both wait forever.
TEST(CcEnforcementTest, ALostGrantDoesNotStallTheSender) {
  EndpointConfig c = test_config(1, 2);
  c.cc = "credit";
  // 6.25 MB/s of grants: one 64 KiB grant per ~10 ms, long after the
  // chunks of the one before were acknowledged.
  c.link_gbps = 0.05;
  c.cc_params = "spec_bytes=65536";
  auto p = Pair::make(c);
  ASSERT_TRUE(p);
  ASSERT_TRUE(EndpointTestAccess::inject_wire_fault(p->server.get(), 0, 11)
                  .ok());  // kLoseGrantAcks
  FlowStats st;
  transfer_seconds(p.get(), 512 << 10, &st);  // every byte, checked
  EXPECT_GT(st.credit_probes, 0u) << "the stall was never met: no test";
}

TEST(TraceTest, ChromeTraceHasChunkEvents) {
  const std::string path = ::testing::TempDir() + "/uccl_trace";
  {
    EndpointConfig c = test_config(1, 1);
    c.trace_file = path;
    auto p = Pair::make(c);
    ASSERT_TRUE(p);
    transfer_seconds(p.get(), 1 << 20);
  }  // endpoints write their traces when they stop
  // One file per engine; the client's has the sends.
  std::string t;
  for (int i = 0; i < 64; ++i) {
    std::ifstream f(path + "." + std::to_string(getpid()) + "." +
                    std::to_string(i) + ".0.json");
    if (!f) continue;
    std::stringstream ss;
    ss << f.rdbuf();
    t += ss.str();
  }
  ASSERT_FALSE(t.empty()) << "no trace file";
  EXPECT_EQ(t.rfind("{\"traceEvents\":[", 0), 0u);
  size_t tx = 0, pos = 0;
  while ((pos = t.find("\"name\":\"tx\"", pos)) != std::string::npos) {
    ++tx;
    ++pos;
  }
  EXPECT_GE(tx, 16u) << "16 chunks of 64 KiB were sent";
  EXPECT_NE(t.find("\"name\":\"rx\""), std::string::npos);
}

}  // namespace
}  // namespace uccl::testing
