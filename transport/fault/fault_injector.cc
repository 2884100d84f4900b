// Fault injector: spec parsing, knob loading and the seeded per-packet
// decisions (splitmix64 streams, one per direction, so TX and RX are
// independent and reproducible).
#include "transport/fault/fault_injector.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "util/knobs.h"
#include "util/random.h"

namespace uccl::transport {

UCCL_KNOB(std::string, knob_fault_tx, "UCCL_FAULT_TX", "",
          "Faults injected on packets this process sends, e.g. "
          "'drop=0.01,burst=0.001:8,reorder=0.01:4,dup=0.001,delay=0.01:200,"
          "corrupt=0.0001,stall=0.01:100' (burst=P:packets, "
          "reorder=P:window packets[:longest hold in microseconds, 1000], "
          "delay=P:microseconds, stall=P:microseconds the send call takes "
          "before the packet leaves). Empty = none.");
UCCL_KNOB(std::string, knob_fault_rx, "UCCL_FAULT_RX", "",
          "Faults injected on packets this process receives (UCCL_FAULT_TX "
          "syntax, without stall).");
UCCL_KNOB(int64_t, knob_fault_seed, "UCCL_FAULT_SEED", 1,
          "Seed for fault injection decisions (same seed, same faults).");

namespace {

bool parse_prob(const std::string& s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= 0.0 && v <= 1.0)) return false;
  *out = v;
  return true;
}

bool parse_u32(const std::string& s, uint32_t* out) {
  char* end = nullptr;
  unsigned long v = std::strtoul(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v > 0xffffffffUL) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

bool FaultSpec::any() const {
  return drop > 0 || burst > 0 || reorder > 0 || duplicate > 0 || delay > 0 ||
         corrupt > 0 || stall > 0;
}

Result<FaultSpec> FaultSpec::parse(const std::string& text) {
  FaultSpec spec;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("fault spec item '" + item + "' is not key=value");
    }
    std::string key = item.substr(0, eq);
    std::string val = item.substr(eq + 1);
    std::string arg;
    size_t colon = val.find(':');
    if (colon != std::string::npos) {
      arg = val.substr(colon + 1);
      val = val.substr(0, colon);
    }
    double* prob = nullptr;
    uint32_t* param = nullptr;
    if (key == "drop") {
      prob = &spec.drop;
    } else if (key == "burst") {
      prob = &spec.burst;
      param = &spec.burst_len;
    } else if (key == "reorder") {
      prob = &spec.reorder;
      param = &spec.reorder_window;
    } else if (key == "dup" || key == "duplicate") {
      prob = &spec.duplicate;
    } else if (key == "delay") {
      prob = &spec.delay;
      param = &spec.delay_us;
    } else if (key == "corrupt") {
      prob = &spec.corrupt;
    } else if (key == "stall") {
      prob = &spec.stall;
      param = &spec.stall_us;
    } else {
      return InvalidArgument(
          "unknown fault '" + key +
          "' (drop, burst, reorder, dup, delay, corrupt, stall)");
    }
    if (!parse_prob(val, prob)) {
      return InvalidArgument("fault '" + key + "': probability '" + val +
                             "' is not a number in [0, 1]");
    }
    const size_t colon2 = arg.find(':');
    if (key == "reorder" && colon2 != std::string::npos) {  // longest hold
      const std::string hold = arg.substr(colon2 + 1);
      arg.resize(colon2);
      if (!parse_u32(hold, &spec.reorder_max_us) || spec.reorder_max_us == 0) {
        return InvalidArgument("fault 'reorder': longest hold '" + hold +
                               "' is not a positive number of microseconds");
      }
    }
    if (!arg.empty()) {
      if (param == nullptr) {
        return InvalidArgument("fault '" + key + "' takes no ':' argument");
      }
      if (!parse_u32(arg, param) || *param == 0) {
        return InvalidArgument("fault '" + key + "': argument '" + arg +
                               "' is not a positive integer");
      }
    }
  }
  return spec;
}

std::string FaultSpec::to_string() const {
  if (!any()) return "none";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "drop=%g,burst=%g:%u,reorder=%g:%u:%u,dup=%g,delay=%g:%u,"
                "corrupt=%g,stall=%g:%u",
                drop, burst, burst_len, reorder, reorder_window, reorder_max_us,
                duplicate, delay, delay_us, corrupt, stall, stall_us);
  return buf;
}

Status FaultOptions::validate() const {
  if (rx.stall > 0) {
    return InvalidArgument(
        "fault 'stall' applies to transmissions only (a send call)");
  }
  return Status::OK();
}

Result<FaultOptions> FaultOptions::from_knobs() {
  FaultOptions o;
  auto tx = FaultSpec::parse(knob_fault_tx().get());
  if (!tx.ok()) return tx.status().with_context("UCCL_FAULT_TX");
  auto rx = FaultSpec::parse(knob_fault_rx().get());
  if (!rx.ok()) return rx.status().with_context("UCCL_FAULT_RX");
  o.tx = *tx;
  o.rx = *rx;
  UCCL_RETURN_IF_ERROR(o.validate().with_context("UCCL_FAULT_RX"));
  o.seed = static_cast<uint64_t>(knob_fault_seed().get());
  return o;
}

FaultInjector::FaultInjector(const FaultOptions& opts) : opts_(opts) {
  rng_[0] = opts.seed * 2 + 1;
  rng_[1] = opts.seed * 2 + 0x1234567;
}

double FaultInjector::uniform(int dir) { return uniform01(&rng_[dir]); }

FaultDecision FaultInjector::decide(Direction d, uint64_t now_ns) {
  const int dir = static_cast<int>(d);
  const FaultSpec& s = spec(d);
  FaultCounters& c = counters_[dir];
  FaultDecision out;
  ++c.packets;
  if (burst_left_[dir] > 0 && now_ns != 0 && now_ns >= burst_end_ns_[dir]) {
    burst_left_[dir] = 0;  // the episode is over
  }
  if (burst_left_[dir] > 0) {
    --burst_left_[dir];
    out.drop = true;
    ++c.burst_dropped;
    return out;
  }
  if (s.burst > 0 && uniform(dir) < s.burst) {
    burst_left_[dir] = s.burst_len - 1;
    burst_end_ns_[dir] = now_ns + kBurstMaxNs;
    out.drop = true;
    ++c.burst_dropped;
    return out;
  }
  if (s.drop > 0 && uniform(dir) < s.drop) {
    out.drop = true;
    ++c.dropped;
    return out;
  }
  if (s.corrupt > 0 && uniform(dir) < s.corrupt) {
    out.corrupt = true;
    out.corrupt_bit = splitmix64(&rng_[dir]);
    ++c.corrupted;
  }
  if (s.duplicate > 0 && uniform(dir) < s.duplicate) {
    out.duplicate = true;
    ++c.duplicated;
  }
  if (s.delay > 0 && uniform(dir) < s.delay) {
    out.delay_ns = static_cast<uint64_t>(s.delay_us) * 1000;
    ++c.delayed;
  } else if (s.reorder > 0 && uniform(dir) < s.reorder) {
    out.reorder_after = s.reorder_window;
    out.reorder_max_ns = static_cast<uint64_t>(s.reorder_max_us) * 1000;
    ++c.reordered;
  }
  if (s.stall > 0 && uniform(dir) < s.stall) {
    out.stall_ns = static_cast<uint64_t>(s.stall_us) * 1000;
    ++c.stalled;
  }
  return out;
}

std::string FaultInjector::counters_text() const {
  std::ostringstream os;
  const char* names[2] = {"tx", "rx"};
  for (int d = 0; d < 2; ++d) {
    const FaultCounters& c = counters_[d];
    os << "fault_" << names[d] << "_packets " << c.packets << "\n"
       << "fault_" << names[d] << "_dropped " << c.dropped << "\n"
       << "fault_" << names[d] << "_burst_dropped " << c.burst_dropped << "\n"
       << "fault_" << names[d] << "_reordered " << c.reordered << "\n"
       << "fault_" << names[d] << "_duplicated " << c.duplicated << "\n"
       << "fault_" << names[d] << "_delayed " << c.delayed << "\n"
       << "fault_" << names[d] << "_corrupted " << c.corrupted << "\n"
       << "fault_" << names[d] << "_stalled " << c.stalled << "\n";
  }
  return os.str();
}

}  // namespace uccl::transport
