// The simulator's chunks: a controller step of several packets that leave
// back to back, pipeline through switches and are lost whole (UC).
#include <gtest/gtest.h>

#include "cc/sim/sim.h"
#include "tests/cc/sim_test_util.h"

namespace uccl::sim {
namespace {

TEST(SimChunks, DefaultsAreTheEnginesAndRoundToWholePackets) {
  const SimConfig d;
  EXPECT_EQ(d.chunk_bytes, 65536u);  // UCCL_CHUNK_KB's default
  EXPECT_EQ(d.mtu_bytes, 4096u);
  // 10000 bytes are two whole 4096-byte packets, as the engine rounds:
  // Swift's first window is ten of those chunks.
  SimConfig c = dumbbell(1, "swift");
  c.chunk_bytes = 10000;
  c.flows.push_back(FlowSpec{0, 1, 1 << 20, 0, 0});
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->flow_series.empty());
  EXPECT_DOUBLE_EQ(r->flow_series[0].cwnd_bytes, 10 * 8192.0);
  c.chunk_bytes = 2048;  // below one packet
  EXPECT_FALSE(run(c).ok());
}

// One 64 KiB chunk crosses two links: as 16 packets the second link starts
// after the first packet, not after the whole chunk (store and forward
// per packet), and the run's ideal counts it that way.
TEST(SimChunks, PacketsOfAChunkPipelineThroughTheSwitches) {
  SimConfig c = dumbbell(1, "none");
  c.chunk_bytes = 65536;
  c.flows.push_back(FlowSpec{0, 1, 65536, 0, 0});
  auto packets = run(c);
  c.mtu_bytes = 65536;  // the chunk as one packet
  auto whole = run(c);
  ASSERT_TRUE(packets.ok() && whole.ok());
  const double t_pkts = packets->flows[0].finish_ns;
  const double t_whole = whole->flows[0].finish_ns;
  EXPECT_LT(t_pkts, t_whole);
  // Of the three links' serialization of 64 KiB at 100 Gb/s (5.2 us
  // each), two are hidden behind the first's but for one packet (0.3 us).
  EXPECT_GT(t_whole - t_pkts, 2 * (5240.0 - 340.0) - 100);
  EXPECT_NEAR(packets->metrics.at("completion_over_ideal"), 1.0, 0.01);
}

// An incast that overflows the queue: a chunk that loses a packet is
// resent whole, and the receiver counts only complete chunks, once.
TEST(SimChunks, ALostPacketLosesItsWholeChunk) {
  SimConfig c = dumbbell(8, "none");
  c.buffer_kb = 128;
  c.chunk_bytes = 16384;  // four packets
  for (uint32_t i = 0; i < 8; ++i) {
    c.flows.push_back(FlowSpec{i, 8, 1 << 20, 0, 0});
  }
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->metrics.at("drops"), 0);
  EXPECT_EQ(r->metrics.at("unfinished_flows"), 0);
  uint64_t retx = 0;
  for (const FlowResult& f : r->flows) {
    EXPECT_EQ(f.delivered_bytes, f.spec.bytes) << "partial or double counts";
    retx += f.retx;
  }
  // Every chunk that lost a packet went again (a drop is never repaired
  // by resending the packet alone): at least a chunk per four drops.
  EXPECT_GE(retx * 4, r->metrics.at("drops"));
}

// Trimming (NDP/EQDS) with chunks: a trimmed packet NACKs its chunk,
// which is resent at once and whole, with no timeout; the rest of that
// transmission is ignored.
TEST(SimChunks, ATrimmedPacketNacksItsChunkOnce) {
  SimConfig c = dumbbell(8, "swift");
  c.buffer_kb = 128;
  c.chunk_bytes = 16384;
  c.trim = true;
  for (uint32_t i = 0; i < 8; ++i) {
    c.flows.push_back(FlowSpec{i, 8, 1 << 20, 0, 0});
  }
  auto r = run(c);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& m = r->metrics;
  EXPECT_GT(m.at("trims"), 0);
  EXPECT_EQ(m.at("drops"), 0);
  EXPECT_EQ(m.at("unfinished_flows"), 0);
  EXPECT_EQ(m.at("rtos"), 0);
  EXPECT_GT(m.at("retransmissions"), 0);
  EXPECT_LE(m.at("retransmissions"), m.at("trims"));
  for (const FlowResult& f : r->flows) {
    EXPECT_EQ(f.delivered_bytes, f.spec.bytes);
  }
}

}  // namespace
}  // namespace uccl::sim
