// Unit tests for NIC-layer pieces: the MR table (bounds, keys, concurrent
// registration), fault-injector specs and determinism, verbs helpers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "transport/fault/fault_injector.h"
#include "transport/nic.h"
#include "transport/soft/mr_table.h"
#ifdef UCCL_HAVE_VERBS
#include "transport/verbs/verbs_util.h"
#endif

namespace uccl::transport {
namespace {

using soft::MrTable;

// Reading one counter back from counters_text(): every line of that name is
// summed (a fault-wrapped device lists its inner device's), a name that is
// a prefix of another, or a line without a value, adds nothing.
TEST(CounterSumTest, SumsLinesOfThatNameOnly) {
  const std::string text =
      "rx_packets 10\nrx_packets_direct 7\nrc_timeouts 3\nrx_packets\n"
      "fault_tx_dropped 2\nrc_timeouts 4";
  EXPECT_EQ(counter_sum(text, "rx_packets"), 10u);
  EXPECT_EQ(counter_sum(text, "rc_timeouts"), 7u);
  EXPECT_EQ(counter_sum(text, "rx"), 0u);
  EXPECT_EQ(counter_sum(text, "missing"), 0u);
  EXPECT_EQ(counter_sum("", "rx_packets"), 0u);
}

TEST(CounterText, NonzeroCountersNameOnlyThoseWithThePrefix) {
  const std::string text =
      "rx_packets 10\ndrop_no_recv 0\ndrop_kernel_rcvbuf 12\ndrop_\n"
      "drop_duplicate 3\nfault_drop_x 5\ndrop_bad_crc 18446744073709551615";
  EXPECT_EQ(nonzero_counters(text, "drop_"),
            "drop_kernel_rcvbuf=12 drop_duplicate=3 "
            "drop_bad_crc=18446744073709551615");
  EXPECT_EQ(nonzero_counters(text, "rx_"), "rx_packets=10");
  EXPECT_EQ(nonzero_counters(text, "tx_"), "");
  EXPECT_EQ(nonzero_counters("", "drop_"), "");
}

TEST(MrTableTest, BoundsKeysAndAccess) {
  MrTable t;
  auto k = t.add(0x10000, 0x1000, kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(k.ok());
  uint32_t key = *k;
  EXPECT_EQ(t.check(key, 0x10000, 0x1000, kAccessRemoteWrite),
            MrTable::Check::kOk);
  EXPECT_EQ(t.check(key, 0x10fff, 1, 0), MrTable::Check::kOk);
  EXPECT_EQ(t.check(key, 0x11000, 0, 0), MrTable::Check::kOk);  // empty at end
  EXPECT_EQ(t.check(key, 0x10fff, 2, 0), MrTable::Check::kOutOfBounds);
  EXPECT_EQ(t.check(key, 0xffff, 1, 0), MrTable::Check::kOutOfBounds);
  EXPECT_EQ(t.check(key, ~0ull - 1, 8, 0), MrTable::Check::kOutOfBounds);
  EXPECT_EQ(t.check(key, 0x10000, ~0ull, 0), MrTable::Check::kOutOfBounds);
  EXPECT_EQ(t.check(key, 0x10000, 1, kAccessRemoteRead),
            MrTable::Check::kNoAccess);
  EXPECT_EQ(t.check(key ^ 0x10000, 0x10000, 1, 0), MrTable::Check::kBadKey);
  EXPECT_EQ(t.check(0, 0x10000, 1, 0), MrTable::Check::kBadKey);
  t.remove(key);
  EXPECT_EQ(t.check(key, 0x10000, 1, 0), MrTable::Check::kBadKey);
  // The slot is reused with a new generation: the old key stays invalid.
  auto k2 = t.add(0x10000, 0x1000, 0);
  ASSERT_TRUE(k2.ok());
  EXPECT_NE(*k2, key);
  EXPECT_EQ(t.check(key, 0x10000, 1, 0), MrTable::Check::kBadKey);
  t.remove(*k2);
}

TEST(MrTableTest, ConcurrentRegistrationWhileCheckingIsSafe) {
  MrTable t;
  uint32_t stable =
      *t.add(0x1000, 0x1000, kAccessRemoteWrite | kAccessLocalWrite);
  std::atomic<bool> stop{false}, checking{false};
  std::thread churn([&] {
    while (!checking) std::this_thread::yield();  // overlap with the checks
    for (int i = 0; i < 20000; ++i) {
      auto k = t.add(0x100000 + i * 64, 64, kAccessLocalWrite);
      if (k.ok()) t.remove(*k);
    }
    stop = true;
  });
  uint64_t checks = 0;
  checking = true;
  while (!stop || checks == 0) {
    ASSERT_EQ(t.check(stable, 0x1800, 16, kAccessRemoteWrite),
              MrTable::Check::kOk);
    // Keys being churned: any answer but a crash or a false kOk for the
    // stable key's bounds is fine.
    EXPECT_NE(t.check(stable, 0x100000, 64, 0), MrTable::Check::kOk);
    ++checks;
  }
  churn.join();
  EXPECT_GT(checks, 0u);
}

TEST(MrTableTest, ManyRegions) {
  MrTable t;
  std::vector<uint32_t> keys;
  for (int i = 0; i < 3000; ++i) {
    auto k = t.add(i * 4096ull + 4096, 4096, kAccessLocalWrite);
    ASSERT_TRUE(k.ok());
    keys.push_back(*k);
  }
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(t.check(keys[i], i * 4096ull + 4096, 4096, kAccessLocalWrite),
              MrTable::Check::kOk);
  }
  for (uint32_t k : keys) t.remove(k);
}

TEST(FaultSpecTest, ParsesAndRejects) {
  auto s = FaultSpec::parse(
      "drop=0.01,burst=0.001:8,reorder=0.02:5,dup=0.5,"
      "delay=0.1:250,corrupt=1e-4");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->drop, 0.01);
  EXPECT_EQ(s->burst_len, 8u);
  EXPECT_EQ(s->reorder_window, 5u);
  EXPECT_DOUBLE_EQ(s->duplicate, 0.5);
  EXPECT_EQ(s->delay_us, 250u);
  EXPECT_DOUBLE_EQ(s->corrupt, 1e-4);
  EXPECT_EQ(s->reorder_max_us, 1000u);  // the default longest hold
  EXPECT_TRUE(s->any());
  auto held = FaultSpec::parse("reorder=0.5:1400:250000");
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->reorder_window, 1400u);
  EXPECT_EQ(held->reorder_max_us, 250000u);
  FaultOptions ho;
  ho.rx = *held;
  FaultInjector hi(ho);
  FaultDecision d;
  while (d.reorder_after == 0) d = hi.decide(Direction::kRx);
  EXPECT_EQ(d.reorder_max_ns, 250000000u);
  EXPECT_FALSE(FaultSpec::parse("")->any());
  for (const char* bad :
       {"drop", "drop=2", "drop=-0.1", "drop=x", "loss=0.1", "drop=0.1:3",
        "burst=0.1:0", "reorder=0.1:x", "reorder=0.1:4:0", "reorder=0.1:4:x",
        "drop=0.1:3:4"}) {
    auto r = FaultSpec::parse(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

// A stall is the send call's: transmit only, counted, and its length.
TEST(FaultSpecTest, StallsAreTransmitOnly) {
  auto s = FaultSpec::parse("stall=0.25:3000");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->stall, 0.25);
  EXPECT_EQ(s->stall_us, 3000u);
  EXPECT_TRUE(s->any());
  EXPECT_NE(s->to_string().find("stall=0.25:3000"), std::string::npos)
      << s->to_string();
  FaultOptions o;
  o.tx = *s;
  EXPECT_TRUE(o.validate().ok());
  FaultInjector f(o);
  int stalled = 0;
  for (int i = 0; i < 4000; ++i) {
    const FaultDecision d = f.decide(Direction::kTx);
    if (d.stall_ns != 0) {
      EXPECT_EQ(d.stall_ns, 3000000u);
      ++stalled;
    }
  }
  EXPECT_EQ(f.counters(Direction::kTx).stalled, static_cast<uint64_t>(stalled));
  EXPECT_NEAR(stalled / 4000.0, 0.25, 0.05);
  EXPECT_NE(f.counters_text().find("fault_tx_stalled "), std::string::npos);
  o.rx = *s;  // a receive has no send call to stall
  const Status v = o.validate();
  EXPECT_EQ(v.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("transmissions only"), std::string::npos) << v;
  EXPECT_FALSE(FaultSpec::parse("stall=0.1:0").ok());
}

TEST(FaultInjectorTest, SameSeedSameDecisions) {
  FaultOptions o;
  o.tx = *FaultSpec::parse("drop=0.1,dup=0.1,reorder=0.1:3,corrupt=0.1");
  o.seed = 77;
  FaultInjector a(o), b(o);
  for (int i = 0; i < 10000; ++i) {
    FaultDecision x = a.decide(Direction::kTx), y = b.decide(Direction::kTx);
    ASSERT_EQ(x.drop, y.drop);
    ASSERT_EQ(x.duplicate, y.duplicate);
    ASSERT_EQ(x.reorder_after, y.reorder_after);
    ASSERT_EQ(x.corrupt_bit, y.corrupt_bit);
  }
  EXPECT_FALSE(a.enabled(Direction::kRx));
}

TEST(FaultInjectorTest, RatesMatchTheSpec) {
  FaultOptions o;
  o.rx = *FaultSpec::parse("drop=0.05");
  o.seed = 3;
  FaultInjector f(o);
  const int n = 200000;
  for (int i = 0; i < n; ++i) f.decide(Direction::kRx);
  double rate = static_cast<double>(f.counters(Direction::kRx).dropped) / n;
  EXPECT_NEAR(rate, 0.05, 0.003);  // ~6 sigma for this n
  EXPECT_EQ(f.counters(Direction::kRx).packets, static_cast<uint64_t>(n));
}

TEST(FaultInjectorTest, BurstsDropConsecutivePackets) {
  FaultOptions o;
  o.tx = *FaultSpec::parse("burst=0.01:6");
  o.seed = 9;
  FaultInjector f(o);
  int run = 0, bursts = 0;
  std::vector<int> runs;
  for (int i = 0; i < 50000; ++i) {
    if (f.decide(Direction::kTx).drop) {
      ++run;
    } else if (run) {
      runs.push_back(run);
      run = 0;
      ++bursts;
    }
  }
  ASSERT_GT(bursts, 100);
  for (int r : runs) EXPECT_EQ(r % 6, 0) << "bursts come in runs of 6";
}

TEST(FaultInjectorTest, BurstsEndAfterAMillisecond) {
  FaultOptions o;
  o.tx = *FaultSpec::parse("burst=1:8");  // every packet starts a burst
  FaultInjector f(o);
  const uint64_t t0 = 5000000;
  ASSERT_TRUE(f.decide(Direction::kTx, t0).drop);         // starts a burst
  ASSERT_TRUE(f.decide(Direction::kTx, t0 + 1000).drop);  // within it
  EXPECT_EQ(f.counters(Direction::kTx).burst_dropped, 2u);
  // An idle millisecond later the episode is over: the next packet is not
  // its 3rd drop (and new bursts are now all but impossible).
  o.tx = *FaultSpec::parse("burst=0.000001:8");
  f.set_spec(Direction::kTx, o.tx);
  EXPECT_FALSE(
      f.decide(Direction::kTx, t0 + FaultInjector::kBurstMaxNs + 1).drop);
  // Without a clock a burst is bounded by its count only.
  FaultInjector g(o);
  g.set_spec(Direction::kTx, *FaultSpec::parse("burst=1:3"));
  ASSERT_TRUE(g.decide(Direction::kTx).drop);
  g.set_spec(Direction::kTx, *FaultSpec::parse("burst=0.000001:3"));
  EXPECT_TRUE(g.decide(Direction::kTx).drop);
  EXPECT_TRUE(g.decide(Direction::kTx).drop);
  EXPECT_FALSE(g.decide(Direction::kTx).drop);
}

#ifdef UCCL_HAVE_VERBS
using verbs::GidEntry;

GidEntry gid(int index, std::initializer_list<uint8_t> bytes,
             const char* type) {
  GidEntry e;
  e.index = index;
  int i = 0;
  for (uint8_t b : bytes) e.gid[i++] = b;
  e.type = type;
  return e;
}

TEST(VerbsUtilTest, GidChoicePrefersRoceV2Ipv4) {
  GidEntry link_local_v1 = gid(
      0, {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, "IB/RoCE v1");
  GidEntry link_local_v2 =
      gid(1, {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, "RoCE v2");
  GidEntry v4_v1 = gid(
      2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, "IB/RoCE v1");
  GidEntry v4_v2 = gid(
      3, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, "RoCE v2");
  GidEntry zero = gid(4, {}, "RoCE v2");
  std::vector<GidEntry> t{link_local_v1, link_local_v2, v4_v1, v4_v2, zero};
  EXPECT_EQ(verbs::choose_gid_index(t, -1), 3);
  EXPECT_EQ(verbs::choose_gid_index(t, 2), 2);   // explicit choice wins
  EXPECT_EQ(verbs::choose_gid_index(t, 4), 3);   // ... unless it is empty
  EXPECT_EQ(verbs::choose_gid_index(t, 99), 3);  // ... or absent
  EXPECT_EQ(verbs::choose_gid_index({link_local_v1, link_local_v2}, -1), 0);
  EXPECT_EQ(verbs::choose_gid_index({zero}, -1), -1);
  // InfiniBand tables have no types: first non-zero GID.
  EXPECT_EQ(verbs::choose_gid_index({zero, gid(7, {0xfe, 0x80, 1}, "")}, -1),
            7);
}

TEST(VerbsUtilTest, BackendParamsTakeAGidIndexOnly) {
  auto p = verbs::VerbsParams::parse("");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->gid_index, -1);
  p = verbs::VerbsParams::parse("gid_index=3");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->gid_index, 3);
  for (const char* bad : {"gid_index=", "gid_index=-1", "gid_index=256",
                          "gid_index=3x", "mtu=1024", "gid_index"}) {
    EXPECT_EQ(verbs::VerbsParams::parse(bad).status().code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(VerbsUtilTest, StatusAndMtuMapping) {
  EXPECT_EQ(verbs::map_wc_status(IBV_WC_SUCCESS), WcStatus::kSuccess);
  EXPECT_EQ(verbs::map_wc_status(IBV_WC_RETRY_EXC_ERR),
            WcStatus::kRetryExceeded);
  EXPECT_EQ(verbs::map_wc_status(IBV_WC_REM_ACCESS_ERR),
            WcStatus::kRemoteAccessError);
  EXPECT_EQ(verbs::map_wc_status(IBV_WC_WR_FLUSH_ERR), WcStatus::kWrFlushError);
  EXPECT_EQ(verbs::map_wc_status(IBV_WC_FATAL_ERR), WcStatus::kGeneralError);
  EXPECT_EQ(verbs::mtu_enum_to_bytes(IBV_MTU_4096), 4096u);
  EXPECT_EQ(verbs::mtu_bytes_to_enum(4096), IBV_MTU_4096);
  EXPECT_EQ(verbs::mtu_bytes_to_enum(9000), IBV_MTU_4096);
  EXPECT_EQ(verbs::mtu_bytes_to_enum(1500), IBV_MTU_1024);
  EXPECT_EQ(verbs::mtu_bytes_to_enum(100), IBV_MTU_256);
}

TEST(VerbsUtilTest, QpAttributesFollowTheSpecPerType) {
  QpInfo remote;
  remote.qpn = 0x1234;
  remote.psn = 0x1abcdef;  // only 24 bits go to the NIC
  remote.addr.lid = 7;
  ipv4_to_gid(0x0100000a, remote.addr.gid);
  RcAttrs rc;
  ibv_qp_attr a;
  int mask;
  verbs::build_rtr_attr(QpType::kUC, remote, 1, true, 3, IBV_MTU_4096, rc, &a,
                        &mask);
  EXPECT_EQ(a.dest_qp_num, 0x1234u);
  EXPECT_EQ(a.rq_psn, 0xabcdefu);
  EXPECT_EQ(a.ah_attr.is_global, 1);
  EXPECT_EQ(a.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(std::memcmp(a.ah_attr.grh.dgid.raw, remote.addr.gid, 16), 0);
  EXPECT_FALSE(mask & IBV_QP_MAX_DEST_RD_ATOMIC) << "UC must not set RC fields";
  verbs::build_rtr_attr(QpType::kRC, remote, 1, false, 0, IBV_MTU_2048, rc, &a,
                        &mask);
  EXPECT_EQ(a.ah_attr.is_global, 0);
  EXPECT_EQ(a.ah_attr.dlid, 7);
  EXPECT_TRUE(mask & IBV_QP_MIN_RNR_TIMER);
  verbs::build_rts_attr(QpType::kUC, 5, rc, &a, &mask);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN);
  verbs::build_rts_attr(QpType::kRC, 5, rc, &a, &mask);
  EXPECT_TRUE(mask & IBV_QP_RETRY_CNT);
  EXPECT_EQ(a.timeout, rc.timeout);
  verbs::build_init_attr(QpType::kUC, 1, &a, &mask);
  EXPECT_FALSE(a.qp_access_flags & IBV_ACCESS_REMOTE_READ);
  verbs::build_init_attr(QpType::kRC, 1, &a, &mask);
  EXPECT_TRUE(a.qp_access_flags & IBV_ACCESS_REMOTE_READ);
}
#endif

TEST(GidTest, Ipv4MappedRoundTrip) {
  uint8_t g[16];
  ipv4_to_gid(0x0201a8c0, g);
  uint32_t ip = 0;
  ASSERT_TRUE(gid_to_ipv4(g, &ip));
  EXPECT_EQ(ip, 0x0201a8c0u);
  g[0] = 0xfe;
  EXPECT_FALSE(gid_to_ipv4(g, &ip));
}

}  // namespace
}  // namespace uccl::transport
