// Engine reliability under injected faults (loss 0.1-20%, reorder,
// duplication, corruption) in UC and RC modes: every message arrives exactly
// once and intact. The receive buffer is reused for every message, so a late
// duplicate landing after completion would be caught by the data check.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "tests/engine/engine_test_util.h"
#include "transport/nic.h"

namespace uccl::testing {
namespace {

struct FaultCase {
  const char* name;
  const char* spec;    // applied to TX (and RX unless tx_only) of both ends
  size_t total_bytes;  // volume to move
  bool tx_only;        // loss rates are per packet: apply them once
};

// Readable parameter names in gtest/ctest output.
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.spec; }

class FaultTest : public ::testing::TestWithParam<std::tuple<bool, FaultCase>> {
};

TEST_P(FaultTest, EveryMessageExactlyOnceAndIntact) {
  const bool rc = std::get<0>(GetParam());
  const FaultCase fc = std::get<1>(GetParam());
  EndpointConfig sc = test_config(1, 4), cc = test_config(1, 4);
  sc.rc_mode = cc.rc_mode = rc ? 1 : 0;
  sc.fault_tx = cc.fault_tx = fc.spec;
  if (!fc.tx_only) sc.fault_rx = cc.fault_rx = fc.spec;
  sc.fault_seed = 11;
  cc.fault_seed = 22;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  const size_t kMax = 1 << 20;
  Buf sb(p->client.get(), kMax), rb(p->server.get(), kMax);
  std::mt19937_64 rng(99);
  size_t moved = 0;
  int msgs = 0;
  while (moved < fc.total_bytes) {
    // Mostly multi-chunk messages, some tiny and empty ones.
    size_t len = (msgs % 7 == 0) ? rng() % 64 : rng() % kMax;
    fill_pattern(sb.ptr(), len, 1000 + msgs);
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kMax, rb.mh, &rr).ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), len, sb.mh, &sr).ok());
    Status a = p->server->wait(&rr, 120000);
    Status b = p->client->wait(&sr, 120000);
    ASSERT_TRUE(a.ok() && b.ok())
        << "message " << msgs << ": " << a << " / " << b << "\n"
        << p->client->stats_text() << p->client->nic_counters() << "server:\n"
        << p->server->stats_text() << p->server->nic_counters();
    ASSERT_EQ(rr.size(0), len) << "message " << msgs;
    ASSERT_EQ(find_pattern_mismatch(rb.ptr(), len, 1000 + msgs), -1)
        << "message " << msgs << " corrupted";
    moved += len;
    ++msgs;
  }
  // Nothing extra arrives: a final receive gets the final message only.
  Request rr, sr;
  fill_pattern(sb.ptr(), 777, 5);
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), kMax, rb.mh, &rr).ok());
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), 777, sb.mh, &sr).ok());
  ASSERT_TRUE(p->server->wait(&rr, 120000).ok());
  EXPECT_EQ(rr.size(0), 777u);
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), 777, 5), -1);
  ASSERT_TRUE(p->client->wait(&sr, 120000).ok());
  // The faults happened: each kind the spec names was done (the injector
  // counts what it did, not what it looked at), at 1% and more.
  const std::string nic = p->client->nic_counters() + p->server->nic_counters();
  auto did = [&](const char* what) {
    return transport::counter_sum(nic, std::string("fault_tx_") + what) +
           transport::counter_sum(nic, std::string("fault_rx_") + what);
  };
  const std::string spec = fc.spec;
  const bool sure = spec != "drop=0.001";  // 0.1% may drop nothing
  if (sure && spec.find("drop=") != std::string::npos) {
    EXPECT_GT(did("dropped"), 0u) << nic;
  }
  if (spec.find("burst=") != std::string::npos) {
    EXPECT_GT(did("burst_dropped"), 0u) << nic;
  }
  if (spec.find("reorder=") != std::string::npos) {
    EXPECT_GT(did("reordered"), 0u) << nic;
  }
  if (spec.find("dup=") != std::string::npos) {
    EXPECT_GT(did("duplicated"), 0u) << nic;
  }
  if (spec.find("corrupt=") != std::string::npos) {
    EXPECT_GT(did("corrupted"), 0u) << nic;
    // Caught by a CRC, or (a flipped magic) as malformed before it.
    EXPECT_GT(transport::counter_sum(nic, "drop_bad_crc") +
                  transport::counter_sum(nic, "drop_malformed"),
              0u)
        << nic;
  }
  // What repaired the losses: the NIC's go-back-N in RC mode (a dropped
  // packet's successor draws a sequence NAK, or the QP's timer fires).
  if (rc && sure && spec.find("drop=") != std::string::npos) {
    EXPECT_GT(transport::counter_sum(nic, "rc_retransmits"), 0u) << nic;
  }
  // Every loss, resend and ACK activated its connection itself: the 1 ms
  // safety-net pass found no work left behind (it would have waited there).
  for (Endpoint* ep : {p->client.get(), p->server.get()}) {
    EXPECT_EQ(ep->engine_stats()[0].late_activations, 0u);
  }
  if (!rc) {
    auto st = p->client->conn_stats(p->c_conns[0]);
    ASSERT_TRUE(st.ok());
    // At 0.1% a run may lose no data packet at all; from 1% on it must.
    if (spec.rfind("drop=", 0) == 0 && sure) {
      EXPECT_GT(
          st->fast_retransmits + st->rto_retransmits + st->tlp_retransmits, 0u)
          << "losses must have been repaired by retransmission";
    }
  }
}

// One-chunk messages sent one at a time: every lost data chunk is a lost
// tail (no later chunk can reveal the hole). The tail loss probe repairs
// them without waiting for the RTO. Seeded loss on the sender's
// transmissions only.
TEST(TailLossProbeTest, LostTailsAreRepairedByProbes) {
  // A 50 ms RTO floor: the probe timeout, max(2 srtt, srtt + 4 rttvar), stays
  // below it even where a loaded host stalls engines for milliseconds, so
  // every lost tail is the probe's to repair first.
  KnobOverride rto_min(knob_rto_min_us(), 50000);
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  cc.fault_tx = "drop=0.1";
  cc.fault_seed = 7;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, std::vector<size_t>(300, 16 * 1024), 49);
  if (::testing::Test::HasFatalFailure()) return;
  auto st = p->client->conn_stats(p->c_conns[0]);
  ASSERT_TRUE(st.ok());
  // ~30 of the 300 tails were lost (10%, seeded); probes repaired them,
  // not timeouts (with UCCL_TLP=0 every one is an RTO).
  EXPECT_GE(st->tlp_retransmits, 10u) << p->client->stats_text();
  EXPECT_LT(st->rtos, st->tlp_retransmits) << p->client->stats_text();
}

// RACK's fast path: a chunk lost with later chunks behind it is found lost
// from their delivery (SACKs) and resent without a timer. The RTO floor is
// 200 ms here, so a run that needed timeouts for its ~10 holes would show
// them; probes cover lost tails only.
TEST(FastRetransmitTest, HolesWithLaterTrafficAreRepairedBySacks) {
  KnobOverride rto_min(knob_rto_min_us(), 200000);
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  cc.fault_tx = "drop=0.02";
  cc.fault_seed = 23;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, std::vector<size_t>(32, 1 << 20), 81);
  if (::testing::Test::HasFatalFailure()) return;
  auto st = p->client->conn_stats(p->c_conns[0]);
  ASSERT_TRUE(st.ok());
  EXPECT_GE(st->fast_retransmits, 3u) << p->client->stats_text();
  EXPECT_LT(st->rtos, st->fast_retransmits) << p->client->stats_text();
}

// The 11-bit chunk sequence number wraps every 2048 chunks: 1 KiB chunks
// take an 8 MiB message past it four times, under 1% loss on every data
// packet, in any build (1 GiB messages, the other way there, are too slow
// under sanitizers). Losses across the wrap must be told from old chunks.
TEST(ChunkWrapTest, LossyTransferAcrossTheSequenceWrap) {
  EndpointConfig sc = test_config(1, 2), cc = test_config(1, 2);
  sc.chunk_bytes = cc.chunk_bytes = 1024;
  cc.fault_tx = "drop=0.01";
  cc.fault_seed = 17;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  exchange(p.get(), 0, {8u << 20, 3u << 20}, 71);
  if (::testing::Test::HasFatalFailure()) return;
  auto st = p->client->conn_stats(p->c_conns[0]);
  ASSERT_TRUE(st.ok());
  EXPECT_GE(st->tx_chunks, 11u * 1024);  // 5.5 wraps
  const std::string nic = p->client->nic_counters();
  EXPECT_GT(transport::counter_sum(nic, "fault_tx_dropped"), 50u) << nic;
  EXPECT_GT(st->fast_retransmits + st->rto_retransmits + st->tlp_retransmits,
            50u)
      << p->client->stats_text();
}

// Value of "name N" in NIC counters text, or -1.
int64_t nic_counter(const std::string& text, const std::string& name) {
  size_t p = text.find("\n" + name + " ");
  if (p == std::string::npos) return -1;
  return std::stoll(text.substr(p + name.size() + 2));
}

// The software NIC places large first transmissions straight into the
// receive buffer and checks them there; a retransmission must not, as the
// receiver may already hold that chunk intact (only its ACK was lost). Here
// most ACKs that are lost make the sender resend chunks that arrived, and
// one datagram in five is corrupted on the way: every message must still
// arrive intact. UC mode, where the engine retransmits.
TEST(DirectPlacementTest, CorruptedResendsOfDeliveredChunksNeverLand) {
  EndpointConfig sc = test_config(1, 4), cc = test_config(1, 4);
  cc.fault_tx = "corrupt=0.2";
  sc.fault_tx = "drop=0.3";  // the server sends ACKs
  sc.fault_seed = 5;
  cc.fault_seed = 6;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  std::vector<size_t> sizes;
  for (int i = 0; i < 40; ++i) sizes.push_back((256 << 10) + i * 4096);
  exchange(p.get(), 0, sizes, 61);
  if (::testing::Test::HasFatalFailure()) return;
  const std::string nic = p->server->nic_counters();
  EXPECT_GT(nic_counter(nic, "rx_direct"), 0) << nic;
  EXPECT_GT(nic_counter(nic, "drop_bad_crc"), 0) << nic;
  auto st = p->client->conn_stats(p->c_conns[0]);
  ASSERT_TRUE(st.ok());
  EXPECT_GT(st->fast_retransmits + st->rto_retransmits + st->tlp_retransmits,
            0u);
}

// Each completed request carries its connection's congestion state (the
// NCCL plugin's NetPlugin profiler events show it): a send's own resends
// and the paths its chunks took, the latest RTT sample, the window.
TEST(RequestCcTest, SendsCountTheirOwnResendsAndPaths) {
  EndpointConfig sc = test_config(1, 4), cc = test_config(1, 4);
  sc.fault_tx = cc.fault_tx = "drop=0.1";
  sc.fault_seed = 3;
  cc.fault_seed = 4;
  auto p = Pair::make(sc, cc);
  ASSERT_TRUE(p);
  const size_t kLen = 1 << 20;
  Buf sb(p->client.get(), kLen), rb(p->server.get(), kLen);
  uint64_t resent = 0;
  for (int i = 0; i < 4; ++i) {
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr).ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), kLen, sb.mh, &sr).ok());
    ASSERT_TRUE(p->server->wait(&rr, 120000).ok());
    ASSERT_TRUE(p->client->wait(&sr, 120000).ok());
    resent += sr.cc().retransmits;
    EXPECT_GE(sr.cc().paths, 2u) << "18 chunks over 4 paths";
    EXPECT_LE(sr.cc().paths, 4u);
    if (i == 3) {
      EXPECT_GT(sr.cc().rtt_ns, 0u) << "no RTT sample by now";
    }
    // A receiver cannot tell resends apart: it reports neither.
    EXPECT_EQ(rr.cc().retransmits, 0u);
    EXPECT_EQ(rr.cc().paths, 0u);
  }
  // 10% of 72 chunks lost: the sends' own resends add up to at most the
  // flow's (whose probes may carry new data; a count of the flow's total
  // so far in each send would add up to more).
  auto st = p->client->conn_stats(p->c_conns[0]);
  ASSERT_TRUE(st.ok());
  EXPECT_GT(resent, 0u);
  EXPECT_LE(resent,
            st->fast_retransmits + st->rto_retransmits + st->tlp_retransmits);
}

// The window and rate are the controller's: none reports 0 (unlimited),
// Swift its window. One chunk's worth: Swift's first window sends it
// whatever the host's scheduling delays (BENCHMARKS.md: on an
// oversubscribed host Swift's window collapses over many RTTs).
TEST(RequestCcTest, WindowAndRateAreTheControllers) {
  for (const char* cc : {"none", "swift"}) {
    EndpointConfig c = test_config(1, 2);
    c.cc = cc;
    auto p = Pair::make(c, c);
    ASSERT_TRUE(p);
    const size_t kLen = 32 << 10;
    Buf sb(p->client.get(), kLen), rb(p->server.get(), kLen);
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr).ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), kLen, sb.mh, &sr).ok());
    ASSERT_TRUE(p->server->wait(&rr, 60000).ok());
    ASSERT_TRUE(p->client->wait(&sr, 60000).ok());
    if (std::string(cc) == "none") {
      EXPECT_EQ(sr.cc().cwnd_bytes, 0u);
      EXPECT_EQ(sr.cc().rate_bps, 0u);
    } else {
      EXPECT_GT(sr.cc().cwnd_bytes, 0u) << cc;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, FaultTest,
    ::testing::Combine(
        ::testing::Bool(),
        ::testing::Values(FaultCase{"loss0_1", "drop=0.001", 24u << 20, true},
                          FaultCase{"loss1", "drop=0.01", 16u << 20, true},
                          FaultCase{"loss5", "drop=0.05", 8u << 20, true},
                          FaultCase{"loss20", "drop=0.2", 2u << 20, true},
                          FaultCase{"reorder", "reorder=0.05:8", 8u << 20,
                                    false},
                          FaultCase{"dup", "dup=0.05", 8u << 20, false},
                          FaultCase{"corrupt", "corrupt=0.02", 8u << 20, false},
                          FaultCase{"mixed",
                                    "drop=0.01,reorder=0.02:4,dup=0.02,"
                                    "corrupt=0.01,burst=0.002:4",
                                    8u << 20, false})),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "RC_" : "UC_") +
             std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace uccl::testing
