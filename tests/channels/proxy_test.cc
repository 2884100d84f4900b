// Channel proxies end to end on the CPU stand-in: two p2p endpoints on
// loopback, CPU threads calling the device API as a kernel's threads would.
#include "channels/proxy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/channels/proxy_fixture.h"
#include "util/pattern.h"

namespace uccl::channels {
namespace {

// The ping-pong of the GPU demonstration, on CPU threads: each side puts a
// message with a signal, then waits for the other's; data checked each
// time.
TEST(ChannelProxy, PingPongWithPutWithSignal) {
  constexpr size_t kMsg = 4096;
  constexpr uint64_t kIters = 200;
  auto p = ProxyPair::make(4 * kMsg);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  // Side X writes its message i at its offset 0, puts it into the peer's
  // offset kMsg; the peer checks and answers from its own offset 0.
  std::thread pong([&] {
    for (uint64_t i = 1; i <= kIters; ++i) {
      ASSERT_EQ(channel_wait(p->hb, 0, i), kChannelOk) << i;
      ASSERT_EQ(find_pattern_mismatch(p->mem_b.data() + kMsg, kMsg, i), -1);
      fill_pattern(p->mem_b.data(), kMsg, i + 1000);
      ASSERT_EQ(channel_put_with_signal(p->hb, 0, kMsg, 0, 0, kMsg, 1),
                kChannelOk);
    }
  });
  for (uint64_t i = 1; i <= kIters; ++i) {
    fill_pattern(p->mem_a.data(), kMsg, i);
    ASSERT_EQ(channel_put_with_signal(p->ha, 0, kMsg, 0, 0, kMsg, 0),
              kChannelOk);
    ASSERT_EQ(channel_wait(p->ha, 1, i), kChannelOk) << i;
    ASSERT_EQ(find_pattern_mismatch(p->mem_a.data() + kMsg, kMsg, i + 1000),
              -1);
  }
  pong.join();
  auto s = p->a->stats();
  EXPECT_EQ(s.puts, kIters);
  EXPECT_EQ(s.signals, kIters);
  EXPECT_EQ(s.bad_triggers, 0u);
  EXPECT_TRUE(p->a->channel_status(0).ok());
  EXPECT_TRUE(p->b->channel_status(0).ok());
}

// A put larger than a piece travels in pieces; the signal comes after the
// last one, and a separate signal after later puts counts too.
TEST(ChannelProxy, LargePutsGoInPiecesAndSignalAfterTheLast) {
  constexpr size_t kBytes = (1 << 20) + 123;
  auto p = ProxyPair::make(kBytes + 4096);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  fill_pattern(p->mem_a.data(), kBytes, 7);
  ASSERT_EQ(channel_put_with_signal(p->ha, 0, 4096, 0, 0, kBytes, 3),
            kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 3, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(p->mem_b.data() + 4096, kBytes, 7), -1);
  // A zero-byte put and a plain signal.
  ASSERT_EQ(channel_put(p->ha, 0, 0, 0, 0, 0), kChannelOk);
  ASSERT_EQ(channel_signal(p->ha, 3), kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 3, 2), kChannelOk);
  EXPECT_EQ(p->a->stats().put_bytes, kBytes);
}

// Both sides put blocks a little past the endpoint's segment (stripe x
// engines) at once, each waiting for the other's signal, round after round
// (the exchange of the expert-parallel demonstration).
TEST(ChannelProxy, BothWaysLargePutsRoundAfterRound) {
  ProxyConfig cfg = test_proxy_config();
  cfg.piece_bytes = 1 << 20;
  p2p::Config pc = p2p::test_config(4);
  const size_t block = 1 << 20;  // a message of block + header > a segment
  auto p = ProxyPair::make(2 * block, cfg, pc);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  constexpr int kRounds = 20;
  auto side = [&](ChannelHandle h, std::vector<uint8_t>* mem, int id) {
    for (int i = 1; i <= kRounds; ++i) {
      fill_pattern(mem->data(), block, 1000 * id + i);
      ASSERT_EQ(channel_put_with_signal(h, 0, block, 0, 0, block, 0),
                kChannelOk);
      ASSERT_EQ(channel_wait(h, 0, i), kChannelOk) << "round " << i;
      ASSERT_EQ(find_pattern_mismatch(mem->data() + block, block,
                                      1000 * (1 - id) + i),
                -1)
          << "round " << i;
      // The peer may overwrite our block only after it has this round's.
      ASSERT_EQ(channel_signal(h, 1), kChannelOk);
      ASSERT_EQ(channel_wait(h, 1, i), kChannelOk);
    }
  };
  std::thread b([&] { side(p->hb, &p->mem_b, 1); });
  side(p->ha, &p->mem_a, 0);
  b.join();
  EXPECT_TRUE(p->a->channel_status(0).ok()) << p->a->channel_status(0);
  EXPECT_TRUE(p->b->channel_status(0).ok()) << p->b->channel_status(0);
}

// Many threads put, then each flushes: after its flush returns, its puts
// are in the peer's memory.
TEST(ChannelProxy, FlushReturnsOnceEveryEarlierPutLanded) {
  constexpr int kThreads = 4;
  constexpr size_t kSlice = 8192;
  constexpr int kPuts = 16;
  auto p = ProxyPair::make(kThreads * kPuts * kSlice);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  fill_pattern(p->mem_a.data(), p->mem_a.size(), 99);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int k = 0; k < kPuts; ++k) {
        const size_t off = (static_cast<size_t>(t) * kPuts + k) * kSlice;
        ASSERT_EQ(channel_put(p->ha, 0, off, 0, off, kSlice), kChannelOk);
      }
      ASSERT_EQ(channel_flush(p->ha), kChannelOk);
      for (int k = 0; k < kPuts; ++k) {
        const size_t off = (static_cast<size_t>(t) * kPuts + k) * kSlice;
        ASSERT_EQ(
            std::memcmp(p->mem_b.data() + off, p->mem_a.data() + off, kSlice),
            0)
            << "thread " << t << " put " << k;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(p->a->stats().flushes, static_cast<uint64_t>(kThreads));
}

// A kernel that misuses its channel: the trigger is refused before any
// byte moves, the channel records why, and its waiters fail instead of
// spinning.
TEST(ChannelProxy, BadTriggersFailTheChannelAndWriteNothing) {
  struct Case {
    const char* what;
    uint32_t dst_mem;
    uint64_t dst_off, src_off, bytes;
    uint32_t sem;
  };
  const Case cases[] = {
      {"unknown peer memory", 5, 0, 0, 16, 0},
      {"past the peer's memory", 0, 4000, 0, 200, 0},
      {"past our memory", 0, 0, 4090, 16, 0},
      {"offset wrapping", 0, ~0ull >> 16, 0, 16, 0},
      {"unknown semaphore", 0, 0, 0, 16, 8},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto p = ProxyPair::make(4096);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(p->start());
    std::memset(p->mem_a.data(), 0xab, 4096);
    ASSERT_EQ(channel_put_with_signal(p->ha, k.dst_mem, k.dst_off, 0, k.src_off,
                                      k.bytes, k.sem),
              kChannelOk);  // the push itself succeeds
    EXPECT_EQ(channel_flush(p->ha), kChannelFailed);
    EXPECT_EQ(channel_wait(p->ha, 0, 1), kChannelFailed);
    EXPECT_FALSE(p->a->channel_status(0).ok());
    EXPECT_EQ(p->a->stats().bad_triggers, 1u);
    for (uint8_t byte : p->mem_b) ASSERT_EQ(byte, 0);
  }
}

// A forged message on the connection (not from a proxy) is dropped,
// counted and fails the receiving channel; the memory is untouched.
TEST(ChannelProxy, AForgedMessageFailsTheReceivingChannel) {
  auto p = ProxyPair::make(4096);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->b->start().ok());  // only the receiving side
  MsgHdr h{kMsgMagic, MsgKind::kPut, 0, 0, 0, 0, 4000, 500};
  std::vector<uint8_t> msg(sizeof(h) + 500, 0xee);
  std::memcpy(msg.data(), &h, sizeof(h));
  p2p::Mem m(p->p2p->client.get(), msg.size());
  std::memcpy(m.ptr(), msg.data(), msg.size());
  auto s =
      p->p2p->client->send_async(p->p2p->c_conn, m.id, m.ptr(), msg.size());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(p->p2p->client->wait(*s, 20000).ok());
  EXPECT_EQ(channel_wait(p->hb, 0, 1), kChannelFailed);
  EXPECT_EQ(p->b->stats().bad_messages, 1u);
  for (uint8_t byte : p->mem_b) ASSERT_EQ(byte, 0);
}

// Copies into place that finish late, the first one latest (its bytes
// land only when it is seen done): the receiver starts later copies early
// but raises a signal only once every put before it has landed.
class LateCopies : public TestDeviceMemory {
 public:
  // Everything registered is "device memory", reached only by copies.
  bool is_device(const void*, size_t) override { return true; }
  Result<uint64_t> copy_async(void* dst, const void* src, size_t len) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t delay_ms = copies_.empty() ? 50 : 1;
    const auto* s = static_cast<const uint8_t*>(src);
    copies_.push_back(Copy{static_cast<uint8_t*>(dst),
                           std::vector<uint8_t>(s, s + len),
                           monotonic_ns() + delay_ms * 1000000, false});
    return uint64_t{copies_.size() - 1};
  }
  Result<bool> copy_done(uint64_t token) override {
    std::lock_guard<std::mutex> lock(mu_);
    Copy& c = copies_.at(token);
    if (!c.done && monotonic_ns() < c.due_ns) return false;
    if (!c.done) std::memcpy(c.dst, c.bytes.data(), c.bytes.size());
    c.done = true;
    return true;
  }
  size_t started() {
    std::lock_guard<std::mutex> lock(mu_);
    return copies_.size();
  }

 private:
  struct Copy {
    uint8_t* dst;
    std::vector<uint8_t> bytes;
    uint64_t due_ns;
    bool done;
  };
  std::mutex mu_;
  std::vector<Copy> copies_;
};

TEST(ChannelProxy, SignalsWaitForEveryEarlierCopyEvenWhenLaterOnesStart) {
  auto late = std::make_shared<LateCopies>();
  ProxyConfig cb = test_proxy_config();
  cb.device_memory = late;
  auto p = std::make_unique<ProxyPair>();
  // The pair by hand: the receiving side gets the late copies.
  p->p2p = p2p::Pair::make(p2p::test_config(1));
  ASSERT_NE(p->p2p, nullptr);
  p->a = std::move(
      *ChannelProxy::create(p->p2p->client.get(), test_proxy_config()));
  p->b = std::move(*ChannelProxy::create(p->p2p->server.get(), cb));
  p->mem_a.assign(3 * 4096, 0);
  p->mem_b.assign(3 * 4096, 0);
  ASSERT_TRUE(p->a->register_memory(p->mem_a.data(), 3 * 4096).ok());
  ASSERT_TRUE(p->b->register_memory(p->mem_b.data(), 3 * 4096).ok());
  ASSERT_TRUE(p->a->add_channel(p->p2p->c_conn, p->b->descriptor()).ok());
  ASSERT_TRUE(p->b->add_channel(p->p2p->s_conn, p->a->descriptor()).ok());
  p->ha = *p->a->handle(0);
  p->hb = *p->b->handle(0);
  ASSERT_TRUE(p->start());
  fill_pattern(p->mem_a.data(), p->mem_a.size(), 21);
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(channel_put(p->ha, 0, k * 4096, 0, k * 4096, 4096), kChannelOk);
  }
  ASSERT_EQ(channel_signal(p->ha, 2), kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 2, 1), kChannelOk);
  // All three in place, though the first copy finished last.
  EXPECT_EQ(find_pattern_mismatch(p->mem_b.data(), p->mem_b.size(), 21), -1);
  EXPECT_EQ(late->started(), 3u);
}

// A device whose memory is one address range (the rest is host memory);
// its copies are done at once, and counted.
class RangeDevice : public TestDeviceMemory {
 public:
  void set_range(const void* p, size_t len) {
    lo_ = static_cast<const uint8_t*>(p);
    hi_ = lo_ + len;
  }
  bool is_device(const void* p, size_t len) override {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= lo_ && b + len <= hi_;
  }
  Result<uint64_t> copy_async(void* dst, const void* src, size_t len) override {
    std::memcpy(dst, src, len);
    copies.fetch_add(1);
    return uint64_t{0};
  }
  Result<bool> copy_done(uint64_t) override { return true; }
  std::atomic<int> copies{0};

 private:
  const uint8_t* lo_ = nullptr;
  const uint8_t* hi_ = nullptr;
};

// Host memory (a kernel's mapped buffers) moves by the proxies' own
// memcpy, with no device copy at either end; device memory is copied out
// on the sender and into place on the receiver.
TEST(ChannelProxy, HostMemoryTakesNoDeviceCopy) {
  constexpr size_t kBytes = 100000;  // two pieces of 64 KiB
  auto dev_a = std::make_shared<RangeDevice>();
  auto dev_b = std::make_shared<RangeDevice>();
  std::vector<uint8_t> gpu_a(kBytes), gpu_b(kBytes);  // "device memory"
  dev_a->set_range(gpu_a.data(), kBytes);
  dev_b->set_range(gpu_b.data(), kBytes);
  auto p = std::make_unique<ProxyPair>();
  p->p2p = p2p::Pair::make(p2p::test_config(1));
  ASSERT_NE(p->p2p, nullptr);
  ProxyConfig ca = test_proxy_config(), cb = test_proxy_config();
  ca.device_memory = dev_a;
  cb.device_memory = dev_b;
  p->a = std::move(*ChannelProxy::create(p->p2p->client.get(), ca));
  p->b = std::move(*ChannelProxy::create(p->p2p->server.get(), cb));
  p->mem_a.assign(kBytes, 0);
  p->mem_b.assign(kBytes, 0);
  ASSERT_EQ(*p->a->register_memory(p->mem_a.data(), kBytes), 0u);
  ASSERT_EQ(*p->a->register_memory(gpu_a.data(), kBytes), 1u);
  ASSERT_EQ(*p->b->register_memory(p->mem_b.data(), kBytes), 0u);
  ASSERT_EQ(*p->b->register_memory(gpu_b.data(), kBytes), 1u);
  ASSERT_TRUE(p->a->add_channel(p->p2p->c_conn, p->b->descriptor()).ok());
  ASSERT_TRUE(p->b->add_channel(p->p2p->s_conn, p->a->descriptor()).ok());
  p->ha = *p->a->handle(0);
  p->hb = *p->b->handle(0);
  ASSERT_TRUE(p->start());

  fill_pattern(p->mem_a.data(), kBytes, 31);
  ASSERT_EQ(channel_put_with_signal(p->ha, 0, 0, 0, 0, kBytes, 0), kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 0, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(p->mem_b.data(), kBytes, 31), -1);
  EXPECT_EQ(dev_a->copies.load(), 0);
  EXPECT_EQ(dev_b->copies.load(), 0);

  fill_pattern(gpu_a.data(), kBytes, 32);
  ASSERT_EQ(channel_put_with_signal(p->ha, 1, 0, 1, 0, kBytes, 1), kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 1, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(gpu_b.data(), kBytes, 32), -1);
  EXPECT_EQ(dev_a->copies.load(), 2);  // a piece each
  EXPECT_EQ(dev_b->copies.load(), 2);
}

TEST(ChannelProxy, SetupMistakesAreRefused) {
  auto p = ProxyPair::make(64);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->a->add_channel(p->p2p->c_conn, "short").ok());
  std::string d = p->b->descriptor();
  d[0] ^= 1;
  EXPECT_FALSE(p->a->add_channel(p->p2p->c_conn, d).ok());
  EXPECT_FALSE(p->a->handle(7).ok());
  ASSERT_TRUE(p->start());
  EXPECT_FALSE(p->a->start().ok());
  EXPECT_FALSE(p->a->register_memory(p->mem_a.data(), 8).ok());
  EXPECT_FALSE(ChannelProxy::create(nullptr, test_proxy_config()).ok());
  // A signal names its semaphore in 31 bits (device/trigger.h).
  ProxyConfig too_many = test_proxy_config();
  too_many.num_semaphores = device::kMaxArg + 2u;
  auto r = ChannelProxy::create(p->p2p->server.get(), too_many);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
}

}  // namespace
}  // namespace uccl::channels
