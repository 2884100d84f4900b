// Experiment-file parsing (keys, variants, checks), making a run's config
// with its workload, and evaluating checks over finished runs.
#include "cc/sim/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cc/sim/workload.h"

namespace uccl::sim {

Result<KeyValues> parse_assignments(const std::string& text) {
  KeyValues kv;
  for (const std::string& item : split_list(text, ';')) {
    const size_t q = item.find('=');
    if (q == std::string::npos || q == 0) {
      return InvalidArgument("'" + item + "' is not key=value");
    }
    kv.push_back({trim(item.substr(0, q)), trim(item.substr(q + 1))});
  }
  return kv;
}

namespace {

Result<double> to_num(const std::string& key, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(d)) {
    return InvalidArgument(key + ": '" + v + "' is not a number");
  }
  return d;
}

Result<uint32_t> to_u32(const std::string& key, const std::string& v) {
  UCCL_ASSIGN_OR_RETURN(double d, to_num(key, v));
  if (d < 0 || d > 4e9 || d != std::floor(d)) {
    return InvalidArgument(key + ": '" + v + "' is not a count");
  }
  return static_cast<uint32_t>(d);
}

// "a-b" or "a" -> [a, b].
Result<std::pair<uint32_t, uint32_t>> to_range(const std::string& key,
                                               const std::string& v) {
  const size_t dash = v.find('-');
  if (dash == std::string::npos) {
    UCCL_ASSIGN_OR_RETURN(uint32_t a, to_u32(key, v));
    return std::make_pair(a, a);
  }
  UCCL_ASSIGN_OR_RETURN(uint32_t a, to_u32(key, trim(v.substr(0, dash))));
  UCCL_ASSIGN_OR_RETURN(uint32_t b, to_u32(key, trim(v.substr(dash + 1))));
  if (b < a) return InvalidArgument(key + ": range '" + v + "' is empty");
  return std::make_pair(a, b);
}

Status apply(SimConfig* c, Workload* w, const std::string& k,
             const std::string& v) {
  auto num = [&](double* out) -> Status {
    UCCL_ASSIGN_OR_RETURN(*out, to_num(k, v));
    return Status::OK();
  };
  auto cnt = [&](uint32_t* out) -> Status {
    UCCL_ASSIGN_OR_RETURN(*out, to_u32(k, v));
    return Status::OK();
  };
  auto flag = [&](bool* out) -> Status {
    uint32_t on = 0;
    UCCL_RETURN_IF_ERROR(cnt(&on));
    if (on > 1) return InvalidArgument(k + ": 0 or 1, not '" + v + "'");
    *out = on == 1;
    return Status::OK();
  };
  if (k == "name") return c->name = v, Status::OK();
  if (k == "description") return Status::OK();
  if (k == "topology") return c->topology = v, Status::OK();
  if (k == "senders") return cnt(&c->senders);
  if (k == "receivers") return cnt(&c->receivers);
  if (k == "leaves") return cnt(&c->leaves);
  if (k == "spines") return cnt(&c->spines);
  if (k == "hosts_per_leaf") return cnt(&c->hosts_per_leaf);
  if (k == "fattree_k") return cnt(&c->fattree_k);
  if (k == "hosts_per_edge") return cnt(&c->hosts_per_edge);
  if (k == "host_gbps") return num(&c->host_gbps);
  if (k == "cc_line_gbps") return num(&c->cc_line_gbps);
  if (k == "rx_delay_us") return num(&c->rx_delay_us);
  if (k == "bottleneck_gbps") return num(&c->bottleneck_gbps);
  if (k == "fabric_gbps") return num(&c->fabric_gbps);
  if (k == "link_delay_us") return num(&c->link_delay_us);
  if (k == "host_delay_us") {
    c->host_delay_us.clear();
    for (const std::string& x : split_list(v, ',')) {
      UCCL_ASSIGN_OR_RETURN(double d, to_num(k, x));
      if (d < 0) return InvalidArgument(k + ": negative delay");
      c->host_delay_us.push_back(d);
    }
    return Status::OK();
  }
  if (k == "buffer_kb") return num(&c->buffer_kb);
  if (k == "ecn_kb") return num(&c->ecn_kb);
  if (k == "ecn_kmax_kb") return num(&c->ecn_kmax_kb);
  if (k == "ecn_pmax") return num(&c->ecn_pmax);
  if (k == "pfc_xoff_kb") return num(&c->pfc_xoff_kb);
  if (k == "shared_buffer_kb") return num(&c->shared_buffer_kb);
  if (k == "dt_alpha") return num(&c->dt_alpha);
  if (k == "trim") {
    double t = 0;
    UCCL_RETURN_IF_ERROR(num(&t));
    c->trim = t != 0;
    return Status::OK();
  }
  if (k == "pfc_xon_kb") return num(&c->pfc_xon_kb);
  if (k == "mtu_bytes") return cnt(&c->mtu_bytes);
  if (k == "chunk_bytes") return cnt(&c->chunk_bytes);
  if (k == "header_bytes") return cnt(&c->header_bytes);
  if (k == "ctrl_bytes") return cnt(&c->ctrl_bytes);
  if (k == "multipath") return c->multipath = v, Status::OK();
  if (k == "paths") return cnt(&c->paths);
  if (k == "cc_per_path") return flag(&c->cc_per_path);
  if (k == "shared_floor") return flag(&c->shared_floor);
  if (k == "host_jitter_us") return num(&c->host_jitter_us);
  if (k == "rto_min_us") return num(&c->rto_min_us);
  if (k == "rto_max_us") return num(&c->rto_max_us);
  if (k == "rto_init_us") return num(&c->rto_init_us);
  if (k == "dupack_threshold") return cnt(&c->dupack_threshold);
  if (k == "tlp") return flag(&c->tlp);
  if (k == "duration_ms") return num(&c->duration_ms);
  if (k == "max_sim_ms") return num(&c->max_sim_ms);
  if (k == "sample_us") return num(&c->sample_us);
  if (k == "trace_flows") return cnt(&c->trace_flows);
  if (k == "jain_from_ms") return num(&c->jain_from_ms);
  if (k == "jain_to_ms") return num(&c->jain_to_ms);
  if (k == "short_flow_bytes") return num(&c->short_flow_bytes);
  if (k == "converge_tolerance") return num(&c->converge_tolerance);
  if (k == "seed") {
    double d;
    UCCL_RETURN_IF_ERROR(num(&d));
    c->seed = static_cast<uint64_t>(d);
    return Status::OK();
  }
  if (k == "pattern") return w->pattern = v, Status::OK();
  if (k == "flow_bytes") return num(&w->flow_bytes);
  if (k == "incast_senders") return cnt(&w->incast_senders);
  if (k == "staircase_flows") return cnt(&w->staircase_flows);
  if (k == "staircase_step_ms") return num(&w->staircase_step_ms);
  if (k == "load") return num(&w->load);
  if (k == "cdf") return w->cdf = v, Status::OK();
  if (k == "poisson_ms") return num(&w->poisson_ms);
  if (k == "max_flows") return cnt(&w->max_flows);
  if (k == "poisson_src") {
    UCCL_ASSIGN_OR_RETURN(w->poisson_src, to_range(k, v));
    return Status::OK();
  }
  if (k == "poisson_dst") {
    UCCL_ASSIGN_OR_RETURN(w->poisson_dst, to_range(k, v));
    return Status::OK();
  }
  if (k == "burst_flows") return cnt(&w->burst_flows);
  if (k == "burst_bytes") return num(&w->burst_bytes);
  if (k == "burst_interval_us") return num(&w->burst_interval_us);
  if (k == "bursts") return cnt(&w->bursts);
  if (k == "long_stop_ms") return num(&w->long_stop_ms);
  if (k == "flow") {
    // src dst bytes start_us [stop_us]
    std::vector<std::string> f;
    std::stringstream ss(v);
    std::string x;
    while (ss >> x) f.push_back(x);
    if (f.size() < 4 || f.size() > 5) {
      return InvalidArgument(
          "flow: want 'src dst bytes start_us [stop_us]', got '" + v + "'");
    }
    FlowSpec s;
    UCCL_ASSIGN_OR_RETURN(s.src, to_u32("flow src", f[0]));
    UCCL_ASSIGN_OR_RETURN(s.dst, to_u32("flow dst", f[1]));
    UCCL_ASSIGN_OR_RETURN(double bytes, to_num("flow bytes", f[2]));
    UCCL_ASSIGN_OR_RETURN(double start, to_num("flow start_us", f[3]));
    if (bytes < 0 || start < 0) return InvalidArgument("flow: negative value");
    s.bytes = static_cast<uint64_t>(bytes);
    s.start_ns = static_cast<uint64_t>(start * 1000);
    if (f.size() == 5) {
      UCCL_ASSIGN_OR_RETURN(double stop, to_num("flow stop_us", f[4]));
      s.stop_ns = static_cast<uint64_t>(stop * 1000);
    }
    w->explicit_flows.push_back(s);
    return Status::OK();
  }
  return InvalidArgument("unknown key '" + k + "'");
}

Result<Check> parse_check(const std::string& key, const std::string& v,
                          bool compare) {
  Check ch;
  ch.compare = compare;
  const std::string rest = key.substr(compare ? 8 : 6);  // after "check."
  const size_t dot = rest.rfind('.');
  ch.metric = dot == std::string::npos ? rest : rest.substr(dot + 1);
  ch.scope = dot == std::string::npos ? "" : rest.substr(0, dot);
  std::string expr = trim(v);
  constexpr const char kKnownMiss[] = "known_miss";
  const size_t km = sizeof(kKnownMiss) - 1;
  if (expr.size() > km && expr.compare(expr.size() - km, km, kKnownMiss) == 0) {
    ch.known_miss = true;
    expr = trim(expr.substr(0, expr.size() - km));
  }
  if (compare) {
    const size_t sp = expr.find_first_of("<>");
    const std::string ab = trim(expr.substr(0, sp));
    const size_t slash = ab.find('/');
    if (sp == std::string::npos || slash == std::string::npos) {
      return InvalidArgument(key + ": want 'A/B OP value'");
    }
    ch.a = trim(ab.substr(0, slash));
    ch.b = trim(ab.substr(slash + 1));
    expr = expr.substr(sp);
  }
  expr = trim(expr);
  const size_t oplen = expr.size() > 1 && expr[1] == '=' ? 2 : 1;
  ch.op = expr.substr(0, oplen);
  if (ch.op != "<" && ch.op != "<=" && ch.op != ">" && ch.op != ">=") {
    return InvalidArgument(key + ": operator must be <, <=, > or >=");
  }
  UCCL_ASSIGN_OR_RETURN(ch.value, to_num(key, trim(expr.substr(oplen))));
  if (ch.metric.empty()) return InvalidArgument(key + ": no metric");
  const auto& names = metric_names();
  if (std::find(names.begin(), names.end(), ch.metric) == names.end()) {
    return InvalidArgument(key + ": no metric '" + ch.metric +
                           "' (cc/sim/README.md lists them)");
  }
  ch.text = key + " = " + v;
  return ch;
}

bool holds(double x, const std::string& op, double v) {
  if (op == "<") return x < v;
  if (op == "<=") return x <= v;
  if (op == ">") return x > v;
  return x >= v;
}

// Whether a compare's A and B name controllers of the file (both), not
// variants.
bool compares_controllers(const Experiment& e, const Check& ch) {
  auto is_cc = [&](const std::string& n) {
    return std::find(e.ccs.begin(), e.ccs.end(), n) != e.ccs.end();
  };
  return ch.compare && is_cc(ch.a) && is_cc(ch.b);
}

bool in_scope(const std::string& scope, const std::string& cc,
              const std::string& variant) {
  return scope.empty() || scope == cc ||
         (!variant.empty() &&
          (scope == variant || scope == cc + "/" + variant));
}

}  // namespace

Result<Experiment> parse_experiment(const std::string& text) {
  Experiment e;
  std::stringstream ss(text);
  std::string line;
  int n = 0;
  while (std::getline(ss, line)) {
    ++n;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("line " + std::to_string(n) +
                             ": want 'key = value', got '" + line + "'");
    }
    const std::string k = trim(line.substr(0, eq));
    const std::string v = trim(line.substr(eq + 1));
    auto at_line = [&](const Status& s) {
      return InvalidArgument("line " + std::to_string(n) + ": " + s.message());
    };
    if (k == "name") {
      e.name = v;
    } else if (k == "description") {
      e.description = v;
    } else if (k == "seeds") {
      auto n = to_u32(k, v);
      if (!n.ok() || *n == 0 || *n > 1000) {
        return at_line(InvalidArgument("seeds: a count from 1 to 1000"));
      }
      e.seeds = *n;
    } else if (k == "cc") {
      e.ccs = split_list(v, ',');
      if (e.ccs.empty()) return at_line(InvalidArgument("cc: empty list"));
    } else if (k.rfind("variant.", 0) == 0) {
      auto kv = parse_assignments(v);
      if (!kv.ok()) {
        return at_line(InvalidArgument(k + ": " + kv.status().message()));
      }
      e.variants.push_back({k.substr(8), *kv});
      e.variant_lines.push_back(n);
    } else if (k.rfind("check.", 0) == 0 || k.rfind("compare.", 0) == 0) {
      auto ch = parse_check(k, v, k[1] == 'o');
      if (!ch.ok()) return at_line(ch.status());
      e.checks.push_back(*ch);
    } else {
      e.base.push_back({k, v});
      e.base_lines.push_back(n);
    }
  }
  // A check's scope must name a cc of the list, a variant, or cc/variant,
  // and a compare's sides two variants or two controllers: a typo must
  // not make a target silently apply to nothing.
  auto is_variant = [&](const std::string& n) {
    for (const auto& [vn, kv] : e.variants) {
      if (vn == n) return true;
    }
    return false;
  };
  for (const Check& ch : e.checks) {
    if (ch.compare && !compares_controllers(e, ch) &&
        !(is_variant(ch.a) && is_variant(ch.b))) {
      return InvalidArgument(ch.text + ": '" + ch.a + "/" + ch.b +
                             "' names neither two variants nor two "
                             "controllers of this file");
    }
  }
  for (const Check& ch : e.checks) {
    if (ch.scope.empty()) continue;
    bool known = false;
    for (const std::string& cc : e.ccs) {
      known |= ch.scope == cc;
      for (const auto& [vn, kv] : e.variants) {
        known |= ch.scope == vn || ch.scope == cc + "/" + vn;
      }
    }
    if (!known) {
      return InvalidArgument(ch.text + ": scope '" + ch.scope +
                             "' is no cc, variant or cc/variant of this file");
    }
  }
  // Validate every run's keys now, not after the first run.
  for (const std::string& cc : e.ccs) {
    if (e.variants.empty()) {
      UCCL_RETURN_IF_ERROR(make_config(e, cc, "").status());
    }
    for (const auto& [vn, kv] : e.variants) {
      UCCL_RETURN_IF_ERROR(make_config(e, cc, vn).status());
    }
  }
  return e;
}

std::vector<const Check*> checks_not_run(
    const Experiment& e, const std::vector<std::string>& ccs,
    const std::vector<std::string>& variants) {
  std::vector<const Check*> out;
  auto ran = [&](const std::string& v) {
    return std::find(variants.begin(), variants.end(), v) != variants.end();
  };
  for (const Check& ch : e.checks) {
    bool any = false;
    for (const std::string& cc : ccs) {
      if (ch.compare && compares_controllers(e, ch)) {
        const bool both = std::count(ccs.begin(), ccs.end(), ch.a) &&
                          std::count(ccs.begin(), ccs.end(), ch.b);
        if (variants.empty()) any |= both && in_scope(ch.scope, "", "");
        for (const std::string& v : variants) {
          any |= both && in_scope(ch.scope, "", v);
        }
        continue;
      }
      if (ch.compare) {  // both sides with the same controller
        any |= in_scope(ch.scope, cc, "") && ran(ch.a) && ran(ch.b);
        continue;
      }
      if (variants.empty()) any |= in_scope(ch.scope, cc, "");
      for (const std::string& v : variants) any |= in_scope(ch.scope, cc, v);
    }
    if (!any) out.push_back(&ch);
  }
  return out;
}

Result<Experiment> load_experiment(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot read experiment file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto e = parse_experiment(ss.str());
  if (!e.ok()) return InvalidArgument(path + ": " + e.status().message());
  return e;
}

Result<SimConfig> make_config(const Experiment& e, const std::string& cc,
                              const std::string& variant,
                              const KeyValues& overrides) {
  SimConfig c;
  Workload w;
  c.name = e.name;
  c.cc = cc;
  std::string ccp_key = "cc_params." + cc;
  auto one = [&](const std::string& k, const std::string& v) -> Status {
    if (k == ccp_key) {
      c.cc_params += (c.cc_params.empty() ? "" : ",") + v;
      return Status::OK();
    }
    if (k.rfind("cc_params.", 0) == 0) return Status::OK();  // other ccs
    return apply(&c, &w, k, v);
  };
  auto at_line = [](const std::vector<int>& lines, size_t i, Status st) {
    if (st.ok() || i >= lines.size() || lines[i] == 0) return st;
    return InvalidArgument("line " + std::to_string(lines[i]) + ": " +
                           st.message());
  };
  for (size_t i = 0; i < e.base.size(); ++i) {
    UCCL_RETURN_IF_ERROR(
        at_line(e.base_lines, i, one(e.base[i].first, e.base[i].second)));
  }
  if (!variant.empty()) {
    bool found = false;
    for (size_t i = 0; i < e.variants.size(); ++i) {
      if (e.variants[i].first != variant) continue;
      found = true;
      for (const auto& [k, v] : e.variants[i].second) {
        UCCL_RETURN_IF_ERROR(at_line(e.variant_lines, i, one(k, v)));
      }
    }
    if (!found) return InvalidArgument("no variant '" + variant + "'");
  }
  for (const auto& [k, v] : overrides) UCCL_RETURN_IF_ERROR(one(k, v));
  UCCL_RETURN_IF_ERROR(generate(&c, w));
  // Checked here too, so a file is refused before anything runs.
  UCCL_RETURN_IF_ERROR(check_host_delays(c));
  return c;
}

double t95(uint32_t df) {
  static const double kT[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447,
                              2.365, 2.306,  2.262, 2.228, 2.201, 2.179, 2.160,
                              2.145, 2.131,  2.120, 2.110, 2.101, 2.093, 2.086,
                              2.080, 2.074,  2.069, 2.064, 2.060, 2.056, 2.052,
                              2.048, 2.045,  2.042};
  if (df == 0) return 0;
  return df < sizeof(kT) / sizeof(kT[0]) ? kT[df] : 1.96;
}

void aggregate_seeds(std::vector<SimResult> runs, RunOutcome* out) {
  out->seeds = static_cast<uint32_t>(runs.size());
  out->ci95.clear();
  if (runs.empty()) return;
  out->result = std::move(runs[0]);
  if (runs.size() == 1) return;
  for (auto& [name, first] : out->result.metrics) {
    std::vector<double> x{first};
    for (size_t i = 1; i < runs.size(); ++i) {
      auto it = runs[i].metrics.find(name);
      if (it != runs[i].metrics.end()) x.push_back(it->second);
    }
    double mean = 0;
    for (double v : x) mean += v;
    mean /= static_cast<double>(x.size());
    double var = 0;
    for (double v : x) var += (v - mean) * (v - mean);
    var = x.size() > 1 ? var / static_cast<double>(x.size() - 1) : 0;
    first = mean;
    out->ci95[name] = t95(static_cast<uint32_t>(x.size()) - 1) *
                      std::sqrt(var / static_cast<double>(x.size()));
  }
}

const char* verdict(const CheckResult& c, bool substituted, bool* fails) {
  if (c.missing) {
    *fails = true;
    return "MISSING";
  }
  if (c.known_miss && !substituted) {
    *fails = c.pass;
    return c.pass ? "MET KNOWN MISS" : "KNOWN MISS";
  }
  *fails = !c.pass;
  return c.pass ? "PASS" : "FAIL";
}

std::vector<CheckResult> evaluate(const Experiment& e,
                                  const std::vector<RunOutcome>& runs) {
  std::vector<CheckResult> out;
  auto metric = [](const RunOutcome& r, const std::string& m, double* v) {
    auto it = r.result.metrics.find(m);
    if (it == r.result.metrics.end()) return false;
    *v = it->second;
    return true;
  };
  auto fmt = [](double x) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.4g", x);
    return std::string(b);
  };
  for (const Check& ch : e.checks) {
    const size_t before = out.size();
    if (!ch.compare) {
      for (const RunOutcome& r : runs) {
        if (!in_scope(ch.scope, r.cc, r.variant)) continue;
        CheckResult cr;
        cr.label = "check " + r.cc +
                   (r.variant.empty() ? "" : "/" + r.variant) + " " +
                   ch.metric + " " + ch.op + " " + fmt(ch.value);
        cr.known_miss = ch.known_miss;
        cr.missing = !metric(r, ch.metric, &cr.actual);
        if (r.seeds > 1 && !cr.missing) {
          // The interval's far end must meet the target: the mean plus
          // the half-width for an upper bound, minus it for a lower one.
          auto ci = r.ci95.find(ch.metric);
          const double h = ci == r.ci95.end() ? 0 : ci->second;
          cr.actual += ch.op[0] == '<' ? h : -h;
          cr.label += " (95% CI over " + std::to_string(r.seeds) + " seeds)";
        }
        cr.pass = !cr.missing && holds(cr.actual, ch.op, ch.value);
        out.push_back(cr);
      }
    } else {
      // A/B: two variants with the same controller, or two controllers
      // with the same variant.
      const bool by_cc = compares_controllers(e, ch);
      for (const RunOutcome& ra : runs) {
        if (by_cc ? ra.cc != ch.a || !in_scope(ch.scope, "", ra.variant)
                  : ra.variant != ch.a || !in_scope(ch.scope, ra.cc, "")) {
          continue;
        }
        for (const RunOutcome& rb : runs) {
          if (by_cc ? rb.cc != ch.b || rb.variant != ra.variant
                    : rb.variant != ch.b || rb.cc != ra.cc) {
            continue;
          }
          CheckResult cr;
          cr.label = "compare " + (by_cc ? ra.variant : ra.cc) + " " +
                     ch.metric + "(" + ch.a + ")/" + ch.metric + "(" + ch.b +
                     ") " + ch.op + " " + fmt(ch.value);
          if (by_cc && ra.variant.empty()) cr.label.erase(8, 1);
          cr.known_miss = ch.known_miss;
          double a = 0, b = 0;
          cr.missing = !metric(ra, ch.metric, &a) ||
                       !metric(rb, ch.metric, &b) || b == 0;
          cr.actual = cr.missing ? 0 : a / b;
          cr.pass = !cr.missing && holds(cr.actual, ch.op, ch.value);
          out.push_back(cr);
        }
      }
    }
    (void)before;
  }
  return out;
}

}  // namespace uccl::sim
