// Experiment files and workloads: keys, flows, variants, seeds and their
// confidence intervals, checks, compares and known misses, clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cc/sim/config.h"
#include "cc/sim/sim.h"

namespace uccl::sim {
namespace {

// The message an experiment file is refused with ("" and a failure when
// it is accepted).
std::string refusal(const std::string& text) {
  auto e = parse_experiment(text);
  EXPECT_FALSE(e.ok()) << text;
  return e.ok() ? std::string() : e.status().message();
}

TEST(Config, LargeFatTreePermutationsCrossEdgesAndHitEveryHostOnce) {
  // 1024 hosts, 8 per edge: a random shuffle keeping every host off its
  // own edge is exponentially unlikely, so the generator repairs one.
  auto e = parse_experiment(
      "cc = swift\ntopology = fattree\nfattree_k = 16\n"
      "pattern = permutation\nflow_bytes = 4096\n"
      "check.unfinished_flows = <= 0\n");
  ASSERT_TRUE(e.ok()) << e.status();
  auto c = make_config(*e, "swift", "");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->flows.size(), 1024u);
  std::vector<int> hits(1024, 0);
  for (const FlowSpec& f : c->flows) {
    EXPECT_NE(f.src / 8, f.dst / 8) << f.src << "->" << f.dst;
    ++hits[f.dst];
  }
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 1024);
  // One edge switch only: no valid permutation, a clear error (the file
  // is checked whole, its workload too, before anything runs).
  EXPECT_NE(refusal("cc = swift\ntopology = leafspine\nleaves = 1\n"
                    "pattern = permutation\nflow_bytes = 1\n"
                    "check.drops = <= 0\n")
                .find("no valid assignment"),
            std::string::npos);
}

TEST(Config, IncastOffTheDumbbellGoesToHostZero) {
  auto e = parse_experiment(
      "cc = swift\ntopology = fattree\nfattree_k = 4\npattern = incast\n"
      "incast_senders = 5\nflow_bytes = 4096\ncheck.drops = <= 0\n");
  ASSERT_TRUE(e.ok()) << e.status();
  auto c = make_config(*e, "swift", "");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->flows.size(), 5u);
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c->flows[i].src, i + 1);
    EXPECT_EQ(c->flows[i].dst, 0u);
  }
  auto r = run(*c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metrics.at("unfinished_flows"), 0);
  // More senders than the 15 other hosts: refused.
  EXPECT_NE(refusal("cc = swift\ntopology = fattree\nfattree_k = 4\n"
                    "pattern = incast\nincast_senders = 16\nflow_bytes = 1\n"
                    "check.drops = <= 0\n")
                .find("incast_senders > 15"),
            std::string::npos);
}

TEST(Config, SeveralSeedsGiveAMeanAndAConfidenceIntervalChecksJudge) {
  EXPECT_DOUBLE_EQ(t95(1), 12.706);
  EXPECT_DOUBLE_EQ(t95(9), 2.262);
  EXPECT_DOUBLE_EQ(t95(1000), 1.96);
  std::vector<SimResult> runs(3);
  for (int i = 0; i < 3; ++i) {
    runs[i].metrics["drops"] = i + 1;  // 1, 2, 3: mean 2, sd 1
    runs[i].events = 100 + i;
  }
  RunOutcome r{"swift", "", {}, 1, {}};
  aggregate_seeds(runs, &r);
  EXPECT_EQ(r.seeds, 3u);
  EXPECT_EQ(r.result.events, 100u);  // the first seed's run
  EXPECT_DOUBLE_EQ(r.result.metrics.at("drops"), 2);
  const double half = 4.303 / std::sqrt(3.0);
  EXPECT_NEAR(r.ci95.at("drops"), half, 1e-12);
  // A check judges the interval's far end: <= 4 fails (2 + 2.48), <= 5
  // holds; >= 0 fails (2 - 2.48).
  auto e = parse_experiment(
      "cc = swift\nseeds = 3\ncheck.drops = <= 4\ncheck.drops = <= 5\n"
      "check.drops = >= 0\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->seeds, 3u);
  const auto checks = evaluate(*e, {r});
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_FALSE(checks[0].pass);
  EXPECT_NEAR(checks[0].actual, 2 + half, 1e-12);
  EXPECT_TRUE(checks[1].pass);
  EXPECT_FALSE(checks[2].pass);
  EXPECT_NE(checks[0].label.find("95% CI over 3 seeds"), std::string::npos);
  // One seed: the value itself.
  RunOutcome one{"swift", "", {}, 1, {}};
  aggregate_seeds({runs[0]}, &one);
  EXPECT_TRUE(one.ci95.empty());
  EXPECT_TRUE(evaluate(*e, {one})[0].pass);
  EXPECT_FALSE(parse_experiment("seeds = 0\n").ok());
  EXPECT_FALSE(parse_experiment("seeds = many\n").ok());
}

TEST(Config, ACompareAcrossControllersPairsTheSameVariant) {
  auto e = parse_experiment(
      "cc = hpcc, dcqcn\nvariant.a = seed=1\nvariant.b = seed=2\n"
      "compare.drops = hpcc/dcqcn <= 0.5\n"
      "compare.b.drops = hpcc/dcqcn <= 0.5\n");
  ASSERT_TRUE(e.ok()) << e.status();
  auto run_of = [](const char* cc, const char* v, double drops) {
    RunOutcome r{cc, v, {}, 1, {}};
    r.result.metrics["drops"] = drops;
    return r;
  };
  const std::vector<RunOutcome> runs = {
      run_of("hpcc", "a", 1), run_of("hpcc", "b", 4), run_of("dcqcn", "a", 4),
      run_of("dcqcn", "b", 4)};
  const auto c = evaluate(*e, runs);
  ASSERT_EQ(c.size(), 3u);  // a and b, then b alone
  EXPECT_EQ(c[0].label, "compare a drops(hpcc)/drops(dcqcn) <= 0.5");
  EXPECT_DOUBLE_EQ(c[0].actual, 0.25);
  EXPECT_TRUE(c[0].pass);
  EXPECT_DOUBLE_EQ(c[1].actual, 1.0);
  EXPECT_FALSE(c[1].pass);
  EXPECT_FALSE(c[2].pass);
  // Sides that are neither two variants nor two controllers: refused.
  EXPECT_FALSE(parse_experiment("cc = hpcc, dcqcn\nvariant.a = seed=1\n"
                                "compare.drops = hpcc/a <= 1\n")
                   .ok());
  EXPECT_FALSE(
      parse_experiment("cc = hpcc\ncompare.drops = hpcc/swift <= 1\n").ok());
}

TEST(Config, ParsesKeysFlowsVariantsAndChecks) {
  auto e = parse_experiment(
      "name = t\ncc = swift, credit\nsenders = 3\n"
      "flow = 0 3 1000 5   # a comment\n"
      "variant.slow = host_gbps=10; buffer_kb=64\n"
      "check.jain = >= 0.9\ncheck.swift/slow.drops = <= 0\n"
      "compare.credit.completion_us = slow/slow < 2\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ccs.size(), 2u);
  ASSERT_EQ(e->checks.size(), 3u);
  EXPECT_EQ(e->checks[1].scope, "swift/slow");
  EXPECT_TRUE(e->checks[2].compare);
  auto c = make_config(*e, "credit", "slow");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host_gbps, 10);
  EXPECT_EQ(c->buffer_kb, 64);
  EXPECT_EQ(c->cc, "credit");
  ASSERT_EQ(c->flows.size(), 1u);
  EXPECT_EQ(c->flows[0].start_ns, 5000u);
}

TEST(Config, AKnownMissIsReportedAndFailsTheRunOnlyWhenMet) {
  auto e = parse_experiment(
      "cc = swift\ncheck.swift.jain = >= 0.99 known_miss\n"
      "compare.completion_us = a/b < 2 known_miss\ncheck.drops = <= 0\n"
      "variant.a = seed=1\nvariant.b = seed=2\n");
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->checks.size(), 3u);
  EXPECT_TRUE(e->checks[0].known_miss);
  EXPECT_EQ(e->checks[0].value, 0.99);
  EXPECT_TRUE(e->checks[1].known_miss);
  EXPECT_EQ(e->checks[1].value, 2);
  EXPECT_FALSE(e->checks[2].known_miss);
  // The mark alone is no target.
  EXPECT_FALSE(parse_experiment("check.jain = known_miss\n").ok());
  CheckResult missed{"x", 0.5, false, false, true};
  CheckResult met{"x", 1.0, true, false, true};
  CheckResult plain_fail{"x", 0.5, false, false, false};
  bool fails = true;
  EXPECT_STREQ(verdict(missed, false, &fails), "KNOWN MISS");
  EXPECT_FALSE(fails);
  EXPECT_STREQ(verdict(met, false, &fails), "MET KNOWN MISS");
  EXPECT_TRUE(fails);
  EXPECT_STREQ(verdict(plain_fail, false, &fails), "FAIL");
  EXPECT_TRUE(fails);
  // Another controller substituted: the marks do not describe it.
  EXPECT_STREQ(verdict(missed, true, &fails), "FAIL");
  EXPECT_TRUE(fails);
  EXPECT_STREQ(verdict(met, true, &fails), "PASS");
  EXPECT_FALSE(fails);
}

TEST(Config, ErrorsNameTheKeyOrLine) {
  auto bad = [](const std::string& text) {
    auto e = parse_experiment(text);
    EXPECT_FALSE(e.ok()) << text;
    return e.ok() ? std::string() : e.status().message();
  };
  EXPECT_NE(bad("senders = 2\nbogus_key = 1\n").find("bogus_key"),
            std::string::npos);
  EXPECT_NE(bad("senders = 2\ncheck.x = ~ 1\n").find("line 2"),
            std::string::npos);
  EXPECT_NE(bad("senders = two\n").find("not a number"), std::string::npos);
  bad("flow = 0 1\n");
  bad("check.jain = == 1\n");
  bad("cc = swift\ncheck.swfit.jain = >= 1\n");  // scope typo
  bad("pattern = zigzag\n");
  bad("just text\n");
  // A misspelled metric is refused before anything runs, with its line.
  const std::string jian = bad("senders = 2\n\ncheck.jian = >= 0.9\n");
  EXPECT_NE(jian.find("line 3"), std::string::npos) << jian;
  EXPECT_NE(jian.find("no metric 'jian'"), std::string::npos) << jian;
  // An unknown key, and a bad value in a variant, name their lines.
  EXPECT_NE(bad("senders = 2\nbogus_key = 1\n").find("line 2"),
            std::string::npos);
  EXPECT_NE(bad("senders = 2\nvariant.v = senders=two\n").find("line 2"),
            std::string::npos);
  // One delay per host or none: a short list is not padded.
  const std::string pad =
      bad("topology = dumbbell\nsenders = 3\nreceivers = 1\n"
          "host_delay_us = 1,20\nflow = 0 3 0 0\n");
  EXPECT_NE(pad.find("lists 2 delays for 4 hosts"), std::string::npos) << pad;
}

TEST(Config, ChecksWhoseRunsAreLeftOutAreNamed) {
  auto e = parse_experiment(
      "cc = swift,credit\nvariant.a = senders=2\nvariant.b = senders=4\n"
      "check.jain = >= 0.9\ncheck.swift.drops = <= 1\n"
      "check.credit/b.jain = >= 0.9\ncompare.credit.jain = a/b >= 0.5\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(checks_not_run(*e, {"swift", "credit"}, {"a", "b"}).empty());
  auto left = checks_not_run(*e, {"swift"}, {"a", "b"});
  ASSERT_EQ(left.size(), 2u);  // credit/b and the credit compare
  EXPECT_EQ(left[0]->scope, "credit/b");
  EXPECT_TRUE(left[1]->compare);
  left = checks_not_run(*e, {"credit"}, {"a"});
  ASSERT_EQ(left.size(), 3u);  // swift's, credit/b, the compare (no b)
}

TEST(Workload, PoissonOffersTheLoadFromTheCdf) {
  auto cdf = load_cdf("websearch");
  ASSERT_TRUE(cdf.ok());
  const double mean = cdf_mean(*cdf);
  EXPECT_GT(mean, 1.5e6);  // WebSearch: ~1.6 MB mean flow
  EXPECT_LT(mean, 1.8e6);
  EXPECT_DOUBLE_EQ(sample_cdf(*cdf, 0), 0);
  // Linear between the points (10 MB, 0.97) and (30 MB, 1).
  EXPECT_NEAR(sample_cdf(*cdf, 0.985), 20e6, 1);
  EXPECT_NEAR(sample_cdf(*cdf, 0.35), 40000, 1e-6);
  Experiment e;
  e.base = {{"topology", "leafspine"}, {"pattern", "poisson"},
            {"cdf", "fb_hadoop"},      {"load", "0.4"},
            {"poisson_ms", "20"},      {"seed", "5"}};
  auto c = make_config(e, "swift", "");
  ASSERT_TRUE(c.ok()) << c.status();
  double bytes = 0;
  for (const FlowSpec& f : c->flows) {
    EXPECT_NE(f.src, f.dst);
    EXPECT_LT(f.dst, 16u);
    EXPECT_LE(f.bytes, 10000000u);
    bytes += f.bytes;
  }
  // Offered load: 16 hosts x 100 Gb/s x 0.4 over 20 ms, within sampling
  // noise of a heavy-tailed CDF.
  const double offered = bytes * 8 / 20e-3 / (16 * 100e9);
  EXPECT_NEAR(offered, 0.4, 0.12);
  auto again = make_config(e, "swift", "");
  EXPECT_EQ(again->flows.size(), c->flows.size());  // seeded
  EXPECT_FALSE(load_cdf("/nonexistent.cdf").ok());
}

TEST(Checks, EvaluateAndCompare) {
  auto e = parse_experiment(
      "cc = swift\nvariant.a = seed=1\nvariant.b = seed=2\n"
      "check.drops = <= 2\ncompare.drops = a/b >= 1.5\n");
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<RunOutcome> runs(2);
  runs[0].cc = runs[1].cc = "swift";
  runs[0].variant = "a";
  runs[1].variant = "b";
  runs[0].result.metrics["drops"] = 3;
  runs[1].result.metrics["drops"] = 1;
  auto res = evaluate(*e, runs);
  ASSERT_EQ(res.size(), 3u);
  EXPECT_FALSE(res[0].pass);  // a: 3 <= 2 fails
  EXPECT_TRUE(res[1].pass);
  EXPECT_TRUE(res[2].pass);  // 3/1 >= 1.5
  EXPECT_DOUBLE_EQ(res[2].actual, 3);
  runs[1].result.metrics.erase("drops");
  res = evaluate(*e, runs);
  EXPECT_TRUE(res[1].missing);
  EXPECT_FALSE(res[1].pass);
}

}  // namespace
}  // namespace uccl::sim
