// nccl_perf's host-side logic: size parsing, the exact-sum data pattern and
// its check, and the comparison table (medians over rounds, ratios, wins).
#include "tools/nccl_perf_util.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace uccl::tools {

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(pos, comma - pos);
    if (!item.empty()) out.push_back(item);
    pos = comma + 1;
  }
  return out;
}

bool is_floor_net(const std::string& base) {
  return base == "SHM" || base == "P2P";
}

Result<NetSpec> parse_net_spec(const std::string& entry) {
  NetSpec spec;
  size_t pos = entry.find('+');
  spec.base = entry.substr(0, pos);
  if (spec.base != "UCCL" && spec.base != "Socket" &&
      spec.base != "Socket4x4" && !is_floor_net(spec.base)) {
    return InvalidArgument("unknown net '" + spec.base + "' in '" + entry +
                           "' (UCCL, Socket, Socket4x4, SHM, P2P)");
  }
  while (pos != std::string::npos) {
    const size_t start = pos + 1;
    pos = entry.find('+', start);
    const std::string kv = entry.substr(
        start, pos == std::string::npos ? std::string::npos : pos - start);
    const size_t eq = kv.find('=');
    const std::string name = kv.substr(0, eq);
    bool ok = eq != std::string::npos && !name.empty();
    for (char ch : name) {
      ok = ok &&
           ((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_');
    }
    if (!ok) {
      return InvalidArgument("bad variable '" + kv + "' in '" + entry +
                             "' (want VAR=value)");
    }
    spec.env.emplace_back(name, kv.substr(eq + 1));
  }
  return spec;
}

Result<std::vector<uint64_t>> parse_sizes(const std::string& list) {
  std::vector<uint64_t> out;
  for (const std::string& item : split_list(list)) {
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    uint64_t mult = 1;
    if (end != item.c_str() && *end != '\0') {
      switch (*end) {
        case 'K':
        case 'k':
          mult = 1ull << 10;
          break;
        case 'M':
        case 'm':
          mult = 1ull << 20;
          break;
        case 'G':
        case 'g':
          mult = 1ull << 30;
          break;
        default:
          mult = 0;
      }
      if (end[1] != '\0') mult = 0;
    }
    if (end == item.c_str() || errno != 0 || mult == 0 || item[0] == '-' ||
        v == 0 || v > (UINT64_MAX / mult)) {
      return InvalidArgument("bad size '" + item +
                             "' (want e.g. 4, 64K, 256M)");
    }
    uint64_t bytes = v * mult;
    if (bytes % 4 != 0) {
      return InvalidArgument("size '" + item +
                             "' is not a multiple of 4 (float32 elements)");
    }
    out.push_back(bytes);
  }
  if (out.empty()) return InvalidArgument("no sizes given");
  return out;
}

uint32_t perf_iters(uint64_t bytes, uint32_t iters, uint64_t cap_bytes) {
  uint64_t cap = bytes ? cap_bytes / bytes : iters;
  return static_cast<uint32_t>(
      std::max<uint64_t>(5, std::min<uint64_t>(iters, cap)));
}

namespace {

// Elements of out[0, n) that are not expected(i) (NaN counts as wrong).
template <typename Expected>
uint64_t count_wrong(const float* out, size_t n, Expected expected) {
  uint64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(out[i] == expected(i))) ++bad;  // NaN compares false
  }
  return bad;
}

}  // namespace

uint64_t perf_check(const float* out, size_t n, int nranks) {
  return count_wrong(out, n,
                     [&](size_t i) { return perf_expected(nranks, i); });
}

uint64_t perf_check_recv(const float* out, size_t n, int from) {
  return count_wrong(out, n, [&](size_t i) { return perf_input(from, i); });
}

uint64_t perf_check_result(PerfColl coll, const float* out, size_t n, int rank,
                           int nranks) {
  switch (coll) {
    case PerfColl::kSendRecv:
      return perf_check_recv(out, n, (rank + nranks - 1) % nranks);
    case PerfColl::kAllToAll:
      return perf_check_all_to_all(out, n, rank, nranks);
    default:
      return perf_check(out, n, nranks);
  }
}

uint64_t perf_check_all_to_all(const float* out, size_t n, int rank,
                               int nranks) {
  const size_t m = n / static_cast<size_t>(nranks);
  return count_wrong(out, m * static_cast<size_t>(nranks), [&](size_t i) {
    const size_t from = i / m, k = i % m;
    return perf_input(static_cast<int>(from),
                      static_cast<size_t>(rank) * m + k);
  });
}

namespace {

// The row of `bytes` in one run, or nullptr (run failed or size missing).
const PerfRow* find_row(const std::vector<PerfRow>& run, uint64_t bytes) {
  for (const PerfRow& r : run) {
    if (r.bytes == bytes) return &r;
  }
  return nullptr;
}

std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

// Sizes in the order the first non-empty run has them.
std::vector<uint64_t> table_sizes(
    const std::vector<std::vector<std::vector<PerfRow>>>& results) {
  std::vector<uint64_t> sizes;
  for (const auto& net : results) {
    for (const auto& run : net) {
      if (sizes.empty()) {
        for (const PerfRow& r : run) sizes.push_back(r.bytes);
      }
    }
  }
  return sizes;
}

// Which nets are baselines: every net after the subject except UCCL
// variants (UCCL+VAR=value), which get their column but are what is being
// compared, not what to beat, and floors (SHM, P2P: no network), which bound
// every network transport instead. *floor: the first floor's index, 0 if
// none.
std::vector<bool> baseline_nets(const std::vector<std::string>& nets,
                                size_t* floor) {
  std::vector<bool> is_base(nets.size(), false);
  *floor = 0;
  for (size_t k = 1; k < nets.size(); ++k) {
    auto spec = parse_net_spec(nets[k]);
    const bool fl = spec.ok() && is_floor_net(spec->base);
    if (fl && *floor == 0) *floor = k;
    is_base[k] = !fl && (!spec.ok() || spec->base != "UCCL");
  }
  return is_base;
}

// The lowest of the baselines' figures (NaN where none has one).
double best_baseline(const std::vector<double>& med,
                     const std::vector<bool>& is_base) {
  double best = NAN;
  for (size_t k = 1; k < med.size(); ++k) {
    if (is_base[k] && !std::isnan(med[k]) &&
        (std::isnan(best) || med[k] < best)) {
      best = med[k];
    }
  }
  return best;
}

}  // namespace

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

Result<PerfColl> parse_coll(const std::string& name) {
  if (name == "all_reduce") return PerfColl::kAllReduce;
  if (name == "sendrecv") return PerfColl::kSendRecv;
  if (name == "all_to_all") return PerfColl::kAllToAll;
  return InvalidArgument("unknown operation '" + name +
                         "' (all_reduce, sendrecv or all_to_all)");
}

double bus_factor(PerfColl coll, uint32_t nranks) {
  if (coll == PerfColl::kSendRecv || nranks == 0) return 1.0;
  if (coll == PerfColl::kAllToAll) return (nranks - 1.0) / nranks;
  return 2.0 * (nranks - 1) / nranks;
}

std::string perf_table(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results,
    uint32_t nranks, PerfColl coll) {
  const std::vector<uint64_t> sizes = table_sizes(results);
  const double bus = bus_factor(coll, nranks);
  size_t floor = 0;  // 0: none
  const std::vector<bool> is_base = baseline_nets(nets, &floor);
  const bool baselines =
      std::find(is_base.begin(), is_base.end(), true) != is_base.end();
  std::string s = "| size (B) |";
  for (const std::string& n : nets) s += " " + n + " us |";
  s += " " + nets[0] + " host us | " + nets[0] + " busbw GB/s |";
  if (baselines) {
    s += " best baseline busbw GB/s | ratio (baseline time / " + nets[0] +
         ") | " + nets[0] + " faster in rounds |";
  }
  if (floor) s += " " + nets[floor] + " time / " + nets[0] + " |";
  s += "\n|---:|";
  for (size_t k = 0; k < nets.size(); ++k) s += "---:|";
  s += "---:|---:|";
  if (baselines) s += "---:|---:|---:|";
  if (floor) s += "---:|";
  s += "\n";
  for (uint64_t bytes : sizes) {
    std::vector<double> med(nets.size());
    std::vector<double> host;
    for (size_t k = 0; k < nets.size(); ++k) {
      std::vector<double> t;
      for (const auto& run : results[k]) {
        if (const PerfRow* r = find_row(run, bytes)) {
          t.push_back(r->time_us);
          if (k == 0) host.push_back(r->host_us);
        }
      }
      med[k] = median(t);
    }
    const double best = best_baseline(med, is_base);
    // Rounds in which every net ran: did the subject beat all baselines?
    size_t rounds = 0, wins = 0;
    size_t nrounds = results[0].size();
    for (size_t r = 0; r < nrounds; ++r) {
      const PerfRow* subj = find_row(results[0][r], bytes);
      bool all = subj != nullptr, win = true;
      for (size_t k = 1; k < nets.size() && all; ++k) {
        if (!is_base[k]) continue;
        const PerfRow* b =
            r < results[k].size() ? find_row(results[k][r], bytes) : nullptr;
        if (b == nullptr) {
          all = false;
        } else if (b->time_us <= subj->time_us) {
          win = false;
        }
      }
      if (all) {
        ++rounds;
        wins += win;
      }
    }
    s += "| " + std::to_string(bytes) + " |";
    for (double m : med) s += " " + fmt("%.1f", m) + " |";
    s += " " + fmt("%.1f", median(host)) + " | " +
         fmt("%.2f", bytes / med[0] / 1e3 * bus) + " |";
    if (baselines) {
      s += " " + fmt("%.2f", bytes / best / 1e3 * bus) + " | " +
           fmt("%.2f", best / med[0]) + " | " + std::to_string(wins) + "/" +
           std::to_string(rounds) + " |";
    }
    if (floor) s += " " + fmt("%.2f", med[floor] / med[0]) + " |";
    s += "\n";
  }
  return s;
}

std::string perf_latency_table(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results) {
  size_t floor = 0;
  const std::vector<bool> is_base = baseline_nets(nets, &floor);
  std::string body;
  for (uint64_t bytes : table_sizes(results)) {
    std::vector<double> med(nets.size());
    bool any = false;
    for (size_t k = 0; k < nets.size(); ++k) {
      std::vector<double> l;
      for (const auto& run : results[k]) {
        const PerfRow* r = find_row(run, bytes);
        if (r && !std::isnan(r->lat_us)) l.push_back(r->lat_us);
      }
      med[k] = median(l);
      any = any || !l.empty();
    }
    if (!any) continue;
    const double best = best_baseline(med, is_base);
    body += "| " + std::to_string(bytes) + " |";
    for (double m : med) body += " " + fmt("%.1f", m) + " |";
    body +=
        " " + fmt("%.1f", best) + " | " + fmt("%.2f", best / med[0]) + " |\n";
  }
  if (body.empty()) return "";
  std::string s = "| size (B) |";
  for (const std::string& n : nets) s += " " + n + " latency us |";
  s += " best baseline latency us | ratio (baseline / " + nets[0] +
       ") |\n|---:|";
  for (size_t k = 0; k < nets.size(); ++k) s += "---:|";
  return s + "---:|---:|\n" + body;
}

std::string perf_rounds_table(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results) {
  size_t nrounds = 0;
  for (const auto& net : results) nrounds = std::max(nrounds, net.size());
  std::string s = "| size (B) | net |";
  for (size_t r = 0; r < nrounds; ++r) {
    s += " round " + std::to_string(r + 1) + " us |";
  }
  s += "\n|---:|---|";
  for (size_t r = 0; r < nrounds; ++r) s += "---:|";
  s += "\n";
  for (uint64_t bytes : table_sizes(results)) {
    for (size_t k = 0; k < nets.size(); ++k) {
      s += "| " + std::to_string(bytes) + " | " + nets[k] + " |";
      for (size_t r = 0; r < nrounds; ++r) {
        const PerfRow* row =
            r < results[k].size() ? find_row(results[k][r], bytes) : nullptr;
        s += row ? " " + fmt("%.1f", row->time_us) + " |" : " - |";
      }
      s += "\n";
    }
  }
  return s;
}

std::string perf_json(
    const std::vector<std::string>& nets,
    const std::vector<std::vector<std::vector<PerfRow>>>& results) {
  std::string s = "{";
  for (size_t k = 0; k < nets.size(); ++k) {
    s += (k ? ", \"" : "\"") + nets[k] + "\": [";
    for (size_t r = 0; r < results[k].size(); ++r) {
      s += r ? ", [" : "[";
      for (size_t i = 0; i < results[k][r].size(); ++i) {
        const PerfRow& row = results[k][r][i];
        char b[200];
        std::snprintf(b, sizeof(b),
                      "%s{\"bytes\": %llu, \"iters\": %u, \"time_us\": %.3f, "
                      "\"host_us\": %.3f, \"errors\": %llu",
                      i ? ", " : "", static_cast<unsigned long long>(row.bytes),
                      row.iters, row.time_us, row.host_us,
                      static_cast<unsigned long long>(row.errors));
        s += b;
        if (!std::isnan(row.lat_us)) {
          std::snprintf(b, sizeof(b), ", \"lat_us\": %.3f", row.lat_us);
          s += b;
        }
        s += "}";
      }
      s += "]";
    }
    s += "]";
  }
  return s + "}\n";
}

}  // namespace uccl::tools
