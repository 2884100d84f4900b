// Software NIC UDP GSO: runs of equal datagrams leave as one message and
// arrive as the datagrams they were, and a kernel that refuses GSO loses none.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/transport/soft_nic_test_access.h"
#include "tests/transport/soft_nic_test_util.h"
#include "transport/udp/tx_batch.h"

namespace uccl::transport::testing {
namespace {

using udp::TxBatch;
using udp::TxBatchCounters;
using udp::WireHeader;

// A UDP socket bound to 127.0.0.1 on a port the kernel picks.
struct UdpSocket {
  int fd = -1;
  sockaddr_in addr{};
  UdpSocket() {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  }
  ~UdpSocket() { close(fd); }
  // The datagrams that arrived, in order: at least `want` of them unless
  // 5 s pass first (loopback delivers in the sender's call, or in
  // ksoftirqd's soon after), and any more already queued.
  std::vector<std::vector<uint8_t>> drain(size_t want) const {
    std::vector<std::vector<uint8_t>> out;
    std::vector<uint8_t> buf(70000);
    const uint64_t deadline = monotonic_ns() + 5'000'000'000ull;
    while (true) {
      const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n >= 0) {
        out.emplace_back(buf.begin(), buf.begin() + n);
        continue;
      }
      if (out.size() >= want || monotonic_ns() > deadline) return out;
      usleep(100);
    }
  }
};

// Whether this kernel has UDP GSO (4.18) and GRO (5.0): a socket takes
// UDP_GRO, and a send with UDP_SEGMENT goes through.
bool kernel_has_udp_offloads() {
  UdpSocket s;
  const int on = 1;
  if (setsockopt(s.fd, SOL_UDP, UDP_GRO, &on, sizeof(on)) != 0) return false;
  const int seg = 100;
  return setsockopt(s.fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) == 0;
}
#define SKIP_WITHOUT_UDP_OFFLOADS()                   \
  if (!kernel_has_udp_offloads()) {                   \
    GTEST_SKIP() << "this kernel has no UDP GSO/GRO"; \
  }

// Datagram i: a header whose psn is i, then `payload` bytes of value i.
struct Datagram {
  WireHeader hdr{};
  std::vector<uint8_t> payload;
  Datagram(uint32_t i, uint32_t payload_bytes)
      : payload(payload_bytes, static_cast<uint8_t>(i)) {
    hdr.psn = i;
    hdr.payload_len = payload_bytes;
  }
  bool is(const std::vector<uint8_t>& got) const {
    if (got.size() != sizeof(WireHeader) + payload.size()) return false;
    return std::memcmp(got.data(), &hdr, sizeof(hdr)) == 0 &&
           std::memcmp(got.data() + sizeof(hdr), payload.data(),
                       payload.size()) == 0;
  }
};

// The device's data socket on loopback, as a peer addresses it.
sockaddr_in device_addr(Side* s) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<udp::SoftDevice*>(s->dev.get())->udp_port());
  return to;
}

// Sends `dg` from `from` to `to` in one batch (one GSO run when they fit).
TxBatchCounters send_batch(const UdpSocket& from,
                           const std::vector<Datagram>& dg,
                           const sockaddr_in& to) {
  TxBatch batch;
  for (const Datagram& d : dg) {
    iovec iov{const_cast<uint8_t*>(d.payload.data()), d.payload.size()};
    batch.add(from.fd, d.hdr, &iov, 1, &to);
  }
  TxBatchCounters c;
  batch.flush(&c);
  return c;
}

// Queues datagrams[i] towards dests[i] and flushes; checks that each socket
// got its datagrams whole and in order.
TxBatchCounters send_and_check(TxBatch* b, const UdpSocket& from,
                               const std::vector<Datagram>& dg,
                               const std::vector<const UdpSocket*>& dests) {
  for (size_t i = 0; i < dg.size(); ++i) {
    iovec iov{const_cast<uint8_t*>(dg[i].payload.data()), dg[i].payload.size()};
    b->add(from.fd, dg[i].hdr, &iov, 1, &dests[i]->addr);
  }
  TxBatchCounters c;
  b->flush(&c);
  std::vector<const UdpSocket*> seen;
  for (const UdpSocket* d : dests) {
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    auto got = d->drain(
        static_cast<size_t>(std::count(dests.begin(), dests.end(), d)));
    size_t k = 0;
    for (size_t i = 0; i < dg.size(); ++i) {
      if (dests[i] != d) continue;
      EXPECT_LT(k, got.size()) << "datagram " << i << " missing";
      if (k < got.size()) {
        EXPECT_TRUE(dg[i].is(got[k])) << "datagram " << i << " differs";
      }
      ++k;
    }
    EXPECT_EQ(k, got.size()) << "more datagrams than sent";
  }
  return c;
}

TEST(TxBatchTest, RunsEndAtANewDestinationALongerOrAfterAShorterDatagram) {
  SKIP_WITHOUT_UDP_OFFLOADS();
  UdpSocket from, d1, d2;
  TxBatch b;
  // Runs: [0-3] to d1 (the last shorter: GSO of 4), [4] to d1 alone after
  // the shorter one, [5-6] to d2 (GSO of 2), [7] longer: alone.
  std::vector<Datagram> dg;
  const uint32_t sizes[] = {1000, 1000, 1000, 500, 1000, 1000, 1000, 2000};
  for (uint32_t i = 0; i < 8; ++i) dg.emplace_back(i, sizes[i]);
  std::vector<const UdpSocket*> dests = {&d1, &d1, &d1, &d1,
                                         &d1, &d2, &d2, &d2};
  TxBatchCounters c = send_and_check(&b, from, dg, dests);
  EXPECT_EQ(c.errors, 0u);
  EXPECT_EQ(c.gso_refused, 0u);
  EXPECT_EQ(c.gso_sends, 2u);
  EXPECT_EQ(c.gso_segments, 6u);
  EXPECT_TRUE(b.empty());
}

TEST(TxBatchTest, ARunStopsAtOneIpPacketsPayload) {
  SKIP_WITHOUT_UDP_OFFLOADS();
  UdpSocket from, to;
  TxBatch b;
  // 32 datagrams of 4000 B: 16 fit in 65507 bytes, 17 do not.
  const uint32_t payload = 4000 - sizeof(WireHeader);
  std::vector<Datagram> dg;
  for (uint32_t i = 0; i < TxBatch::kMaxDatagrams; ++i) {
    dg.emplace_back(i, payload);
  }
  std::vector<const UdpSocket*> dests(dg.size(), &to);
  TxBatchCounters c = send_and_check(&b, from, dg, dests);
  EXPECT_EQ(c.errors, 0u);
  EXPECT_EQ(c.gso_sends, 2u);
  EXPECT_EQ(c.gso_segments, 32u);
}

TEST(TxBatchTest, WithGsoOffEveryDatagramIsItsOwnMessage) {
  UdpSocket from, to;
  TxBatch b;
  b.set_gso(false);
  std::vector<Datagram> dg;
  for (uint32_t i = 0; i < 10; ++i) dg.emplace_back(i, 700);
  std::vector<const UdpSocket*> dests(dg.size(), &to);
  TxBatchCounters c = send_and_check(&b, from, dg, dests);
  EXPECT_EQ(c.gso_sends, 0u);
  EXPECT_EQ(c.errors, 0u);
}

TEST(TxBatchTest, AKernelThatRefusesGsoLosesNothingAndGsoStaysOff) {
  SKIP_WITHOUT_UDP_OFFLOADS();
  UdpSocket from, to;
  // A socket without UDP checksums cannot segment: the kernel refuses GSO
  // with EINVAL.
  int one = 1;
  ASSERT_EQ(setsockopt(from.fd, SOL_SOCKET, SO_NO_CHECK, &one, sizeof(one)), 0);
  TxBatch b;
  std::vector<Datagram> dg;
  for (uint32_t i = 0; i < 6; ++i) dg.emplace_back(i, i == 2 ? 300 : 900);
  std::vector<const UdpSocket*> dests(dg.size(), &to);
  TxBatchCounters c = send_and_check(&b, from, dg, dests);
  EXPECT_EQ(c.gso_refused, 1u);
  EXPECT_EQ(c.gso_sends, 0u);
  EXPECT_EQ(c.errors, 0u);
  EXPECT_FALSE(b.gso());
  c = send_and_check(&b, from, dg, dests);  // single datagrams from now on
  EXPECT_EQ(c.gso_refused, 0u);
  EXPECT_EQ(c.errors, 0u);
}

// Two devices on lo with a 1 KiB MTU: a 300 KiB WRITE leaves in GSO runs,
// which the receiver takes whole (GRO) or the kernel cuts, and arrives
// byte-exact, on RC and UC.
class SoftNicGsoTest : public ::testing::TestWithParam<QpType> {};

TEST_P(SoftNicGsoTest, SmallMtuWritesLeaveInRunsAndArriveWhole) {
  SKIP_WITHOUT_UDP_OFFLOADS();
  for (const char* params : {"gso=1,gro=1", "gso=1,gro=0", "gso=0,gro=1"}) {
    SCOPED_TRACE(params);
    const bool gso = std::strstr(params, "gso=1") != nullptr;
    const bool gro = std::strstr(params, "gro=1") != nullptr;
    DeviceOptions o = Side::no_faults();
    o.mtu_bytes = 1024;
    o.backend_params = params;
    constexpr uint32_t kLen = 300 * 1024 + 100;  // a shorter last datagram
    auto a = Side::make(GetParam(), kLen + 4096, o);
    auto b = Side::make(GetParam(), kLen + 4096, o);
    ASSERT_TRUE(a && b);
    connect_pair(a.get(), b.get());
    ASSERT_EQ(mtu_of(a.get()), 1024u);
    transfer_once(a.get(), b.get(), WrOpcode::kWriteWithImm, kLen, 7);
    const auto& ca = cnt(a.get());
    const auto& cb = cnt(b.get());
    EXPECT_EQ(ca.tx_errors, 0u);
    EXPECT_EQ(ca.tx_gso_refused, 0u);
    EXPECT_EQ(cb.drop_malformed, 0u);
    // The receiver counts every datagram, coalesced or not.
    EXPECT_GE(cb.rx_packets, (kLen + 1023) / 1024);
    if (gso) {
      EXPECT_GT(ca.tx_gso_sends, 0u);
      // Most datagrams (all the WRITE's, but ACKs and the like) in runs.
      EXPECT_GE(ca.tx_gso_segments * 10, ca.tx_packets * 9);
      EXPECT_GE(ca.tx_gso_segments, 2 * ca.tx_gso_sends);
    } else {
      EXPECT_EQ(ca.tx_gso_sends, 0u);
      EXPECT_EQ(ca.tx_gso_segments, 0u);
    }
    if (gso && gro) {
      EXPECT_GT(cb.rx_gro_packets, 0u);
    } else {
      EXPECT_EQ(cb.rx_gro_packets, 0u);
    }
  }
}

// A coalesced buffer is split and each datagram in it judged alone: three
// junk datagrams sent as one GSO run are three malformed drops.
TEST(SoftNicGroTest, EachDatagramOfACoalescedBufferIsJudgedAlone) {
  SKIP_WITHOUT_UDP_OFFLOADS();
  DeviceOptions o = Side::no_faults();
  o.backend_params = "gro=1";
  auto b = Side::make(QpType::kUC, 4096, o);
  ASSERT_TRUE(b);
  const udp::SoftCounters before = cnt(b.get());
  UdpSocket from;
  std::vector<Datagram> dg;
  for (uint32_t i = 0; i < 3; ++i) dg.emplace_back(i, 500);
  ASSERT_EQ(send_batch(from, dg, device_addr(b.get())).gso_sends, 1u);
  ASSERT_TRUE(drive(
      {b.get()},
      [&] { return cnt(b.get()).drop_malformed >= before.drop_malformed + 3; },
      3000))
      << b->dev->counters_text();
  const udp::SoftCounters& after = cnt(b.get());
  EXPECT_EQ(after.drop_malformed, before.drop_malformed + 3);
  EXPECT_EQ(after.rx_packets, before.rx_packets + 3);
  EXPECT_EQ(after.rx_gro_packets, before.rx_gro_packets + 1);
}

// Whatever segment size a coalesced buffer claims, its bytes are cut into
// datagrams end to end, none skipped or taken twice, and each is judged (a
// datagram shorter than a header is a malformed drop, as alone).
TEST(SoftNicGroTest, AnySegmentSizeCutsTheBufferEndToEnd) {
  DeviceOptions o = Side::no_faults();
  auto b = Side::make(QpType::kUC, 4096, o);
  ASSERT_TRUE(b);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  from.sin_port = htons(9);
  std::vector<uint8_t> buf(1000, 0x5a);
  struct Case {
    uint32_t segment, datagrams;
  } cases[] = {{1, 1000}, {7, 143}, {64, 16}, {999, 2}, {1000, 1}, {4096, 1}};
  for (const Case& k : cases) {
    const udp::SoftCounters before = cnt(b.get());
    const uint32_t n = udp::SoftNicTestAccess::take_gro_buffer(
        b->dev.get(), buf.data(), static_cast<uint32_t>(buf.size()), k.segment,
        from, 1);
    const udp::SoftCounters& after = cnt(b.get());
    EXPECT_EQ(n, k.datagrams) << "segment " << k.segment;
    EXPECT_EQ(after.rx_packets - before.rx_packets, k.datagrams);
    EXPECT_EQ(after.rx_bytes - before.rx_bytes, buf.size());
    EXPECT_EQ(after.drop_malformed - before.drop_malformed, k.datagrams);
  }
}

// Bytes queued on a socket (its receive memory), once that stops growing
// for 20 ms (at most 2 s): loopback delivers in the sender's call, or in
// ksoftirqd's soon after.
uint32_t settled_rmem(int fd) {
  uint32_t last = 0;
  int still = 0;
  for (int i = 0; i < 2000 && still < 20; ++i) {
    uint32_t mem[SK_MEMINFO_VARS] = {};
    socklen_t len = sizeof(mem);
    getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &len);
    still = mem[SK_MEMINFO_RMEM_ALLOC] == last ? still + 1 : 0;
    last = mem[SK_MEMINFO_RMEM_ALLOC];
    usleep(1000);
  }
  return last;
}

// A progress call's budget counts datagrams, not the kernel's buffers: a
// backlog of 40 GRO buffers of 32 datagrams each (a send batch's most) is
// taken over several calls of at most the budget (and a buffer's
// overshoot), so the engine gets to its completions, sends and ACKs
// between them.
TEST(SoftNicGroTest, AProgressCallTakesItsBudgetOfDatagramsNotBuffers) {
  SKIP_WITHOUT_UDP_OFFLOADS();
  DeviceOptions o = Side::no_faults();
  o.backend_params = "gro=1";
  auto b = Side::make(QpType::kUC, 4096, o);
  ASSERT_TRUE(b);
  const udp::SoftCounters before = cnt(b.get());
  UdpSocket from;
  int big = 8 << 20;
  setsockopt(from.fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  const sockaddr_in to = device_addr(b.get());
  constexpr int kRuns = 40, kPerRun = TxBatch::kMaxDatagrams;
  constexpr int kAll = kRuns * kPerRun;
  std::vector<Datagram> dg;
  for (uint32_t i = 0; i < kPerRun; ++i) dg.emplace_back(i, 500);  // junk
  for (int r = 0; r < kRuns; ++r) {
    const TxBatchCounters c = send_batch(from, dg, to);
    ASSERT_EQ(c.gso_sends, 1u);
    ASSERT_EQ(c.errors, 0u);
  }
  ASSERT_GT(settled_rmem(udp::SoftNicTestAccess::rx_fd(b->dev.get())), 0u);
  constexpr uint64_t kBudget = 128, kMost = kBudget + 64;
  uint64_t taken = 0;
  int calls = 0;
  for (; taken < kAll && calls < 1000; ++calls) {
    const uint64_t was = cnt(b.get()).rx_packets;
    b->dev->progress();
    const uint64_t now = cnt(b.get()).rx_packets - was;
    EXPECT_LE(now, kMost) << "call " << calls;
    if (calls == 0) {
      EXPECT_GT(now, 0u);
    }
    taken += now;
  }
  EXPECT_EQ(taken, static_cast<uint64_t>(kAll));
  EXPECT_GE(calls, kAll / static_cast<int>(kMost));
  const udp::SoftCounters& after = cnt(b.get());
  EXPECT_EQ(after.drop_malformed, before.drop_malformed + kAll);
  EXPECT_EQ(after.rx_gro_packets, before.rx_gro_packets + kRuns);
}

INSTANTIATE_TEST_SUITE_P(Qp, SoftNicGsoTest,
                         ::testing::Values(QpType::kRC, QpType::kUC),
                         [](const auto& info) {
                           return std::string(qp_type_name(info.param));
                         });

}  // namespace
}  // namespace uccl::transport::testing
