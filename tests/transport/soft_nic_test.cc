// Software NIC in one process: every QP type x opcode at sizes 0 B .. 1 GiB
// byte-exact, UD/GRH, SRQ, RC recovery under loss/reorder/duplication, UC
// loss semantics, RNR, access errors, API misuse, owner-driven progress.
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
#include "transport/udp/netif.h"
#include "transport/udp/wire.h"
#include "util/pattern.h"

namespace uccl::transport::testing {
namespace {

uint32_t mtu_of(Side* s) {
  return static_cast<udp::SoftDevice*>(s->dev.get())->mtu();
}
const udp::SoftCounters& cnt(Side* s) {
  return static_cast<udp::SoftDevice*>(s->dev.get())->counters();
}
uint64_t udp_rx(Side* s) { return cnt(s).rx_packets; }

bool needs_recv(WrOpcode op) {
  return op == WrOpcode::kWriteWithImm || op == WrOpcode::kSend ||
         op == WrOpcode::kSendWithImm;
}

// Runs one transfer of `len` bytes from a to b (READ: b's data into a) and
// checks the bytes and completions.
void transfer_once(Side* a, Side* b, WrOpcode op, uint32_t len, uint64_t seed) {
  SCOPED_TRACE(std::string(wr_opcode_name(op)) + " len=" + std::to_string(len));
  a->send_wcs.clear();
  b->recv_wcs.clear();
  Side* src = op == WrOpcode::kRead ? b : a;
  Side* dst = op == WrOpcode::kRead ? a : b;
  fill_pattern(src->buf.data(), len, seed);
  std::memset(dst->buf.data(), 0, std::min<size_t>(dst->buf.size(), len + 64));
  if (needs_recv(op)) {
    ASSERT_TRUE(b->post_recv(7, 0, len).ok());
  }
  uint64_t b_rx_before = udp_rx(b);
  ASSERT_TRUE(
      a->post_send(op, 42, 0, len, b->addr(), b->mr->rkey(), 0xabcd1234).ok());
  ASSERT_TRUE(drive({a, b}, [&] { return !a->send_wcs.empty(); }))
      << "no send completion";
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kSuccess)
      << wc_status_name(a->send_wcs[0].status);
  EXPECT_EQ(a->send_wcs[0].wr_id, 42u);
  if (needs_recv(op)) {
    ASSERT_TRUE(drive({a, b}, [&] { return !b->recv_wcs.empty(); }))
        << "no receive completion";
    const WorkCompletion& wc = b->recv_wcs[0];
    EXPECT_EQ(wc.status, WcStatus::kSuccess);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.byte_len, len);
    EXPECT_EQ(wc.opcode, op == WrOpcode::kWriteWithImm ? WcOpcode::kRecvWriteImm
                                                       : WcOpcode::kRecv);
    EXPECT_EQ(wc.with_imm, op != WrOpcode::kSend);
    if (wc.with_imm) {
      EXPECT_EQ(wc.imm_data, 0xabcd1234u);
    }
    EXPECT_GT(wc.timestamp_ns, 0u);
  } else if (op == WrOpcode::kWrite && a->qp->type() == QpType::kUC) {
    // UC WRITE has no remote completion: wait for every packet to arrive.
    uint64_t want =
        b_rx_before + std::max<uint64_t>(1, (len + mtu_of(a) - 1) / mtu_of(a));
    ASSERT_TRUE(drive({a, b}, [&] { return udp_rx(b) >= want; }));
  }
  EXPECT_EQ(find_pattern_mismatch(dst->buf.data(), len, seed), -1);
}

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

// ------------------------------------------------------------ reliability

DeviceOptions with_faults(const std::string& tx, const std::string& rx,
                          uint64_t seed) {
  DeviceOptions o = Side::no_faults();
  o.faults.tx = *FaultSpec::parse(tx);
  o.faults.rx = *FaultSpec::parse(rx);
  o.faults.seed = seed;
  return o;
}

TEST(RcReliabilityTest, InOrderAndIntactUnderLossReorderDuplication) {
  const std::string faults = "drop=0.05,reorder=0.05:3,dup=0.05,corrupt=0.01";
  QpConfig cfg;
  cfg.rc.timeout = 8;  // ~1 ms retransmit timer
  cfg.max_send_wr = 512;
  cfg.max_recv_wr = 512;
  auto a =
      Side::make(QpType::kRC, 8 << 20, with_faults(faults, faults, 11), cfg);
  auto b =
      Side::make(QpType::kRC, 8 << 20, with_faults(faults, faults, 12), cfg);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  // 300 SENDs of varied sizes (0 .. 3 fragments), 64 slots reused in turn.
  const int kMsgs = 300;
  const uint32_t kSlot = 3 * mtu_of(a.get()) / 2 + 1000;
  ASSERT_LE(64ull * kSlot, a->buf.size());
  for (int i = 0; i < kMsgs; ++i) {
    ASSERT_TRUE(b->post_recv(i, (i % 64) * uint64_t{kSlot}, kSlot).ok());
  }
  int posted = 0, checked = 0;
  auto len_of = [&](int i) {
    return static_cast<uint32_t>((i * 7919) % kSlot);
  };
  auto off_of = [&](int i) { return (i % 64) * uint64_t{kSlot}; };
  bool ok = drive(
      {a.get(), b.get()},
      [&] {
        // Keep up to 8 messages in flight; each from its own source offset.
        while (posted < kMsgs && posted - checked < 8) {
          fill_pattern(a->buf.data() + off_of(posted), len_of(posted), posted);
          EXPECT_TRUE(a->post_send(WrOpcode::kSendWithImm, posted,
                                   off_of(posted), len_of(posted), 0, 0, posted)
                          .ok());
          ++posted;
        }
        while (checked < static_cast<int>(b->recv_wcs.size())) {
          const WorkCompletion& wc = b->recv_wcs[checked];
          EXPECT_EQ(wc.status, WcStatus::kSuccess);
          EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(checked)) << "out of order";
          EXPECT_EQ(wc.imm_data, static_cast<uint32_t>(checked));
          EXPECT_EQ(wc.byte_len, len_of(checked));
          EXPECT_EQ(find_pattern_mismatch(b->buf.data() + off_of(checked),
                                          len_of(checked), checked),
                    -1)
              << "message " << checked;
          ++checked;
        }
        return checked == kMsgs && a->send_wcs.size() == kMsgs;
      },
      120000);
  ASSERT_TRUE(ok) << "posted " << posted << " checked " << checked << "\nA:\n"
                  << a->dev->counters_text() << "\nB:\n"
                  << b->dev->counters_text();
  for (int i = 0; i < kMsgs; ++i) {
    EXPECT_EQ(a->send_wcs[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(a->send_wcs[i].status, WcStatus::kSuccess);
  }
  // The faults really happened and were repaired.
  EXPECT_GT(counter(*a->dev, "fault_tx_dropped"), 0);
  EXPECT_GT(counter(*b->dev, "fault_rx_duplicated"), 0);
  EXPECT_GT(counter(*a->dev, "rc_retransmits"), 0);
  EXPECT_GT(counter(*b->dev, "drop_bad_crc") + counter(*a->dev, "drop_bad_crc"),
            0);
}

TEST(RcReliabilityTest, LargeWritesAndReadsUnderLoss) {
  const std::string faults = "drop=0.05,reorder=0.02:4,dup=0.02";
  QpConfig cfg;
  cfg.rc.timeout = 8;
  auto a = Side::make(QpType::kRC, 4 << 20, with_faults(faults, "", 3), cfg);
  auto b = Side::make(QpType::kRC, 4 << 20, with_faults(faults, "", 4), cfg);
  connect_pair(a.get(), b.get());
  for (int round = 0; round < 4; ++round) {
    transfer_once(a.get(), b.get(), WrOpcode::kWrite, 4 << 20, 100 + round);
    transfer_once(a.get(), b.get(), WrOpcode::kRead, 4 << 20, 200 + round);
    if (HasFatalFailure()) return;
  }
}

// Two connected RC sides with 64 KiB buffers on `clock` (time moves only
// when the test moves it), the QP timeout attribute `timeout`, 3 retries.
std::pair<std::unique_ptr<Side>, std::unique_ptr<Side>> clocked_rc_pair(
    ManualClock* clock, uint8_t timeout) {
  DeviceOptions o = Side::no_faults();
  o.clock = clock;
  QpConfig cfg;
  cfg.rc.timeout = timeout;
  cfg.rc.retry_cnt = 3;
  auto a = Side::make(QpType::kRC, 1 << 16, o, cfg);
  auto b = Side::make(QpType::kRC, 1 << 16, o, cfg);
  connect_pair(a.get(), b.get());
  return {std::move(a), std::move(b)};
}

// An ACK that covers a READ's PSN (here: the WRITE posted after it) says the
// responder saw the request, not that its response arrived. The READ whose
// response was lost must still be asked again after one timeout, and the
// WRITE, already acknowledged, completes right after it without another.
// Time moves only when the test moves it.
TEST(RcReliabilityTest, ReadIsRetriedAfterALaterWriteIsAcked) {
  ManualClock clock;
  auto sides = clocked_rc_pair(&clock, 6);  // ~262 us
  auto& a = sides.first;
  auto& b = sides.second;
  const uint32_t len = 8000;
  fill_pattern(b->buf.data(), len, 5);
  fill_pattern(a->buf.data() + 32768, 100, 6);
  // b's READ response is lost.
  FaultInjector* fb = b->dev->fault_injector();
  fb->set_spec(Direction::kTx, *FaultSpec::parse("drop=1"));
  ASSERT_TRUE(
      a->post_send(WrOpcode::kRead, 1, 0, len, b->addr(), b->mr->rkey()).ok());
  ASSERT_TRUE(drive({a.get(), b.get()},
                    [&] { return fb->counters(Direction::kTx).dropped >= 1; }));
  fb->set_spec(Direction::kTx, FaultSpec());
  // The WRITE after it is acknowledged at once, PSN past the READ's.
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 2, 32768, 100, b->addr(32768),
                           b->mr->rkey())
                  .ok());
  ASSERT_TRUE(drive({a.get(), b.get()},
                    [&] { return cnt(a.get()).acks_received >= 1; }));
  EXPECT_TRUE(a->send_wcs.empty()) << "completed before the READ's data";
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u);
  clock.advance_ns(1000000);  // past one timeout, short of a second
  ASSERT_TRUE(drive(
      {a.get(), b.get()}, [&] { return a->send_wcs.size() == 2; }, 5000));
  EXPECT_EQ(a->send_wcs[0].wr_id, 1u);
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kSuccess)
      << wc_status_name(a->send_wcs[0].status);
  EXPECT_EQ(a->send_wcs[1].wr_id, 2u);
  EXPECT_EQ(a->send_wcs[1].status, WcStatus::kSuccess)
      << wc_status_name(a->send_wcs[1].status);
  EXPECT_EQ(find_pattern_mismatch(a->buf.data(), len, 5), -1);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data() + 32768, 100, 6), -1);
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 1u);
}

// The retransmission timeout follows the measured RTT once there is one
// (srtt + 4 rttvar, at least UCCL_SOFTNIC_RC_MIN_TIMEOUT_US, 200 us), not
// the configured verbs timeout (here ~67 ms), so a lost packet that nothing
// follows is resent after a fraction of a millisecond. Before any sample
// the configured timeout rules. Time moves only when the test moves it.
TEST(RcReliabilityTest, TimeoutFollowsMeasuredRtt) {
  ManualClock clock;
  auto sides = clocked_rc_pair(&clock, 14);  // ~67 ms
  auto& a = sides.first;
  auto& b = sides.second;
  FaultInjector* fa = a->dev->fault_injector();
  // Posts a WRITE whose only packet is dropped, and lets the NIC send it.
  auto post_lost_write = [&](uint64_t wr_id, uint64_t off) {
    fa->set_spec(Direction::kTx, *FaultSpec::parse("drop=1"));
    fill_pattern(a->buf.data() + off, 1000, static_cast<uint32_t>(wr_id));
    ASSERT_TRUE(a->post_send(WrOpcode::kWrite, wr_id, off, 1000, b->addr(off),
                             b->mr->rkey())
                    .ok());
    ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
      return fa->counters(Direction::kTx).dropped >= wr_id;
    }));
    fa->set_spec(Direction::kTx, FaultSpec());
  };
  // Polls both sides a while at the current (frozen) time.
  auto settle = [&] {
    for (int i = 0; i < 200; ++i) {
      a->poll();
      b->poll();
    }
  };

  // No RTT measured yet: 250 us is far short of the configured timeout.
  post_lost_write(1, 0);
  clock.advance_ns(250000);
  settle();
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u);
  clock.advance_ns(70000000);  // past ~67 ms
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 1; }));
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 1u);

  // Eight WRITEs each acknowledged 50 us after it left.
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 10 + i, 4096, 100, b->addr(4096),
                             b->mr->rkey())
                    .ok());
    a->poll();  // transmits at the current time
    clock.advance_ns(50000);
    ASSERT_TRUE(
        drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 2 + i; }));
  }

  // Now a lost WRITE is resent after the 200 us floor, not after ~67 ms.
  post_lost_write(2, 8192);
  clock.advance_ns(150000);
  settle();
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 1u) << "resent before the floor";
  clock.advance_ns(100000);  // 250 us after it left
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 10; }));
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 2u);
  for (const auto& wc : a->send_wcs) {
    EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  }
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 1000, 1), -1);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data() + 8192, 1000, 2), -1);
}

// A path whose RTT nears the configured timeout (a queue behind a shaped
// link): the timeout follows the measured RTT upward too, so a packet is
// not resent while its acknowledgement is merely queued. Acks 0.9 ms after
// each send against ~1 ms configured give srtt + 4 rttvar of ~1.66 ms;
// before, the timeout stopped at the configured 1 ms and an ack 1.5 ms
// late was preceded by a go-back-N resend. Time moves only when the test
// moves it.
TEST(RcReliabilityTest, TimeoutFollowsASlowPathAboveTheConfiguredOne) {
  ManualClock clock;
  auto sides = clocked_rc_pair(&clock, 8);  // 4096 << 8 ns: ~1 ms
  auto& a = sides.first;
  auto& b = sides.second;
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(
        a->post_send(WrOpcode::kWrite, 1 + i, 0, 100, b->addr(), b->mr->rkey())
            .ok());
    a->poll();  // transmits at the current time
    clock.advance_ns(900000);
    ASSERT_TRUE(
        drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 1 + i; }));
  }
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u);
  // A send acknowledged 1.5 ms after it left: nothing is resent.
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 20, 0, 100, b->addr(), b->mr->rkey())
          .ok());
  a->poll();
  for (int step = 0; step < 14; ++step) {  // 1.4 ms, the sender polling
    clock.advance_ns(100000);
    a->poll();
  }
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u) << "resent at the configured ~1 ms";
  clock.advance_ns(100000);
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 5; }));
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u);
  for (const auto& wc : a->send_wcs) {
    EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  }
}

// progress() runs the RC timers only of QPs with sends outstanding: an idle
// QP costs nothing per call (an engine has one per connection, and used to
// visit them all each loop). A send after a long idle spell times out from
// when it was posted, not from the last time the queue was looked at.
// Time moves only when the test moves it.
TEST(RcReliabilityTest, IdleQpsRunNoTimers) {
  ManualClock clock;
  auto sides = clocked_rc_pair(&clock, 14);  // ~67 ms
  auto& a = sides.first;
  auto& b = sides.second;
  fill_pattern(a->buf.data(), 1000, 1);
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 1, 0, 1000, b->addr(), b->mr->rkey())
          .ok());
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 1; }));
  const uint64_t checks = cnt(a.get()).rc_timer_checks;
  EXPECT_GT(checks, 0u) << "the WRITE's timer ran while it was outstanding";
  for (int i = 0; i < 500; ++i) {
    a->poll();
    b->poll();
  }
  EXPECT_EQ(cnt(a.get()).rc_timer_checks, checks) << "idle QP's timer ran";
  EXPECT_EQ(cnt(b.get()).rc_timer_checks, 0u) << "b never sent";

  // Ten idle seconds, then a WRITE whose only packet is lost.
  clock.advance_ns(10000000000ull);
  FaultInjector* fa = a->dev->fault_injector();
  fa->set_spec(Direction::kTx, *FaultSpec::parse("drop=1"));
  fill_pattern(a->buf.data() + 4096, 1000, 2);
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 2, 4096, 1000, b->addr(4096),
                           b->mr->rkey())
                  .ok());
  // Sent at once, as an engine's flush() sends what it posted, so no timer
  // ran between the post and the packet.
  a->dev->flush();
  ASSERT_EQ(fa->counters(Direction::kTx).dropped, 1u);
  fa->set_spec(Direction::kTx, FaultSpec());
  for (int i = 0; i < 200; ++i) {
    a->poll();
    b->poll();
  }
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u) << "timed out from a stale time";
  EXPECT_GT(cnt(a.get()).rc_timer_checks, checks);
  clock.advance_ns(70000000);  // past ~67 ms
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 2; }));
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 1u);
  EXPECT_EQ(a->send_wcs[1].status, WcStatus::kSuccess)
      << wc_status_name(a->send_wcs[1].status);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 1000, 1), -1);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data() + 4096, 1000, 2), -1);
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

TEST(RcErrorsTest, RnrRetriesUntilReceiveIsPosted) {
  QpConfig cfg;
  cfg.rc.min_rnr_timer = 1;  // 10 us
  auto a = Side::make(QpType::kRC, 4096, Side::no_faults(), cfg);
  auto b = Side::make(QpType::kRC, 4096, Side::no_faults(), cfg);
  connect_pair(a.get(), b.get());
  fill_pattern(a->buf.data(), 500, 3);
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 1, 0, 500).ok());
  ASSERT_TRUE(drive({a.get(), b.get()},
                    [&] { return counter(*b->dev, "rnr_naks_sent") >= 3; }));
  EXPECT_TRUE(a->send_wcs.empty());
  ASSERT_TRUE(b->post_recv(9, 0, 4096).ok());
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
    return !a->send_wcs.empty() && !b->recv_wcs.empty();
  }));
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(b->recv_wcs[0].byte_len, 500u);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 500, 3), -1);
}

TEST(RcErrorsTest, RnrRetryLimitFailsTheSend) {
  QpConfig cfg;
  cfg.rc.min_rnr_timer = 1;
  cfg.rc.rnr_retry = 2;
  auto a = Side::make(QpType::kRC, 4096, Side::no_faults(), cfg);
  auto b = Side::make(QpType::kRC, 4096, Side::no_faults(), cfg);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 1, 0, 100).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 2, 0, 100).ok());
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 2; }));
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kRnrRetryExceeded);
  EXPECT_EQ(a->send_wcs[1].status, WcStatus::kWrFlushError);
  EXPECT_EQ(a->qp->state(), QpState::kError);
}

TEST(RcErrorsTest, RemoteAccessErrorCompletesWithErrorAndFlushes) {
  auto a = Side::make(QpType::kRC, 8192);
  auto b = Side::make(QpType::kRC, 8192);
  connect_pair(a.get(), b.get());
  // Past the end of b's region.
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 1, 0, 4096, b->addr(4097), b->mr->rkey())
          .ok());
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 2, 0, 16, b->addr(), b->mr->rkey()).ok());
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return a->send_wcs.size() == 2; }));
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(a->send_wcs[1].status, WcStatus::kWrFlushError);
  EXPECT_EQ(counter(*b->dev, "drop_out_of_bounds"), 1);
  EXPECT_EQ(a->qp->state(), QpState::kError);
  // Posting to a QP in error is refused with a clear message.
  Status st =
      a->post_send(WrOpcode::kWrite, 3, 0, 16, b->addr(), b->mr->rkey());
  EXPECT_NE(st.message().find("ERROR"), std::string::npos) << st;
}

TEST(RcErrorsTest, SendLargerThanReceiveFailsBothSides) {
  auto a = Side::make(QpType::kRC, 8192);
  auto b = Side::make(QpType::kRC, 8192);
  connect_pair(a.get(), b.get());
  ASSERT_TRUE(b->post_recv(5, 0, 100).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 1, 0, 101).ok());
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
    return !a->send_wcs.empty() && !b->recv_wcs.empty();
  }));
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kRemoteInvalidRequest);
  EXPECT_EQ(b->recv_wcs[0].status, WcStatus::kLocalLengthError);
  EXPECT_EQ(b->recv_wcs[0].wr_id, 5u);
}

TEST(RcErrorsTest, DeadPeerGivesRetryExceeded) {
  QpConfig cfg;
  cfg.rc.timeout = 6;  // ~262 us
  cfg.rc.retry_cnt = 3;
  auto a = Side::make(QpType::kRC, 8192, Side::no_faults(), cfg);
  auto b = Side::make(QpType::kRC, 8192, Side::no_faults(), cfg);
  connect_pair(a.get(), b.get());
  b.reset();  // peer gone
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 1, 0, 100, 0x1000, 1).ok());
  ASSERT_TRUE(drive(
      {a.get()}, [&] { return !a->send_wcs.empty(); }, 5000));
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kRetryExceeded);
}

// With an RTT sample the retransmissions come every ~200 us, doubling, so
// retry_cnt of them pass in ~3 ms; the QP still waits out retry_cnt + 1
// configured timeouts of silence before it fails, as verbs would (before
// the fix it failed after ~3 ms).
TEST(RcErrorsTest, DeadPeerFailsNoSoonerThanTheConfiguredTimeouts) {
  QpConfig cfg;
  cfg.rc.timeout = 10;  // 4.096 us << 10: ~4.2 ms
  cfg.rc.retry_cnt = 3;
  const uint64_t budget_ns = (4096ull << 10) * 4;
  auto a = Side::make(QpType::kRC, 8192, Side::no_faults(), cfg);
  auto b = Side::make(QpType::kRC, 8192, Side::no_faults(), cfg);
  connect_pair(a.get(), b.get());
  transfer_once(a.get(), b.get(), WrOpcode::kWrite, 1000, 3);  // RTT sample
  a->send_wcs.clear();
  b.reset();  // peer gone
  const uint64_t t0 = monotonic_ns();
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 1, 0, 100, 0x1000, 1).ok());
  ASSERT_TRUE(drive(
      {a.get()}, [&] { return !a->send_wcs.empty(); }, 10000));
  const uint64_t took_ns = monotonic_ns() - t0;
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kRetryExceeded);
  EXPECT_GE(took_ns, budget_ns);
}

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
