// Hostile datagrams against the software NIC: garbage, truncation, bad CRCs,
// versions, QPNs, rkeys, bounds and a mutation fuzz. Guard pages and canary
// pages prove nothing is written outside the registered region.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "tests/transport/nic_test_util.h"
#include "transport/udp/soft_nic.h"
#include "transport/udp/wire.h"
#include "util/crc32c.h"
#include "util/pattern.h"

namespace uccl::transport::testing {
namespace {

using udp::WireHeader;

constexpr size_t kPage = 4096;

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // [guard][canary][region: 2 pages][canary][guard]
    map_ =
        static_cast<uint8_t*>(mmap(nullptr, 6 * kPage, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(map_, MAP_FAILED);
    ASSERT_EQ(mprotect(map_, kPage, PROT_NONE), 0);
    ASSERT_EQ(mprotect(map_ + 5 * kPage, kPage, PROT_NONE), 0);
    std::memset(map_ + kPage, 0xA5, 4 * kPage);
    region_ = map_ + 2 * kPage;
    rx_ = Side::make(QpType::kUC, 0);
    peer_ = Side::make(QpType::kUC, 2 * kPage);
    ASSERT_TRUE(rx_ && peer_);
    connect_pair(rx_.get(), peer_.get());
    auto mr = rx_->pd->reg_mr(region_, 2 * kPage,
                              kAccessLocalWrite | kAccessRemoteWrite);
    ASSERT_TRUE(mr.ok());
    mr_ = std::move(*mr);
    raw_ = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(raw_, 0);
    dst_.sin_family = AF_INET;
    dst_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    dst_.sin_port =
        htons(static_cast<udp::SoftDevice*>(rx_->dev.get())->udp_port());
  }

  void TearDown() override {
    mr_.reset();
    rx_.reset();
    peer_.reset();
    if (raw_ >= 0) close(raw_);
    if (map_ != MAP_FAILED) munmap(map_, 6 * kPage);
  }

  // A WRITE fragment from the real peer QP into the region, valid in every
  // field; tests then break one thing.
  WireHeader good_write(uint32_t len, uint64_t offset = 0) {
    WireHeader h;
    std::memset(&h, 0, sizeof(h));
    h.magic = udp::kWireMagic;
    h.version = udp::kWireVersion;
    h.opcode = static_cast<uint8_t>(udp::WireOp::kWrite);
    h.flags = udp::kFlagFirst | udp::kFlagLast;
    h.qp_type = static_cast<uint8_t>(QpType::kUC);
    h.dst_qpn = rx_->qp->qpn();
    h.src_qpn = peer_->qp->qpn();
    h.psn = next_psn_++;
    h.msg_len = len;
    h.payload_len = len;
    h.remote_addr = reinterpret_cast<uint64_t>(region_) + offset;
    h.rkey = mr_->rkey();
    return h;
  }

  // Sends from `from_` (the peer QP's own socket unless a test changes it:
  // the datagrams then carry the peer's exact source address and port, as
  // an attacker who can spoof it would send them).
  void send_raw(const void* p, size_t n) {
    const int fd =
        from_ >= 0 ? from_ : udp::SoftNicTestAccess::tx_fd(peer_->qp.get());
    ASSERT_EQ(
        sendto(fd, p, n, 0, reinterpret_cast<sockaddr*>(&dst_), sizeof(dst_)),
        static_cast<ssize_t>(n));
    ++sent_;
  }

  // Sends header + payload with correct CRCs (unless told not to).
  void send_packet(WireHeader h, const uint8_t* payload, uint32_t n,
                   bool fix_hdr_crc = true, bool fix_payload_crc = true) {
    std::vector<uint8_t> pkt(sizeof(h) + n);
    if (fix_payload_crc) h.payload_crc = crc32c(0, payload, n);
    if (fix_hdr_crc) {
      uint32_t pc = h.payload_crc;
      h.hdr_crc = 0;
      h.payload_crc = 0;
      h.hdr_crc = crc32c(0, &h, sizeof(h));
      h.payload_crc = pc;
    }
    std::memcpy(pkt.data(), &h, sizeof(h));
    if (n) std::memcpy(pkt.data() + sizeof(h), payload, n);
    send_raw(pkt.data(), pkt.size());
  }

  // Polls until the device saw every datagram sent so far.
  void settle() {
    ASSERT_TRUE(drive({rx_.get()}, [&] {
      return static_cast<udp::SoftDevice*>(rx_->dev.get())
                 ->counters()
                 .rx_packets >= sent_;
    }));
  }

  int64_t c(const char* name) { return counter(*rx_->dev, name); }

  void expect_canaries_intact() {
    for (size_t i = 0; i < kPage; ++i) {
      ASSERT_EQ(map_[kPage + i], 0xA5) << "canary before region, byte " << i;
      ASSERT_EQ(map_[4 * kPage + i], 0xA5) << "canary after region, byte " << i;
    }
  }

  uint8_t* map_ = static_cast<uint8_t*>(MAP_FAILED);
  uint8_t* region_ = nullptr;
  std::unique_ptr<Side> rx_, peer_;
  std::unique_ptr<MemoryRegion> mr_;
  int raw_ = -1;   // a stranger's socket
  int from_ = -1;  // what send_raw() sends from; -1: the peer QP's socket
  sockaddr_in dst_{};
  uint64_t sent_ = 0;
  uint32_t next_psn_ = 0;
};

TEST_F(HostileInputTest, EachKindOfBadDatagramIsDroppedAndCounted) {
  uint8_t data[256];
  fill_pattern(data, sizeof(data), 1);
  std::memset(region_, 0, 2 * kPage);

  // Truncated headers and random garbage.
  for (size_t n = 0; n < sizeof(WireHeader); ++n) send_raw(data, n);
  settle();
  EXPECT_EQ(c("drop_malformed"), static_cast<int64_t>(sizeof(WireHeader)));

  // Bad header CRC.
  WireHeader h = good_write(100);
  h.hdr_crc = 0x12345678;
  send_packet(h, data, 100, /*fix_hdr_crc=*/false);
  settle();
  EXPECT_EQ(c("drop_bad_crc"), 1);

  // Wrong version (CRC fixed so the version check itself is reached).
  h = good_write(100);
  h.version = 9;
  send_packet(h, data, 100);
  settle();
  EXPECT_EQ(c("drop_bad_version"), 1);

  // Unknown destination QP; right QP but not from its peer.
  h = good_write(100);
  h.dst_qpn ^= 0x5555;
  send_packet(h, data, 100);
  h = good_write(100);
  h.src_qpn ^= 1;
  send_packet(h, data, 100);
  settle();
  EXPECT_EQ(c("drop_unknown_qp"), 2);

  // Wrong rkey.
  h = good_write(100);
  h.rkey ^= 0x10000;
  send_packet(h, data, 100);
  settle();
  EXPECT_EQ(c("drop_bad_rkey"), 1);

  // Out of bounds: past the end, before the start, and wrapping around.
  h = good_write(100, 2 * kPage - 50);
  send_packet(h, data, 100);
  h = good_write(100);
  h.remote_addr -= 64;
  send_packet(h, data, 100);
  h = good_write(100);
  h.remote_addr = ~0ull - 10;
  send_packet(h, data, 100);
  settle();
  EXPECT_EQ(c("drop_out_of_bounds"), 3);

  // Lengths that disagree with the datagram or the message.
  h = good_write(100);
  h.payload_len = 120;
  send_packet(h, data, 100);
  h = good_write(100);
  h.frag_offset = 50;  // 50 + 100 > msg_len 100
  send_packet(h, data, 100);
  h = good_write(100);
  h.opcode = 42;
  send_packet(h, data, 100);
  settle();
  EXPECT_EQ(c("drop_malformed"), static_cast<int64_t>(sizeof(WireHeader)) + 3);

  // Bad payload CRC: never completes, nothing outside the target range.
  h = good_write(100);
  h.opcode = static_cast<uint8_t>(udp::WireOp::kWriteImm);
  h.payload_crc = 1;
  send_packet(h, data, 100, true, /*fix_payload_crc=*/false);
  settle();
  EXPECT_EQ(c("drop_bad_crc"), 2);
  EXPECT_TRUE(rx_->recv_wcs.empty());

  expect_canaries_intact();

  // The QP still works for its real peer.
  fill_pattern(peer_->buf.data(), 2 * kPage, 77);
  Sge rsge{0, 0, 0};
  RecvWr rwr;
  rwr.wr_id = 5;
  rwr.sg_list = &rsge;
  ASSERT_TRUE(rx_->qp->post_recv(&rwr, nullptr).ok());
  ASSERT_TRUE(peer_
                  ->post_send(WrOpcode::kWriteWithImm, 1, 0, 2 * kPage,
                              reinterpret_cast<uint64_t>(region_), mr_->rkey(),
                              9)
                  .ok());
  ASSERT_TRUE(drive({rx_.get(), peer_.get()}, [&] {
    for (const auto& wc : rx_->recv_wcs) {
      if (wc.wr_id == 5) return true;
    }
    return false;
  }));
  EXPECT_EQ(find_pattern_mismatch(region_, 2 * kPage, 77), -1);
  expect_canaries_intact();
}

// A chunk that arrived intact, then a corrupted copy of it (a duplicate or a
// spurious retransmission damaged on the way) into the same, still valid,
// region: the copy is dropped for its CRC before any byte is placed, so the
// data that arrived stays. (Placing while checking let such copies clobber
// delivered bytes: the engine's mixed-fault test failed ~3% of runs.)
TEST_F(HostileInputTest, CorruptedCopyNeverOverwritesDeliveredBytes) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<uint8_t>(i * 7);
  send_packet(good_write(1000, 100), data.data(), 1000);
  settle();
  ASSERT_EQ(std::memcmp(region_ + 100, data.data(), 1000), 0);
  std::vector<uint8_t> bad = data;
  bad[500] ^= 0x40;  // payload CRC computed over `data`: a flipped bit
  WireHeader h = good_write(1000, 100);
  h.payload_crc = crc32c(0, data.data(), 1000);
  send_packet(h, bad.data(), 1000, true, /*fix_payload_crc=*/false);
  settle();
  EXPECT_EQ(c("drop_bad_crc"), 1);
  EXPECT_EQ(std::memcmp(region_ + 100, data.data(), 1000), 0)
      << "a corrupted copy overwrote delivered bytes";
  expect_canaries_intact();
}

// An unsummed payload (wire.h, "Unsummed payloads") is placed only by a QP
// that offered to take one from its peer on this host; one that did not
// (UCCL_SOFTNIC_LOCAL_CRC on) drops it as a bad CRC and writes nothing.
TEST_F(HostileInputTest, UnsummedPayloadIsTakenOnlyWhereOffered) {
  std::vector<uint8_t> data(1000);
  fill_pattern(data.data(), data.size(), 5);
  std::memset(region_, 0, 2 * kPage);
  ASSERT_NE(rx_->qp->local_info().flags & kQpInfoTakesUnsummed, 0);
  WireHeader h = good_write(1000);
  h.flags |= udp::kFlagUnsummed;  // payload_crc stays 0
  send_packet(h, data.data(), 1000, true, /*fix_payload_crc=*/false);
  settle();
  EXPECT_EQ(c("drop_bad_crc"), 0);
  EXPECT_EQ(std::memcmp(region_, data.data(), 1000), 0);

  // The same datagram to a QP that did not offer.
  DeviceOptions o = Side::no_faults();
  o.backend_params = "local_crc=1";
  auto rx2 = Side::make(QpType::kUC, 2 * kPage, o);
  auto peer2 = Side::make(QpType::kUC, 0);
  ASSERT_TRUE(rx2 && peer2);
  connect_pair(rx2.get(), peer2.get());
  EXPECT_EQ(rx2->qp->local_info().flags & kQpInfoTakesUnsummed, 0);
  std::memset(rx2->buf.data(), 0, rx2->buf.size());
  h.dst_qpn = rx2->qp->qpn();
  h.src_qpn = peer2->qp->qpn();
  from_ = udp::SoftNicTestAccess::tx_fd(peer2->qp.get());
  h.psn = 0;
  h.remote_addr = rx2->addr();
  h.rkey = rx2->mr->rkey();
  dst_.sin_port =
      htons(static_cast<udp::SoftDevice*>(rx2->dev.get())->udp_port());
  send_packet(h, data.data(), 1000, true, /*fix_payload_crc=*/false);
  ASSERT_TRUE(drive({rx2.get()},
                    [&] { return counter(*rx2->dev, "rx_packets") >= 1; }));
  EXPECT_EQ(counter(*rx2->dev, "drop_bad_crc"), 1);
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(rx2->buf[i], 0) << "placed byte " << i;
  }
  expect_canaries_intact();
}

TEST_F(HostileInputTest, MutationFuzzNeverWritesOutsideTheRegion) {
  std::mt19937_64 rng(2024);
  uint8_t data[1024];
  for (int i = 0; i < 5000; ++i) {
    uint32_t len = rng() % sizeof(data);
    for (uint32_t k = 0; k < len; ++k) data[k] = static_cast<uint8_t>(rng());
    WireHeader h = good_write(len, rng() % (2 * kPage));
    auto* bytes = reinterpret_cast<uint8_t*>(&h);
    int flips = 1 + rng() % 4;
    for (int f = 0; f < flips; ++f) {
      // Mutate any header byte except the CRC fields (recomputed below).
      size_t pos = rng() % offsetof(WireHeader, hdr_crc);
      bytes[pos] = static_cast<uint8_t>(rng());
    }
    if (rng() % 4 == 0) h.remote_addr += (rng() % 8192) - 4096;
    send_packet(h, data, len, /*fix_hdr_crc=*/rng() % 8 != 0);
    if (i % 256 == 0) settle();
  }
  // Pure garbage too, some of it starting with the magic.
  for (int i = 0; i < 2000; ++i) {
    uint8_t junk[300];
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    if (i % 2) {
      uint32_t m = udp::kWireMagic;
      std::memcpy(junk, &m, 4);
    }
    send_raw(junk, rng() % sizeof(junk));
  }
  settle();
  expect_canaries_intact();
  auto* dev = static_cast<udp::SoftDevice*>(rx_->dev.get());
  EXPECT_EQ(dev->counters().rx_packets, sent_);
  EXPECT_GT(c("drop_malformed") + c("drop_bad_crc") + c("drop_out_of_bounds") +
                c("drop_bad_rkey") + c("drop_unknown_qp") +
                c("drop_bad_version"),
            5000);
}

}  // namespace
}  // namespace uccl::transport::testing
