// ccsim experiment files: key = value lines (cc/sim/README.md documents
// every key), workload patterns, per-run variants, and pass/fail checks.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cc/sim/sim.h"
#include "cc/sim/workload.h"
#include "uccl/status.h"
#include "util/strings.h"

namespace uccl::sim {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// A target: `check.[scope.]metric = OP value` holds on every run in scope;
// `compare.[scope.]metric = A/B OP value` holds on metric(A)/metric(B), A
// and B variants run with the same congestion control. Scope: a cc name, a
// variant name, or "cc/variant"; empty = every run. A target written with
// a trailing `known_miss` is one the controller is known to miss (the file
// says why): reported, not failed; met, it fails the run until the file
// makes it a plain target again.
struct Check {
  std::string scope, metric, op, a, b;
  double value = 0;
  bool compare = false;
  bool known_miss = false;
  std::string text;  // as written, for reports
};

struct Experiment {
  std::string name = "experiment";
  std::string description;
  std::vector<std::string> ccs{"swift"};
  KeyValues base;               // in file order; "flow" may repeat
  std::vector<int> base_lines;  // the file's line of each base key (0: none)
  std::vector<std::pair<std::string, KeyValues>> variants;
  std::vector<int> variant_lines;
  std::vector<Check> checks;
  // `seeds = N`: every run N times (seed, seed + 1, ...); metrics are the
  // mean with a 95% confidence interval, checks judge its far end.
  uint32_t seeds = 1;
};

// Checks whose scope names no run of `ccs` x `variants` (ccsim --cc or
// --variant left those runs out): reported as not evaluated.
std::vector<const Check*> checks_not_run(
    const Experiment& e, const std::vector<std::string>& ccs,
    const std::vector<std::string>& variants);

Result<Experiment> parse_experiment(const std::string& text);

// Items of a `sep`-separated list, trimmed, empty ones dropped.
using uccl::split_list;
// "key=value; key=value" (variants, ccsim --set).
Result<KeyValues> parse_assignments(const std::string& text);
Result<Experiment> load_experiment(const std::string& path);

// The run of `cc` with `variant` ("" = none): base keys, then the variant's,
// then `overrides` (command line). Generates the workload.
Result<SimConfig> make_config(const Experiment& e, const std::string& cc,
                              const std::string& variant,
                              const KeyValues& overrides = {});

// One finished run, for checks and reports.
struct RunOutcome {
  std::string cc, variant;
  SimResult result;  // several seeds: the first seed's, metrics the mean
  uint32_t seeds = 1;
  std::map<std::string, double> ci95;  // several seeds: half-widths
};
// Folds the runs of one (cc, variant) over several seeds into `out`: the
// first run's series and flows, each metric's mean, and its 95%
// confidence half-width (Student's t over the seeds).
void aggregate_seeds(std::vector<SimResult> runs, RunOutcome* out);
// Student's t for a two-sided 95% interval with `df` degrees of freedom.
double t95(uint32_t df);
struct CheckResult {
  std::string label;  // "check swift/single jain >= 0.99"
  double actual = 0;
  bool pass = false;
  bool missing = false;     // the metric was not produced
  bool known_miss = false;  // its Check is marked known_miss
};
// "PASS", "FAIL", "MISSING", "KNOWN MISS" (a known_miss target missed) or
// "MET KNOWN MISS" (one met), and whether the verdict fails the run;
// `substituted`: another controller ran under the listed names, so the
// marks, which describe the listed ones, do not apply: plain verdicts.
const char* verdict(const CheckResult& c, bool substituted, bool* fails);
std::vector<CheckResult> evaluate(const Experiment& e,
                                  const std::vector<RunOutcome>& runs);

}  // namespace uccl::sim
