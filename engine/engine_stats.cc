// Engine statistics and tracing: per-connection and engine snapshots
// through the command queue, the periodic stats line, the Chrome trace.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

void UcclRDMAEngine::fill_stats(uint32_t conn, FlowStats* out) {
  auto add = [&](Conn* c) {
    out->tx_bytes += c->tx.tx_bytes;
    out->rx_bytes += c->rx.win.rx_bytes();
    out->tx_chunks += c->tx.tx_chunks;
    out->rx_chunks += c->rx.win.rx_chunks();
    const cc::RecoveryCounters& rc = c->tx.sb->counters();
    out->fast_retransmits += rc.fast_retx;
    out->rto_retransmits += rc.rto_retx;
    out->tlp_retransmits += rc.tlp_retx;
    out->spurious_rtos += rc.spurious_rtos;
    out->spurious_retransmits += rc.spurious_retx;
    out->sends_matched += c->tx.sends_matched;
    out->sends_waited_for_recv += c->tx.sends_waited;
    out->sends_eager += c->tx.sends_eager;
    out->eager_received += c->rx.eager_rx;
    out->eager_held += c->rx.eager_held;
    out->sends_inline += c->tx.sends_inline;
    out->recv_descs_received += c->tx.desc_tail;  // one per descriptor
    out->inline_received += c->rx.inline_rx;
    if (cfg_.eager_bytes) {  // slots we would use
      out->eager_slots_free +=
          __builtin_popcount(c->tx.eager_free & ~c->tx.eager_busy);
    }
    out->send_wait_ns += c->tx.send_wait_ns;
    out->rtos += rc.rtos;
    out->duplicate_chunks += c->rx.win.duplicates();
    out->acks_sent += c->rx.acks_tx;
    out->acks_received += c->tx.acks_rx;
    out->credit_probes += c->tx.credit_probes;
    out->rtt_p50_ns = std::max(out->rtt_p50_ns, c->tx.rtt.quantile(0.5));
    out->rtt_p99_ns = std::max(out->rtt_p99_ns, c->tx.rtt.quantile(0.99));
    out->rtt_max_ns = std::max(out->rtt_max_ns, c->tx.rtt.max());
    out->max_inflight_bytes =
        std::max(out->max_inflight_bytes, c->tx.max_inflight);
    out->hops = std::max(out->hops, c->tx.hops);
    for (auto& pc : c->tx.ccs) {
      double w = pc.cc->cwnd_bytes();
      out->cwnd_bytes += w >= cc::kUnlimited ? 0 : w;
      out->rate_bps += pc.cc->rate_bps();
      if (out->cc_state.empty()) out->cc_state = pc.cc->state();
    }
  };
  if (conn != UINT32_MAX) {
    if (conns_[conn]) add(conns_[conn].get());
    return;
  }
  // Engine totals; the CC state shown is the flow that sent the most.
  Conn* busiest = nullptr;
  for (auto& c : conns_) {
    if (!c) continue;
    add(c.get());
    if (!busiest || c->tx.tx_bytes > busiest->tx.tx_bytes) busiest = c.get();
  }
  if (busiest && !busiest->tx.ccs.empty()) {
    out->cc_state = "flow " + std::to_string(busiest->index) + " " +
                    busiest->tx.ccs[0].cc->state();
  }
}

void UcclRDMAEngine::log_stats(uint64_t now) {
  FlowStats f;
  fill_stats(UINT32_MAX, &f);
  // Totals include closed connections, so a close never makes them shrink.
  f.tx_bytes += closed_tx_bytes_;
  f.rx_bytes += closed_rx_bytes_;
  double secs = cfg_.stats_interval_s;
  // Once: the software NIC reads the kernel's count with a syscall, and a
  // drop between two reads would be missing from every interval.
  const uint64_t drops = dev_->drops();
  // The NIC's RC retransmission timeouts (the control QPs' in UC mode):
  // descriptors lost, or acknowledged later than the timeout.
  const std::string counters = dev_->counters_text();
  const uint64_t rc_timeouts = transport::counter_sum(counters, "rc_timeouts");
  // Datagrams per second through the NIC (software NIC; verbs counts none):
  // sent, of them by reference (spliced) and the RC ACKs of the control
  // QPs, received, of them placed directly.
  static const char* const kNicPkts[kNicCounters] = {
      "tx_packets", "tx_spliced", "acks_sent", "rx_packets", "rx_direct"};
  uint64_t nic[kNicCounters];
  for (int i = 0; i < kNicCounters; ++i) {
    nic[i] = transport::counter_sum(counters, kNicPkts[i]);
  }
  // (ACK counts are the live connections': a close may lower them.)
  auto per_s = [secs](uint64_t now_count, uint64_t last) {
    return now_count > last ? static_cast<uint64_t>((now_count - last) / secs)
                            : uint64_t{0};
  };
  auto nic_per_s = [&](int i) { return per_s(nic[i], last_stats_nic_[i]); };

  // Of the wall time since the last line (BusyMeter: loops that did work).
  const uint64_t run = busy_.run_ns() - last_stats_run_ns_;
  const int busy_pct =
      run ? static_cast<int>((busy_.busy_ns() - last_stats_busy_ns_) * 100 /
                             run)
          : 0;
  LOG(INFO) << "engine " << cfg_.index << ": conns " << live_.size() << " tx "
            << (f.tx_bytes - last_stats_tx_) * 8 / secs / 1e9 << " Gb/s rx "
            << (f.rx_bytes - last_stats_rx_) * 8 / secs / 1e9
            << " Gb/s retx fast/rto/tlp " << f.fast_retransmits << "/"
            << f.rto_retransmits << "/" << f.tlp_retransmits
            << " credit probes " << f.credit_probes << " sends "
            << f.sends_matched << " waited-for-recv " << f.sends_waited_for_recv
            << " avg "
            << (f.sends_waited_for_recv
                    ? f.send_wait_ns / 1000.0 / f.sends_waited_for_recv
                    : 0.0)
            << " us eager " << f.sends_eager << " held " << f.eager_held
            << " rtt p50/p99 " << f.rtt_p50_ns / 1000 << "/"
            << f.rtt_p99_ns / 1000 << " us nic drops "
            << drops - last_stats_drops_ << " ("
            << transport::nonzero_counters(counters, "drop_")
            << " since start) rc timeouts "
            << rc_timeouts - last_stats_rc_timeouts_ << " pkts/s: nic tx "
            << nic_per_s(0) << " (spliced " << nic_per_s(1) << ", rc acks "
            << nic_per_s(2) << ") rx " << nic_per_s(3) << " (direct "
            << nic_per_s(4) << "), engine acks "
            << per_s(f.acks_sent, last_stats_acks_) << " control sends "
            << per_s(ctrl_sends_, last_stats_ctrl_sends_) << " loops "
            << loops_ - last_stats_loops_ << " idle "
            << idle_loops_ - last_stats_idle_ << " busy " << busy_pct
            << "% protocol errors " << protocol_errors_ << " late activations "
            << late_activations_ << " " << f.cc_state;
  last_stats_busy_ns_ = busy_.busy_ns();
  last_stats_run_ns_ = busy_.run_ns();
  last_stats_drops_ = drops;
  last_stats_rc_timeouts_ = rc_timeouts;
  std::copy(nic, nic + kNicCounters, last_stats_nic_);
  last_stats_acks_ = f.acks_sent;
  last_stats_ctrl_sends_ = ctrl_sends_;
  last_stats_loops_ = loops_;
  last_stats_idle_ = idle_loops_;
  last_stats_tx_ = f.tx_bytes;
  last_stats_rx_ = f.rx_bytes;
  (void)now;
}

Status UcclRDMAEngine::wait_query(Query* q) {
  Command c{};
  c.type = CmdType::kQuery;
  c.query = q;
  if (!thread_.joinable()) return Unavailable("engine not running");
  uint64_t deadline = monotonic_ns() + 5000000000ull;
  while (!submit(c)) {
    if (monotonic_ns() > deadline) return TimedOut("engine queue full");
    sched_yield();
  }
  while (!q->done.load(std::memory_order_acquire)) {
    if (monotonic_ns() > deadline) return TimedOut("engine did not answer");
    sched_yield();
  }
  return q->status;
}

Status UcclRDMAEngine::sync() {
  Query q;
  return wait_query(&q);
}

Result<FlowStats> UcclRDMAEngine::conn_stats(uint32_t conn) {
  Query q;
  q.conn = conn;
  UCCL_RETURN_IF_ERROR(wait_query(&q));
  return q.flow;
}

void UcclRDMAEngine::fill_cc(const Conn* c, RequestCc* out) const {
  out->rtt_ns = c->tx.last_rtt_ns;
  double cwnd = 0, rate = 0;
  for (const auto& pc : c->tx.ccs) {
    const double w = pc.cc->cwnd_bytes();
    cwnd += w >= cc::kUnlimited ? 0 : w;
    rate += pc.cc->rate_bps();
  }
  // Clamped: a controller may report an unbounded rate.
  constexpr double kMax = 1e18;
  out->cwnd_bytes = static_cast<uint64_t>(std::min(cwnd, kMax));
  out->rate_bps = static_cast<uint64_t>(rate > 0 ? std::min(rate, kMax) : 0);
}

EngineStats UcclRDMAEngine::stats() {
  Query q;
  if (!wait_query(&q).ok()) return EngineStats();
  return q.engine;
}

std::string UcclRDMAEngine::device_counters() {
  Query q;
  q.counters = true;
  if (!wait_query(&q).ok()) return "";
  return q.counters_text;
}

void UcclRDMAEngine::write_trace() {
  if (cfg_.trace_file.empty() || trace_n_ == 0) return;
  // <file>.<pid>.<endpoint>.<engine>.json: unique per process and engine.
  static std::atomic<int> instance{0};
  std::string path = cfg_.trace_file + "." + std::to_string(getpid()) + "." +
                     std::to_string(instance.fetch_add(1)) + "." +
                     std::to_string(cfg_.index) + ".json";
  std::ofstream f(path);
  if (!f) {
    LOG(WARNING) << "cannot write trace " << path;
    return;
  }
  f << std::fixed << std::setprecision(3);  // ts: monotonic clock, us
  f << "{\"traceEvents\":[\n";
  for (size_t i = 0; i < trace_n_; ++i) {
    const TraceEvent& e = trace_[i];
    f << (i ? ",\n" : "") << "{\"name\":\"" << e.name
      << "\",\"ph\":\"i\",\"s\":\"t\",\"ts\":" << e.ts_ns / 1000.0
      << ",\"pid\":" << cfg_.index << ",\"tid\":" << e.conn
      << ",\"args\":{\"csn\":" << e.csn << "}}";
  }
  f << "\n]}\n";
  LOG(INFO) << "engine " << cfg_.index << ": wrote " << trace_n_
            << " trace events to " << path;
  trace_n_ = 0;
}

}  // namespace uccl::engine
