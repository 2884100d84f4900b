// Software NIC devices and API: bad posts get a clear Status, device
// listing and MTUs, counted junk, rate limits, unsummed and spliced sends.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <tuple>
#include <utility>

#include "tests/transport/nic_test_util.h"
#include "tests/transport/soft_nic_test_util.h"
#include "transport/udp/netif.h"
#include "transport/udp/soft_nic.h"
#include "transport/udp/wire.h"
#include "util/pattern.h"

namespace uccl::transport::testing {
namespace {

TEST(ApiErrorsTest, BadPostsReturnClearStatus) {
  auto a = Side::make(QpType::kUC, 8192);
  auto b = Side::make(QpType::kUC, 8192);
  // Not connected yet.
  Status st = a->post_send(WrOpcode::kWrite, 1, 0, 10, b->addr(), 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  connect_pair(a.get(), b.get());
  // READ is not a UC operation.
  st = a->post_send(WrOpcode::kRead, 1, 0, 10, b->addr(), b->mr->rkey());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not allowed on UC"), std::string::npos) << st;
  // Bad lkey.
  Sge sge{a->addr(), 10, 12345};
  SendWr wr;
  wr.opcode = WrOpcode::kWrite;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const SendWr* bad = nullptr;
  st = a->qp->post_send(&wr, &bad);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(bad, &wr);
  // SGE outside its region.
  sge = Sge{a->addr(8000), 500, a->mr->lkey()};
  EXPECT_EQ(a->qp->post_send(&wr, nullptr).code(),
            StatusCode::kPermissionDenied);
  // Too many SGEs.
  Sge many[9];
  wr.sg_list = many;
  wr.num_sge = 9;
  EXPECT_EQ(a->qp->post_send(&wr, nullptr).code(),
            StatusCode::kInvalidArgument);
  // Connecting QPs of different types.
  auto rc = Side::make(QpType::kRC, 0);
  st = rc->qp->connect(a->qp->local_info());
  EXPECT_NE(st.message().find("local QP is RC, remote is UC"),
            std::string::npos);
  // Zero-length registration.
  EXPECT_FALSE(a->pd->reg_mr(a->buf.data(), 0, kAccessLocalWrite).ok());
  // Remote write without local write.
  EXPECT_FALSE(a->pd->reg_mr(a->buf.data(), 10, kAccessRemoteWrite).ok());
}

TEST(ApiErrorsTest, SendQueueFullIsResourceExhausted) {
  QpConfig cfg;
  cfg.max_send_wr = 4;
  auto a = Side::make(QpType::kRC, 8192, Side::no_faults(), cfg);
  auto b = Side::make(QpType::kRC, 8192);
  connect_pair(a.get(), b.get());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        a->post_send(WrOpcode::kWrite, i, 0, 8, b->addr(), b->mr->rkey()).ok());
  }
  Status st = a->post_send(WrOpcode::kWrite, 9, 0, 8, b->addr(), b->mr->rkey());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 4; }));
  EXPECT_TRUE(
      a->post_send(WrOpcode::kWrite, 9, 0, 8, b->addr(), b->mr->rkey()).ok());
}

TEST(ApiErrorsTest, InlineSendsCopyAtPostTime) {
  auto a = Side::make(QpType::kRC, 8192);
  auto b = Side::make(QpType::kRC, 8192);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(b->post_recv(1, 0, 256).ok());
  std::vector<uint8_t> tmp(200);
  fill_pattern(tmp.data(), tmp.size(), 4);
  Sge sge{reinterpret_cast<uint64_t>(tmp.data()), 200, 0};  // no lkey needed
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.inline_data = true;
  ASSERT_TRUE(a->qp->post_send(&wr, nullptr).ok());
  std::fill(tmp.begin(), tmp.end(), 0);  // reuse immediately
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] { return !b->recv_wcs.empty(); }));
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 200, 4), -1);
  sge.length = 300;  // above max_inline_data (256)
  EXPECT_EQ(a->qp->post_send(&wr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(ApiErrorsTest, ErrorStateFlushesPostedReceives) {
  auto a = Side::make(QpType::kRC, 8192);
  auto b = Side::make(QpType::kRC, 8192);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(b->post_recv(1, 0, 100).ok());
  ASSERT_TRUE(b->post_recv(2, 100, 100).ok());
  ASSERT_TRUE(b->qp->set_error().ok());
  ASSERT_TRUE(drive({b.get()}, [&] { return b->recv_wcs.size() == 2; }));
  EXPECT_EQ(b->recv_wcs[0].status, WcStatus::kWrFlushError);
  EXPECT_EQ(b->recv_wcs[1].wr_id, 2u);
}

// The payload MTU to a peer on this host is lo's (capped like the rest):
// the same as the device's on lo, and on any other interface too, whatever
// that interface's own MTU (a VM's 1400-MTU eth0: 1280 B against 61440).
TEST(DeviceTest, LocalPeersGetLoopbacksMtu) {
  auto lo = open_device("udp:lo", Side::no_faults());
  ASSERT_TRUE(lo.ok()) << lo.status();
  const DeviceInfo li = (*lo)->info();
  EXPECT_EQ(li.local_mtu_bytes, li.mtu_bytes);
  EXPECT_GT(li.local_mtu_bytes, 60000u);
  for (const udp::NetIf& n : udp::list_netifs()) {
    if (n.loopback) continue;
    auto d = open_device("udp:" + n.name, Side::no_faults());
    ASSERT_TRUE(d.ok()) << n.name << ": " << d.status();
    EXPECT_EQ((*d)->info().local_mtu_bytes, li.mtu_bytes) << n.name;
  }
}

TEST(DeviceTest, ListingAndOpeningByName) {
  std::vector<DeviceInfo> devs = list_devices();
  bool has_lo = false;
  for (const DeviceInfo& d : devs) {
    if (d.name == "udp:lo") {
      has_lo = true;
      EXPECT_EQ(d.ip, "127.0.0.1");
      EXPECT_GT(d.mtu_bytes, 60000u);
      // lo has no link speed (sysfs says EINVAL): a stand-in, marked so.
      EXPECT_FALSE(d.link_speed_known);
      EXPECT_GT(d.link_speed_mbps, 0u);
    }
  }
  EXPECT_TRUE(has_lo);
  EXPECT_TRUE(open_device("udp:127.0.0.1", Side::no_faults()).ok());
  auto bad = open_device("udp:nosuchif0", Side::no_faults());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("lo (127.0.0.1)"), std::string::npos)
      << bad.status();
  auto nodev = open_device("mlx5_99", Side::no_faults());
  EXPECT_FALSE(nodev.ok());
  EXPECT_FALSE(verbs_unavailable_reason().empty());
}

TEST(DeviceTest, WildcardDeviceLearnsPathMtuFromRoute) {
  auto a =
      Side::make(QpType::kRC, 1 << 20, Side::no_faults(), QpConfig(), "udp");
  auto b = Side::make(QpType::kRC, 1 << 20);
  ASSERT_TRUE(a && b);
  QpInfo ai = a->qp->local_info();
  // A wildcard device advertises 0.0.0.0: the peer must be told the address.
  EXPECT_FALSE(b->qp->connect(ai).ok());
  ipv4_to_gid(htonl(0x7f000001), ai.addr.gid);
  ASSERT_TRUE(b->qp->connect(ai).ok());
  ASSERT_TRUE(a->qp->connect(b->qp->local_info()).ok());
  transfer_once(a.get(), b.get(), WrOpcode::kWrite, 300000, 8);
}

TEST(DeviceTest, KernelDropsAndJunkDatagramsAreCounted) {
  // Datagrams the kernel drops because nobody drained the socket are read
  // from the socket (SO_MEMINFO) when the counters are; junk that gets in
  // is dropped and counted as malformed.
  auto a = Side::make(QpType::kUC, 4096);
  ASSERT_TRUE(a);
  auto* dev = static_cast<udp::SoftDevice*>(a->dev.get());
  EXPECT_EQ(dev->counters().drop_kernel_rcvbuf, 0u);
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(0x7f000001);
  to.sin_port = htons(dev->udp_port());
  std::vector<uint8_t> junk(60000, 0x5a);
  // 3000 x 60 KB is several times the device's socket buffer (16 MiB by
  // default, doubled by the kernel); loopback UDP never blocks the sender.
  int sent = 0;
  for (int i = 0; i < 3000; ++i) {
    if (sendto(fd, junk.data(), junk.size(), 0,
               reinterpret_cast<sockaddr*>(&to), sizeof(to)) > 0) {
      ++sent;
    }
  }
  close(fd);
  ASSERT_EQ(sent, 3000);
  const uint64_t kdrops = dev->counters().drop_kernel_rcvbuf;
  EXPECT_GT(kdrops, 0u);
  EXPECT_LT(kdrops, 3000u);
  EXPECT_GE(dev->drops(), kdrops);
  EXPECT_NE(
      dev->counters_text().find("drop_kernel_rcvbuf " + std::to_string(kdrops)),
      std::string::npos)
      << dev->counters_text();
  for (int i = 0; i < 1000 && dev->counters().rx_packets < 3000 - kdrops; ++i) {
    a->poll();
  }
  EXPECT_EQ(dev->counters().rx_packets, 3000 - kdrops);
  EXPECT_EQ(dev->counters().drop_malformed, 3000 - kdrops);
  EXPECT_EQ(dev->counters().drop_kernel_rcvbuf, kdrops);  // nothing new
}

TEST(DeviceTest, RateLimitIsEnforced) {
  ManualClock clock;
  DeviceOptions o = Side::no_faults();
  o.rate_gbps = 8.0;  // 1 byte per ns
  o.clock = &clock;
  auto a = Side::make(QpType::kUC, 16 << 20, o);
  auto b = Side::make(QpType::kUC, 16 << 20);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 1, 0, 8 << 20, b->addr(), b->mr->rkey())
          .ok());
  const uint64_t burst = 256 * 1024;  // token bucket depth
  const uint64_t slack = 32 * 65536;  // one transmit budget of overshoot
  for (int i = 0; i < 100; ++i) a->poll();
  EXPECT_LE(cnt(a.get()).tx_bytes, burst + slack) << "time stood still";
  EXPECT_GT(cnt(a.get()).tx_bytes, 0u);
  clock.advance_ns(1000000);  // 1 ms at 1 B/ns
  for (int i = 0; i < 100; ++i) a->poll();
  EXPECT_LE(cnt(a.get()).tx_bytes, burst + 1000000 + slack);
  EXPECT_GE(cnt(a.get()).tx_bytes, 1000000u);
  for (int i = 0; i < 20 && a->send_wcs.empty(); ++i) {
    clock.advance_ns(1000000);
    for (int k = 0; k < 100; ++k) a->poll();
  }
  ASSERT_EQ(a->send_wcs.size(), 1u);
}

// Between QPs of one host the payload CRC is left out where both agree
// (wire.h, "Unsummed payloads"): the sender's knob, the receiver's offer in
// its QpInfo, and no injected faults. Every case delivers byte for byte.
TEST(UnsummedTest, LocalPeersLeaveOutThePayloadCrcOnlyWhenBothAgree) {
  constexpr uint32_t kBytes = 1 << 20;  // several datagrams, even on lo
  struct Case {
    int sender_crc, receiver_crc;
    bool sender_tx_faults;
    bool unsummed;
  };
  const Case cases[] = {
      {0, 0, false, true},   // the default between processes of a host
      {1, 0, false, false},  // the sender sums anyway
      {0, 1, false, false},  // the receiver did not offer
      {0, 0, true, false},   // injected TX faults: corruption must be caught
  };
  uint32_t seed = 40;
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "sender_crc " << k.sender_crc << " receiver_crc "
                 << k.receiver_crc << " tx_faults " << k.sender_tx_faults);
    DeviceOptions so = Side::no_faults(), ro = Side::no_faults();
    so.backend_params = "local_crc=" + std::to_string(k.sender_crc);
    ro.backend_params = "local_crc=" + std::to_string(k.receiver_crc);
    // Seeded corruption of a fifth of the datagrams: RC resends them.
    if (k.sender_tx_faults) so.faults.tx = *FaultSpec::parse("corrupt=0.2");
    auto a = Side::make(QpType::kRC, kBytes, so);
    auto b = Side::make(QpType::kRC, kBytes, ro);
    ASSERT_TRUE(a && b);
    connect_pair(a.get(), b.get());
    EXPECT_EQ((b->qp->local_info().flags & kQpInfoTakesUnsummed) != 0,
              k.receiver_crc == 0);
    fill_pattern(a->buf.data(), kBytes, ++seed);
    std::memset(b->buf.data(), 0, kBytes);
    ASSERT_TRUE(
        a->post_send(WrOpcode::kWrite, 1, 0, kBytes, b->addr(), b->mr->rkey())
            .ok());
    ASSERT_TRUE(
        drive({a.get(), b.get()}, [&] { return !a->send_wcs.empty(); }));
    ASSERT_EQ(a->send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(find_pattern_mismatch(b->buf.data(), kBytes, seed), -1);
    // The sender sends only WRITE datagrams (the RC ACKs come back).
    const int64_t writes = counter(*a->dev, "tx_packets");
    EXPECT_GT(writes, 1);
    EXPECT_EQ(counter(*a->dev, "tx_unsummed"), k.unsummed ? writes : 0);
    // Injected corruption is caught by the sum, and only then is any dropped.
    if (k.sender_tx_faults) {
      EXPECT_GT(counter(*b->dev, "drop_bad_crc"), 0);
    } else {
      EXPECT_EQ(counter(*b->dev, "drop_bad_crc"), 0);
    }
  }
}

// A WRITE marked by_reference to a peer on this host leaves without a copy
// (wire.h, "Spliced payloads") only where its payload also goes unsummed;
// every case delivers byte for byte, and the payload MTU fits 16 pages at
// any alignment only while splicing is on.
TEST(SplicedTest, ByReferenceWritesAreSplicedOnlyWhereUnsummedAndAsked) {
  constexpr uint32_t kBytes = 1 << 20;
  struct Case {
    int splice, sender_crc;
    bool by_reference;
    bool spliced;
  };
  const Case cases[] = {
      {1, 0, true, true},    // the default for the engine's chunks
      {1, 0, false, false},  // not marked: copied
      {0, 0, true, false},   // splicing off
      {1, 1, true, false},   // summed: the sender reads it anyway
  };
  const long page = sysconf(_SC_PAGESIZE);
  uint32_t seed = 60;
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "splice " << k.splice << " sender_crc " << k.sender_crc
                 << " by_reference " << k.by_reference);
    DeviceOptions so = Side::no_faults();
    so.backend_params = "splice=" + std::to_string(k.splice) +
                        ",local_crc=" + std::to_string(k.sender_crc);
    auto a = Side::make(QpType::kRC, kBytes + 4096, so);
    auto b = Side::make(QpType::kRC, kBytes, Side::no_faults());
    ASSERT_TRUE(a && b);
    connect_pair(a.get(), b.get());
    const uint32_t mtu = a->dev->info().mtu_bytes;
    if (k.splice == 1 && k.sender_crc == 0) {
      EXPECT_LE(mtu, static_cast<uint32_t>(page * (udp::kSpliceMaxPages - 1)));
    } else {
      EXPECT_GT(mtu, static_cast<uint32_t>(page * (udp::kSpliceMaxPages - 1)))
          << "loopback's payload MTU is ~64 KiB";
    }
    // From an odd offset, so every fragment straddles pages.
    fill_pattern(a->buf.data() + 100, kBytes, ++seed);
    std::memset(b->buf.data(), 0, kBytes);
    ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 1, 100, kBytes, b->addr(),
                             b->mr->rkey(), 0, true, k.by_reference)
                    .ok());
    ASSERT_TRUE(
        drive({a.get(), b.get()}, [&] { return !a->send_wcs.empty(); }));
    ASSERT_EQ(a->send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(find_pattern_mismatch(b->buf.data(), kBytes, seed), -1);
    // The QPs agree on the smaller of their MTUs; all but the last fragment
    // are full, and only fragments of 16 KiB or more are worth splicing.
    const uint32_t path_mtu = std::min(mtu, b->dev->info().mtu_bytes);
    const uint32_t full = kBytes / path_mtu, tail = kBytes % path_mtu;
    const int64_t writes = counter(*a->dev, "tx_packets");
    const int64_t resent = counter(*a->dev, "rc_retransmits");
    EXPECT_EQ(writes - resent, full + (tail ? 1 : 0));
    if (k.spliced) {
      // A resend (a stalled host) is copied.
      EXPECT_EQ(counter(*a->dev, "tx_spliced"),
                full + (tail >= udp::kSpliceMinPayload ? 1 : 0));
    } else {
      EXPECT_EQ(counter(*a->dev, "tx_spliced"), 0);
    }
    EXPECT_EQ(counter(*a->dev, "tx_splice_fallbacks"), 0);
    EXPECT_EQ(counter(*a->dev, "tx_errors"), 0);
  }
}

// A resend is copied (an earlier copy may have been acknowledged), and
// pages the kernel takes only in part are copied whole: both arrive intact.
// Time moves only when the test moves it.
TEST(SplicedTest, ResendsAndPagesNotTakenWholeAreCopied) {
  constexpr uint32_t kBytes = 4 * 61440;
  ManualClock clock;
  DeviceOptions o = Side::no_faults();
  o.clock = &clock;
  o.backend_params = "splice=1,local_crc=0";
  QpConfig cfg;
  cfg.rc.timeout = 14;  // ~67 ms before any RTT sample
  cfg.rc.retry_cnt = 3;
  auto a = Side::make(QpType::kRC, kBytes, o, cfg);
  auto b = Side::make(QpType::kRC, kBytes, o, cfg);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  fill_pattern(a->buf.data(), kBytes, 71);
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 1, 0, kBytes, b->addr(),
                           b->mr->rkey(), 0, true, true)
                  .ok());
  // a sends; b does not read yet, so nothing is acknowledged.
  for (int i = 0; i < 10; ++i) a->poll();
  const int64_t first = counter(*a->dev, "tx_packets");
  ASSERT_EQ(first, 4);
  EXPECT_EQ(counter(*a->dev, "tx_spliced"), 4);
  // Past the timeout a resends everything (go-back-N), by copy.
  clock.advance_ns(1000000000);
  for (int i = 0; i < 10; ++i) a->poll();
  ASSERT_GE(counter(*a->dev, "rc_retransmits"), 4);
  EXPECT_EQ(counter(*a->dev, "tx_spliced"), 4);
  EXPECT_EQ(counter(*a->dev, "tx_unsummed"), counter(*a->dev, "tx_packets"));
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] { return !a->send_wcs.empty(); }));
  ASSERT_EQ(a->send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), kBytes, 71), -1);

  // A one-page pipe takes a 15-page payload in part: copied whole instead.
  auto* soft = dynamic_cast<udp::SoftDevice*>(a->dev.get());
  ASSERT_NE(soft, nullptr);
  ASSERT_TRUE(soft->set_splice_pipe_bytes_for_test(4096));
  fill_pattern(a->buf.data(), kBytes, 72);
  const int64_t spliced = counter(*a->dev, "tx_spliced");
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 2, 0, kBytes, b->addr(),
                           b->mr->rkey(), 0, true, true)
                  .ok());
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 2; }));
  ASSERT_EQ(a->send_wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), kBytes, 72), -1);
  EXPECT_EQ(counter(*a->dev, "tx_spliced"), spliced);
  EXPECT_EQ(counter(*a->dev, "tx_splice_fallbacks"), 4);
  EXPECT_EQ(counter(*a->dev, "tx_errors"), 0);
}

}  // namespace
}  // namespace uccl::transport::testing
