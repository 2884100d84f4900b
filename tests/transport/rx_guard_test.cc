// The software NIC's receive guard (QpConfig::rx_guard): a UC WRITE_WITH_IMM
// the guard refuses places nothing, staged or about to be placed directly.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <vector>

#include "tests/transport/soft_nic_test_util.h"

namespace uccl::transport::testing {
namespace {

// Refuses the immediates in `refuse`; records what it was asked and told.
class TestGuard final : public RxGuard {
 public:
  bool admits(uint32_t qpn, const Fragment& f) const override {
    ++asked;
    asked_qpns.insert(qpn);
    asked_frags.push_back(f);
    return refuse.count(f.imm) == 0;
  }
  void refused(uint32_t qpn, const Fragment& f) override {
    refused_qpns.push_back(qpn);
    refused_imms.push_back(f.imm);
    refused_frags.push_back(f);
  }
  std::set<uint32_t> refuse;
  mutable int asked = 0;
  mutable std::set<uint32_t> asked_qpns;
  mutable std::vector<Fragment> asked_frags;
  std::vector<uint32_t> refused_qpns, refused_imms;
  std::vector<Fragment> refused_frags;
};

// Whether every fragment in `v` carried the tag `tag` (nullopt: none).
::testing::AssertionResult all_tagged(const std::vector<RxGuard::Fragment>& v,
                                      std::optional<uint32_t> tag) {
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k].tagged != tag.has_value() || (tag && v[k].tag != *tag)) {
      return ::testing::AssertionFailure()
             << "fragment " << k << " tagged " << v[k].tagged << " tag 0x"
             << std::hex << v[k].tag;
    }
  }
  return ::testing::AssertionSuccess();
}

DeviceOptions direct_opts(bool direct) {
  DeviceOptions o = Side::no_faults();
  o.backend_params = std::string("direct_rx_bytes=") + (direct ? "16384" : "0");
  return o;
}

// Param: direct placement on (a refused fragment is declined at the peek,
// before the kernel copies it anywhere) or off (refused when staged).
// a writes 1 MiB WRITE_WITH_IMMs to b, whose UC QP has `guard`.
class RxGuardTest : public ::testing::TestWithParam<bool> {
 protected:
  static constexpr uint32_t kLen = 1 << 20;
  void SetUp() override {
    QpConfig gq;
    gq.rx_guard = &guard;
    a = Side::make(QpType::kUC, 2 << 20, direct_opts(GetParam()));
    b = Side::make(QpType::kUC, 2 << 20, direct_opts(GetParam()), gq);
    ASSERT_TRUE(a && b);
    connect_pair(a.get(), b.get());
    frags = (kLen + mtu_of(a.get()) - 1) / mtu_of(a.get());
  }
  // One write of a's first kLen bytes, driven until it completed at a and
  // every datagram of it reached b; then b's completions polled.
  void write_imm(uint32_t imm, std::optional<uint32_t> tag = std::nullopt) {
    const size_t sent = a->send_wcs.size();
    ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, imm, 0, kLen, b->addr(),
                             b->mr->rkey(), imm, true, false, tag)
                    .ok());
    ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
      return a->send_wcs.size() == sent + 1 &&
             udp_rx(b.get()) == cnt(a.get()).tx_packets;
    }));
    b->poll();  // the completion of what the last progress placed
  }
  TestGuard guard;
  std::unique_ptr<Side> a, b;
  uint32_t frags = 0;
};

TEST_P(RxGuardTest, ARefusedWriteWithImmPlacesNothingAndIsCounted) {
  guard.refuse = {2};
  const uint32_t b_qpn = b->qp->local_info().qpn;
  const uint32_t len = kLen;
  ASSERT_GT(frags, 2u);  // several
  auto write = [&](uint32_t imm, uint32_t pattern) {
    fill_pattern(a->buf.data(), len, pattern);
    write_imm(imm);
  };
  // Admitted: placed, completed.
  ASSERT_TRUE(b->post_recv(1, 0, 0).ok());
  write(1, 31);
  ASSERT_EQ(b->recv_wcs.size(), 1u);
  EXPECT_EQ(b->recv_wcs[0].imm_data, 1u);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), len, 31), -1);
  EXPECT_GE(guard.asked, static_cast<int>(frags));
  EXPECT_EQ(guard.asked_qpns, std::set<uint32_t>{b_qpn});
  // Refused: the first fragment is refused, the rest of the message is
  // dropped unasked; nothing of it lands, nothing completes.
  const udp::SoftCounters before = cnt(b.get());
  ASSERT_TRUE(b->post_recv(2, 0, 0).ok());
  write(2, 32);
  EXPECT_EQ(b->recv_wcs.size(), 1u);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), len, 31), -1)
      << "a refused write landed";
  const udp::SoftCounters& after = cnt(b.get());
  EXPECT_EQ(after.drop_refused - before.drop_refused, 1u);
  EXPECT_EQ(after.drop_out_of_sequence - before.drop_out_of_sequence,
            frags - 1);
  EXPECT_EQ(after.rx_direct, before.rx_direct);
  EXPECT_EQ(guard.refused_imms, std::vector<uint32_t>{2});
  EXPECT_EQ(guard.refused_qpns, std::vector<uint32_t>{b_qpn});
  // The receive it did not take serves the next admitted write.
  write(3, 33);
  ASSERT_EQ(b->recv_wcs.size(), 2u);
  EXPECT_EQ(b->recv_wcs[1].imm_data, 3u);
  EXPECT_EQ(b->recv_wcs[1].wr_id, 2u);
  if (GetParam()) {  // direct placement was on for the refused one too
    EXPECT_GT(cnt(b.get()).rx_direct, before.rx_direct);
  }
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), len, 33), -1);
  EXPECT_EQ(cnt(b.get()).drop_bad_rkey, 0u);
}

// The guard sees the sender's tag (SendWr::guard_tag) with every fragment,
// asked at the peek or staged, and with a refusal; an untagged write says
// it has none, and a tag on another opcode does not travel.
TEST_P(RxGuardTest, TheSendersTagComesWithEveryFragment) {
  guard.refuse = {7};
  auto write = [&](uint32_t imm, std::optional<uint32_t> tag) {
    guard.asked_frags.clear();
    write_imm(imm, tag);
  };
  for (uint32_t r = 1; r <= 3; ++r) ASSERT_TRUE(b->post_recv(r, 0, 0).ok());
  write(5, 0xC0FFEE05u);
  EXPECT_GE(guard.asked_frags.size(), frags);
  EXPECT_TRUE(all_tagged(guard.asked_frags, 0xC0FFEE05u));
  write(6, std::nullopt);
  EXPECT_GE(guard.asked_frags.size(), frags);
  EXPECT_TRUE(all_tagged(guard.asked_frags, std::nullopt));
  write(7, 0xC0FFEE07u);
  ASSERT_EQ(guard.refused_frags.size(), 1u);
  EXPECT_TRUE(all_tagged(guard.refused_frags, 0xC0FFEE07u));
  ASSERT_EQ(b->recv_wcs.size(), 2u);  // the refused one did not complete
  EXPECT_EQ(b->recv_wcs[1].imm_data, 6u);
  // A plain WRITE is not asked, tagged or not.
  const int asked = guard.asked;
  ASSERT_TRUE(a->post_send(WrOpcode::kWrite, 8, 0, 4096, b->addr(),
                           b->mr->rkey(), 0, true, false, 0xC0FFEE08u)
                  .ok());
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] {
    return udp_rx(b.get()) == cnt(a.get()).tx_packets;
  }));
  EXPECT_EQ(guard.asked, asked);
}

INSTANTIATE_TEST_SUITE_P(Placement, RxGuardTest, ::testing::Values(false, true),
                         [](const auto& info) {
                           return info.param ? "Direct" : "Staged";
                         });

// Only WRITE_WITH_IMM names a chunk: plain WRITEs and SENDs are not asked.
TEST(RxGuardScopeTest, OtherOpcodesAreNotAsked) {
  TestGuard guard;
  guard.refuse = {0};
  QpConfig gq;
  gq.rx_guard = &guard;
  auto a = Side::make(QpType::kUC, 1 << 16);
  auto b = Side::make(QpType::kUC, 1 << 16, Side::no_faults(), gq);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  fill_pattern(a->buf.data(), 4096, 41);
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 1, 0, 4096, b->addr(), b->mr->rkey())
          .ok());
  ASSERT_TRUE(b->post_recv(2, 8192, 4096).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kSend, 2, 0, 4096).ok());
  ASSERT_TRUE(
      drive({a.get(), b.get()}, [&] { return b->recv_wcs.size() == 1; }));
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 4096, 41), -1);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data() + 8192, 4096, 41), -1);
  EXPECT_EQ(guard.asked, 0);
  EXPECT_EQ(cnt(b.get()).drop_refused, 0u);
}

// RC drops duplicates by PSN and must answer every request: no guard there.
TEST(RxGuardScopeTest, OnlyUcQpsTakeAGuard) {
  TestGuard guard;
  for (const char* dev : {"udp:lo", "null"}) {
    auto d = open_device(dev, Side::no_faults());
    ASSERT_TRUE(d.ok()) << d.status();
    auto pd = (*d)->alloc_pd();
    auto cq = (*d)->create_cq(64);
    ASSERT_TRUE(pd.ok() && cq.ok());
    for (QpType t : {QpType::kRC, QpType::kUD, QpType::kUC}) {
      QpConfig q;
      q.type = t;
      q.pd = pd->get();
      q.send_cq = q.recv_cq = cq->get();
      q.rx_guard = &guard;
      auto qp = (*d)->create_qp(q);
      if (t == QpType::kUC) {
        EXPECT_TRUE(qp.ok()) << dev << ": " << qp.status();
      } else {
        ASSERT_FALSE(qp.ok()) << dev;
        EXPECT_EQ(qp.status().code(), StatusCode::kInvalidArgument);
        EXPECT_NE(qp.status().message().find("UC QPs only"), std::string::npos)
            << qp.status();
      }
    }
  }
}

}  // namespace
}  // namespace uccl::transport::testing
