// Per-collective accounting of a communicator's events (owner of each
// event, time per state per channel, slowest steps) and the summary text.
#include "profiler/analysis.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

namespace uccl::profiler {

void StepTimes::add(const StepTimes& o) {
  gpu_wait += o.gpu_wait;
  peer_wait += o.peer_wait;
  network += o.network;
  flush += o.flush;
  gpu_consume += o.gpu_consume;
  proxy += o.proxy;
}

const char* state_label(int state) {
  switch (state) {
    case abi::kSendGpuWait:
      return "GPU wait";
    case abi::kSendPeerWait:
      return "peer wait";
    case abi::kSendWait:
    case abi::kRecvWait:
      return "network";
    case abi::kRecvFlushWait:
      return "flush";
    case abi::kRecvGpuWait:
      return "GPU consume";
    case abi::kCtrlIdle:
      return "idle";
    case abi::kCtrlActive:
      return "active";
    case abi::kCtrlSleep:
      return "sleep";
    case abi::kCtrlWakeup:
      return "wakeup";
    case abi::kCtrlAppend:
      return "append";
    case abi::kCtrlAppendEnd:
      return "append end";
    default:
      return nullptr;
  }
}

namespace {

uint64_t* bucket(StepTimes* t, int state) {
  switch (state) {
    case abi::kSendGpuWait:
      return &t->gpu_wait;
    case abi::kSendPeerWait:
      return &t->peer_wait;
    case abi::kSendWait:
    case abi::kRecvWait:
      return &t->network;
    case abi::kRecvFlushWait:
      return &t->flush;
    case abi::kRecvGpuWait:
      return &t->gpu_consume;
    default:
      return &t->proxy;
  }
}

uint64_t stop_or(const Event& e, uint64_t end_ns) {
  return e.life.load(std::memory_order_acquire) == 2 ? e.stop_ns : end_ns;
}

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

StepTimes step_times(const Event& step, uint64_t end_ns) {
  StepTimes t;
  const uint64_t stop = std::max(stop_or(step, end_ns), step.start_ns);
  uint64_t at = step.start_ns;
  int state = -1;  // before the first transition: the proxy's
  for (int i = 0; i <= step.nstates; ++i) {
    const uint64_t next =
        i < step.nstates ? std::clamp(step.state_ns[i], at, stop) : stop;
    *bucket(&t, state) += next - at;
    at = next;
    if (i < step.nstates) state = step.states[i];
  }
  return t;
}

size_t datatype_bytes(const char* name) {
  if (name == nullptr) return 1;
  std::string n(name);
  for (char& c : n) c = static_cast<char>(std::tolower(c));
  if (n.find("64") != std::string::npos || n.find("double") != n.npos) return 8;
  if (n.find("16") != n.npos || n.find("half") != n.npos) return 2;
  if (n.find("8") != n.npos || n.find("char") != n.npos) return 1;
  return 4;  // float, int32, uint32
}

namespace {

void count_stats(const EventPool& pool, uint64_t end_ns, Analysis* a) {
  PoolStats& s = a->stats;
  const PoolCounters& c = pool.counters();
  s.events = pool.used();
  s.dropped = pool.dropped_total();
  s.orphans = c.orphans.load();
  s.bad_calls = c.bad_calls.load();
  s.foreign_parents = c.foreign_parent.load();
  s.unknown_types = c.unknown_type.load();
  for (size_t i = 0; i < pool.used(); ++i) {
    const Event& e = pool.at(i);
    if (e.life.load(std::memory_order_acquire) == 0) continue;
    ++s.by_kind[static_cast<int>(e.kind)];
    if (e.life.load(std::memory_order_acquire) != 2) ++s.unfinished;
    if (e.kind != Kind::kNetPlugin) continue;
    if (e.net.uccl) {
      ++s.net_uccl;
    } else if (e.net.decoded) {
      ++s.net_socket;
    } else {
      ++s.net_other;
    }
    if (e.net.updated) ++s.net_updated;
    s.net_retransmits += e.net.retransmits;
    if (e.parent >= 0 &&
        pool.at(static_cast<size_t>(e.parent)).kind == Kind::kProxyStep) {
      ++s.net_under_step;
    }
  }
  a->end_ns = end_ns;
}

// The Coll/P2p each event belongs to, following parents (at most 6 up).
void find_owners(const EventPool& pool, Analysis* a) {
  a->owner.assign(pool.used(), -1);
  for (size_t i = 0; i < pool.used(); ++i) {
    int32_t at = static_cast<int32_t>(i);
    for (int depth = 0; depth < 6 && at >= 0; ++depth) {
      const Event& e = pool.at(static_cast<size_t>(at));
      if (e.kind == Kind::kColl || e.kind == Kind::kP2p) {
        a->owner[i] = at;
        break;
      }
      at = e.parent;
    }
  }
}

}  // namespace

namespace {

using ReportIndex = std::map<int32_t, size_t>;  // Coll/P2p event -> colls

// A report per Coll/P2p event, and each step's NetPlugin child.
void start_reports(const EventPool& pool, uint64_t end_ns, Analysis* a,
                   ReportIndex* report_of) {
  for (size_t i = 0; i < pool.used(); ++i) {
    const Event& e = pool.at(i);
    if (e.kind != Kind::kColl && e.kind != Kind::kP2p) continue;
    if (e.life.load(std::memory_order_acquire) == 0) continue;
    CollReport r;
    r.index = static_cast<int32_t>(i);
    r.start_ns = e.start_ns;
    r.end_ns = stop_or(e, end_ns);
    r.bytes = e.count * datatype_bytes(e.dtype);
    if (e.parent >= 0) {
      const Event& api = pool.at(static_cast<size_t>(e.parent));
      if (api.kind == Kind::kCollApi || api.kind == Kind::kP2pApi) {
        r.api_ns = stop_or(api, end_ns) - api.start_ns;
      }
    }
    (*report_of)[r.index] = a->colls.size();
    a->colls.push_back(r);
  }
  a->net_child.assign(pool.used(), -1);  // the last, if several
  for (size_t i = 0; i < pool.used(); ++i) {
    const Event& n = pool.at(i);
    if (n.kind == Kind::kNetPlugin && n.parent >= 0) {
      a->net_child[static_cast<size_t>(n.parent)] = static_cast<int32_t>(i);
    }
  }
}

ChannelReport& channel_of(CollReport* r, int channel) {
  for (auto& c : r->channels) {
    if (c.channel == channel) return c;
  }
  r->channels.push_back(ChannelReport{});
  r->channels.back().channel = channel;
  return r->channels.back();
}

// Event i (under a collective) into its report: its end, and for a proxy
// step its channel's times and bytes; (time, step) into `steps`.
void add_event(const EventPool& pool, uint64_t end_ns, size_t i,
               const Analysis& a, CollReport* r,
               std::vector<std::pair<uint64_t, int32_t>>* steps) {
  const Event& e = pool.at(i);
  r->unfinished = r->unfinished || e.life.load(std::memory_order_acquire) != 2;
  r->end_ns = std::max(r->end_ns, stop_or(e, end_ns));
  if (e.kind == Kind::kNetPlugin) {
    r->retransmits += e.net.retransmits;
    if (e.parent < 0) return;  // a step's resends are its net request's
    const Event& step = pool.at(static_cast<size_t>(e.parent));
    const Event& op =
        step.parent >= 0 ? pool.at(static_cast<size_t>(step.parent)) : step;
    channel_of(r, op.channel).retransmits += e.net.retransmits;
    return;
  }
  if (e.kind != Kind::kProxyStep || e.parent < 0) return;
  const Event& op = pool.at(static_cast<size_t>(e.parent));
  const StepTimes t = step_times(e, end_ns);
  ChannelReport& ch = channel_of(r, op.channel);
  ++ch.steps;
  // Bytes: NCCL's transSize, else what its net request moved.
  const int32_t n = a.net_child[i];
  ch.bytes += e.bytes  ? e.bytes
              : n >= 0 ? pool.at(static_cast<size_t>(n)).net.bytes
                       : 0;
  ch.t.add(t);
  steps->push_back({t.total(), static_cast<int32_t>(i)});
}

}  // namespace

Analysis analyze(const EventPool& pool, uint64_t end_ns, int slowest) {
  Analysis a;
  count_stats(pool, end_ns, &a);
  find_owners(pool, &a);
  ReportIndex report_of;
  start_reports(pool, end_ns, &a, &report_of);
  std::vector<std::vector<std::pair<uint64_t, int32_t>>> steps(a.colls.size());
  for (size_t i = 0; i < pool.used(); ++i) {
    const int32_t o = a.owner[i];
    const auto it = report_of.find(o);
    if (o == static_cast<int32_t>(i) || it == report_of.end()) continue;
    add_event(pool, end_ns, i, a, &a.colls[it->second], &steps[it->second]);
  }
  for (size_t k = 0; k < a.colls.size(); ++k) {
    auto& v = steps[k];
    std::sort(v.begin(), v.end(), std::greater<>());
    for (int j = 0; j < slowest && j < static_cast<int>(v.size()); ++j) {
      a.colls[k].slowest.push_back(v[j].second);
    }
    std::sort(a.colls[k].channels.begin(), a.colls[k].channels.end(),
              [](const ChannelReport& x, const ChannelReport& y) {
                return x.channel < y.channel;
              });
  }
  return a;
}

namespace {

void append(std::string* s, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void append(std::string* s, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n > 0) s->append(buf, std::min<size_t>(n, sizeof(buf) - 1));
}

const char* str(const char* s) { return s ? s : "?"; }

// "ch 2 peer 1 send step 37 (262144 B) 812.0 us: network 790.1, ..."
void describe_step(const EventPool& pool, const Analysis& a, int32_t i,
                   std::string* out) {
  const uint64_t end_ns = a.end_ns;
  const Event& s = pool.at(static_cast<size_t>(i));
  const Event* op =
      s.parent >= 0 ? &pool.at(static_cast<size_t>(s.parent)) : nullptr;
  const StepTimes t = step_times(s, end_ns);
  append(out, "    ch %d peer %d %s step %d (%" PRIu64 " B) %.1f us:",
         op ? op->channel : -1, op ? op->peer : -1,
         op && op->is_send ? "send" : "recv", s.step, s.bytes, us(t.total()));
  const std::pair<const char*, uint64_t> parts[] = {
      {"GPU wait", t.gpu_wait},       {"peer wait", t.peer_wait},
      {"network", t.network},         {"flush", t.flush},
      {"GPU consume", t.gpu_consume}, {"proxy", t.proxy}};
  for (const auto& p : parts) {
    if (p.second > 0) append(out, " %s %.1f", p.first, us(p.second));
  }
  // Its net plugin request (UCCL's carries the congestion state).
  const int32_t k = a.net_child[static_cast<size_t>(i)];
  if (k >= 0 && pool.at(static_cast<size_t>(k)).net.uccl) {
    const NetInfo& n = pool.at(static_cast<size_t>(k)).net;
    append(out, "; %u resent, rtt %.1f us, cwnd %" PRIu64 " B, %u paths",
           n.retransmits, us(n.rtt_ns), n.cwnd_bytes, n.paths);
  }
  out->append("\n");
}

}  // namespace

std::string summary_text(const EventPool& pool, const Analysis& a,
                         const std::string& header) {
  std::string out = header;
  const PoolStats& s = a.stats;
  append(&out,
         "events %" PRIu64 " (pool %zu), dropped %" PRIu64
         ", unfinished %" PRIu64 ", bad calls %" PRIu64
         ", parents not found %" PRIu64 " (%" PRIu64
         " events left out for it)\n",
         s.events, pool.capacity(), s.dropped, s.unfinished, s.bad_calls,
         s.foreign_parents, s.orphans);
  if (s.dropped > 0) {
    out.append(
        "  the pool filled: later events were dropped; raise "
        "UCCL_PROFILER_EVENTS to keep them\n");
  }
  append(&out,
         "net plugin events %" PRIu64 " (UCCL %" PRIu64 ", socket %" PRIu64
         ", other %" PRIu64 "; under a proxy step %" PRIu64
         "), resent chunks "
         "%" PRIu64 "\n\n",
         s.by_kind[static_cast<int>(Kind::kNetPlugin)], s.net_uccl,
         s.net_socket, s.net_other, s.net_under_step, s.net_retransmits);
  out.append(
      "Per collective (us): total = its start to the last stop under it; "
      "host = its API call;\nper channel, its proxy steps' time in each "
      "state, added up (steps overlap: up to 8 per connection).\n");
  for (size_t k = 0; k < a.colls.size(); ++k) {
    const CollReport& r = a.colls[k];
    const Event& e = pool.at(static_cast<size_t>(r.index));
    append(&out, "\n#%zu %s %" PRIu64 " B (%" PRIu64 " x %s)", k, str(e.func),
           r.bytes, e.count, str(e.dtype));
    if (e.kind == Kind::kColl) {
      append(&out, " %s/%s %d ch", str(e.algo), str(e.proto), e.nchannels);
    } else {
      append(&out, " peer %d", e.peer);
    }
    append(&out, ": total %.1f, host %.1f%s\n", us(r.end_ns - r.start_ns),
           us(r.api_ns), r.unfinished ? " (unfinished)" : "");
    if (r.channels.empty()) continue;
    out.append(
        "    ch  steps      bytes  GPU-wait peer-wait   network     "
        "flush GPU-cons.  resent\n");
    for (const ChannelReport& c : r.channels) {
      append(
          &out, "  %4d %6d %10" PRIu64 " %9.1f %9.1f %9.1f %9.1f %9.1f %7u\n",
          c.channel, c.steps, c.bytes, us(c.t.gpu_wait), us(c.t.peer_wait),
          us(c.t.network), us(c.t.flush), us(c.t.gpu_consume), c.retransmits);
    }
    if (!r.slowest.empty()) out.append("  slowest steps:\n");
    for (int32_t i : r.slowest) describe_step(pool, a, i, &out);
  }
  return out;
}

}  // namespace uccl::profiler
