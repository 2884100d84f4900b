// Tests of the null NIC (transport/null/): immediates and SENDs delivered,
// no payload moved, keys checked, RNR holding, back-pressure, errors.
#include "transport/null/null_nic.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/transport/nic_test_util.h"
#include "transport/registry.h"

namespace uccl::transport::testing {
namespace {

std::unique_ptr<Side> null_side(QpType type, size_t bytes = 1 << 16,
                                QpConfig cfg = QpConfig()) {
  return Side::make(type, bytes, Side::no_faults(), cfg, "null");
}

bool drive_until(Side* a, Side* b, size_t recvs) {
  return drive(
      {a, b}, [&] { return b->recv_wcs.size() >= recvs; }, 5000);
}

TEST(NullNicTest, WriteWithImmDeliversImmediateAndMovesNoBytes) {
  auto a = null_side(QpType::kUC), b = null_side(QpType::kUC);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  std::memset(a->buf.data(), 0xAB, a->buf.size());
  ASSERT_TRUE(b->post_recv(7, 0, 0).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 1, 0, 4096, b->addr(128),
                           b->mr->rkey(), 0xC0FFEE)
                  .ok());
  ASSERT_TRUE(drive_until(a.get(), b.get(), 1));
  ASSERT_EQ(a->send_wcs.size(), 1u);
  EXPECT_EQ(a->send_wcs[0].opcode, WcOpcode::kWrite);
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kSuccess);
  const WorkCompletion& w = b->recv_wcs[0];
  EXPECT_EQ(w.status, WcStatus::kSuccess);
  EXPECT_EQ(w.opcode, WcOpcode::kRecvWriteImm);
  EXPECT_TRUE(w.with_imm);
  EXPECT_EQ(w.imm_data, 0xC0FFEEu);
  EXPECT_EQ(w.byte_len, 4096u);
  EXPECT_EQ(w.wr_id, 7u);
  EXPECT_EQ(w.qp_num, b->qp->qpn());
  for (uint8_t v : b->buf) ASSERT_EQ(v, 0) << "the null NIC moved payload";
}

TEST(NullNicTest, BadKeysAndBoundsAreDroppedAndCounted) {
  auto a = null_side(QpType::kUC), b = null_side(QpType::kUC);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(b->post_recv(i, 0, 0).ok());
  // Wrong rkey, then past the end of the region, then a good one.
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 1, 0, 64, b->addr(),
                           b->mr->rkey() ^ 0x5A5A0000u, 1)
                  .ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 2, 0, 4096,
                           b->addr(b->buf.size() - 100), b->mr->rkey(), 2)
                  .ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 3, 0, 64, b->addr(),
                           b->mr->rkey(), 3)
                  .ok());
  ASSERT_TRUE(drive_until(a.get(), b.get(), 1));
  for (int i = 0; i < 50; ++i) b->poll();
  ASSERT_EQ(b->recv_wcs.size(), 1u);
  EXPECT_EQ(b->recv_wcs[0].imm_data, 3u);
  EXPECT_EQ(counter(*b->dev, "drop_bad_rkey"), 1);
  EXPECT_EQ(counter(*b->dev, "drop_out_of_bounds"), 1);
  EXPECT_EQ(b->dev->drops(), 2u);
}

TEST(NullNicTest, UcWithoutReceiveDropsRcHoldsInOrder) {
  auto a = null_side(QpType::kUC), b = null_side(QpType::kUC);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 1, 0, 8, b->addr(),
                           b->mr->rkey(), 1)
                  .ok());
  for (int i = 0; i < 20; ++i) b->poll();
  EXPECT_TRUE(b->recv_wcs.empty());
  EXPECT_EQ(counter(*b->dev, "drop_no_recv"), 1);

  auto c = null_side(QpType::kRC), d = null_side(QpType::kRC);
  ASSERT_TRUE(c && d);
  connect_pair(c.get(), d.get());
  for (uint32_t i = 0; i < 10; ++i) {
    std::memcpy(c->buf.data() + 16 * i, &i, sizeof(i));
    ASSERT_TRUE(c->post_send(WrOpcode::kSend, i, 16 * i, 16).ok());
  }
  for (int i = 0; i < 20; ++i) d->poll();
  EXPECT_TRUE(d->recv_wcs.empty()) << "RC delivered without a receive";
  EXPECT_EQ(counter(*d->dev, "drop_no_recv"), 0);
  for (uint32_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(d->post_recv(100 + i, 1024 + 16 * i, 16).ok());
    if (i == 3) {
      for (int k = 0; k < 5; ++k) d->poll();
      EXPECT_EQ(d->recv_wcs.size(), 4u);
    }
  }
  ASSERT_TRUE(drive_until(c.get(), d.get(), 10));
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_EQ(d->recv_wcs[i].wr_id, 100 + i);
    EXPECT_EQ(d->recv_wcs[i].byte_len, 16u);
    uint32_t v;
    std::memcpy(&v, d->buf.data() + 1024 + 16 * i, sizeof(v));
    EXPECT_EQ(v, i) << "SEND " << i << " out of order or corrupted";
  }
  EXPECT_GE(counter(*d->dev, "rnr_held"), 10);
}

TEST(NullNicTest, UdSendCarriesGrhAndChecksQkey) {
  QpConfig cfg;
  cfg.qkey = 0x1234;
  auto a = null_side(QpType::kUD, 4096, cfg),
       b = null_side(QpType::kUD, 4096, cfg);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->qp->activate().ok());
  ASSERT_TRUE(b->qp->activate().ok());
  auto ah = a->dev->create_ah(a->pd.get(), b->dev->port_address());
  ASSERT_TRUE(ah.ok()) << ah.status();
  std::memset(b->buf.data(), 0x77, 512);
  std::memcpy(a->buf.data(), "hello, null NIC", 16);
  ASSERT_TRUE(b->post_recv(1, 0, 256).ok());
  ASSERT_TRUE(b->post_recv(2, 256, 256).ok());
  auto send = [&](uint32_t qkey) {
    Sge sge{a->addr(), 16, a->mr->lkey()};
    SendWr wr;
    wr.opcode = WrOpcode::kSend;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.ah = ah->get();
    wr.remote_qpn = b->qp->qpn();
    wr.remote_qkey = qkey;
    return a->qp->post_send(&wr, nullptr);
  };
  ASSERT_TRUE(send(0x9999).ok());
  ASSERT_TRUE(send(0x1234).ok());
  ASSERT_TRUE(drive_until(a.get(), b.get(), 1));
  EXPECT_EQ(counter(*b->dev, "drop_qkey"), 1);
  const WorkCompletion& w = b->recv_wcs[0];
  EXPECT_EQ(w.byte_len, kGrhBytes + 16);
  EXPECT_EQ(w.src_qp, a->qp->qpn());
  for (uint32_t i = 0; i < kGrhBytes; ++i) ASSERT_EQ(b->buf[i], 0);
  EXPECT_EQ(std::memcmp(b->buf.data() + kGrhBytes, "hello, null NIC", 16), 0);
}

TEST(NullNicTest, FullQueueRefusesThenLosesNothing) {
  // RC, so that polls between receive batches hold rather than drop.
  auto a = null_side(QpType::kRC), b = null_side(QpType::kRC);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  uint32_t posted = 0;
  Status st;
  while (posted < 2 * nullnic::kInboundDepth) {
    st = a->post_send(WrOpcode::kWriteWithImm, posted, 0, 64, b->addr(),
                      b->mr->rkey(), posted, /*signaled=*/false);
    if (!st.ok()) break;
    ++posted;
  }
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_GE(posted, nullnic::kInboundDepth / 2);
  EXPECT_EQ(counter(*a->dev, "tx_queue_full"), 1);
  uint32_t next = 0;
  while (b->recv_wcs.size() < posted) {
    const size_t before = b->recv_wcs.size();
    for (uint32_t i = 0; i < 256; ++i) ASSERT_TRUE(b->post_recv(i, 0, 0).ok());
    for (int k = 0; k < 64 && b->recv_wcs.size() < before + 256; ++k) b->poll();
    ASSERT_GT(b->recv_wcs.size(), before) << "stalled at " << before;
    for (size_t i = before; i < b->recv_wcs.size(); ++i) {
      ASSERT_EQ(b->recv_wcs[i].imm_data, next++);
    }
  }
  EXPECT_EQ(b->recv_wcs.size(), posted);
  EXPECT_EQ(b->dev->drops(), 0u);
}

TEST(NullNicTest, ErrorsAreStatusesNotCrashes) {
  auto a = null_side(QpType::kRC), b = null_side(QpType::kRC);
  ASSERT_TRUE(a && b);
  // Not connected yet.
  EXPECT_FALSE(a->post_send(WrOpcode::kSend, 1, 0, 8).ok());
  QpInfo bogus = b->qp->local_info();
  bogus.addr.udp_port = 0;
  Status st = a->qp->connect(bogus);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st;
  connect_pair(a.get(), b.get());
  st = a->post_send(WrOpcode::kSend, 1, 0, nullnic::kMaxSendBytes + 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  st = a->post_send(WrOpcode::kWrite, 1, a->buf.size() - 8, 64, b->addr(),
                    b->mr->rkey());
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st;
  EXPECT_EQ(nullnic::find_port(b->dev->port_address().udp_port) != nullptr,
            true);
  // The peer goes away: RC sends complete with an error, the QP fails.
  const uint16_t gone = b->dev->port_address().udp_port;
  b.reset();
  EXPECT_EQ(nullnic::find_port(gone), nullptr);
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 9, 0, 8).ok());
  a->poll();
  ASSERT_EQ(a->send_wcs.size(), 1u);
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kRetryExceeded);
  EXPECT_EQ(a->qp->state(), QpState::kError);
  EXPECT_FALSE(a->post_send(WrOpcode::kSend, 10, 0, 8).ok());
}

TEST(NullNicTest, NotListedForNccl) {
  for (const DeviceInfo& d : list_devices()) EXPECT_NE(d.backend, "null");
  auto d = open_device("null");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->info().backend, "null");
  EXPECT_GT((*d)->info().link_speed_mbps, 1000000u);
}

}  // namespace
}  // namespace uccl::transport::testing
