// First engine checks: one connection, messages of many sizes both ways.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine/engine.h"
#include "tests/engine/engine_test_util.h"
#include "transport/udp/netif.h"
#include "transport/udp/wire.h"

namespace uccl::testing {
namespace {

// Sum of counter `name` over the engines in Endpoint::nic_counters() text.
uint64_t nic_counter(const std::string& text, const std::string& name) {
  uint64_t sum = 0;
  for (size_t at = text.find(name + " "); at != std::string::npos;
       at = text.find(name + " ", at + 1)) {
    if (at == 0 || text[at - 1] == '\n') {
      sum += std::strtoull(text.c_str() + at + name.size() + 1, nullptr, 10);
    }
  }
  return sum;
}

TEST(EngineSmoke, SendRecvManySizes) {
  auto p = Pair::make(test_config());
  ASSERT_TRUE(p);
  const size_t kMax = 8 << 20;
  Buf sb(p->client.get(), kMax), rb(p->server.get(), kMax);
  uint64_t seed = 0;
  for (size_t len : {size_t{0}, size_t{1}, size_t{100}, size_t{65536},
                     size_t{65537}, size_t{1} << 20, kMax}) {
    ++seed;
    fill_pattern(sb.ptr(), len, seed);
    Request rr, sr;
    ASSERT_TRUE(
        p->server->recv_async(p->s_conns[0], rb.ptr(), kMax, rb.mh, &rr).ok());
    ASSERT_TRUE(
        p->client->send_async(p->c_conns[0], sb.ptr(), len, sb.mh, &sr).ok());
    ASSERT_TRUE(p->client->wait(&sr, 20000).ok())
        << sr.status() << "\nclient:\n"
        << p->client->stats_text() << p->client->nic_counters() << "\nserver:\n"
        << p->server->stats_text() << p->server->nic_counters();
    ASSERT_TRUE(p->server->wait(&rr, 20000).ok()) << rr.status();
    EXPECT_EQ(rr.size(0), len);
    EXPECT_EQ(find_pattern_mismatch(rb.ptr(), len, seed), -1) << len;
  }
}

TEST(EngineChunks, WholePacketsOfTheMtu) {
  using engine::whole_packet_chunk_bytes;
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 65408, 65408), 65408u);  // lo
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 4096, 0), 65536u);       // whole
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 0, 0), 65536u);   // MTU unknown
  EXPECT_EQ(whole_packet_chunk_bytes(1024, 1408, 0), 1024u);  // under one
  EXPECT_EQ(whole_packet_chunk_bytes(1408, 1408, 0), 1408u);
  EXPECT_EQ(whole_packet_chunk_bytes(2815, 1408, 0), 1408u);  // never below
  // With no separate limit for peers on this host (verbs, or lo itself).
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 1408, 0), 46u * 1408);
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 61440, 61440), 61440u);  // lo
}

// An interface whose MTU is below loopback's (a VM's eth0): its chunks are
// whole packets of that MTU and also one datagram to a peer on this host,
// which the software NIC reaches through lo, 61440 B when spliced.
TEST(EngineChunks, WholePacketsOfTheInterfaceAndOneDatagramToThisHost) {
  using engine::whole_packet_chunk_bytes;
  // MTU 1400 (cloud VMs' eth0, this project's machines among them): 1280 B of
  // payload. 65280 B was 61440 + 3840 B through lo, the tail copied.
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 1280, 61440), 61440u);
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 1280, 65408), 65280u);  // copied
  // MTU 1500: 1408 B; the largest whole number of them within 61440.
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 1408, 61440), 43u * 1408);
  // Smaller chunks than either MTU allows are only made whole.
  EXPECT_EQ(whole_packet_chunk_bytes(32768, 1408, 61440), 23u * 1408);
  // An interface MTU above the local one: one local datagram.
  EXPECT_EQ(whole_packet_chunk_bytes(65536, 65408, 61440), 61440u);
}

// One chunk is one datagram on loopback. Copied, a 1 MiB message is 17
// chunks: 16 of lo's 65408-byte payload MTU and one of 1024 B, where 64 KiB
// chunks took 16 chunks of two datagrams (65408 + 128 B). Spliced, it is 18
// of 61440 B (15 pages) and a 4 KiB tail, every one but the tail by
// reference (transport/udp/wire.h, "Spliced payloads"). The message arrives
// intact.
// `chunks` 0: whatever the device's chunk size makes of 1 MiB, each chunk
// still one datagram, and spliced where over 16 KiB.
void expect_whole_datagrams(int splice, uint32_t chunks,
                            const std::string& device = "udp:lo") {
  EndpointConfig cfg = test_config(/*engines=*/1, /*paths=*/1);
  cfg.device = device;
  cfg.eager_bytes = 0;
  cfg.nic_params = "splice=" + std::to_string(splice);
  auto p = Pair::make(cfg);
  ASSERT_TRUE(p);
  const size_t kLen = 1 << 20;
  Buf sb(p->client.get(), kLen), rb(p->server.get(), kLen);
  // With eager sends off the client sends the message's chunks and the
  // software NIC's ACK of the receive descriptor (its control QP is RC),
  // counted apart here. A stalled run (a sanitizer on a loaded host) may
  // add retransmissions of either kind, which make the count inexact.
  auto data_packets = [&] {
    const std::string t = p->client->nic_counters();
    return nic_counter(t, "tx_packets") - nic_counter(t, "acks_sent") -
           nic_counter(t, "naks_sent") - nic_counter(t, "rnr_naks_sent");
  };
  auto rc_retransmits = [&] {
    return nic_counter(p->client->nic_counters(), "rc_retransmits");
  };
  Request rr, sr;
  ASSERT_TRUE(
      p->server->recv_async(p->s_conns[0], rb.ptr(), kLen, rb.mh, &rr).ok());
  const uint64_t before = data_packets();
  const uint64_t rc_before = rc_retransmits();
  fill_pattern(sb.ptr(), kLen, 17);
  ASSERT_TRUE(
      p->client->send_async(p->c_conns[0], sb.ptr(), kLen, sb.mh, &sr).ok());
  ASSERT_TRUE(p->client->wait(&sr, 20000).ok()) << sr.status();
  ASSERT_TRUE(p->server->wait(&rr, 20000).ok()) << rr.status();
  EXPECT_EQ(find_pattern_mismatch(rb.ptr(), kLen, 17), -1);
  auto st = p->client->conn_stats(p->c_conns[0]);
  ASSERT_TRUE(st.ok()) << st.status();
  uint32_t over_16k = chunks - 1;  // every chunk but the tail
  if (chunks == 0) {
    const uint32_t chunk = p->client->config().chunk_bytes;
    chunks = static_cast<uint32_t>((kLen + chunk - 1) / chunk);
    over_16k = static_cast<uint32_t>(kLen / chunk) +
               (kLen % chunk >= transport::udp::kSpliceMinPayload ? 1 : 0);
  }
  EXPECT_EQ(st->tx_chunks, chunks);
  const uint64_t retx =
      st->fast_retransmits + st->rto_retransmits + st->tlp_retransmits;
  if (retx == 0 && rc_retransmits() == rc_before) {
    EXPECT_EQ(data_packets() - before, chunks) << p->client->nic_counters();
  }
  // First transmissions of the chunks over 16 KiB only: resends are copied.
  const uint64_t spliced = nic_counter(p->client->nic_counters(), "tx_spliced");
  if (splice) {
    EXPECT_EQ(spliced, over_16k) << p->client->nic_counters();
  } else {
    EXPECT_EQ(spliced, 0u);
  }
}

TEST(EngineChunks, OneMegabyteIsSeventeenDatagramsOnLoopback) {
  expect_whole_datagrams(/*splice=*/0, 17);
}

TEST(EngineChunks, OneMegabyteIsEighteenSplicedDatagramsOnLoopback) {
  expect_whole_datagrams(/*splice=*/1, 18);
}

// The same between two endpoints on an interface other than lo (the GPU
// VMs' case: NCCL's ranks on one host over eth0's address). Its MTU sets
// the chunk; the datagrams go through lo. Skipped on a host with lo only.
TEST(EngineChunks, OneDatagramPerChunkOverAnotherInterfaceToThisHost) {
  std::string ifname;
  for (const transport::udp::NetIf& n : transport::udp::list_netifs()) {
    if (!n.loopback) {
      ifname = n.name;
      break;
    }
  }
  if (ifname.empty()) GTEST_SKIP() << "no interface other than lo";
  expect_whole_datagrams(/*splice=*/1, /*chunks=*/0, "udp:" + ifname);
  expect_whole_datagrams(/*splice=*/0, /*chunks=*/0, "udp:" + ifname);
}

}  // namespace
}  // namespace uccl::testing
