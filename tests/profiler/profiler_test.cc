// Unit tests of the NCCL profiler plugin's core on an injected clock: the
// event pool (drops, second stops, handle checks), the mask's parsing, the
// per-state step times, the per-collective analysis and the summary.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "collective/net_event.h"
#include "profiler/analysis.h"
#include "profiler/comm.h"
#include "profiler/events.h"
#include "profiler/trace.h"

namespace uccl::profiler {
namespace {

uint64_t g_now = 0;
uint64_t fake_clock() { return g_now; }

TEST(ProfilerMask, NamesNumbersAndAll) {
  uint64_t m = 0;
  EXPECT_TRUE(parse_mask("all", &m));
  EXPECT_EQ(m, abi::kAllV5Types);
  EXPECT_TRUE(parse_mask("coll,proxystep,net", &m));
  EXPECT_EQ(m, abi::kColl | abi::kProxyStep | abi::kNetPlugin);
  EXPECT_TRUE(parse_mask("proxyop|kernelch", &m));
  EXPECT_EQ(m, abi::kProxyOp | abi::kKernelCh);
  EXPECT_TRUE(parse_mask("0x18", &m));
  EXPECT_EQ(m, abi::kProxyOp | abi::kProxyStep);
  EXPECT_TRUE(parse_mask("2", &m));
  EXPECT_EQ(m, abi::kColl);
  for (const char* bad : {"", "colls", "coll,,net", "0x1000", "12abc", ","}) {
    EXPECT_FALSE(parse_mask(bad, &m)) << bad;
  }
}

TEST(EventPool, FullPoolDropsAndCountsByKind) {
  EventPool pool(3, fake_clock);
  EXPECT_NE(pool.start(Kind::kColl), nullptr);
  EXPECT_NE(pool.start(Kind::kProxyOp), nullptr);
  EXPECT_NE(pool.start(Kind::kProxyStep), nullptr);
  EXPECT_EQ(pool.start(Kind::kProxyStep), nullptr);
  EXPECT_EQ(pool.start(Kind::kNetPlugin), nullptr);
  EXPECT_EQ(pool.used(), 3u);
  EXPECT_EQ(pool.dropped_total(), 2u);
  EXPECT_EQ(pool.counters().dropped[static_cast<int>(Kind::kProxyStep)].load(),
            1u);
}

TEST(EventPool, HandlesAreCheckedAndStopsCountOnce) {
  EventPool pool(8, fake_clock);
  g_now = 100;
  Event* a = pool.start(Kind::kColl);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(pool.index_of(a), 0);
  EXPECT_EQ(pool.index_of(reinterpret_cast<char*>(a) + 1), -1);  // inside
  EXPECT_EQ(pool.index_of(a + 1), -1);  // a slot not started yet
  int local;
  EXPECT_EQ(pool.index_of(&local), -1);
  EXPECT_EQ(pool.index_of(nullptr), -1);
  g_now = 250;
  pool.stop(a);
  g_now = 400;
  pool.stop(a);  // a second stop: counted, the first one's time stays
  EXPECT_EQ(a->stop_ns, 250u);
  EXPECT_EQ(pool.counters().bad_calls.load(), 1u);
}

// A send step: started at 0, GPU wait at 10, peer wait at 30, network at
// 35, stopped at 100; a receive: network at 5, GPU consume at 60, stop 70.
TEST(StepTimes, EachStateLastsUntilTheNext) {
  EventPool pool(4, fake_clock);
  g_now = 0;
  Event* s = pool.start(Kind::kProxyStep);
  for (auto [t, st] : {std::pair<uint64_t, int>{10, abi::kSendGpuWait},
                       {30, abi::kSendPeerWait},
                       {35, abi::kSendWait}}) {
    g_now = t;
    pool.record_state(s, st, nullptr);
  }
  g_now = 100;
  pool.stop(s);
  StepTimes t = step_times(*s, 1000);
  EXPECT_EQ(t.proxy, 10u);
  EXPECT_EQ(t.gpu_wait, 20u);
  EXPECT_EQ(t.peer_wait, 5u);
  EXPECT_EQ(t.network, 65u);
  EXPECT_EQ(t.total(), 100u);
  // Unstopped: the last state runs to the end given.
  g_now = 0;
  Event* r = pool.start(Kind::kProxyStep);
  g_now = 5;
  pool.record_state(r, abi::kRecvWait, nullptr);
  g_now = 60;
  pool.record_state(r, abi::kRecvGpuWait, nullptr);
  t = step_times(*r, 70);
  EXPECT_EQ(t.network, 55u);
  EXPECT_EQ(t.gpu_consume, 10u);
  EXPECT_EQ(t.proxy, 5u);
}

TEST(StepTimes, ManyTransitionsKeepTheLatest) {
  EventPool pool(2, fake_clock);
  g_now = 0;
  Event* c = pool.start(Kind::kProxyCtrl);
  for (int i = 0; i < 20; ++i) {
    g_now = 10 * (i + 1);
    pool.record_state(c, i % 2 ? abi::kCtrlActive : abi::kCtrlIdle, nullptr);
  }
  EXPECT_EQ(c->nstates, kMaxStates);
  EXPECT_EQ(c->state_ns[kMaxStates - 1], 200u);
  EXPECT_EQ(c->states[kMaxStates - 1], abi::kCtrlActive);
}

// One all_reduce: Coll under a CollApi, a send op on channel 0 and a
// receive op on channel 1, two steps each, a UCCL net event per step.
struct Scenario {
  EventPool pool{64, fake_clock};
  Event* api = nullptr;
  Event* coll = nullptr;
  Event* steps[4] = {};

  void net(Event* step, uint32_t resent, uint64_t bytes, uint8_t op) {
    Event* n = pool.start(Kind::kNetPlugin);
    n->parent = pool.index_of(step);
    ncclabi::UcclNetEventV1 u{};
    u.type = ncclabi::kUcclNetMessage;
    u.op = op;
    u.parts = 2;
    u.bytes = bytes;
    pool.set_net(n, ncclabi::kNetTypeUccl | ncclabi::kNetUcclVersion, &u,
                 false);
    u.done = 1;
    u.retransmits = resent;
    u.rtt_ns = 40000;
    u.cwnd_bytes = 65536;
    u.paths = 3;
    abi::StateArgs args;
    args.netPlugin.data = &u;
    g_now += 1;
    pool.record_state(n, abi::kNetPluginUpdate, &args);
    pool.stop(n);
  }

  Scenario() {
    g_now = 1000;
    api = pool.start(Kind::kCollApi);
    api->func = "AllReduce";
    g_now = 1010;
    coll = pool.start(Kind::kColl);
    coll->parent = pool.index_of(api);
    coll->func = "AllReduce";
    coll->count = 1024;
    coll->dtype = "ncclFloat32";
    coll->algo = "RING";
    coll->proto = "SIMPLE";
    coll->nchannels = 2;
    g_now = 1030;
    pool.stop(api);
    for (int ch = 0; ch < 2; ++ch) {
      g_now = 1040;
      Event* op = pool.start(Kind::kProxyOp);
      op->parent = pool.index_of(coll);
      op->channel = static_cast<uint8_t>(ch);
      op->peer = 1;
      op->is_send = ch == 0;
      for (int k = 0; k < 2; ++k) {
        g_now = 1050 + 100 * k;
        Event* s = pool.start(Kind::kProxyStep);
        s->parent = pool.index_of(op);
        s->step = k;
        steps[ch * 2 + k] = s;
        g_now += 10;
        pool.record_state(s, ch == 0 ? abi::kSendWait : abi::kRecvWait,
                          nullptr);
        abi::StateArgs a;
        a.proxyStep.transSize = 2048;
        pool.record_state(s, ch == 0 ? abi::kSendWait : abi::kRecvWait, &a);
        g_now += 50 + 200 * k * ch;  // channel 1's second step is slow
        net(s, ch == 1 && k == 1 ? 7 : 0, 2048, ch == 0 ? 0 : 1);
        pool.stop(s);
      }
      g_now = 1500;
      pool.stop(op);
    }
    g_now = 1020;
    pool.stop(coll);  // host side done early, the network later
  }
};

TEST(Analysis, CollectiveSpansItsStepsPerChannel) {
  Scenario s;
  const Analysis a = analyze(s.pool, 2000, 2);
  ASSERT_EQ(a.colls.size(), 1u);
  const CollReport& r = a.colls[0];
  EXPECT_EQ(r.bytes, 4096u);
  EXPECT_EQ(r.start_ns, 1010u);
  EXPECT_EQ(r.end_ns, 1500u);  // the last proxy op's stop
  EXPECT_EQ(r.api_ns, 30u);
  EXPECT_EQ(r.retransmits, 7u);
  EXPECT_FALSE(r.unfinished);
  ASSERT_EQ(r.channels.size(), 2u);
  EXPECT_EQ(r.channels[0].channel, 0);
  EXPECT_EQ(r.channels[0].steps, 2);
  EXPECT_EQ(r.channels[0].bytes, 4096u);
  EXPECT_EQ(r.channels[1].retransmits, 7u);
  EXPECT_EQ(r.channels[0].retransmits, 0u);
  // Each step: 10 ns before its first state, then the network until its
  // net event's update (+1) and stop.
  EXPECT_EQ(r.channels[0].t.proxy, 20u);
  EXPECT_EQ(r.channels[0].t.network, 102u);
  EXPECT_EQ(r.channels[1].t.network, 302u);
  // The slowest step first: channel 1's second.
  ASSERT_EQ(r.slowest.size(), 2u);
  EXPECT_EQ(r.slowest[0], s.pool.index_of(s.steps[3]));
  // Counts for the trace's metadata.
  EXPECT_EQ(a.stats.net_uccl, 4u);
  EXPECT_EQ(a.stats.net_updated, 4u);
  EXPECT_EQ(a.stats.net_under_step, 4u);
  EXPECT_EQ(a.stats.net_retransmits, 7u);
  EXPECT_EQ(a.stats.unfinished, 0u);
}

TEST(Analysis, SummaryNamesTheSlowestStepAndItsCongestionState) {
  Scenario s;
  const Analysis a = analyze(s.pool, 2000, 1);
  const std::string text = summary_text(s.pool, a, "head\n");
  EXPECT_NE(text.find("#0 AllReduce 4096 B (1024 x ncclFloat32) RING/SIMPLE "
                      "2 ch: total 0.5, host 0.0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ch 1 peer 1 recv step 1 (2048 B)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("7 resent, rtt 40.0 us, cwnd 65536 B, 3 paths"),
            std::string::npos)
      << text;
}

TEST(Analysis, UnstoppedEventsEndAtFinalizeAndAreMarked) {
  EventPool pool(8, fake_clock);
  g_now = 10;
  Event* c = pool.start(Kind::kColl);
  Event* op = pool.start(Kind::kProxyOp);
  op->parent = pool.index_of(c);
  const Analysis a = analyze(pool, 90, 1);
  ASSERT_EQ(a.colls.size(), 1u);
  EXPECT_TRUE(a.colls[0].unfinished);
  EXPECT_EQ(a.colls[0].end_ns, 90u);
  EXPECT_EQ(a.stats.unfinished, 2u);
}

TEST(Trace, JsonEscapesWhatItMust) {
  EXPECT_EQ(json_escape("a\"b\\c\n"), "a\\\"b\\\\c\\u000a");
}

TEST(Datatype, SizesFromNcclNames) {
  EXPECT_EQ(datatype_bytes("ncclFloat32"), 4u);
  EXPECT_EQ(datatype_bytes("ncclFloat16"), 2u);
  EXPECT_EQ(datatype_bytes("ncclBfloat16"), 2u);
  EXPECT_EQ(datatype_bytes("ncclInt64"), 8u);
  EXPECT_EQ(datatype_bytes("ncclUint8"), 1u);
  EXPECT_EQ(datatype_bytes("ncclFloat64"), 8u);
  EXPECT_EQ(datatype_bytes(nullptr), 1u);
}

}  // namespace
}  // namespace uccl::profiler
