// Loss recovery that does not mistake delay for loss: a timeout that an ACK
// proves spurious resends one chunk (F-RTO) and raises the timer (Eifel),
// and the engine's window bounds what it leaves unacknowledged.
#include <gtest/gtest.h>

#include "tests/engine/engine_test_util.h"
#include "util/knobs.h"

namespace uccl {
UCCL_DECLARE_KNOB(int64_t, knob_window_kb);
UCCL_DECLARE_KNOB(int64_t, knob_rto_max_us);
UCCL_DECLARE_KNOB(bool, knob_tlp);
}  // namespace uccl
namespace uccl::transport::udp {
UCCL_DECLARE_KNOB(int64_t, knob_softnic_tx_budget);
}  // namespace uccl::transport::udp

namespace uccl::testing {
namespace {

FlowStats stats(Endpoint* ep, ConnId c) {
  auto s = ep->conn_stats(c);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : FlowStats{};
}

// Every datagram the receiver gets is held 80 ms (injected delay, nothing
// lost). The sender's RTO (40 ms floor, no RTT sample yet) fires halfway;
// its next one (backed off: 120 ms) would come 40 ms after the data and its
// ACKs, a margin for a loaded host's scheduling. The ACKs then show the
// original chunks delivered: the timeout was spurious. Before F-RTO the
// timeout resent every chunk of the message.
TEST(SpuriousTimeoutTest, DelayIsNotLossOneProbeAndTheTimerRises) {
  KnobOverride rto_min(knob_rto_min_us(), 40000);
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  sc.fault_rx = "delay=1:80000";
  sc.fault_seed = 5;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 16 * 61440;  // 16 chunks
  Buf sb(p->client.get(), kLen), rb(p->server.get(), kLen);
  fill_pattern(sb.ptr(), kLen, 3);
  Request rr, sr;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr).ok());
  // The receive's descriptor reaches the sender late too: it waits first.
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), kLen, sb.mh, &sr).ok());
  ASSERT_TRUE(p->client->wait(&sr, 20000).ok()) << sr.status();
  ASSERT_TRUE(p->server->wait(&rr, 20000).ok()) << rr.status();
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), kLen, 3), -1);
  const FlowStats s = stats(p->client.get(), p->c_conns[0]);
  EXPECT_GE(s.rtos, 1u) << p->client->stats_text();
  EXPECT_GE(s.spurious_rtos, 1u) << p->client->stats_text();
  // One probe per timeout; no chunk declared lost.
  EXPECT_LE(s.rto_retransmits, s.rtos) << p->client->stats_text();
  EXPECT_LT(s.rto_retransmits + s.fast_retransmits + s.tlp_retransmits, 16u)
      << p->client->stats_text();
}

// The same delay on a flow whose RTO is already well above it: no timeout
// at all (control: the probe above is caused by the delay, not by the
// transfer).
TEST(SpuriousTimeoutTest, NoTimeoutWhenTheTimerExceedsTheDelay) {
  KnobOverride rto_min(knob_rto_min_us(), 200000);
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  sc.fault_rx = "delay=1:30000";
  sc.fault_seed = 5;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {16 * 61440}, 4);
  const FlowStats s = stats(p->client.get(), p->c_conns[0]);
  EXPECT_EQ(s.rtos, 0u) << p->client->stats_text();
  EXPECT_EQ(s.spurious_rtos, 0u);
}

// The engine keeps at most its window unacknowledged over all its flows:
// four flows each sending 4 MiB at once never have more than 256 KiB (plus
// one chunk, which may start the window) out together, so no flow alone
// exceeds it either.
TEST(EngineWindowTest, UnacknowledgedBytesStayWithinTheWindow) {
  KnobOverride window(knob_window_kb(), 256);
  auto p = Pair::make(test_config(1, 2), 4);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 4 << 20;
  std::vector<std::unique_ptr<Buf>> sbs, rbs;
  std::vector<std::unique_ptr<Request>> rrs, srs;
  for (int i = 0; i < 4; ++i) {
    sbs.push_back(std::make_unique<Buf>(p->client.get(), kLen));
    rbs.push_back(std::make_unique<Buf>(p->server.get(), kLen));
    fill_pattern(sbs[i]->ptr(), kLen, 10 + i);
    rrs.push_back(std::make_unique<Request>());
    srs.push_back(std::make_unique<Request>());
    ASSERT_TRUE(p->server
                    ->recv_async(p->s_conns[i], rbs[i]->ptr(), kLen, rbs[i]->mh,
                                 rrs[i].get())
                    .ok());
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(p->client
                    ->send_async(p->c_conns[i], sbs[i]->ptr(), kLen, sbs[i]->mh,
                                 srs[i].get())
                    .ok());
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(p->client->wait(srs[i].get(), 60000).ok());
    ASSERT_TRUE(p->server->wait(rrs[i].get(), 60000).ok());
    EXPECT_EQ(find_pattern_mismatch(rbs[i]->ptr(), kLen, 10 + i), -1);
    EXPECT_LE(stats(p->client.get(), p->c_conns[i]).max_inflight_bytes,
              256u * 1024 + 65536)
        << "flow " << i;
  }
}

// A resend reads the sender's buffer when its NIC sends it. Here one waits
// behind the NIC's rate limit (20 Mb/s: a 64 KiB datagram's tokens take
// 25 ms) while the first copy's ACK comes back, so the message is
// acknowledged well before its resend leaves. The send must not complete
// until then: the application may deregister (or free) the buffer once it
// has. Completed early, the deregistration turned the queued resend into a
// local protection error, which failed the connection. (No timer resends
// the chunks that wait for tokens in the NIC: they would add to the wait.
// One datagram per QP per round, so the tokens are asked before each.)
TEST(ResendLifetimeTest, ASendCompletesOnlyOnceItsResendsLeftTheNic) {
  KnobOverride budget(transport::udp::knob_softnic_tx_budget(), int64_t{1});
  KnobOverride rto_min(knob_rto_min_us(), 2000000);
  KnobOverride rto_max(knob_rto_max_us(), 4000000);
  KnobOverride tlp(knob_tlp(), false);
  EndpointConfig sc = test_config(1, 1), cc = test_config(1, 1);
  cc.nic_rate_gbps = 0.02;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  // Past the 256 KiB token bucket: the last chunk and its resend wait.
  constexpr size_t kLen = 6 * 64 * 1024, kSmall = 4096;
  auto sb = std::make_unique<Buf>(p->client.get(), kLen);
  Buf rb(p->server.get(), kLen), sb2(p->client.get(), kSmall),
      rb2(p->server.get(), kSmall);
  fill_pattern(sb->ptr(), kLen, 71);
  fill_pattern(sb2.ptr(), kSmall, 72);
  Request rr, sr, rr2, sr2;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr).ok());
  ASSERT_TRUE(EndpointTestAccess::inject_wire_fault(
                  p->client.get(), 0,
                  static_cast<uint32_t>(
                      engine::UcclRDMAEngine::WireFault::kResendLastChunk))
                  .ok());
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb->ptr(), kLen, sb->mh, &sr).ok());
  ASSERT_TRUE(p->client->wait(&sr, 30000).ok()) << sr.status();
  EXPECT_GE(sr.cc().retransmits, 1u) << "the hook resent no chunk";
  sb.reset();  // deregistered and freed, as the completion allows
  ASSERT_TRUE(p->server->wait(&rr, 30000).ok()) << rr.status();
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), kLen, 71), -1);
  // The connection lives on: the next message goes through whole.
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb2.ptr(), kSmall, rb2.mh, &rr2)
          .ok());
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb2.ptr(), kSmall, sb2.mh, &sr2)
          .ok());
  ASSERT_TRUE(p->client->wait(&sr2, 30000).ok()) << sr2.status();
  ASSERT_TRUE(p->server->wait(&rr2, 30000).ok()) << rr2.status();
  EXPECT_EQ(find_pattern_mismatch(rb2.ptr(), kSmall, 72), -1);
}

}  // namespace
}  // namespace uccl::testing
