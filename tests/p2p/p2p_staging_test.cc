// p2p device memory on the software NIC, with a stand-in device: "device"
// buffers are host pages kept PROT_NONE except inside the stand-in's own
// copies, so an engine touching them directly crashes the test. Checks
// byte-exact staging both ways at every size around a segment, the copies
// overlapping the network, and what is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>

#include "tests/p2p/p2p_fixture.h"
#include "uccl/p2p.h"
#include "util/pattern.h"

namespace uccl::p2p {
namespace {

// Device memory that only copy_async touches; a copy completes on the
// second copy_done after it was started (asynchronous, like a stream).
class FakeDevice : public DeviceMemory {
 public:
  ~FakeDevice() override {
    for (auto& [p, n] : allocs_) munmap(p, n);
  }
  uint8_t* alloc_device(size_t n) {
    n = (n + 4095) / 4096 * 4096 + 4096;
    void* p = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    allocs_[static_cast<uint8_t*>(p)] = n;
    return static_cast<uint8_t*>(p);
  }
  // The test's own access (as cudaMemcpy would be).
  void poke(uint8_t* dst, const void* src, size_t n) { raw_copy(dst, src, n); }
  void peek(void* dst, const uint8_t* src, size_t n) { raw_copy(dst, src, n); }

  bool is_device(const void* p, size_t) override { return find(p) != nullptr; }
  Result<void*> alloc_host(size_t len) override { return std::malloc(len); }
  void free_host(void* p) override { std::free(p); }
  Result<uint64_t> copy_async(void* dst, const void* src, size_t n) override {
    if (fail_copies) return Internal("injected copy failure");
    pending_[next_] = {dst, src, n, 0};
    return next_++;
  }
  Result<bool> copy_done(uint64_t t) override {
    auto it = pending_.find(t);
    if (it == pending_.end()) return InvalidArgument("unknown copy");
    if (it->second.polls++ == 0) return false;
    raw_copy(it->second.dst, it->second.src, it->second.n);
    pending_.erase(it);
    return true;
  }
  bool fail_copies = false;
  // dma-buf export: a memfd stands in for the GPU's (the test checks that
  // whoever took it closed it).
  Result<DmaBuf> export_dmabuf(void* p, size_t) override {
    auto* e = find(p);
    if (e == nullptr) return NotSupported("not device memory");
    const int fd = static_cast<int>(syscall(SYS_memfd_create, "fake", 0));
    if (fd < 0) return Internal("memfd_create failed");
    exported.push_back(fd);
    return DmaBuf{fd,
                  static_cast<uint64_t>(static_cast<uint8_t*>(p) - e->first)};
  }
  std::vector<int> exported;

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t n;
    int polls;
  };
  // The allocation holding p, if any.
  const std::pair<uint8_t* const, size_t>* find(const void* p) const {
    auto* a = static_cast<const uint8_t*>(p);
    for (const auto& e : allocs_) {
      if (a >= e.first && a < e.first + e.second) return &e;
    }
    return nullptr;
  }
  void set_access(const void* p, int prot) {
    if (auto* e = find(p)) mprotect(e->first, e->second, prot);
  }
  void raw_copy(void* dst, const void* src, size_t n) {
    if (n == 0) return;
    set_access(dst, PROT_READ | PROT_WRITE);
    set_access(src, PROT_READ | PROT_WRITE);
    std::memcpy(dst, src, n);
    set_access(dst, PROT_NONE);
    set_access(src, PROT_NONE);
  }
  std::map<uint8_t*, size_t> allocs_;
  std::map<uint64_t, Copy> pending_;
  uint64_t next_ = 1;
};

constexpr size_t kStripe = 64 << 10;
constexpr size_t kSeg = 2 * kStripe;  // two engines

std::unique_ptr<Pair> make_pair(std::shared_ptr<FakeDevice> dev,
                                int stages = 2) {
  Config c = test_config(2);
  c.stripe_bytes = kStripe;
  c.staging_buffers = stages;
  c.device_memory = dev;
  return Pair::make(c);
}

// Moves `sizes` client->server with either end in device memory.
void staged_send_recv(bool src_dev, bool dst_dev, uint64_t seed) {
  auto dev = std::make_shared<FakeDevice>();
  auto p = make_pair(dev);
  ASSERT_TRUE(p);
  const std::vector<size_t> sizes = {0,    1,        4096,         kSeg - 1,
                                     kSeg, kSeg + 1, 3 * kSeg + 5, 2 * kSeg};
  constexpr size_t kMax = 4 * kSeg;
  std::vector<uint8_t> host_src(kMax), host_dst(kMax), check(kMax);
  uint8_t* src = src_dev ? dev->alloc_device(kMax) : host_src.data();
  uint8_t* dst = dst_dev ? dev->alloc_device(kMax) : host_dst.data();
  auto smr = p->client->reg(src, kMax);
  auto rmr = p->server->reg(dst, kMax);
  ASSERT_TRUE(smr.ok() && rmr.ok()) << smr.status() << rmr.status();
  for (size_t len : sizes) {
    ++seed;
    fill_pattern(check.data(), len, seed);
    if (src_dev) {
      dev->poke(src, check.data(), len);
    } else {
      std::memcpy(src, check.data(), len);
    }
    auto r = p->server->recv_async(p->s_conn, *rmr, dst, kMax);
    auto s = p->client->send_async(p->c_conn, *smr, src, len);
    ASSERT_TRUE(r.ok() && s.ok()) << r.status() << s.status();
    size_t sent = 0, got = 0;
    wait_both(p.get(), *s, *r, &sent, &got);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(sent, len);
    EXPECT_EQ(got, len);
    std::vector<uint8_t> out(std::max<size_t>(len, 1));
    if (dst_dev) {
      dev->peek(out.data(), dst, len);
    } else {
      std::memcpy(out.data(), dst, len);
    }
    ASSERT_EQ(find_pattern_mismatch(out.data(), len, seed), -1) << len;
  }
  const auto cs = p->client->staging_stats();
  const auto ss = p->server->staging_stats();
  EXPECT_EQ(cs.copies > 0, src_dev);
  EXPECT_EQ(ss.copies > 0, dst_dev);
}

TEST(P2pStaging, DeviceToHostEverySize) { staged_send_recv(true, false, 10); }
TEST(P2pStaging, HostToDeviceEverySize) { staged_send_recv(false, true, 20); }
TEST(P2pStaging, DeviceToDeviceEverySize) { staged_send_recv(true, true, 30); }

TEST(P2pStaging, CopiesOverlapTheNetworkOnBothSides) {
  auto dev = std::make_shared<FakeDevice>();
  auto p = make_pair(dev, 4);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 16 * kSeg;
  uint8_t* src = dev->alloc_device(kLen);
  uint8_t* dst = dev->alloc_device(kLen);
  std::vector<uint8_t> check(kLen);
  fill_pattern(check.data(), kLen, 77);
  dev->poke(src, check.data(), kLen);
  auto smr = p->client->reg(src, kLen);
  auto rmr = p->server->reg(dst, kLen);
  ASSERT_TRUE(smr.ok() && rmr.ok());
  auto r = p->server->recv_async(p->s_conn, *rmr, dst, kLen);
  auto s = p->client->send_async(p->c_conn, *smr, src, kLen);
  ASSERT_TRUE(r.ok() && s.ok());
  wait_both(p.get(), *s, *r);
  if (HasFatalFailure()) return;
  dev->peek(check.data(), dst, kLen);
  EXPECT_EQ(find_pattern_mismatch(check.data(), kLen, 77), -1);
  // 16 segments (and an empty one ending the message) through 4 staging
  // buffers. Sender: the copies of segments 1-3 start with segment 0's, the
  // later ones as buffers come back (while others are in flight, unless
  // the network drained the window between two polls). Receiver: segment
  // i + 1's receive is posted while segment i still copies out (the
  // stand-in's copies take two polls).
  const auto cs = p->client->staging_stats();
  const auto ss = p->server->staging_stats();
  EXPECT_EQ(cs.copies, 16u);
  EXPECT_EQ(ss.copies, 16u);
  EXPECT_EQ(cs.bytes, kLen);
  EXPECT_GE(cs.overlapped, 3u) << "sender copies waited for the network";
  EXPECT_GE(ss.overlapped, 15u) << "receives waited for copies out";
  std::printf("overlapped copies: sender %llu, receiver %llu of 16\n",
              static_cast<unsigned long long>(cs.overlapped),
              static_cast<unsigned long long>(ss.overlapped));
}

// One-sided, each end in host or device memory: local device memory is
// staged per segment; an advertised device region is a host shadow that
// flush() brings into device memory and publish() refreshes.
void one_sided(bool local_dev, bool remote_dev, uint64_t seed) {
  auto dev = std::make_shared<FakeDevice>();
  auto p = make_pair(dev);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 5 * kSeg + 4099;  // past the staging buffers
  std::vector<uint8_t> host_l(kLen), host_r(kLen), check(kLen), out(kLen);
  uint8_t* local = local_dev ? dev->alloc_device(kLen) : host_l.data();
  uint8_t* region = remote_dev ? dev->alloc_device(kLen) : host_r.data();
  auto lmr = p->client->reg(local, kLen);
  auto rmr = p->server->reg(region, kLen);
  ASSERT_TRUE(lmr.ok() && rmr.ok());
  auto adv = p->server->advertise(*rmr, 0, kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  auto put = [&](uint8_t* dst, bool d, const uint8_t* src, size_t n) {
    d ? dev->poke(dst, src, n) : (void)std::memcpy(dst, src, n);
  };
  auto get = [&](uint8_t* dst, const uint8_t* src, bool d, size_t n) {
    d ? dev->peek(dst, src, n) : (void)std::memcpy(dst, src, n);
  };
  // A notifying write needs memory the NIC reaches: staged memory is
  // refused up front, nothing posted.
  auto nw = p->client->write_async(p->c_conn, *lmr, local, 100, *adv, 0, true);
  if (local_dev) {
    EXPECT_EQ(nw.status().code(), StatusCode::kNotSupported) << nw.status();
    EXPECT_EQ(*p->client->notified_parts_sent(p->c_conn), 0u);
  } else {
    ASSERT_TRUE(nw.ok()) << nw.status();
    ASSERT_TRUE(p->client->wait(*nw, 30000).ok());
  }
  // Write 100 bytes in, then the rest of the region.
  fill_pattern(check.data(), kLen - 100, seed);
  put(local, local_dev, check.data(), kLen - 100);
  auto w =
      p->client->write_async(p->c_conn, *lmr, local, kLen - 100, *adv, 100);
  ASSERT_TRUE(w.ok()) << w.status();
  size_t n = 0;
  ASSERT_TRUE(p->client->wait(*w, 30000, &n).ok());
  EXPECT_EQ(n, kLen - 100);
  send_recv(p.get(), {8}, seed + 1);  // the target learns of it
  if (remote_dev) {
    get(out.data(), region + 100, true, kLen - 100);
    EXPECT_NE(find_pattern_mismatch(out.data(), kLen - 100, seed), -1)
        << "in device memory before flush";
    ASSERT_TRUE(p->server->flush(*rmr).ok());
  }
  get(out.data(), region + 100, remote_dev, kLen - 100);
  EXPECT_EQ(find_pattern_mismatch(out.data(), kLen - 100, seed), -1);
  // The target changes its memory and publishes it; the client reads it.
  fill_pattern(check.data(), kLen, seed + 2);
  put(region, remote_dev, check.data(), kLen);
  ASSERT_TRUE(p->server->publish(*rmr).ok());
  auto r = p->client->read_async(p->c_conn, *lmr, local, kLen, *adv, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(p->client->wait(*r, 30000, &n).ok());
  EXPECT_EQ(n, kLen);
  get(out.data(), local, local_dev, kLen);
  EXPECT_EQ(find_pattern_mismatch(out.data(), kLen, seed + 2), -1);
  EXPECT_EQ(p->client->staging_stats().copies > 0, local_dev);
  EXPECT_TRUE(p->server->dereg(*rmr).ok());
}

TEST(P2pStaging, OneSidedFromDeviceToHost) { one_sided(true, false, 40); }
TEST(P2pStaging, OneSidedFromHostToDevice) { one_sided(false, true, 50); }
TEST(P2pStaging, OneSidedFromDeviceToDevice) { one_sided(true, true, 60); }

TEST(P2pStaging, VectoredOneSidedDeviceSlices) {
  auto dev = std::make_shared<FakeDevice>();
  auto p = make_pair(dev);
  ASSERT_TRUE(p);
  constexpr size_t kLen = 3 * kSeg;
  uint8_t* local = dev->alloc_device(kLen);
  std::vector<uint8_t> region(kLen), check(kLen);
  fill_pattern(check.data(), kLen, 70);
  dev->poke(local, check.data(), kLen);
  auto lmr = p->client->reg(local, kLen);
  auto rmr = p->server->reg(region.data(), kLen);
  ASSERT_TRUE(lmr.ok() && rmr.ok());
  auto adv = p->server->advertise(*rmr, 0, kLen);
  ASSERT_TRUE(adv.ok());
  // Two halves swapped.
  auto w = p->client->writev_async(
      p->c_conn, {{*lmr, local, kLen / 2}, {*lmr, local + kLen / 2, kLen / 2}},
      {{*adv, kLen / 2}, {*adv, 0}});
  ASSERT_TRUE(w.ok()) << w.status();
  size_t n = 0;
  ASSERT_TRUE(p->client->wait(*w, 30000, &n).ok());
  EXPECT_EQ(n, kLen);
  send_recv(p.get(), {8}, 71);
  EXPECT_EQ(std::memcmp(region.data(), check.data() + kLen / 2, kLen / 2), 0);
  EXPECT_EQ(std::memcmp(region.data() + kLen / 2, check.data(), kLen / 2), 0);
}

TEST(P2pStaging, ASoftwareNicTakesNoDmaBufAndGpuMemoryIsStaged) {
  auto dev = std::make_shared<FakeDevice>();
  auto p = make_pair(dev);
  ASSERT_TRUE(p);
  uint8_t* d = dev->alloc_device(8192);
  // The engine layer refuses a dma-buf on the software NIC, and bad input.
  Mem host(p->client.get(), 64);
  uccl::Endpoint* ep = p->client->engine_endpoint();
  EXPECT_EQ(ep->reg_dmabuf_mr(d, 8192, 0, 0).status().code(),
            StatusCode::kNotSupported);
  EXPECT_EQ(ep->reg_dmabuf_mr(d, 8192, -1, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ep->reg_dmabuf_mr(nullptr, 8192, 0, 0).status().code(),
            StatusCode::kInvalidArgument);
  // The p2p layer offers the NIC the exported buffer, closes it, and
  // stages the memory instead (a transfer from it copies).
  auto dmr = p->client->reg(d + 4096, 4096);
  ASSERT_TRUE(dmr.ok()) << dmr.status();
  ASSERT_EQ(dev->exported.size(), 1u);
  EXPECT_EQ(fcntl(dev->exported[0], F_GETFD), -1) << "dma-buf fd left open";
  Mem rb(p->server.get(), 4096);
  auto r = p->server->recv_async(p->s_conn, rb.id, rb.ptr(), 4096);
  auto s = p->client->send_async(p->c_conn, *dmr, d + 4096, 4096);
  ASSERT_TRUE(r.ok() && s.ok());
  wait_both(p.get(), *s, *r);
  EXPECT_GT(p->client->staging_stats().copies, 0u);
}

TEST(P2pStaging, SegmentsLargerThanTheStagingBuffersAreRefused) {
  // The connecting side's stripe is twice this side's: its segments would
  // overrun the accepting side's staging buffers.
  auto dev = std::make_shared<FakeDevice>();
  Config big = test_config(2), small = test_config(2);
  big.stripe_bytes = 2 * kStripe;
  small.stripe_bytes = kStripe;
  small.device_memory = dev;
  auto s = Endpoint::create(small);
  auto c = Endpoint::create(big);
  ASSERT_TRUE(s.ok() && c.ok());
  auto port = (*s)->listen(0);
  ASSERT_TRUE(port.ok());
  Result<ConnHandle> acc = Unavailable("");
  std::thread t([&] { acc = (*s)->accept(20000); });
  auto conn = (*c)->connect("127.0.0.1", *port, 20000);
  t.join();
  ASSERT_TRUE(conn.ok() && acc.ok());
  uint8_t* d = dev->alloc_device(8 * kSeg);
  auto dmr = (*s)->reg(d, 8 * kSeg);
  ASSERT_TRUE(dmr.ok());
  auto r = (*s)->recv_async(*acc, *dmr, d, 8 * kSeg);
  ASSERT_TRUE(r.ok());
  Status st = (*s)->wait(*r, 10000);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
}

TEST(P2pStaging, AFailedCopyFailsItsTransferNotTheProcess) {
  auto dev = std::make_shared<FakeDevice>();
  auto p = make_pair(dev);
  ASSERT_TRUE(p);
  uint8_t* d = dev->alloc_device(8192);
  auto dmr = p->client->reg(d, 8192);
  ASSERT_TRUE(dmr.ok());
  dev->fail_copies = true;
  auto s = p->client->send_async(p->c_conn, *dmr, d, 4096);
  ASSERT_TRUE(s.ok()) << s.status();
  Status st = p->client->wait(*s, 10000);
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st;
  EXPECT_EQ(p->client->flush(*dmr).code(), StatusCode::kOk) << "no shadows";
  EXPECT_EQ(p->client->advertise(*dmr, 0, 8192).status().code(),
            StatusCode::kInternal);
  EXPECT_EQ(p->client->dereg(*dmr).code(), StatusCode::kOk);
}

}  // namespace
}  // namespace uccl::p2p
