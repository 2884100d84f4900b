// ccsim: runs a congestion-control experiment (configs/experiments/*.conf)
// on the cc/sim simulator; prints summaries and PASS/FAIL, writes CSVs.
#include <gflags/gflags.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cc/sim/config.h"
#include "cc/sim/sim.h"

DEFINE_string(config, "", "Experiment file (configs/experiments/*.conf).");
DEFINE_string(out, "",
              "Directory for CSV output (time series, FCTs, "
              "summary, checks); none when empty.");
DEFINE_string(cc, "",
              "Run these congestion controls (comma list) instead of "
              "the file's 'cc' list.");
DEFINE_string(variant, "", "Run only this variant.");
DEFINE_string(set, "", "Override keys: 'key=value;key=value' (applied last).");
DEFINE_bool(quiet, false, "No progress lines on stderr.");
DEFINE_uint32(seeds, 0,
              "Run every simulation this many times (seed, seed+1, ...) and "
              "judge checks on the 95% confidence interval; 0: the file's "
              "'seeds' (default 1).");
DEFINE_string(substitute, "",
              "Run this controller, 'name' or 'name:params' (e.g. 'none', "
              "'swift:ai=20'), in place of every controller the file lists, "
              "under their names, so their checks judge it: an experiment "
              "whose targets a substitute also meets shows nothing.");

namespace {

using uccl::sim::CheckResult;
using uccl::sim::Experiment;
using uccl::sim::RunOutcome;
using uccl::sim::split_list;

constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;

std::string run_tag(const Experiment& e, const RunOutcome& r) {
  return e.name + "__" + r.cc + (r.variant.empty() ? "" : "__" + r.variant);
}

bool write_csvs(const std::string& dir, const Experiment& e,
                const RunOutcome& r) {
  const std::string base = dir + "/" + run_tag(e, r);
  const auto& res = r.result;
  std::ofstream f(base + "__flows.csv");
  f << "t_us,flow,tput_gbps,cwnd_bytes,rate_gbps\n";
  for (const auto& s : res.flow_series) {
    f << s.t_ns / 1e3 << ',' << s.flow << ',' << s.tput_gbps << ','
      << s.cwnd_bytes << ',' << s.rate_gbps << '\n';
  }
  std::ofstream q(base + "__queue.csv");
  q << "t_us,port,queue_kb\n";
  for (const auto& s : res.queue_series) {
    q << s.t_ns / 1e3 << ',' << res.port_names[s.port] << ','
      << s.bytes / 1024.0 << '\n';
  }
  std::ofstream t(base + "__fct.csv");
  t << "flow,src,dst,bytes,start_us,finish_us,fct_us,ideal_us,slowdown,"
       "retx,rtos,window_bytes\n";
  for (size_t i = 0; i < res.flows.size(); ++i) {
    const auto& fr = res.flows[i];
    const double fct =
        fr.finish_ns ? (fr.finish_ns - fr.spec.start_ns) / 1e3 : -1;
    t << i << ',' << fr.spec.src << ',' << fr.spec.dst << ',' << fr.spec.bytes
      << ',' << fr.spec.start_ns / 1e3 << ','
      << (fr.finish_ns ? fr.finish_ns / 1e3 : -1) << ',' << fct << ','
      << fr.ideal_fct_ns / 1e3 << ','
      << (fct > 0 && fr.ideal_fct_ns ? fct * 1e3 / fr.ideal_fct_ns : -1) << ','
      << fr.retx << ',' << fr.rtos << ','
      << (fr.in_window ? fr.window_bytes : -1) << '\n';
  }
  return f.good() && q.good() && t.good();
}

}  // namespace

// The simulation of one controller and variant with `overrides`, the
// substitute (if any) in the controller's place.
bool simulate(const Experiment& e, const std::string& cc, const std::string& v,
              const uccl::sim::KeyValues& overrides, uccl::sim::SimResult* out,
              uint64_t* seed) {
  auto cfg = uccl::sim::make_config(e, cc, v, overrides);
  if (!cfg.ok()) {
    std::fprintf(stderr, "ccsim: %s\n", cfg.status().to_string().c_str());
    return false;
  }
  cfg->progress = !FLAGS_quiet;
  if (!FLAGS_substitute.empty()) {
    const size_t colon = FLAGS_substitute.find(':');
    cfg->cc = FLAGS_substitute.substr(0, colon);
    cfg->cc_params =
        colon == std::string::npos ? "" : FLAGS_substitute.substr(colon + 1);
  }
  if (seed) *seed = cfg->seed;
  auto res = uccl::sim::run(*cfg);
  if (!res.ok()) {
    std::fprintf(stderr, "ccsim: %s\n", res.status().to_string().c_str());
    return false;
  }
  *out = std::move(*res);
  return true;
}

// One controller and variant over `seeds` seeds (the config's seed, then
// the next ones): runs them, prints the metrics (mean +- 95% half-width
// with several seeds) and writes the first seed's CSVs; false after
// printing why it could not.
bool run_one(const Experiment& e, const std::string& cc, const std::string& v,
             const uccl::sim::KeyValues& overrides, uint32_t seeds,
             RunOutcome* out) {
  std::vector<uccl::sim::SimResult> results(1);
  uint64_t seed = 0;
  if (!simulate(e, cc, v, overrides, &results[0], &seed)) return false;
  for (uint32_t i = 1; i < seeds; ++i) {
    uccl::sim::KeyValues more = overrides;
    more.push_back({"seed", std::to_string(seed + i)});
    results.emplace_back();
    if (!simulate(e, cc, v, more, &results.back(), nullptr)) return false;
  }
  double wall_s = 0;
  for (const auto& r : results) wall_s += r.wall_s;
  *out = RunOutcome{cc, v, {}, 1, {}};
  uccl::sim::aggregate_seeds(std::move(results), out);
  RunOutcome& r = *out;
  char all_seeds[64] = "";
  if (seeds > 1) {
    std::snprintf(all_seeds, sizeof(all_seeds), ", %u seeds in %.2f s", seeds,
                  wall_s);
  }
  std::printf(
      "== %s%s%s: %zu flows, %.3f ms simulated, %llu events in "
      "%.2f s (%.2fM events/s)%s\n",
      cc.c_str(), v.empty() ? "" : "/", v.c_str(), r.result.flows.size(),
      r.result.end_ns / 1e6, static_cast<unsigned long long>(r.result.events),
      r.result.wall_s, r.result.events / 1e6 / r.result.wall_s, all_seeds);
  int col = 0;
  for (const auto& [k, val] : r.result.metrics) {
    auto ci = r.ci95.find(k);
    if (ci != r.ci95.end()) {
      std::printf("  %-22s %10.4g +-%-9.3g%s", k.c_str(), val, ci->second,
                  ++col % 3 == 0 ? "\n" : "");
    } else {
      std::printf("  %-26s %12.4g%s", k.c_str(), val,
                  ++col % 3 == 0 ? "\n" : "");
    }
  }
  if (col % 3) std::printf("\n");
  if (!FLAGS_out.empty() && !write_csvs(FLAGS_out, e, r)) {
    std::fprintf(stderr, "ccsim: writing CSVs to %s failed\n",
                 FLAGS_out.c_str());
    return false;
  }
  return true;
}

// Evaluates the experiment's checks over all runs, prints each verdict
// (and writes them to --out): 0 if all passed, kExitFail otherwise.
// `not_run` (checks whose runs --cc or --variant left out) are listed as
// such, never counted as passed.
int report_checks(const Experiment& e, const std::vector<RunOutcome>& runs,
                  size_t not_run) {
  const std::vector<CheckResult> checks = uccl::sim::evaluate(e, runs);
  const std::string skipped =
      not_run == 0 ? ""
                   : " (" + std::to_string(not_run) +
                         " more not evaluated: their runs were left out)";
  if (checks.empty()) {
    // A run that expects nothing cannot pass (a --cc that leaves out every
    // controller the checks name lands here too).
    std::printf("FAIL %s: no checks (an experiment states its targets)\n",
                e.name.c_str());
    return kExitFail;
  }
  std::vector<std::string> failed;
  size_t known_misses = 0;
  std::ofstream cf;
  if (!FLAGS_out.empty()) {
    cf.open(FLAGS_out + "/" + e.name + "__checks.csv");
    cf << "check,actual,result\n";
  }
  for (const CheckResult& c : checks) {
    bool fails = false;
    const char* verdict =
        uccl::sim::verdict(c, !FLAGS_substitute.empty(), &fails);
    std::printf("%-60s actual %-10.4g %s\n", c.label.c_str(), c.actual,
                verdict);
    if (cf.is_open()) {
      cf << '"' << c.label << "\"," << c.actual << ',' << verdict << '\n';
    }
    if (fails) {
      failed.push_back(c.label + (c.known_miss && c.pass
                                      ? " (met: make it a plain target)"
                                      : ""));
    }
    if (c.known_miss && !c.pass) ++known_misses;
  }
  const std::string misses =
      known_misses == 0 ? ""
                        : ", " + std::to_string(known_misses) + " known miss" +
                              (known_misses == 1 ? "" : "es");
  if (!failed.empty()) {
    std::printf("FAIL %s: %zu of %zu checks failed: %s%s\n", e.name.c_str(),
                failed.size(), checks.size(), failed[0].c_str(),
                skipped.c_str());
    return kExitFail;
  }
  std::printf("PASS %s: %zu checks%s%s\n", e.name.c_str(), checks.size(),
              misses.c_str(), skipped.c_str());
  return 0;
}

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "congestion-control simulator.\n"
      "  ccsim --config=configs/experiments/1_incast.conf [--out=DIR] "
      "[--cc=swift] [--set='host_gbps=400;senders=64']\n"
      "Exit status: 0 every check passed, 1 a check failed (last line "
      "'FAIL ...'), 2 bad usage or configuration.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_config.empty() && argc > 1) FLAGS_config = argv[1];
  if (FLAGS_config.empty()) {
    std::fprintf(stderr, "ccsim: give --config=FILE (see cc/sim/README.md)\n");
    return kExitUsage;
  }
  auto ex = uccl::sim::load_experiment(FLAGS_config);
  if (!ex.ok()) {
    std::fprintf(stderr, "ccsim: %s\n", ex.status().to_string().c_str());
    return kExitUsage;
  }
  Experiment e = *ex;
  if (!FLAGS_cc.empty()) e.ccs = split_list(FLAGS_cc, ',');
  auto overrides = uccl::sim::parse_assignments(FLAGS_set);
  if (!overrides.ok()) {
    std::fprintf(stderr, "ccsim: --set: %s\n",
                 overrides.status().message().c_str());
    return kExitUsage;
  }
  if (!FLAGS_out.empty()) {
    ::mkdir(FLAGS_out.c_str(), 0755);
    struct stat st;
    if (::stat(FLAGS_out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      std::fprintf(stderr, "ccsim: cannot create directory %s\n",
                   FLAGS_out.c_str());
      return kExitUsage;
    }
  }
  std::vector<std::string> variants;
  for (const auto& [vn, kv] : e.variants) {
    if (FLAGS_variant.empty() || FLAGS_variant == vn) variants.push_back(vn);
  }
  if (e.variants.empty()) variants.push_back("");
  if (variants.empty()) {
    std::fprintf(stderr, "ccsim: no variant '%s'\n", FLAGS_variant.c_str());
    return kExitUsage;
  }
  std::printf("ccsim: %s: %s\n", e.name.c_str(), e.description.c_str());
  if (!FLAGS_substitute.empty()) {
    std::printf("ccsim: running '%s' in place of every controller listed\n",
                FLAGS_substitute.c_str());
  }
  std::vector<std::string> run_variants = variants;
  if (e.variants.empty()) run_variants.clear();
  const auto not_run = uccl::sim::checks_not_run(e, e.ccs, run_variants);
  for (const auto* ch : not_run) {
    std::printf("not evaluated (its runs were left out): %s\n",
                ch->text.c_str());
  }
  const uint32_t seeds = FLAGS_seeds ? FLAGS_seeds : e.seeds;
  std::vector<RunOutcome> runs;
  for (const std::string& cc : e.ccs) {
    for (const std::string& v : variants) {
      RunOutcome r;
      if (!run_one(e, cc, v, *overrides, seeds, &r)) return kExitUsage;
      runs.push_back(std::move(r));
    }
  }
  if (!FLAGS_out.empty()) {
    std::ofstream s(FLAGS_out + "/" + e.name + "__summary.csv");
    s << "cc,variant,metric,value\n";
    for (const RunOutcome& r : runs) {
      for (const auto& [k, val] : r.result.metrics) {
        s << r.cc << ',' << r.variant << ',' << k << ',' << val << '\n';
      }
      for (const auto& [k, half] : r.ci95) {
        s << r.cc << ',' << r.variant << ',' << k << "__ci95," << half << '\n';
      }
    }
  }
  return report_checks(e, runs, not_run.size());
}
