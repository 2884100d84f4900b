// Tests for nccl_perf's host-side logic: size lists and their errors, the
// exact-sum data pattern and its check, and the comparison table.
#include "tools/nccl_perf_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace uccl::tools {
namespace {

TEST(NcclPerfUtil, ParsesSizesWithSuffixes) {
  auto s = parse_sizes("4,64,1K,16k,256M,1G");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, (std::vector<uint64_t>{4, 64, 1024, 16384, 256ull << 20,
                                       1ull << 30}));
  auto one = parse_sizes(",8,,");  // empty entries are ignored
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<uint64_t>{8});
}

TEST(NcclPerfUtil, RejectsBadSizes) {
  for (const char* bad : {"", ",", "0", "6", "4X", "4KB", "-4", "K",
                          "99999999999999999999", "18014398509481984G"}) {
    auto s = parse_sizes(bad);
    EXPECT_FALSE(s.ok()) << "'" << bad << "' was accepted";
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_NE(parse_sizes("4,6").status().message().find("'6'"),
            std::string::npos);
}

TEST(NcclPerfUtil, NetSpecsCarryTheirOwnEnvironment) {
  auto plain = parse_net_spec("Socket4x4");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->base, "Socket4x4");
  EXPECT_TRUE(plain->env.empty());
  auto v = parse_net_spec("UCCL+UCCL_NCCL_SPEED_MBPS=400000+NCCL_PROTO=");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->base, "UCCL");
  ASSERT_EQ(v->env.size(), 2u);
  EXPECT_EQ(v->env[0].first, "UCCL_NCCL_SPEED_MBPS");
  EXPECT_EQ(v->env[0].second, "400000");
  EXPECT_EQ(v->env[1].first, "NCCL_PROTO");
  EXPECT_EQ(v->env[1].second, "");  // set, and empty
  for (const char* bad : {"", "Uccl", "UCCL+", "UCCL+X", "UCCL+=1",
                          "UCCL+lower=1", "UCCL+A-B=1", "Socket++A=1"}) {
    auto s = parse_net_spec(bad);
    EXPECT_FALSE(s.ok()) << "'" << bad << "' was accepted";
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_NE(parse_net_spec("UCCL+A=1+bad").status().message().find("'bad'"),
            std::string::npos);
  for (const char* floor : {"SHM", "P2P"}) {
    auto f = parse_net_spec(floor);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE(is_floor_net(f->base)) << floor;
  }
  EXPECT_FALSE(is_floor_net("Socket"));
  EXPECT_FALSE(is_floor_net("UCCL"));
}

TEST(NcclPerfUtil, IterationsAreCappedByBytes) {
  EXPECT_EQ(perf_iters(4, 1000, 4ull << 30), 1000u);
  EXPECT_EQ(perf_iters(256ull << 20, 1000, 4ull << 30), 16u);
  EXPECT_EQ(perf_iters(1ull << 30, 1000, 4ull << 30), 5u);  // floor of 5
}

TEST(NcclPerfUtil, PatternSumsAreExactAndChecked) {
  // Summing every rank's input gives the expected value, exactly, for
  // element indices past float's 2^24 integer range of the index itself.
  const int nranks = 8;
  const size_t n = 1000;
  for (size_t base : {size_t{0}, size_t{1} << 26}) {
    std::vector<float> out(n, 0.0f);
    for (int r = 0; r < nranks; ++r) {
      for (size_t i = 0; i < n; ++i) out[i] += perf_input(r, base + i);
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], perf_expected(nranks, base + i)) << i;
    }
  }
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = perf_expected(2, i);
  EXPECT_EQ(perf_check(out.data(), n, 2), 0u);
  EXPECT_EQ(perf_check(out.data(), n, 3), n);  // every element differs
  out[7] = NAN;
  out[500] += 1.0f;
  EXPECT_EQ(perf_check(out.data(), n, 2), 2u);
}

PerfRow row(uint64_t bytes, double time_us, double host_us = 1.0) {
  PerfRow r;
  r.bytes = bytes;
  r.time_us = time_us;
  r.host_us = host_us;
  return r;
}

TEST(NcclPerfUtil, TableGivesMediansRatiosAndRoundWins) {
  std::vector<std::string> nets = {"UCCL", "Socket", "Socket4x4"};
  // 3 rounds. 4 B: UCCL 10/12/11 (median 11), Socket 13/11/14 (13),
  // Socket4x4 20/20/20: UCCL beats both in rounds 1 and 3 only.
  // 1 MiB: UCCL 100 each round, Socket 200, Socket4x4 150 (best).
  std::vector<std::vector<std::vector<PerfRow>>> res(3);
  double u4[] = {10, 12, 11}, s4[] = {13, 11, 14};
  for (int r = 0; r < 3; ++r) {
    res[0].push_back({row(4, u4[r], 2.0), row(1 << 20, 100)});
    res[1].push_back({row(4, s4[r]), row(1 << 20, 200)});
    res[2].push_back({row(4, 20), row(1 << 20, 150)});
  }
  std::string t = perf_table(nets, res, 2);
  EXPECT_NE(t.find("| size (B) | UCCL us | Socket us | Socket4x4 us | UCCL "
                   "host us | UCCL busbw GB/s | best baseline busbw GB/s"),
            std::string::npos)
      << t;
  // 4 B: medians 11.0 / 13.0 / 20.0, host 2.0, ratio 13/11, 2 of 3 rounds.
  EXPECT_NE(t.find("| 4 | 11.0 | 13.0 | 20.0 | 2.0 | 0.00 | 0.00 | 1.18 | "
                   "2/3 |"),
            std::string::npos)
      << t;
  // 1 MiB: busbw = 1048576 B / 100 us = 10.49 GB/s algbw, x1 for 2 ranks.
  EXPECT_NE(t.find("| 1048576 | 100.0 | 200.0 | 150.0 | 1.0 | 10.49 | 6.99 | "
                   "1.50 | 3/3 |"),
            std::string::npos)
      << t;
}

TEST(NcclPerfUtil, FailedRunsAreLeftOutOfMediansAndRounds) {
  std::vector<std::string> nets = {"UCCL", "Socket"};
  std::vector<std::vector<std::vector<PerfRow>>> res(2);
  res[0] = {{row(4, 10)}, {row(4, 30)}, {row(4, 12)}};
  res[1] = {{row(4, 11)}, {}, {row(4, 13)}};  // round 2's Socket run failed
  std::string t = perf_table(nets, res, 2);
  // UCCL median of 10/30/12 = 12; Socket median of 11/13 = 12; rounds
  // counted only where both ran (1 and 3), UCCL faster in both.
  EXPECT_NE(t.find("| 4 | 12.0 | 12.0 | 1.0 |"), std::string::npos) << t;
  EXPECT_NE(t.find("| 1.00 | 2/2 |"), std::string::npos) << t;
  // A UCCL variant is a column, not a baseline: the ratio and the rounds
  // are against Socket alone even where the variant is faster.
  std::vector<std::vector<std::vector<PerfRow>>> var(3);
  var[0] = {{row(4, 10)}, {row(4, 12)}};
  var[1] = {{row(4, 5)}, {row(4, 6)}};
  var[2] = {{row(4, 11)}, {row(4, 11)}};
  std::string vt = perf_table({"UCCL", "UCCL+UCCL_PATHS=1", "Socket"}, var, 2);
  EXPECT_NE(vt.find("| 4 | 11.0 | 5.5 | 11.0 | 1.0 | 0.00 | 0.00 | 1.00 | "
                    "1/2 |"),
            std::string::npos)
      << vt;
  // Only UCCL variants: nothing to compare against, no baseline columns.
  std::string vonly =
      perf_table({"UCCL", "UCCL+UCCL_PATHS=1"}, {var[0], var[1]}, 2);
  EXPECT_EQ(vonly.find("baseline"), std::string::npos) << vonly;
  // One net alone: no baseline columns.
  std::string solo = perf_table({"UCCL"}, {res[0]}, 2);
  EXPECT_EQ(solo.find("baseline"), std::string::npos) << solo;
  EXPECT_NE(solo.find("| 4 | 12.0 | 1.0 | 0.00 |"), std::string::npos) << solo;
}

TEST(NcclPerfUtil, FloorsAreColumnsWithTheirOwnRatioNotBaselines) {
  // 256 MiB, 2 rounds: UCCL 20000/22000 us (median 21000), Socket4x4
  // 28000/30000 (29000), SHM 9800/10200 (10000), faster than both.
  const uint64_t big = 256u << 20;
  std::vector<std::vector<std::vector<PerfRow>>> res(3);
  double u[] = {20000, 22000}, s[] = {28000, 30000}, h[] = {9800, 10200};
  for (int r = 0; r < 2; ++r) {
    res[0].push_back({row(big, u[r])});
    res[1].push_back({row(big, s[r])});
    res[2].push_back({row(big, h[r])});
  }
  std::string t = perf_table({"UCCL", "Socket4x4", "SHM"}, res, 2);
  EXPECT_NE(t.find("| ratio (baseline time / UCCL) | UCCL faster in rounds | "
                   "SHM time / UCCL |\n|---:|---:|---:|---:|---:|---:|---:|"
                   "---:|---:|---:|\n"),
            std::string::npos)
      << t;
  // The ratio and the rounds are against Socket4x4 alone (29000 / 21000,
  // UCCL won both); SHM's own ratio is 10000 / 21000.
  EXPECT_NE(t.find("| 268435456 | 21000.0 | 29000.0 | 10000.0 | 1.0 | 12.78 | "
                   "9.26 | 1.38 | 2/2 | 0.48 |"),
            std::string::npos)
      << t;
  // Only floors besides the subject: no baseline columns, the floor's ratio.
  std::string only = perf_table({"UCCL", "P2P"}, {res[0], res[2]}, 2);
  EXPECT_EQ(only.find("baseline"), std::string::npos) << only;
  EXPECT_NE(only.find("| 268435456 | 21000.0 | 10000.0 | 1.0 | 12.78 | 0.48 |"),
            std::string::npos)
      << only;
}

TEST(NcclPerfUtil, RoundsTableShowsEveryRunAndMarksFailedOnes) {
  std::vector<std::string> nets = {"UCCL", "Socket"};
  std::vector<std::vector<std::vector<PerfRow>>> res(2);
  res[0] = {{row(4, 10), row(64, 11)}, {row(4, 30), row(64, 31)}};
  res[1] = {{row(4, 12), row(64, 13)}, {}};  // round 2's Socket run failed
  EXPECT_EQ(perf_rounds_table(nets, res),
            "| size (B) | net | round 1 us | round 2 us |\n"
            "|---:|---|---:|---:|\n"
            "| 4 | UCCL | 10.0 | 30.0 |\n"
            "| 4 | Socket | 12.0 | - |\n"
            "| 64 | UCCL | 11.0 | 31.0 |\n"
            "| 64 | Socket | 13.0 | - |\n");
  // A net with fewer rounds (stopped early) gets "-" for the missing ones.
  res[1] = {{row(4, 12), row(64, 13)}};
  EXPECT_NE(perf_rounds_table(nets, res).find("| 4 | Socket | 12.0 | - |"),
            std::string::npos);
}

TEST(NcclPerfUtil, MedianOfOddEvenAndNoValues) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(NcclPerfUtil, LatencyTableGivesMediansAndTheBestBaselinesRatio) {
  auto lrow = [](uint64_t bytes, double lat_us) {
    PerfRow r = row(bytes, 1.0);
    r.lat_us = lat_us;
    return r;
  };
  // 4 B, 3 rounds: UCCL 30/34/31 (median 31), Socket 33/40/35 (35),
  // Socket4x4 32/32/60 (32, the best baseline), the variant 20/20/20 and
  // SHM 10/10/10 (columns, not baselines). 1 MiB has no latency: no row.
  std::vector<std::string> nets = {"UCCL", "Socket", "Socket4x4",
                                   "UCCL+UCCL_PATHS=1", "SHM"};
  std::vector<std::vector<std::vector<PerfRow>>> res(5);
  double u[] = {30, 34, 31}, s[] = {33, 40, 35}, s4[] = {32, 32, 60};
  for (int r = 0; r < 3; ++r) {
    res[0].push_back({lrow(4, u[r]), row(1 << 20, 100)});
    res[1].push_back({lrow(4, s[r]), row(1 << 20, 200)});
    res[2].push_back({lrow(4, s4[r]), row(1 << 20, 150)});
    res[3].push_back({lrow(4, 20), row(1 << 20, 90)});
    res[4].push_back({lrow(4, 10), row(1 << 20, 50)});
  }
  std::string t = perf_latency_table(nets, res);
  EXPECT_EQ(t,
            "| size (B) | UCCL latency us | Socket latency us | Socket4x4 "
            "latency us | UCCL+UCCL_PATHS=1 latency us | SHM latency us | "
            "best baseline latency us | ratio (baseline / UCCL) |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            "| 4 | 31.0 | 35.0 | 32.0 | 20.0 | 10.0 | 32.0 | 1.03 |\n");
  // A failed run and a size one net did not measure: medians of what ran,
  // "-" where nothing did.
  res[0][1] = {};
  res[1] = {{row(4, 1.0)}, {row(4, 1.0)}, {row(4, 1.0)}};
  res[2].clear();
  EXPECT_NE(perf_latency_table(nets, res).find(
                "| 4 | 30.5 | - | - | 20.0 | 10.0 | - | - |"),
            std::string::npos)
      << perf_latency_table(nets, res);
  // No latency anywhere: no table.
  std::vector<std::vector<std::vector<PerfRow>>> none(1);
  none[0] = {{row(4, 10)}};
  EXPECT_EQ(perf_latency_table({"UCCL"}, none), "");
}

TEST(NcclPerfUtil, JsonHasEveryRound) {
  std::vector<std::vector<std::vector<PerfRow>>> res(1);
  res[0] = {{row(4, 10)}, {}};
  EXPECT_EQ(perf_json({"UCCL"}, res),
            "{\"UCCL\": [[{\"bytes\": 4, \"iters\": 0, \"time_us\": 10.000, "
            "\"host_us\": 1.000, \"errors\": 0}], []]}\n");
  res[0][0][0].lat_us = 31.25;  // a measured latency is written too
  EXPECT_NE(perf_json({"UCCL"}, res).find("\"errors\": 0, \"lat_us\": 31.250}"),
            std::string::npos);
}

TEST(NcclPerfUtil, AllToAllTakesBlockRankOfEveryRanksInput) {
  EXPECT_EQ(*parse_coll("all_to_all"), PerfColl::kAllToAll);
  EXPECT_DOUBLE_EQ(bus_factor(PerfColl::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(PerfColl::kAllToAll, 4), 0.75);
  // Rank 1 of 3, 302 elements: blocks of 100 (2 left unwritten); block j
  // holds rank j's elements [100, 200).
  const size_t n = 302, m = 100;
  std::vector<float> out(n, NAN);
  for (size_t j = 0; j < 3; ++j) {
    for (size_t k = 0; k < m; ++k) {
      out[j * m + k] = perf_input(static_cast<int>(j), m + k);
    }
  }
  EXPECT_EQ(perf_check_all_to_all(out.data(), n, 1, 3), 0u);
  EXPECT_EQ(perf_check_result(PerfColl::kAllToAll, out.data(), n, 1, 3), 0u);
  EXPECT_GT(perf_check_result(PerfColl::kAllReduce, out.data(), n, 1, 3), 0u);
  // Read as rank 0's or 2's result, the blocks are other blocks of the
  // inputs: block j of rank r's result should be perf_input(j, r * m + k).
  EXPECT_EQ(perf_check_all_to_all(out.data(), n, 0, 3), 3 * m);
  std::swap(out[5], out[m + 5]);  // two blocks' elements crossed
  out[2 * m + 9] = NAN;
  EXPECT_EQ(perf_check_all_to_all(out.data(), n, 1, 3), 3u);
}

TEST(NcclPerfUtil, SendRecvIsCheckedAgainstThePreviousRankAndHasBusFactorOne) {
  ASSERT_TRUE(parse_coll("all_reduce").ok());
  EXPECT_EQ(*parse_coll("sendrecv"), PerfColl::kSendRecv);
  EXPECT_FALSE(parse_coll("allreduce").ok());
  EXPECT_FALSE(parse_coll("").ok());
  EXPECT_DOUBLE_EQ(bus_factor(PerfColl::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(PerfColl::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(PerfColl::kSendRecv, 4), 1.0);
  // Rank 2 receives rank 1's buffer: rank 1's input passes, rank 0's and
  // NaN do not.
  const size_t n = 600;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = perf_input(1, i);
  EXPECT_EQ(perf_check_recv(out.data(), n, 1), 0u);
  EXPECT_EQ(perf_check_recv(out.data(), n, 0), n);
  out[7] = NAN;
  EXPECT_EQ(perf_check_recv(out.data(), n, 1), 1u);
  // 4 ranks, 1 MiB in 100 us: sendrecv's busbw is its algbw (10.49 GB/s),
  // all_reduce's 1.5 times that.
  std::vector<std::vector<std::vector<PerfRow>>> res(1);
  res[0].push_back({row(1 << 20, 100)});
  EXPECT_NE(perf_table({"UCCL"}, res, 4, PerfColl::kSendRecv).find("| 10.49 |"),
            std::string::npos);
  EXPECT_NE(perf_table({"UCCL"}, res, 4).find("| 15.73 |"), std::string::npos);
}

}  // namespace
}  // namespace uccl::tools
