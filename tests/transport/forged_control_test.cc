// Forged datagrams against live software-NIC connections: NAKs and ACKs with
// PSNs outside the window, and datagrams from anyone but the connected peer,
// are dropped and counted and never change the QP's state.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "tests/transport/nic_test_util.h"
#include "transport/udp/soft_nic.h"
#include "transport/udp/wire.h"
#include "util/crc32c.h"
#include "util/knobs.h"
#include "util/pattern.h"

namespace uccl::transport::udp {
UCCL_DECLARE_KNOB(int64_t, knob_softnic_rc_min_timeout_us);
}  // namespace uccl::transport::udp

namespace uccl::transport::testing {
namespace {

using udp::AckSyndrome;
using udp::WireHeader;

const udp::SoftCounters& cnt(Side* s) {
  return static_cast<udp::SoftDevice*>(s->dev.get())->counters();
}

sockaddr_in device_addr(Side* s) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<udp::SoftDevice*>(s->dev.get())->udp_port());
  return a;
}

// Sends header `h` (CRCs filled in, no payload) from socket `fd` to `to`'s
// device and polls `to` until its device took it.
void inject(int fd, WireHeader h, Side* to) {
  h.magic = udp::kWireMagic;
  h.version = udp::kWireVersion;
  h.hdr_crc = 0;
  h.payload_crc = 0;
  h.hdr_crc = crc32c(0, &h, sizeof(h));
  const sockaddr_in dst = device_addr(to);
  const uint64_t before = cnt(to).rx_packets;
  ASSERT_EQ(sendto(fd, &h, sizeof(h), 0,
                   reinterpret_cast<const sockaddr*>(&dst), sizeof(dst)),
            static_cast<ssize_t>(sizeof(h)));
  ASSERT_TRUE(drive(
      {to}, [&] { return cnt(to).rx_packets > before; }, 10000));
}

// What the peer `from` would send `to` as an RC ACK/NAK: cumulative PSN
// `psn`, syndrome `syn` about PSN `about`.
WireHeader ack_header(Side* from, Side* to, uint32_t psn, AckSyndrome syn,
                      uint32_t about) {
  WireHeader h;
  std::memset(&h, 0, sizeof(h));
  h.qp_type = static_cast<uint8_t>(QpType::kRC);
  h.opcode = static_cast<uint8_t>(udp::WireOp::kAck);
  h.flags = udp::kFlagFirst | udp::kFlagLast;
  h.dst_qpn = to->qp->qpn();
  h.src_qpn = from->qp->qpn();
  h.psn = psn;
  h.aux = static_cast<uint32_t>(syn);
  h.aux2 = about;
  return h;
}

class ForgedNakTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = Side::make(QpType::kRC, kLen);
    b_ = Side::make(QpType::kRC, kLen);
    ASSERT_TRUE(a_ && b_);
    connect_pair(a_.get(), b_.get());
    stranger_ = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(stranger_, 0);
  }
  void TearDown() override {
    if (stranger_ >= 0) close(stranger_);
  }
  // Posts a WRITE of the whole buffer from a to b (not yet progressed past
  // a's first packets: b is not polled) and returns its first PSN.
  uint32_t post_write(uint64_t seed, uint64_t wr_id) {
    fill_pattern(a_->buf.data(), kLen, seed);
    const uint32_t psn = a_->qp->local_info().psn;
    EXPECT_TRUE(a_->post_send(WrOpcode::kWrite, wr_id, 0, kLen, b_->addr(),
                              b_->mr->rkey())
                    .ok());
    a_->poll();
    return psn;
  }
  // The peer's own socket: forged datagrams from it carry b's exact source.
  int spoofed_b() { return udp::SoftNicTestAccess::tx_fd(b_->qp.get()); }

  static constexpr uint32_t kLen = 1 << 20;
  std::unique_ptr<Side> a_, b_;
  int stranger_ = -1;
};

TEST_F(ForgedNakTest, FatalNaksOutsideTheWindowChangeNothing) {
  const uint32_t first = post_write(7, 1);
  // Copied from real traffic: the cumulative PSN is right, the PSN the NAK
  // is about is far from anything outstanding, and it comes from the peer's
  // own address and port.
  for (AckSyndrome syn :
       {AckSyndrome::kNakRemoteAccess, AckSyndrome::kNakInvalid,
        AckSyndrome::kNakSequence, AckSyndrome::kNakRnr}) {
    inject(spoofed_b(),
           ack_header(b_.get(), a_.get(), first - 1, syn, first + (1u << 22)),
           a_.get());
    ASSERT_EQ(a_->qp->state(), QpState::kRts)
        << "a NAK about nothing outstanding moved the QP";
  }
  // About a PSN already acknowledged (behind the window) as well.
  inject(spoofed_b(),
         ack_header(b_.get(), a_.get(), first - 1,
                    AckSyndrome::kNakRemoteAccess, first - 5),
         a_.get());
  EXPECT_EQ(a_->qp->state(), QpState::kRts);
  EXPECT_EQ(cnt(a_.get()).drop_stale_ack, 5u);
  EXPECT_TRUE(a_->send_wcs.empty());
  // The transfer still completes, byte-exact.
  ASSERT_TRUE(
      drive({a_.get(), b_.get()}, [&] { return !a_->send_wcs.empty(); }));
  EXPECT_EQ(a_->send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(find_pattern_mismatch(b_->buf.data(), kLen, 7), -1);
}

TEST_F(ForgedNakTest, NaksFromAnyoneButThePeerAreDropped) {
  const uint32_t first = post_write(8, 1);
  // In the window, but from another socket (same host, other port).
  inject(stranger_,
         ack_header(b_.get(), a_.get(), first - 1,
                    AckSyndrome::kNakRemoteAccess, first),
         a_.get());
  EXPECT_EQ(a_->qp->state(), QpState::kRts);
  EXPECT_EQ(cnt(a_.get()).drop_wrong_source, 1u);
  ASSERT_TRUE(
      drive({a_.get(), b_.get()}, [&] { return !a_->send_wcs.empty(); }));
  EXPECT_EQ(a_->send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(find_pattern_mismatch(b_->buf.data(), kLen, 8), -1);
}

// The control: the same NAK about a PSN that is outstanding, from the peer,
// still fails the request and the QP, as verbs does.
TEST_F(ForgedNakTest, APeersNakAboutAnOutstandingPsnStillCounts) {
  const uint32_t first = post_write(9, 1);
  inject(spoofed_b(),
         ack_header(b_.get(), a_.get(), first - 1,
                    AckSyndrome::kNakRemoteAccess, first),
         a_.get());
  EXPECT_EQ(a_->qp->state(), QpState::kError);
  ASSERT_TRUE(drive({a_.get()}, [&] { return !a_->send_wcs.empty(); }));
  EXPECT_EQ(a_->send_wcs[0].status, WcStatus::kRemoteAccessError);
}

// Go-back-N: a sequence NAK from the peer about an outstanding PSN resends
// from that PSN at once, with no timeout (the QP's timer is 4 s here, and
// at least 1 s once RTTs are measured).
TEST(GoBackNTest, SequenceNakResendsFromTheNakedPsnWithoutATimeout) {
  auto& min_timeout = udp::knob_softnic_rc_min_timeout_us();
  const int64_t old_min = min_timeout.get();
  min_timeout.set_for_testing(1000000);
  struct Restore {
    Knob<int64_t>& k;
    int64_t v;
    ~Restore() { k.set_for_testing(v); }
  } restore{min_timeout, old_min};
  QpConfig cfg;
  cfg.rc.timeout = 20;  // 4.096 us << 20: ~4.3 s, and no RTT sample yet
  auto a = Side::make(QpType::kRC, 1 << 20, Side::no_faults(), cfg);
  auto b = Side::make(QpType::kRC, 1 << 20);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  fill_pattern(a->buf.data(), 1 << 20, 12);
  const uint32_t first = a->qp->local_info().psn;
  ASSERT_TRUE(
      a->post_send(WrOpcode::kWrite, 1, 0, 1 << 20, b->addr(), b->mr->rkey())
          .ok());
  ASSERT_TRUE(drive({a.get()}, [&] { return cnt(a.get()).tx_packets >= 10; }));
  const uint64_t sent = cnt(a.get()).tx_packets;
  inject(udp::SoftNicTestAccess::tx_fd(b->qp.get()),
         ack_header(b.get(), a.get(), first + 4, AckSyndrome::kNakSequence,
                    first + 5),
         a.get());
  ASSERT_TRUE(drive(
      {a.get()}, [&] { return cnt(a.get()).rc_retransmits > 0; }, 2000))
      << "no resend after the NAK";
  EXPECT_EQ(cnt(a.get()).rc_timeouts, 0u);
  EXPECT_GE(cnt(a.get()).tx_packets, sent);
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] { return !a->send_wcs.empty(); }));
  EXPECT_EQ(a->send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 1 << 20, 12), -1);
}

// An ACK beyond anything sent acknowledges nothing.
TEST_F(ForgedNakTest, AckBeyondWhatWasSentIsIgnored) {
  const uint32_t first = post_write(10, 1);
  inject(
      spoofed_b(),
      ack_header(b_.get(), a_.get(), first + (1u << 20), AckSyndrome::kAck, 0),
      a_.get());
  a_->poll();
  EXPECT_TRUE(a_->send_wcs.empty()) << "a forged ACK completed the WRITE";
  ASSERT_TRUE(
      drive({a_.get(), b_.get()}, [&] { return !a_->send_wcs.empty(); }));
  EXPECT_EQ(find_pattern_mismatch(b_->buf.data(), kLen, 10), -1);
}

// UC: a datagram from a stranger, whatever its PSN, does not abort the
// message in progress (a UC QP resyncs to any PSN it accepts).
TEST(ForgedUcTest, StrangersCannotAbortAMessage) {
  auto a = Side::make(QpType::kUC, 1 << 20);
  auto b = Side::make(QpType::kUC, 1 << 20);
  ASSERT_TRUE(a && b);
  connect_pair(a.get(), b.get());
  int stranger = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(stranger, 0);
  fill_pattern(a->buf.data(), 1 << 20, 11);
  ASSERT_TRUE(b->post_recv(1, 0, 0).ok());
  ASSERT_TRUE(a->post_send(WrOpcode::kWriteWithImm, 1, 0, 1 << 20, b->addr(),
                           b->mr->rkey(), 5)
                  .ok());
  WireHeader h;
  std::memset(&h, 0, sizeof(h));
  h.qp_type = static_cast<uint8_t>(QpType::kUC);
  h.opcode = static_cast<uint8_t>(udp::WireOp::kWrite);
  h.flags = udp::kFlagFirst | udp::kFlagLast;
  h.dst_qpn = b->qp->qpn();
  h.src_qpn = a->qp->qpn();
  h.psn = 12345;
  h.remote_addr = b->addr();
  h.rkey = b->mr->rkey();
  // Interleaved with the real message's fragments.
  for (int i = 0; i < 4; ++i) {
    a->poll();
    inject(stranger, h, b.get());
  }
  ASSERT_TRUE(drive({a.get(), b.get()}, [&] { return !b->recv_wcs.empty(); }));
  EXPECT_EQ(b->recv_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(find_pattern_mismatch(b->buf.data(), 1 << 20, 11), -1);
  EXPECT_EQ(cnt(b.get()).drop_wrong_source, 4u);
  close(stranger);
}

// UD completions report the sender's address in the GRH (source GID and,
// in the flow label, its UDP port), which the engine checks ACKs against.
TEST(ForgedUdTest, GrhNamesTheSendersAddressAndPort) {
  auto rx = Side::make(QpType::kUD, 4096);
  ASSERT_TRUE(rx);
  ASSERT_TRUE(rx->qp->activate().ok());
  ASSERT_TRUE(rx->post_recv(1, 0, 4096).ok());
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
  socklen_t sl = sizeof(me);
  getsockname(s, reinterpret_cast<sockaddr*>(&me), &sl);
  WireHeader h;
  std::memset(&h, 0, sizeof(h));
  h.qp_type = static_cast<uint8_t>(QpType::kUD);
  h.opcode = static_cast<uint8_t>(udp::WireOp::kSend);
  h.flags = udp::kFlagFirst | udp::kFlagLast;
  h.dst_qpn = rx->qp->qpn();
  h.src_qpn = 77;
  h.aux = QpConfig().qkey;
  inject(s, h, rx.get());
  ASSERT_TRUE(drive({rx.get()}, [&] { return !rx->recv_wcs.empty(); }));
  const WorkCompletion& wc = rx->recv_wcs[0];
  EXPECT_EQ(wc.status, WcStatus::kSuccess);
  EXPECT_TRUE(wc.with_grh);
  EXPECT_EQ(wc.src_qp, 77u);
  uint8_t gid[16];
  ipv4_to_gid(htonl(INADDR_LOOPBACK), gid);
  EXPECT_EQ(std::memcmp(rx->buf.data() + 8, gid, 16), 0);
  EXPECT_EQ((rx->buf[2] << 8) | rx->buf[3], ntohs(me.sin_port));
  close(s);
}

}  // namespace
}  // namespace uccl::transport::testing
