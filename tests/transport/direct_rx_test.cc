// Direct receive placement in the software NIC (UCCL_SOFTNIC_DIRECT_RX_BYTES):
// large WRITEs land intact, and a corrupted copy never overwrites bytes that
// may already be there intact (stale PSNs, kFlagRetransmit) or outside a
// region.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "tests/transport/nic_test_util.h"
#include "transport/udp/soft_nic.h"
#include "transport/udp/wire.h"
#include "util/crc32c.h"
#include "util/pattern.h"

namespace uccl::transport::testing {
namespace {

using udp::WireHeader;

DeviceOptions direct_opts(int64_t min_bytes) {
  DeviceOptions o = Side::no_faults();
  o.backend_params = "direct_rx_bytes=" + std::to_string(min_bytes);
  return o;
}

const udp::SoftCounters& cnt(Side* s) {
  return static_cast<udp::SoftDevice*>(s->dev.get())->counters();
}

// ------------------------------------------------------- real QP pairs

class DirectPairTest : public ::testing::TestWithParam<QpType> {};

TEST_P(DirectPairTest, LargeWritesLandDirectlyAndIntact) {
  auto a = Side::make(GetParam(), 4 << 20, direct_opts(16384));
  auto b = Side::make(GetParam(), 4 << 20, direct_opts(16384));
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  const uint32_t mtu = static_cast<udp::SoftDevice*>(b->dev.get())->mtu();
  ASSERT_GE(mtu, 32768u) << "loopback MTU expected";
  const uint32_t len = 1 << 20;
  const uint32_t full = len / mtu;  // fragments of a full MTU
  for (int i = 0; i < 3; ++i) {
    fill_pattern(a->buf.data(), len, 10 + i);
    ASSERT_TRUE(b->post_recv(i, 0, 0).ok());
    const uint64_t direct_before = cnt(b.get()).rx_direct;
    ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, i, 0, len,
                             b->addr(i * 64), b->mr->rkey(), i)
                    .ok());
    ASSERT_TRUE(drive({a.get(), b.get()},
                      [&] { return b->recv_wcs.size() == size_t(i) + 1; }));
    EXPECT_EQ(b->recv_wcs.back().status, WcStatus::kSuccess);
    EXPECT_EQ(b->recv_wcs.back().imm_data, uint32_t(i));
    EXPECT_EQ(find_pattern_mismatch(b->buf.data() + i * 64, len, 10 + i), -1);
    // The first message's datagrams reach the batched receive (which then
    // turns direct placement on); every full fragment after it lands
    // directly, the short last one is staged.
    if (i > 0) {
      EXPECT_EQ(cnt(b.get()).rx_direct - direct_before, full);
    }
  }
  EXPECT_EQ(cnt(b.get()).drop_bad_crc, 0u);
}

TEST_P(DirectPairTest, OffMeansEveryDatagramIsStaged) {
  auto a = Side::make(GetParam(), 2 << 20, direct_opts(0));
  auto b = Side::make(GetParam(), 2 << 20, direct_opts(0));
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  for (int i = 0; i < 3; ++i) {
    fill_pattern(a->buf.data(), 1 << 20, 20 + i);
    ASSERT_TRUE(b->post_recv(i, 0, 0).ok());
    ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, i, 0, 1 << 20, b->addr(),
                             b->mr->rkey(), i)
                    .ok());
    ASSERT_TRUE(drive({a.get(), b.get()},
                      [&] { return b->recv_wcs.size() == size_t(i) + 1; }));
    EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 1 << 20, 20 + i), -1);
  }
  EXPECT_EQ(cnt(b.get()).rx_direct, 0u);
  EXPECT_GT(cnt(b.get()).rx_packets, 48u);
}

INSTANTIATE_TEST_SUITE_P(Qp, DirectPairTest,
                         ::testing::Values(QpType::kUC, QpType::kRC),
                         [](const auto& info) {
                           return std::string(qp_type_name(info.param));
                         });

// ------------------------------------------- crafted datagrams from a peer

// A receiving QP connected to a "peer" that is a plain UDP socket, so the
// test sends exactly the datagrams it wants: intact, corrupted in transit
// (payload changed, CRC of the original), stale or flagged.
class CraftedPeer {
 public:
  static constexpr uint32_t kPeerQpn = 0x4242;
  static constexpr uint32_t kFirstPsn = 100;
  // The registered region is [kGuard, kGuard + kRegion) of a larger buffer:
  // the bytes around it must never change.
  static constexpr size_t kGuard = 64 << 10;
  static constexpr size_t kRegion = 256 << 10;

  // `clock`: the device's clock (nullptr: the system's).
  explicit CraftedPeer(QpType type, Clock* clock = nullptr) {
    DeviceOptions o = direct_opts(16384);
    o.clock = clock;
    side_ = Side::make(type, 0, o);
    if (!side_) return;
    mem_.assign(kRegion + 2 * kGuard, 0xEE);
    auto mr = side_->pd->reg_mr(mem_.data() + kGuard, kRegion,
                                kAccessLocalWrite | kAccessRemoteWrite);
    EXPECT_TRUE(mr.ok()) << mr.status();
    if (!mr.ok()) return;
    mr_ = std::move(*mr);
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in me{};
    me.sin_family = AF_INET;
    me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
    socklen_t sl = sizeof(me);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&me), &sl);
    QpInfo peer = side_->qp->local_info();
    peer.addr.udp_port = ntohs(me.sin_port);
    peer.src_port = ntohs(me.sin_port);
    peer.qpn = kPeerQpn;
    peer.psn = kFirstPsn;
    EXPECT_TRUE(side_->qp->connect(peer).ok());
    to_.sin_family = AF_INET;
    to_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to_.sin_port =
        htons(static_cast<udp::SoftDevice*>(side_->dev.get())->udp_port());
    ok_ = true;
  }
  ~CraftedPeer() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }

  uint8_t* region() { return mem_.data() + kGuard; }
  uint64_t region_addr() { return reinterpret_cast<uint64_t>(region()); }
  const udp::SoftCounters& counters() { return cnt(side_.get()); }

  // Sends a one-fragment WRITE of pattern `seed` to `offset` of the region
  // (relative; may point outside it) and waits until the device took it.
  // `corrupt`: one payload byte flipped after the CRC was computed.
  void write(uint32_t psn, int64_t offset, uint32_t len, uint64_t seed,
             bool corrupt = false, uint8_t flags = 0, uint32_t rkey = 0) {
    std::vector<uint8_t> d(sizeof(WireHeader) + len);
    uint8_t* payload = d.data() + sizeof(WireHeader);
    fill_pattern(payload, len, seed);
    WireHeader h{};
    h.magic = udp::kWireMagic;
    h.version = udp::kWireVersion;
    h.opcode = static_cast<uint8_t>(udp::WireOp::kWrite);
    h.flags = udp::kFlagFirst | udp::kFlagLast | flags;
    h.qp_type = static_cast<uint8_t>(side_->qp->type());
    h.dst_qpn = side_->qp->local_info().qpn;
    h.src_qpn = kPeerQpn;
    h.psn = psn;
    h.msg_len = len;
    h.payload_len = len;
    h.remote_addr = region_addr() + offset;
    h.rkey = rkey ? rkey : mr_->rkey();
    h.hdr_crc = crc32c(0, &h, sizeof(h));
    h.payload_crc = crc32c(0, payload, len);
    std::memcpy(d.data(), &h, sizeof(h));
    if (corrupt) payload[len / 2] ^= 0x10;
    const uint64_t before = counters().rx_packets;
    ASSERT_EQ(sendto(fd_, d.data(), d.size(), 0,
                     reinterpret_cast<sockaddr*>(&to_), sizeof(to_)),
              static_cast<ssize_t>(d.size()));
    ASSERT_TRUE(drive(
        {side_.get()}, [&] { return counters().rx_packets == before + 1; },
        10000));
  }

  // Sends `n` datagrams of 16 bytes (too short for a header: counted as
  // malformed) and waits until the device took them.
  void small(int n) {
    const uint8_t junk[16] = {};
    for (int i = 0; i < n; ++i) {
      const uint64_t before = counters().rx_packets;
      ASSERT_EQ(sendto(fd_, junk, sizeof(junk), 0,
                       reinterpret_cast<sockaddr*>(&to_), sizeof(to_)),
                static_cast<ssize_t>(sizeof(junk)));
      ASSERT_TRUE(drive(
          {side_.get()}, [&] { return counters().rx_packets == before + 1; },
          10000));
    }
  }

  // True when the bytes around the region are as they were.
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (mem_[i] != 0xEE || mem_[kGuard + kRegion + i] != 0xEE) return false;
    }
    return true;
  }

 private:
  std::unique_ptr<Side> side_;
  std::vector<uint8_t> mem_;
  std::unique_ptr<MemoryRegion> mr_;
  int fd_ = -1;
  sockaddr_in to_{};
  bool ok_ = false;
};

constexpr uint32_t k32K = 32 << 10;

TEST(DirectCraftedTest, UcPlacesOnlyPsnsBeyondEverySeenOne) {
  CraftedPeer p(QpType::kUC);
  ASSERT_TRUE(p.ok());
  const uint32_t psn = CraftedPeer::kFirstPsn;
  // The first large WRITE comes through the batched receive and turns
  // direct placement on.
  p.write(psn, 0, k32K, 1);
  EXPECT_EQ(p.counters().rx_direct, 0u);
  p.write(psn + 1, 64 << 10, k32K, 2);
  EXPECT_EQ(p.counters().rx_direct, 1u);
  EXPECT_EQ(find_pattern_mismatch(p.region(), k32K, 1), -1);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (64 << 10), k32K, 2), -1);

  // A corrupted duplicate of PSN psn+1 (the network copied it): not beyond
  // the newest PSN, so verified first and dropped; the bytes stay.
  p.write(psn + 1, 64 << 10, k32K, 2, /*corrupt=*/true);
  EXPECT_EQ(p.counters().rx_direct, 1u);
  EXPECT_EQ(p.counters().drop_bad_crc, 1u);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (64 << 10), k32K, 2), -1);
  // An old PSN reordered behind newer ones: the same.
  p.write(psn + 3, 128 << 10, k32K, 3);
  EXPECT_EQ(p.counters().rx_direct, 2u);
  p.write(psn + 2, 0, k32K, 1, /*corrupt=*/true);
  EXPECT_EQ(p.counters().rx_direct, 2u);
  EXPECT_EQ(p.counters().drop_bad_crc, 2u);
  EXPECT_EQ(find_pattern_mismatch(p.region(), k32K, 1), -1);

  // A corrupted retransmission (new PSN, kFlagRetransmit) of bytes that
  // arrived: verified first, dropped, the bytes stay.
  p.write(psn + 4, 64 << 10, k32K, 2, /*corrupt=*/true, udp::kFlagRetransmit);
  EXPECT_EQ(p.counters().rx_direct, 2u);
  EXPECT_EQ(p.counters().drop_bad_crc, 3u);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (64 << 10), k32K, 2), -1);

  // Without the flag a new PSN is placed first and checked where it landed:
  // dropped all the same (no completion), its bytes undefined until the
  // retransmission, which lands intact.
  p.write(psn + 5, 192 << 10, k32K, 4, /*corrupt=*/true);
  EXPECT_EQ(p.counters().rx_direct, 3u);
  EXPECT_EQ(p.counters().drop_bad_crc, 4u);
  p.write(psn + 6, 192 << 10, k32K, 4, false, udp::kFlagRetransmit);
  EXPECT_EQ(p.counters().rx_direct, 3u);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (192 << 10), k32K, 4), -1);
  EXPECT_TRUE(p.guards_intact());
}

// Where data and small datagrams (ACKs, descriptors) share the socket, as
// with traffic both ways, direct placement stays on through runs of small
// ones; it goes back to batched receives only once no large datagram came
// for kDirectRxQuietNs (device clock) as well.
TEST(DirectCraftedTest, SmallDatagramsBetweenLargeOnesKeepDirectPlacement) {
  ManualClock clock(1000000000);
  CraftedPeer p(QpType::kUC, &clock);
  ASSERT_TRUE(p.ok());
  uint32_t psn = CraftedPeer::kFirstPsn;
  p.write(psn++, 0, k32K, 1);  // batched: turns direct placement on
  ASSERT_EQ(p.counters().rx_direct, 0u);
  // Twice the miss count of small datagrams, no time passing: still direct.
  p.small(32);
  clock.advance_ns(udp::SoftDevice::kDirectRxQuietNs / 2);
  p.write(psn++, 64 << 10, k32K, 2);
  EXPECT_EQ(p.counters().rx_direct, 1u);
  // Quiet for the whole interval, then small ones: batched again, so the
  // next large datagram is staged (and turns direct placement back on).
  clock.advance_ns(udp::SoftDevice::kDirectRxQuietNs);
  p.small(32);
  p.write(psn++, 128 << 10, k32K, 3);
  EXPECT_EQ(p.counters().rx_direct, 1u);
  p.write(psn++, 192 << 10, k32K, 4);
  EXPECT_EQ(p.counters().rx_direct, 2u);
  EXPECT_EQ(p.counters().drop_malformed, 64u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(find_pattern_mismatch(p.region() + (i << 16), k32K, 1 + i), -1);
  }
  EXPECT_TRUE(p.guards_intact());
}

TEST(DirectCraftedTest, RcPlacesOnlyTheExpectedPsn) {
  CraftedPeer p(QpType::kRC);
  ASSERT_TRUE(p.ok());
  const uint32_t psn = CraftedPeer::kFirstPsn;
  p.write(psn, 0, k32K, 1);  // batched: turns direct placement on
  p.write(psn + 1, 64 << 10, k32K, 2);
  EXPECT_EQ(p.counters().rx_direct, 1u);
  EXPECT_EQ(find_pattern_mismatch(p.region(), k32K, 1), -1);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (64 << 10), k32K, 2), -1);
  // A corrupted duplicate of an accepted PSN: counted, never placed.
  p.write(psn + 1, 64 << 10, k32K, 2, /*corrupt=*/true);
  EXPECT_EQ(p.counters().drop_duplicate, 1u);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (64 << 10), k32K, 2), -1);
  // Ahead of the expected PSN (one was lost): not placed.
  p.write(psn + 3, 128 << 10, k32K, 3, /*corrupt=*/true);
  EXPECT_EQ(p.counters().drop_out_of_sequence, 1u);
  EXPECT_EQ(p.counters().rx_direct, 1u);
  // The expected PSN, corrupted: placed, checked, not accepted; its resend
  // (go-back-N keeps the PSN) lands intact.
  p.write(psn + 2, 192 << 10, k32K, 5, /*corrupt=*/true);
  EXPECT_EQ(p.counters().rx_direct, 2u);
  EXPECT_EQ(p.counters().drop_bad_crc, 1u);
  p.write(psn + 2, 192 << 10, k32K, 5);
  EXPECT_EQ(p.counters().rx_direct, 3u);
  EXPECT_EQ(find_pattern_mismatch(p.region() + (192 << 10), k32K, 5), -1);
  EXPECT_TRUE(p.guards_intact());
}

TEST(DirectCraftedTest, BadKeysAndBoundsNeverTouchMemory) {
  for (QpType type : {QpType::kUC, QpType::kRC}) {
    SCOPED_TRACE(qp_type_name(type));
    CraftedPeer p(type);
    ASSERT_TRUE(p.ok());
    uint32_t psn = CraftedPeer::kFirstPsn;
    p.write(psn++, 0, k32K, 1);  // batched: turns direct placement on
    // Each rejected WRITE is an access error; RC stops at the first one
    // (the QP goes to the error state), UC drops and goes on.
    p.write(psn++, -4096, k32K, 7);  // starts before the region
    p.write(psn++, CraftedPeer::kRegion - 4096, k32K, 7);  // runs past it
    p.write(psn++, 0, k32K, 7, false, 0, /*rkey=*/0xdead);
    EXPECT_EQ(p.counters().rx_direct, 0u);
    EXPECT_TRUE(p.guards_intact());
    EXPECT_EQ(find_pattern_mismatch(p.region(), k32K, 1), -1);
    if (type == QpType::kUC) {
      EXPECT_EQ(p.counters().drop_out_of_bounds, 2u);
      EXPECT_EQ(p.counters().drop_bad_rkey, 1u);
    } else {
      EXPECT_EQ(p.counters().drop_out_of_bounds + p.counters().drop_wrong_state,
                3u);
    }
  }
}

}  // namespace
}  // namespace uccl::transport::testing
