// Puts between host memories as one-sided writes (no copy at either end):
// which puts take the path, signals held until every earlier write has
// landed (at the reader, by count) or is acknowledged, flushes until
// acknowledged (under loss, round after round), and descriptors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/channels/proxy_fixture.h"
#include "util/pattern.h"

namespace uccl::channels {
namespace {

// Puts of at least write_min_bytes go as writes, smaller ones as messages;
// both land, and a put with signal raises its semaphore once.
TEST(ChannelWrites, LargeHostPutsGoAsWritesSmallOnesAsMessages) {
  ProxyConfig cfg = test_proxy_config();
  cfg.write_min_bytes = 64 << 10;
  constexpr size_t kBig = 200000, kSmall = 4096;
  auto p = ProxyPair::make(2 * kBig, cfg);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  fill_pattern(p->mem_a.data(), p->mem_a.size(), 5);
  ASSERT_EQ(channel_put(p->ha, 0, 0, 0, 0, kBig), kChannelOk);
  ASSERT_EQ(channel_put(p->ha, 0, kBig, 0, kBig, kSmall), kChannelOk);
  ASSERT_EQ(channel_put_with_signal(p->ha, 0, kBig + kSmall, 0, kBig + kSmall,
                                    kBig - kSmall, 2),
            kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 2, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(p->mem_b.data(), 2 * kBig, 5), -1);
  const auto s = p->a->stats();
  EXPECT_EQ(s.puts, 3u);
  EXPECT_EQ(s.writes, 2u);
  EXPECT_EQ(s.signals, 1u);
  EXPECT_EQ(s.put_bytes, 2 * kBig);
}

// write_min_bytes = 0: every put goes as messages, and the memory is not
// offered to the peer for writes.
TEST(ChannelWrites, OffMeansEveryPutGoesAsMessages) {
  ProxyConfig cfg = test_proxy_config();
  cfg.write_min_bytes = 0;
  constexpr size_t kBytes = 1 << 20;
  auto p = ProxyPair::make(kBytes, cfg);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  fill_pattern(p->mem_a.data(), kBytes, 6);
  ASSERT_EQ(channel_put_with_signal(p->ha, 0, 0, 0, 0, kBytes, 0), kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 0, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(p->mem_b.data(), kBytes, 6), -1);
  EXPECT_EQ(p->a->stats().writes, 0u);
}

// The writer's transmissions lose 5% of their packets, so writes finish
// late (retransmitted) while a signal message could overtake them. Each
// round the reader checks every byte as soon as the signal arrives, then
// answers so the writer may overwrite its source. A signal acted on before
// the writes landed shows as a stale block. The round's signal is a
// signal of its own, or (small_put) a put too small for a write, sent as a
// message with its signal, behind the writes. on_landing: the signal
// leaves at once and the reader's proxy holds it until the writes' parts
// have landed (the software NIC's landed writes are final); else the
// writer holds it until they are acknowledged.
void signals_wait_for_writes_under_loss(bool small_put,
                                        bool on_landing = true) {
  ProxyConfig cfg = test_proxy_config();
  cfg.write_min_bytes = 16 << 10;
  cfg.signal_on_landing = on_landing;
  constexpr int kBlocks = 4, kRounds = 12;
  constexpr size_t kBlock = 96 << 10, kSmall = 4096;
  // Loss on the writer's endpoint only; it outlives the proxies (declared
  // first, destroyed last).
  p2p::Config lossy_cfg = p2p::test_config(2);
  lossy_cfg.engine.fault_tx = "drop=0.05";
  lossy_cfg.engine.fault_seed = 17;
  auto lossy = p2p::Endpoint::create(lossy_cfg);
  ASSERT_TRUE(lossy.ok()) << lossy.status();
  auto p = std::make_unique<ProxyPair>();
  p->p2p = p2p::Pair::make(p2p::test_config(2));
  ASSERT_NE(p->p2p, nullptr);
  auto conns = connect_more(p->p2p->server.get(), lossy->get());
  ASSERT_TRUE(conns.ok()) << conns.status();
  p->a = std::move(*ChannelProxy::create(lossy->get(), cfg));
  p->b = std::move(*ChannelProxy::create(p->p2p->server.get(), cfg));
  p->mem_a.assign(kBlocks * kBlock + kSmall, 0);
  p->mem_b.assign(kBlocks * kBlock + kSmall, 0);
  ASSERT_TRUE(p->a->register_memory(p->mem_a.data(), p->mem_a.size()).ok());
  ASSERT_TRUE(p->b->register_memory(p->mem_b.data(), p->mem_b.size()).ok());
  ASSERT_TRUE(p->a->add_channel(conns->first, p->b->descriptor()).ok());
  ASSERT_TRUE(p->b->add_channel(conns->second, p->a->descriptor()).ok());
  p->ha = *p->a->handle(0);
  p->hb = *p->b->handle(0);
  ASSERT_TRUE(p->start());

  std::thread reader([&] {
    for (int i = 1; i <= kRounds; ++i) {
      ASSERT_EQ(channel_wait(p->hb, 0, i), kChannelOk) << "round " << i;
      // (The small put's bytes too, where it went.)
      const size_t checked = small_put ? p->mem_b.size() : kBlocks * kBlock;
      ASSERT_EQ(find_pattern_mismatch(p->mem_b.data(), checked, i), -1)
          << "round " << i << ": the signal overtook a write";
      ASSERT_EQ(channel_signal(p->hb, 1), kChannelOk);
    }
  });
  for (int i = 1; i <= kRounds; ++i) {
    fill_pattern(p->mem_a.data(), p->mem_a.size(), i);
    for (int k = 0; k < kBlocks; ++k) {
      ASSERT_EQ(channel_put(p->ha, 0, k * kBlock, 0, k * kBlock, kBlock),
                kChannelOk);
    }
    const size_t tail = kBlocks * kBlock;
    ASSERT_EQ(small_put
                  ? channel_put_with_signal(p->ha, 0, tail, 0, tail, kSmall, 0)
                  : channel_signal(p->ha, 0),
              kChannelOk);
    ASSERT_EQ(channel_wait(p->ha, 1, i), kChannelOk) << "round " << i;
  }
  reader.join();
  const ChannelProxy::Stats sa = p->a->stats(), sb = p->b->stats();
  EXPECT_EQ(sa.writes, uint64_t{kBlocks} * kRounds);
  EXPECT_TRUE(p->a->channel_status(0).ok()) << p->a->channel_status(0);
  if (on_landing) {  // (how many the reader held is up to the timing)
    EXPECT_GT(sa.signals_on_landing, 0u);
  } else {
    EXPECT_EQ(sa.signals_on_landing, 0u);
    EXPECT_EQ(sb.signals_held_for_writes, 0u);
  }
}

TEST(ChannelWrites, SignalsWaitForEveryEarlierWriteUnderLoss) {
  signals_wait_for_writes_under_loss(false);
}

TEST(ChannelWrites, APutsSignalWaitsForEveryEarlierWriteUnderLoss) {
  signals_wait_for_writes_under_loss(true);
}

TEST(ChannelWrites, SignalsHeldByTheWriterWaitForEveryEarlierWriteUnderLoss) {
  signals_wait_for_writes_under_loss(false, false);
  signals_wait_for_writes_under_loss(true, false);
}

// A signal that carries a write mark waits at the reader until those
// writes have landed, and so does every message behind it. The peer here
// is the test, sending in the proxies' format a marked signal (semaphore
// 0) whose mark names a write part not yet posted, then a plain signal
// (semaphore 1); both rise once a notifying write lands.
TEST(ChannelWrites, AMarkedSignalWaitsForItsWritesAndHoldsWhatFollows) {
  auto p = ProxyPair::make(4096, test_proxy_config(), p2p::test_config(2));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->b->start().ok());  // only the reader
  p2p::Endpoint* writer = p->p2p->client.get();
  auto mark = writer->notified_mark(p->p2p->c_conn);
  ASSERT_TRUE(mark.ok()) << mark.status();
  ASSERT_EQ(mark->n, 2u);
  mark->parts[0] = 1;  // the first part of the write below
  const MsgHdr marked{kMsgMagic, MsgKind::kSignal,    kAfterLanded, 0, 0, 0,
                      0,         p2p::kWriteMarkBytes};
  const MsgHdr plain{kMsgMagic, MsgKind::kSignal, 0, 0, 0, 1, 0, 0};
  p2p::Mem msgs(writer, 1024);
  std::memcpy(msgs.ptr(), &marked, sizeof(marked));
  std::memcpy(msgs.ptr(sizeof(marked)), &*mark, p2p::kWriteMarkBytes);
  std::memcpy(msgs.ptr(512), &plain, sizeof(plain));
  for (size_t off : {size_t{0}, size_t{512}}) {
    const size_t len =
        off == 0 ? sizeof(marked) + p2p::kWriteMarkBytes : sizeof(plain);
    auto s = writer->send_async(p->p2p->c_conn, msgs.id, msgs.ptr(off), len);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(writer->wait(*s, 20000).ok());
  }
  ChannelHandle quick = p->hb;
  quick.timeout_ns = 100000000;  // 100 ms
  EXPECT_EQ(channel_wait(quick, 0, 1), kChannelTimedOut);
  EXPECT_EQ(channel_wait(quick, 1, 1), kChannelTimedOut) << "not held";
  EXPECT_EQ(p->b->stats().signals_held_for_writes, 1u);
  // The write the mark names lands; the signals rise, in order.
  constexpr size_t kLen = 2 << 20;  // a part on each engine connection
  p2p::Mem region(p->p2p->server.get(), kLen), src(writer, kLen);
  auto adv = p->p2p->server->advertise(region.id, 0, kLen);
  ASSERT_TRUE(adv.ok()) << adv.status();
  auto w = writer->write_async(p->p2p->c_conn, src.id, src.ptr(), kLen, *adv, 0,
                               true);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(channel_wait(p->hb, 0, 1), kChannelOk);
  EXPECT_EQ(channel_wait(p->hb, 1, 1), kChannelOk);
  ASSERT_TRUE(writer->wait(*w, 20000).ok());
  EXPECT_TRUE(p->b->channel_status(0).ok()) << p->b->channel_status(0);
  EXPECT_EQ(p->b->stats().signals_held_for_writes, 1u);
}

// A flush returns once every earlier write is in the peer's memory.
TEST(ChannelWrites, FlushCoversWrites) {
  ProxyConfig cfg = test_proxy_config();
  cfg.write_min_bytes = 16 << 10;
  constexpr size_t kBytes = 512 << 10;
  auto p = ProxyPair::make(kBytes, cfg);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->start());
  for (int round = 1; round <= 5; ++round) {
    fill_pattern(p->mem_a.data(), kBytes, 40 + round);
    for (size_t off = 0; off < kBytes; off += 128 << 10) {
      ASSERT_EQ(channel_put(p->ha, 0, off, 0, off, 128 << 10), kChannelOk);
    }
    ASSERT_EQ(channel_flush(p->ha), kChannelOk);
    ASSERT_EQ(find_pattern_mismatch(p->mem_b.data(), kBytes, 40 + round), -1)
        << "round " << round;
  }
  EXPECT_EQ(p->a->stats().writes, 20u);
}

// The endpoint's transfer slots all taken (receives on another connection
// of the writer's endpoint): a message's send and a write wait for a slot
// instead of failing their channel, and go once slots are free again.
TEST(ChannelWrites, AFullEndpointDelaysAPutAndFailsNothing) {
  constexpr size_t kBytes = 256 << 10;
  auto p = ProxyPair::make(kBytes);
  ASSERT_NE(p, nullptr);
  auto conns = connect_more(p->p2p->server.get(), p->p2p->client.get());
  ASSERT_TRUE(conns.ok()) << conns.status();
  const p2p::ConnHandle spare = conns->first;
  ASSERT_TRUE(p->start());
  std::vector<uint8_t> sink(64);
  auto mr = p->p2p->client->reg(sink.data(), sink.size());
  ASSERT_TRUE(mr.ok());
  std::vector<p2p::XferHandle> held;
  for (;;) {
    auto h = p->p2p->client->recv_async(spare, *mr, sink.data(), 64);
    if (!h.ok()) {
      ASSERT_EQ(h.status().code(), StatusCode::kResourceExhausted)
          << h.status();
      break;
    }
    held.push_back(*h);
  }
  fill_pattern(p->mem_a.data(), kBytes, 77);
  // A message's send, then a write, both held for a slot.
  ASSERT_EQ(channel_put_with_signal(p->ha, 0, 0, 0, 0, 4096, 1), kChannelOk);
  ASSERT_EQ(channel_put_with_signal(p->ha, 0, 0, 0, 0, kBytes, 0), kChannelOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(p->a->channel_status(0).ok()) << p->a->channel_status(0);
  EXPECT_EQ(p->a->stats().writes, 0u);  // still waiting for a slot
  // Freed: the receives fail with their connection and are polled away.
  ASSERT_TRUE(p->p2p->client->close(spare).ok());
  for (p2p::XferHandle h : held) {
    const Status st = p->p2p->client->wait(h, 10000);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.code(), StatusCode::kTimedOut);
  }
  ASSERT_EQ(channel_wait(p->hb, 1, 1), kChannelOk);
  ASSERT_EQ(channel_wait(p->hb, 0, 1), kChannelOk);
  EXPECT_EQ(find_pattern_mismatch(p->mem_b.data(), kBytes, 77), -1);
  EXPECT_EQ(p->a->stats().writes, 1u);
  EXPECT_TRUE(p->a->channel_status(0).ok()) << p->a->channel_status(0);
}

// A descriptor entry with unknown flags, or a writable one whose region is
// not a region, is refused.
TEST(ChannelWrites, BadDescriptorEntriesAreRefused) {
  auto p = ProxyPair::make(1 << 20);
  ASSERT_NE(p, nullptr);
  const std::string good = p->b->descriptor();
  ASSERT_EQ(good.size(), sizeof(DescHead) + sizeof(DescMem));
  DescMem m;
  std::memcpy(&m, good.data() + sizeof(DescHead), sizeof(m));
  EXPECT_EQ(m.flags, kMemWritable);
  auto with = [&](const DescMem& e) {
    std::string d = good;
    std::memcpy(d.data() + sizeof(DescHead), &e, sizeof(e));
    return p->a->add_channel(p->p2p->c_conn, d).status();
  };
  DescMem bad = m;
  bad.flags |= 2;
  EXPECT_EQ(with(bad).code(), StatusCode::kInvalidArgument);
  bad = m;
  bad.region[0] ^= 1;  // the region's magic
  EXPECT_EQ(with(bad).code(), StatusCode::kInvalidArgument);
  bad = m;
  bad.len += 1;  // disagrees with the region
  EXPECT_EQ(with(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(with(m).ok());
}

}  // namespace
}  // namespace uccl::channels
