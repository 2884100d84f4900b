// The Chrome trace of one communicator: events packed into lanes so that
// slices on one track never partly overlap (steps of one connection run up
// to 8 at once), each proxy step holding its state slices.
#include "profiler/trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <map>
#include <tuple>
#include <vector>

namespace uccl::profiler {

std::string json_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

constexpr int kMaxLanes = 32;

// A group of tracks (lanes) for one kind of work; slices go to the first
// lane whose last slice ended before they start.
struct Group {
  int base = 0;
  std::string name;
  std::vector<uint64_t> ends;
};

class Writer {
 public:
  Writer(std::FILE* f, const EventPool& pool, const Analysis& a, int pid)
      : f_(f), pool_(pool), a_(a), pid_(pid) {}

  void all(const TraceInfo& info);

 private:
  using Key = std::tuple<int, int, int, int>;  // kind, channel, peer, dir
  int lane(const Key& k, const std::string& name, uint64_t start, uint64_t end);
  void slice(int tid, const std::string& name, uint64_t start, uint64_t end,
             const std::string& args);
  uint64_t end_of(const Event& e) const {
    return e.life.load(std::memory_order_acquire) == 2 ? e.stop_ns : a_.end_ns;
  }
  void host_event(size_t i, const Event& e);
  void proxy_event(size_t i, const Event& e);
  void metadata(const TraceInfo& info);
  std::string coll_args(const CollReport& r, const Event& e) const;
  std::string net_args(const Event& e) const;

  std::FILE* f_;
  const EventPool& pool_;
  const Analysis& a_;
  int pid_;
  bool first_ = true;
  std::map<Key, Group> groups_;
  int next_base_ = 1;
  std::vector<int32_t> report_of_;  // event -> its index in a_.colls
};

int Writer::lane(const Key& k, const std::string& name, uint64_t start,
                 uint64_t end) {
  auto it = groups_.find(k);
  if (it == groups_.end()) {
    Group g;
    g.base = next_base_;
    g.name = name;
    next_base_ += kMaxLanes;
    it = groups_.emplace(k, g).first;
  }
  Group& g = it->second;
  size_t l = 0;
  while (l < g.ends.size() && g.ends[l] > start) ++l;
  if (l == g.ends.size()) {
    if (g.ends.size() < kMaxLanes) {
      g.ends.push_back(end);
    } else {
      l = kMaxLanes - 1;  // overflow: share the last lane
    }
  }
  g.ends[l] = std::max(g.ends[l], end);
  return g.base + static_cast<int>(l);
}

void Writer::slice(int tid, const std::string& name, uint64_t start,
                   uint64_t end, const std::string& args) {
  std::fprintf(f_,
               "%s{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
               "\"ts\":%.3f,\"dur\":%.3f%s%s%s}",
               first_ ? "" : ",\n", json_escape(name).c_str(), pid_, tid,
               start / 1000.0, (end > start ? end - start : 0) / 1000.0,
               args.empty() ? "" : ",\"args\":{", args.c_str(),
               args.empty() ? "" : "}");
  first_ = false;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  const int n = std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return std::string(buf, n > 0 ? std::min<size_t>(n, sizeof(buf) - 1) : 0);
}

const char* str(const char* s) { return s ? s : "?"; }

std::string Writer::coll_args(const CollReport& r, const Event& e) const {
  StepTimes t;
  for (const auto& c : r.channels) t.add(c.t);
  return fmt(
      "\"seq\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"count\":%" PRIu64
      ",\"datatype\":\"%s\",\"algo\":\"%s\",\"proto\":\"%s\",\"channels\":%d,"
      "\"peer\":%d,\"host_us\":%.3f,\"gpu_wait_us\":%.3f,\"peer_wait_us\":%.3f,"
      "\"network_us\":%.3f,\"gpu_consume_us\":%.3f,\"resent\":%u%s",
      e.seq, r.bytes, e.count, str(e.dtype), str(e.algo), str(e.proto),
      e.nchannels, e.peer, r.api_ns / 1e3, t.gpu_wait / 1e3, t.peer_wait / 1e3,
      t.network / 1e3, t.gpu_consume / 1e3, r.retransmits,
      r.unfinished ? ",\"unfinished\":true" : "");
}

std::string Writer::net_args(const Event& e) const {
  const NetInfo& n = e.net;
  std::string s =
      fmt("\"plugin_id\":\"0x%" PRIx64 "\",\"bytes\":%" PRIu64 ",\"conn\":%u",
          static_cast<uint64_t>(n.id), n.bytes, n.conn);
  if (n.uccl) {
    s +=
        fmt(",\"parts\":%u,\"status\":%d,\"resent\":%u,\"paths\":%u,"
            "\"rtt_us\":%.3f,\"cwnd_bytes\":%" PRIu64 ",\"rate_gbps\":%.3f",
            n.parts, n.status, n.retransmits, n.paths, n.rtt_ns / 1e3,
            n.cwnd_bytes, n.rate_bps / 1e9);
  }
  return s;
}

void Writer::host_event(size_t i, const Event& e) {
  const uint64_t end = end_of(e);
  switch (e.kind) {
    case Kind::kColl:
    case Kind::kP2p: {
      if (report_of_[i] < 0) return;
      const CollReport* r = &a_.colls[static_cast<size_t>(report_of_[i])];
      const int tid = lane({5, 0, 0, 0}, "collectives", e.start_ns, r->end_ns);
      slice(tid, str(e.func), e.start_ns, r->end_ns, coll_args(*r, e));
      return;
    }
    case Kind::kKernelCh: {
      uint64_t stop = end;
      if (e.gpu_start_ns && e.gpu_stop_ns > e.gpu_start_ns) {
        stop = e.start_ns + (e.gpu_stop_ns - e.gpu_start_ns);
      }
      const int tid = lane({10, e.channel, 0, 0},
                           fmt("GPU channel %d", e.channel), e.start_ns, stop);
      slice(tid, fmt("kernel ch %d", e.channel), e.start_ns, stop,
            fmt("\"gpu_ns\":%" PRIu64, e.gpu_stop_ns - e.gpu_start_ns));
      return;
    }
    default: {
      const int track = static_cast<int>(e.kind);
      const std::string name =
          e.func ? std::string(e.func) : std::string(kind_name(e.kind));
      const int tid =
          lane({track, 0, 0, 0}, kind_name(e.kind), e.start_ns, end);
      slice(tid, name, e.start_ns, end,
            e.count ? fmt("\"count\":%" PRIu64 ",\"datatype\":\"%s\"", e.count,
                          str(e.dtype))
                    : std::string());
      // ProxyCtrl: its states (idle, active, sleep, ...) nested.
      for (int s = 0; e.kind == Kind::kProxyCtrl && s < e.nstates; ++s) {
        const uint64_t to = s + 1 < e.nstates ? e.state_ns[s + 1] : end;
        const char* label = state_label(e.states[s]);
        slice(tid, label ? label : fmt("state %d", e.states[s]), e.state_ns[s],
              std::max(to, e.state_ns[s]), "");
      }
    }
  }
}

void Writer::proxy_event(size_t i, const Event& e) {
  const uint64_t end = end_of(e);
  const Event* op = &e;
  if (e.kind != Kind::kProxyOp) {
    int32_t p = e.parent;
    if (e.kind == Kind::kNetPlugin && p >= 0) p = pool_.at(p).parent;
    if (p < 0) return;
    op = &pool_.at(static_cast<size_t>(p));
  }
  const std::string conn = fmt("ch %d %s peer %d", op->channel,
                               op->is_send ? "send to" : "recv from", op->peer);
  const int dir = op->is_send ? 1 : 0;
  if (e.kind == Kind::kProxyOp) {
    const int tid =
        lane({20, op->channel, op->peer, dir}, conn + ": ops", e.start_ns, end);
    const int32_t o = a_.owner[i];
    slice(tid, conn, e.start_ns, end,
          fmt("\"steps\":%d,\"chunk_size\":%d,\"coll_seq\":%" PRIu64, e.nsteps,
              e.chunk_size, o >= 0 ? pool_.at(static_cast<size_t>(o)).seq : 0));
  } else if (e.kind == Kind::kProxyStep) {
    const int tid = lane({21, op->channel, op->peer, dir}, conn + ": steps",
                         e.start_ns, end);
    slice(tid, fmt("step %d", e.step), e.start_ns, end,
          fmt("\"bytes\":%" PRIu64, e.bytes));
    for (int s = 0; s < e.nstates; ++s) {
      const uint64_t to = s + 1 < e.nstates ? e.state_ns[s + 1] : end;
      const char* label = state_label(e.states[s]);
      slice(tid, label ? label : fmt("state %d", e.states[s]), e.state_ns[s],
            std::max(to, e.state_ns[s]), "");
    }
  } else {
    const int tid =
        lane({22, op->channel, op->peer, dir}, conn + ": net", e.start_ns, end);
    slice(tid, e.net.op == 0 ? "isend" : "irecv", e.start_ns, end, net_args(e));
  }
}

void Writer::metadata(const TraceInfo& info) {
  std::fprintf(f_,
               ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
               "\"args\":{\"name\":\"rank %d/%d %s\"}}",
               pid_, info.rank, info.nranks,
               json_escape(info.comm_name).c_str());
  for (const auto& [key, g] : groups_) {
    for (size_t l = 0; l < g.ends.size(); ++l) {
      const std::string name =
          g.ends.size() > 1 ? g.name + " #" + std::to_string(l) : g.name;
      std::fprintf(f_,
                   ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
                   "\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n"
                   "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,"
                   "\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                   pid_, g.base + static_cast<int>(l),
                   json_escape(name).c_str(), pid_,
                   g.base + static_cast<int>(l), g.base + static_cast<int>(l));
    }
  }
}

void Writer::all(const TraceInfo& info) {
  report_of_.assign(pool_.used(), -1);
  for (size_t k = 0; k < a_.colls.size(); ++k) {
    report_of_[static_cast<size_t>(a_.colls[k].index)] =
        static_cast<int32_t>(k);
  }
  // Slices in start order, so lanes fill as time goes.
  std::vector<size_t> order;
  for (size_t i = 0; i < pool_.used(); ++i) {
    if (pool_.at(i).life.load(std::memory_order_acquire) != 0) {
      order.push_back(i);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return pool_.at(x).start_ns < pool_.at(y).start_ns;
  });
  std::fprintf(f_, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
  for (size_t i : order) {
    const Event& e = pool_.at(i);
    if (e.kind == Kind::kProxyOp || e.kind == Kind::kProxyStep ||
        e.kind == Kind::kNetPlugin) {
      proxy_event(i, e);
    } else {
      host_event(i, e);
    }
  }
  if (first_) {  // no slices: the metadata's leading comma needs one entry
    std::fprintf(f_, "{\"name\":\"empty\",\"ph\":\"M\",\"pid\":%d}", pid_);
  }
  metadata(info);
  const PoolStats& s = a_.stats;
  std::fprintf(f_,
               "\n],\"otherData\":{\"rank\":%d,\"nranks\":%d,"
               "\"comm_id\":\"0x%" PRIx64 "\",\"events\":%" PRIu64
               ",\"capacity\":%zu,\"dropped\":%" PRIu64 ",\"orphans\":%" PRIu64
               ",\"unfinished\":%" PRIu64 ",\"bad_calls\":%" PRIu64
               ",\"stray_calls\":%" PRIu64 ",\"parents_not_found\":%" PRIu64
               ",\"unknown_types\":%" PRIu64
               ",\"collectives\":%zu,\"net_uccl\":%" PRIu64
               ",\"net_socket\":%" PRIu64 ",\"net_other\":%" PRIu64
               ",\"net_updated\":%" PRIu64 ",\"net_under_step\":%" PRIu64
               ",\"net_retransmits\":%" PRIu64 ",\"by_kind\":{",
               info.rank, info.nranks, info.comm_id, s.events, pool_.capacity(),
               s.dropped, s.orphans, s.unfinished, s.bad_calls,
               info.stray_calls, s.foreign_parents, s.unknown_types,
               a_.colls.size(), s.net_uccl, s.net_socket, s.net_other,
               s.net_updated, s.net_under_step, s.net_retransmits);
  for (int k = 0; k < static_cast<int>(Kind::kCount); ++k) {
    std::fprintf(f_, "%s\"%s\":%" PRIu64, k ? "," : "",
                 kind_name(static_cast<Kind>(k)), s.by_kind[k]);
  }
  std::fprintf(f_, "}}}\n");
}

}  // namespace

bool write_trace(std::FILE* f, const EventPool& pool, const Analysis& a,
                 const TraceInfo& info) {
  Writer w(f, pool, a, info.rank);
  w.all(info);
  return std::ferror(f) == 0;
}

}  // namespace uccl::profiler
