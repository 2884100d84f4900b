// Software NIC in one process: every QP type x opcode at sizes 0 B .. 1 GiB
// byte-exact, UD/GRH, SRQ, owner-driven progress, UC loss semantics.
#include "transport/udp/soft_nic.h"

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
#include "transport/udp/wire.h"
#include "util/pattern.h"

namespace uccl::transport::testing {
namespace {

class OpMatrix : public ::testing::TestWithParam<std::tuple<QpType, WrOpcode>> {
};

TEST_P(OpMatrix, ByteExactAcrossSizes) {
  auto [type, op] = GetParam();
  constexpr size_t kMax = 16u << 20;
  auto a = Side::make(type, kMax + 4096);
  auto b = Side::make(type, kMax + 4096);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  const uint32_t mtu = mtu_of(a.get());
  uint64_t seed = 1;
  for (uint32_t len : {0u, 1u, 63u, 4096u, mtu - 1, mtu, mtu + 1, 3 * mtu + 17,
                       (1u << 20) + 3, static_cast<uint32_t>(kMax)}) {
    transfer_once(a.get(), b.get(), op, len, ++seed);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(counter(*b->dev, "drop_bad_crc"), 0);
}

#ifndef UCCL_SANITIZER_BUILD
TEST_P(OpMatrix, OneGiB) {
  auto [type, op] = GetParam();
  constexpr uint32_t kLen = 1u << 30;
  auto a = Side::make(type, kLen);
  auto b = Side::make(type, kLen);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  transfer_once(a.get(), b.get(), op, kLen, 99);
}
#endif

INSTANTIATE_TEST_SUITE_P(RcUc, OpMatrix, qp_op_matrix(),
                         [](const auto& info) { return qp_op_name(info); });

// ------------------------------------------------------------------ UD

struct UdPair {
  std::unique_ptr<Side> a, b;
  std::unique_ptr<AddressHandle> ah;  // a -> b
};

UdPair make_ud(uint32_t buf = 1 << 20) {
  UdPair p;
  p.a = Side::make(QpType::kUD, buf);
  p.b = Side::make(QpType::kUD, buf);
  EXPECT_TRUE(p.a->qp->activate().ok());
  EXPECT_TRUE(p.b->qp->activate().ok());
  auto ah = p.a->dev->create_ah(p.a->pd.get(), p.b->qp->local_info().addr);
  EXPECT_TRUE(ah.ok()) << ah.status();
  p.ah = std::move(*ah);
  return p;
}

Status ud_send(UdPair& p, uint32_t len, uint32_t qkey, WrOpcode op,
               uint64_t wr_id = 1) {
  Sge sge{p.a->addr(), len, p.a->mr->lkey()};
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = len ? 1 : 0;
  wr.ah = p.ah.get();
  wr.remote_qpn = p.b->qp->qpn();
  wr.remote_qkey = qkey;
  wr.imm_data = 77;
  return p.a->qp->post_send(&wr, nullptr);
}

TEST(UdTest, DatagramsUpToMtuWithGrh) {
  UdPair p = make_ud();
  const uint32_t mtu = mtu_of(p.a.get());
  uint64_t seed = 5;
  for (uint32_t len : {0u, 1u, 100u, mtu}) {
    for (WrOpcode op : {WrOpcode::kSend, WrOpcode::kSendWithImm}) {
      p.b->recv_wcs.clear();
      p.a->send_wcs.clear();
      fill_pattern(p.a->buf.data(), len, ++seed);
      ASSERT_TRUE(p.b->post_recv(3, 0, kGrhBytes + len).ok());
      ASSERT_TRUE(ud_send(p, len, QpConfig().qkey, op).ok());
      ASSERT_TRUE(drive({p.a.get(), p.b.get()},
                        [&] { return !p.b->recv_wcs.empty(); }));
      const WorkCompletion& wc = p.b->recv_wcs[0];
      EXPECT_EQ(wc.status, WcStatus::kSuccess);
      EXPECT_EQ(wc.byte_len, kGrhBytes + len);
      EXPECT_EQ(wc.src_qp, p.a->qp->qpn());
      EXPECT_EQ(wc.with_imm, op == WrOpcode::kSendWithImm);
      EXPECT_EQ(p.b->buf[0] >> 4, 6) << "GRH version";
      EXPECT_EQ(find_pattern_mismatch(p.b->buf.data() + kGrhBytes, len, seed),
                -1);
    }
  }
}

TEST(UdTest, AboveMtuIsRejectedAtPost) {
  UdPair p = make_ud(1 << 20);
  const uint32_t mtu = mtu_of(p.a.get());
  Status st = ud_send(p, mtu + 1, QpConfig().qkey, WrOpcode::kSend);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("exceeds the path MTU"), std::string::npos) << st;
}

TEST(UdTest, WrongQkeyAndNoReceiveAreDroppedAndCounted) {
  UdPair p = make_ud();
  ASSERT_TRUE(p.b->post_recv(3, 0, 4096).ok());
  ASSERT_TRUE(ud_send(p, 10, 0xdead, WrOpcode::kSend).ok());
  ASSERT_TRUE(drive({p.a.get(), p.b.get()},
                    [&] { return counter(*p.b->dev, "drop_qkey") == 1; }));
  EXPECT_TRUE(p.b->recv_wcs.empty());
  // The receive is still there: a good datagram uses it.
  ASSERT_TRUE(ud_send(p, 10, QpConfig().qkey, WrOpcode::kSend).ok());
  ASSERT_TRUE(
      drive({p.a.get(), p.b.get()}, [&] { return !p.b->recv_wcs.empty(); }));
  ASSERT_TRUE(ud_send(p, 10, QpConfig().qkey, WrOpcode::kSend).ok());
  ASSERT_TRUE(drive({p.a.get(), p.b.get()},
                    [&] { return counter(*p.b->dev, "drop_no_recv") == 1; }));
}

// ------------------------------------------------------------------ SRQ

TEST(SrqTest, TwoQpsShareOneSrq) {
  auto dev_b = open_device("udp:lo", Side::no_faults());
  ASSERT_TRUE(dev_b.ok());
  auto pd = std::move(*(*dev_b)->alloc_pd());
  auto cq = std::move(*(*dev_b)->create_cq(256));
  auto srq = std::move(*(*dev_b)->create_srq(pd.get(), 64, 1));
  std::vector<uint8_t> rbuf(8 * 4096);
  auto mr = std::move(*pd->reg_mr(rbuf.data(), rbuf.size(),
                                  kAccessLocalWrite | kAccessRemoteWrite));
  for (int i = 0; i < 8; ++i) {
    Sge sge{reinterpret_cast<uint64_t>(rbuf.data()) + i * 4096, 4096,
            mr->lkey()};
    RecvWr wr;
    wr.wr_id = 100 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_TRUE(srq->post_recv(&wr, nullptr).ok());
  }
  std::vector<std::unique_ptr<Side>> senders;
  std::vector<std::unique_ptr<QueuePair>> qps;
  for (int i = 0; i < 2; ++i) {
    senders.push_back(Side::make(QpType::kRC, 4096));
    QpConfig cfg;
    cfg.type = QpType::kRC;
    cfg.pd = pd.get();
    cfg.send_cq = cq.get();
    cfg.recv_cq = cq.get();
    cfg.srq = srq.get();
    qps.push_back(std::move(*(*dev_b)->create_qp(cfg)));
    ASSERT_TRUE(qps[i]->connect(senders[i]->qp->local_info()).ok());
    ASSERT_TRUE(senders[i]->qp->connect(qps[i]->local_info()).ok());
    EXPECT_EQ(qps[i]->post_recv(nullptr, nullptr).code(),
              StatusCode::kInvalidArgument);
  }
  std::vector<WorkCompletion> got;
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 3; ++k) {
      fill_pattern(senders[i]->buf.data(), 1000, i * 10 + k);
      ASSERT_TRUE(senders[i]->post_send(WrOpcode::kSend, k, 0, 1000).ok());
      ASSERT_TRUE(drive({senders[i].get()}, [&] {
        WorkCompletion wc[8];
        int n = cq->poll(8, wc);
        got.insert(got.end(), wc, wc + n);
        return got.size() == static_cast<size_t>(i * 3 + k + 1);
      }));
      const WorkCompletion& wc = got.back();
      ASSERT_EQ(wc.status, WcStatus::kSuccess);
      EXPECT_EQ(wc.qp_num, qps[i]->qpn());
      uint64_t slot = wc.wr_id - 100;
      EXPECT_EQ(
          find_pattern_mismatch(rbuf.data() + slot * 4096, 1000, i * 10 + k),
          -1);
    }
  }
  // Six distinct receives were consumed, in posting order.
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wr_id, 100 + i);
}

// ------------------------------------------------- owner-driven progress

// Device A sends one message on each of two UC QPs to device B; the first
// posted QP is low-priority when `first_low`. Returns the order (by A's QP
// index) in which B completed them.
std::vector<int> arrival_order(bool first_low) {
  std::vector<int> order;
  auto a = open_device("udp:lo", Side::no_faults());
  auto b = open_device("udp:lo", Side::no_faults());
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return order;
  (*a)->set_owner_driven(true);
  auto apd = std::move(*(*a)->alloc_pd());
  auto bpd = std::move(*(*b)->alloc_pd());
  auto acq = std::move(*(*a)->create_cq(64));
  auto bcq = std::move(*(*b)->create_cq(64));
  std::vector<uint8_t> abuf(256, 7), bbuf(2 * 256);
  auto amr = std::move(*apd->reg_mr(abuf.data(), abuf.size(), 0));
  auto bmr = std::move(*bpd->reg_mr(bbuf.data(), bbuf.size(),
                                    kAccessLocalWrite | kAccessRemoteWrite));
  std::unique_ptr<QueuePair> aq[2], bq[2];
  for (int i = 0; i < 2; ++i) {
    QpConfig cfg;
    cfg.type = QpType::kUC;
    cfg.pd = apd.get();
    cfg.send_cq = cfg.recv_cq = acq.get();
    cfg.low_priority = first_low && i == 0;
    aq[i] = std::move(*(*a)->create_qp(cfg));
    cfg.pd = bpd.get();
    cfg.send_cq = cfg.recv_cq = bcq.get();
    cfg.low_priority = false;
    bq[i] = std::move(*(*b)->create_qp(cfg));
    EXPECT_TRUE(aq[i]->connect(bq[i]->local_info()).ok());
    EXPECT_TRUE(bq[i]->connect(aq[i]->local_info()).ok());
    Sge rs{reinterpret_cast<uint64_t>(bbuf.data()) + i * 256, 256, bmr->lkey()};
    RecvWr rw;
    rw.wr_id = static_cast<uint64_t>(i);
    rw.sg_list = &rs;
    rw.num_sge = 1;
    EXPECT_TRUE(bq[i]->post_recv(&rw, nullptr).ok());
  }
  for (int i = 0; i < 2; ++i) {
    Sge ss{reinterpret_cast<uint64_t>(abuf.data()), 256, amr->lkey()};
    SendWr sw;
    sw.wr_id = static_cast<uint64_t>(i);
    sw.opcode = WrOpcode::kSend;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    EXPECT_TRUE(aq[i]->post_send(&sw, nullptr).ok());
  }
  // Owner-driven: polling A's CQ (and A's progress) transmits nothing.
  WorkCompletion wc[8];
  for (int k = 0; k < 50; ++k) {
    EXPECT_EQ(acq->poll(8, wc), 0);
    (*a)->progress();
    EXPECT_EQ(bcq->poll(8, wc), 0);
  }
  EXPECT_EQ(counter(**b, "rx_packets"), 0);
  (*a)->flush();                   // the doorbell: both leave now, in one round
  EXPECT_EQ(acq->poll(8, wc), 2);  // UC sends complete once sent
  uint64_t deadline = monotonic_ns() + 10'000'000'000ull;
  while (order.size() < 2 && monotonic_ns() < deadline) {
    int n = bcq->poll(8, wc);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(wc[i].status, WcStatus::kSuccess);
      order.push_back(wc[i].qp_num == bq[0]->qpn() ? 0 : 1);
    }
  }
  return order;
}

TEST(OwnerDrivenTest, PollsTransmitNothingAndFlushSendsInPostOrder) {
  EXPECT_EQ(arrival_order(false), (std::vector<int>{0, 1}));
}

TEST(OwnerDrivenTest, LowPriorityQpSendsAfterNormalOnes) {
  EXPECT_EQ(arrival_order(true), (std::vector<int>{1, 0}));
}

// A received packet the fault injector holds back (delay line) is handled
// when the device progresses, never from inside a transmit. Before the fix
// (6854a71) a transmit released every due held packet, so an RC ACK could
// be handled inside a QP's transmit and retire the WR being resent.
TEST(OwnerDrivenTest, HeldReceivedPacketWaitsForProgressNotTransmit) {
  DeviceOptions bo = Side::no_faults();
  bo.faults.rx = *FaultSpec::parse("delay=1:2000");  // every packet, 2 ms
  bo.faults.seed = 3;
  auto a = Side::make(QpType::kUC, 4096);
  auto b = Side::make(QpType::kUC, 4096, bo);
  ASSERT_TRUE(a && b);
  b->dev->set_owner_driven(true);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(b->post_recv(1, 0, 256).ok());
  ASSERT_TRUE(a->post_recv(2, 0, 256).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 1, 0, 100).ok());
  // B takes A's packet into its delay line (A's polls transmit it).
  const uint64_t deadline = monotonic_ns() + 10'000'000'000ull;
  while (counter(*b->dev, "rx_packets") < 1) {
    ASSERT_LT(monotonic_ns(), deadline) << "A's packet never reached B";
    a->poll();
    b->dev->progress();
  }
  b->poll();
  ASSERT_TRUE(b->recv_wcs.empty()) << "delivered before its 2 ms delay";
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // now due
  // B transmits: its due received packet must stay held.
  ASSERT_TRUE(b->post_send(WrOpcode::kSend, 7, 0, 50).ok());
  b->dev->flush();
  b->poll();
  EXPECT_TRUE(b->recv_wcs.empty()) << "a held packet was handled by flush()";
  EXPECT_EQ(b->send_wcs.size(), 1u);  // the send itself went
  b->dev->progress();                 // here it is handled
  b->poll();
  ASSERT_EQ(b->recv_wcs.size(), 1u);
  EXPECT_EQ(b->recv_wcs[0].wr_id, 1u);
  EXPECT_EQ(b->recv_wcs[0].byte_len, 100u);
}

// progress() and flush() report the datagrams they moved: the engine
// counts a loop that moved any as busy (engine/busy_meter.h).
TEST(OwnerDrivenTest, ProgressAndFlushCountDatagrams) {
  auto a = Side::make(QpType::kUC, 1 << 20);
  auto b = Side::make(QpType::kUC, 1 << 20);
  ASSERT_TRUE(a && b);
  a->dev->set_owner_driven(true);
  b->dev->set_owner_driven(true);
  connect_pair(a.get(), b.get());
  EXPECT_EQ(a->dev->flush(), 0u);                 // nothing posted
  EXPECT_EQ(b->dev->progress(), 0u);              // nothing sent
  const uint32_t len = 3 * mtu_of(a.get()) + 17;  // four datagrams
  ASSERT_LE(len, 1u << 20);
  ASSERT_TRUE(b->post_recv(1, 0, len).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 2, 0, len).ok());
  EXPECT_EQ(a->dev->flush(), 4u);
  EXPECT_EQ(a->dev->flush(), 0u);  // all of it went in the first
  // Loopback delivers inside the sender's syscall; bounded anyway.
  uint32_t got = 0;
  const uint64_t deadline = monotonic_ns() + 10'000'000'000ull;
  while (got < 4) {
    ASSERT_LT(monotonic_ns(), deadline) << "only " << got << " of 4 arrived";
    got += b->dev->progress();
  }
  EXPECT_EQ(got, 4u);
  b->poll();
  ASSERT_EQ(b->recv_wcs.size(), 1u);
  EXPECT_EQ(b->recv_wcs[0].byte_len, len);
  EXPECT_EQ(b->dev->progress(), 0u);
}

TEST(UcSemanticsTest, LostFragmentMeansNoCompletion) {
  auto a = Side::make(QpType::kUC, 1 << 20);
  auto b = Side::make(QpType::kUC, 1 << 20);
  connect_pair(a.get(), b.get());
  const uint32_t len = 4 * mtu_of(a.get()) + 100;  // five fragments
  FaultInjector* f = a->dev->fault_injector();
  f->set_spec(Direction::kTx, *FaultSpec::parse("drop=0.5"));
  ASSERT_TRUE(b->post_recv(1, 0, len).ok());
  int lost = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    uint64_t dropped_before = f->counters(Direction::kTx).dropped;
    size_t done_before = b->recv_wcs.size();
    ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, attempt, 0, len,
                             b->addr(), b->mr->rkey(), attempt)
                    .ok());
    ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
      return a->send_wcs.size() == size_t(attempt) + 1;
    }));
    // Every datagram that was not dropped has reached b.
    ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
      return udp_rx(b.get()) ==
             cnt(a.get()).tx_packets - f->counters(Direction::kTx).dropped;
    }));
    if (f->counters(Direction::kTx).dropped > dropped_before) {
      ++lost;
      EXPECT_EQ(b->recv_wcs.size(), done_before)
          << "UC completed a message that lost a fragment";
    } else {
      ASSERT_EQ(b->recv_wcs.size(), done_before + 1);
      ASSERT_TRUE(b->post_recv(1, 0, len).ok());
    }
  }
  EXPECT_GT(lost, 0);
  // Without faults the next message uses the receive that is still posted.
  f->set_spec(Direction::kTx, FaultSpec());
  size_t before = b->recv_wcs.size();
  fill_pattern(a->buf.data(), len, 9);
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 1000, 0, len, b->addr(),
                           b->mr->rkey(), 1000)
                  .ok());
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return b->recv_wcs.size() > before; }));
  EXPECT_EQ(b->recv_wcs.back().imm_data, 1000u);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), len, 9), -1);
}

// ------------------------------------------------------------ RNR / errors

}  // namespace
}  // namespace uccl::transport::testing
