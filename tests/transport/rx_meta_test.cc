// Receive metadata on the software NIC: completions stamped with the
// kernel's arrival time, UD GRHs with the TTL a datagram came with.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/transport/nic_test_util.h"

namespace uccl::transport::testing {
namespace {

TEST(GrhHopLimit, BothGrhFormsAndTheHopsTheyMean) {
  uint8_t v6[kGrhBytes] = {0x60};
  v6[7] = 61;
  EXPECT_EQ(grh_hop_limit(v6), 61);
  EXPECT_EQ(hops_from_hop_limit(61), 3u);  // Linux starts at 64
  uint8_t v4[kGrhBytes] = {};
  v4[20] = 0x45;  // RoCEv2 over IPv4: the IP header in the last 20 bytes
  v4[28] = 250;
  EXPECT_EQ(grh_hop_limit(v4), 250);
  EXPECT_EQ(hops_from_hop_limit(250), 5u);  // RoCE NICs start at 255
  EXPECT_EQ(hops_from_hop_limit(120), 8u);  // and some hosts at 128
  EXPECT_EQ(hops_from_hop_limit(64), 0u);
  uint8_t junk[kGrhBytes] = {};
  EXPECT_EQ(grh_hop_limit(junk), -1);
  EXPECT_EQ(hops_from_hop_limit(-1), 0u);
}

DeviceOptions receiving(bool timestamps, bool hop_limits) {
  DeviceOptions o = Side::no_faults();
  o.rx_timestamps = timestamps;
  o.hop_limits = hop_limits;
  return o;
}

// Posts one 64-byte UD SEND a -> b; the address handle it used (kept until
// the datagram is out), or nullptr.
std::unique_ptr<AddressHandle> post_ud_send(Side* a, Side* b) {
  auto ah = a->dev->create_ah(a->pd.get(), b->qp->local_info().addr);
  EXPECT_TRUE(ah.ok()) << ah.status();
  if (!ah.ok()) return nullptr;
  Sge sge{a->addr(), 64, a->mr->lkey()};
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.ah = ah->get();
  wr.remote_qpn = b->qp->qpn();
  wr.remote_qkey = QpConfig().qkey;
  Status st = a->qp->post_send(&wr, nullptr);
  EXPECT_TRUE(st.ok()) << st;
  return st.ok() ? std::move(*ah) : nullptr;
}

// One UD datagram a -> b; b's completion and the GRH it wrote.
struct UdResult {
  WorkCompletion wc;
  uint8_t hop_limit = 0;
};
UdResult ud_once(Side* a, Side* b) {
  UdResult r;
  EXPECT_TRUE(b->post_recv(1, 0, kGrhBytes + 64).ok());
  auto ah = post_ud_send(a, b);
  EXPECT_TRUE(drive({a, b}, [&] { return !b->recv_wcs.empty(); }));
  if (!b->recv_wcs.empty()) r.wc = b->recv_wcs[0];
  r.hop_limit = b->buf[7];
  return r;
}

TEST(RxMeta, UdGrhCarriesTheTtlTheDatagramCameWith) {
  DeviceOptions sender = Side::no_faults();
  sender.backend_params = "ttl=61";  // as if three routers took one each
  auto a = Side::make(QpType::kUD, 4096, sender);
  auto b = Side::make(QpType::kUD, 4096, receiving(false, true));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->qp->activate().ok());
  ASSERT_TRUE(b->qp->activate().ok());
  UdResult r = ud_once(a.get(), b.get());
  EXPECT_EQ(r.wc.status, WcStatus::kSuccess);
  EXPECT_EQ(r.hop_limit, 61);
  EXPECT_EQ(hops_from_hop_limit(grh_hop_limit(b->buf.data())), 3u);
  // Not asked for: the hop limit as sent by default.
  auto c = Side::make(QpType::kUD, 4096, receiving(false, false));
  ASSERT_TRUE(c && c->qp->activate().ok());
  EXPECT_EQ(ud_once(a.get(), c.get()).hop_limit, 64);
}

TEST(RxMeta, BadTtlIsRefused) {
  DeviceOptions o = Side::no_faults();
  for (const char* bad : {"ttl=0", "ttl=256", "ttl=x"}) {
    o.backend_params = bad;
    EXPECT_FALSE(open_device("udp:lo", o).ok()) << bad;
  }
}

// A datagram that waits in the socket before its receiver polls: the
// completion says when it arrived, not when it was polled, if asked.
void expect_arrival_stamp(QpType type, bool asked) {
  auto a = Side::make(type, 4096);
  auto b = Side::make(type, 4096, receiving(asked, false));
  ASSERT_TRUE(a && b);
  if (type == QpType::kUD) {
    ASSERT_TRUE(a->qp->activate().ok());
    ASSERT_TRUE(b->qp->activate().ok());
  } else {
    connect_pair(a.get(), b.get());
  }
  ASSERT_TRUE(
      b->post_recv(1, 0, type == QpType::kUD ? kGrhBytes + 64 : 64).ok());
  const uint64_t sent_ns = monotonic_ns();
  std::unique_ptr<AddressHandle> ah;
  if (type == QpType::kUD) {
    ah = post_ud_send(a.get(), b.get());
    ASSERT_TRUE(ah);
  } else {
    ASSERT_TRUE(a->post_send(WrOpcode::kSend, 1, 0, 64).ok());
  }
  // Only the sender runs until its datagram is in b's socket.
  ASSERT_TRUE(drive({a.get()}, [&] { return !a->send_wcs.empty(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const uint64_t polled_ns = monotonic_ns();
  ASSERT_TRUE(drive({b.get()}, [&] { return !b->recv_wcs.empty(); }));
  const uint64_t t = b->recv_wcs[0].timestamp_ns;
  if (asked) {
    EXPECT_GE(t, sent_ns);
    EXPECT_LT(t, polled_ns - 20000000) << "stamped when polled";
  } else {
    EXPECT_GE(t, polled_ns);
  }
}

TEST(RxMeta, CompletionsCarryTheKernelArrivalTimeWhenAsked) {
  // The kernel switches receive timestamps on for all sockets once one
  // asks, but asynchronously (deferred work), and off again when the last
  // one that asked closes; a datagram that arrives meanwhile is stamped
  // when it is read. One socket asking for the whole test, and a moment
  // for the switch, keep them on across the devices opened and closed.
  const int guard = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(guard, 0);
  const int on = 1;
  ASSERT_EQ(setsockopt(guard, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (QpType type : {QpType::kUD, QpType::kUC}) {
    SCOPED_TRACE(qp_type_name(type));
    expect_arrival_stamp(type, true);
    expect_arrival_stamp(type, false);
  }
  close(guard);
}

}  // namespace
}  // namespace uccl::transport::testing
