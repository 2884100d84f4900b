// transport_test's end of a run: the summary line, per-flow and NIC
// statistics, retransmit totals and the --json record.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tools/transport_test/runner.h"
#include "transport/nic.h"

namespace uccl::tt {

void Runner::retx_totals(uint64_t* fast, uint64_t* rto, uint64_t* tlp) const {
  *fast = *rto = *tlp = 0;
  for (const Flow& f : fl_) {
    auto st = ep_->conn_stats(f.conn);
    if (st.ok()) {
      *fast += st->fast_retransmits;
      *rto += st->rto_retransmits;
      *tlp += st->tlp_retransmits;
    }
  }
}

int Runner::finish(double secs, const std::vector<double>* lat_us) {
  // Our Done must have left before the process (and its endpoint) ends.
  Status dst = ep_->wait(&ctl_sreq_, 30000);
  if (!dst.ok()) fail(dst, "sending the summary");
  // Closing handshake: the server has everything once the client's Done
  // arrives, but that Done completes at the client only when acknowledged;
  // the server stays for the client's Fin (sent after that) so it does not
  // leave under it. A Fin that fails (the peer already left) is harmless.
  if (opts_.server) {
    Status st = ep_->recv_async(ctl_, ctlmem_.data() + sizeof(Done),
                                sizeof(Done), ctl_mh_, &ctl_rreq_);
    if (st.ok()) (void)ep_->wait(&ctl_rreq_, 10000);
  } else {
    Done fin{kFinMagic, 0, 0, 0, 0, 0, 0};
    std::memcpy(ctlmem_.data(), &fin, sizeof(fin));
    Status st =
        ep_->send_async(ctl_, ctlmem_.data(), sizeof(fin), ctl_mh_, &ctl_sreq_);
    if (st.ok()) (void)ep_->wait(&ctl_sreq_, 5000);
  }
  const double gbps_tx = secs > 0 ? tx_bytes_ * 8 / secs / 1e9 : 0;
  const double gbps_rx = secs > 0 ? rx_bytes_ * 8 / secs / 1e9 : 0;
  uint64_t total_errors = errors_ + peer_.errors;
  std::printf("\n==== transport_test %s summary (%s) ====\n",
              kPerfNames[p_.perftype], role());
  std::printf("  flows %zu  nreq %u  nmsg %u  msize %llu B  time %.2f s\n",
              fl_.size(), p_.nreq, p_.nmsg,
              static_cast<unsigned long long>(p_.msize), secs);
  std::printf("  %-10s %14s %10s %10s\n", "", "bytes", "messages", "Gb/s");
  std::printf("  %-10s %14llu %10llu %10.2f\n", "sent",
              static_cast<unsigned long long>(tx_bytes_),
              static_cast<unsigned long long>(tx_msgs_), gbps_tx);
  std::printf("  %-10s %14llu %10llu %10.2f\n", "received",
              static_cast<unsigned long long>(rx_bytes_),
              static_cast<unsigned long long>(rx_msgs_), gbps_rx);
  // Per-flow rates and Jain's fairness index, in the direction that moved
  // data (tx on the client in tpt).
  if (fl_.size() > 1 && p_.perftype != kLat && secs > 0) {
    const bool by_tx = tx_bytes_ >= rx_bytes_;
    double sum = 0, sq = 0;
    std::string list;
    for (const Flow& f : fl_) {
      const double g = (by_tx ? f.tx_bytes : f.rx_bytes) * 8 / secs / 1e9;
      sum += g;
      sq += g * g;
      char b[32];
      std::snprintf(b, sizeof(b), " %.2f", g);
      list += b;
    }
    const double jain = sq > 0 ? sum * sum / (fl_.size() * sq) : 1.0;
    std::printf("  per-flow Gb/s (%s):%s  Jain's index %.3f\n",
                by_tx ? "sent" : "received", list.c_str(), jain);
  }
  if (opts_.flow_stats) print_flow_stats();
  std::printf(
      "  peer: sent %llu bytes / %llu messages, received %llu bytes / "
      "%llu messages, %llu errors\n",
      static_cast<unsigned long long>(peer_.tx_bytes),
      static_cast<unsigned long long>(peer_.tx_msgs),
      static_cast<unsigned long long>(peer_.rx_bytes),
      static_cast<unsigned long long>(peer_.rx_msgs),
      static_cast<unsigned long long>(peer_.errors));
  // Everything the peer sent, we received (its Done follows its last send),
  // and, on the client, everything we sent the server received (its Done
  // follows its last receive).
  if (peer_.tx_bytes != rx_bytes_ || peer_.tx_msgs != rx_msgs_ ||
      (!opts_.server &&
       (peer_.rx_bytes != tx_bytes_ || peer_.rx_msgs != tx_msgs_))) {
    ++total_errors;
    std::printf("  MISMATCH between what was sent and what was received\n");
  }
  print_nic_summary();
  double p[6] = {0, 0, 0, 0, 0, 0};
  if (lat_us && !lat_us->empty()) {
    std::vector<double> v = *lat_us;
    std::sort(v.begin(), v.end());
    auto q = [&](double x) {
      return v[std::min(v.size() - 1, size_t(x * v.size()))];
    };
    p[0] = v.front();
    p[1] = q(0.5);
    p[2] = q(0.9);
    p[3] = q(0.99);
    p[4] = q(0.999);
    p[5] = v.back();
    std::printf(
        "  one-way latency (RTT/2) of %llu-byte messages, %zu samples, us:\n"
        "    min %.2f  p50 %.2f  p90 %.2f  p99 %.2f  p999 %.2f  max %.2f\n",
        static_cast<unsigned long long>(p_.msize), v.size(), p[0], p[1], p[2],
        p[3], p[4], p[5]);
  }
  if (opts_.json) print_json(secs, total_errors, p);
  std::fflush(stdout);
  return total_errors ? kExitIntegrity : kExitOk;
}

void Runner::print_flow_stats() {
  for (size_t i = 0; i < fl_.size(); ++i) {
    auto st = ep_->conn_stats(fl_[i].conn);
    if (!st.ok()) continue;
    std::printf(
        "  flow %zu: rtt p50/p99 %.0f/%.0f us, retx fast %llu rto %llu "
        "tlp %llu (%llu timeouts, %llu spurious; %llu spurious resends), "
        "max in flight %llu B, %s\n",
        i, st->rtt_p50_ns / 1e3, st->rtt_p99_ns / 1e3,
        static_cast<unsigned long long>(st->fast_retransmits),
        static_cast<unsigned long long>(st->rto_retransmits),
        static_cast<unsigned long long>(st->tlp_retransmits),
        static_cast<unsigned long long>(st->rtos),
        static_cast<unsigned long long>(st->spurious_rtos),
        static_cast<unsigned long long>(st->spurious_retransmits),
        static_cast<unsigned long long>(st->max_inflight_bytes),
        st->cc_state.c_str());
  }
}

void Runner::print_nic_summary() {
  // The NIC's drop counters, where any are non-zero, and how many received
  // datagrams the kernel copied straight to their destination. (A server's
  // NIC is shared by its sessions: its counters cover all of them.)
  std::string nic = ep_->nic_counters(), line, drops;
  const unsigned long long rx_packets =
      uccl::transport::counter_sum(nic, "rx_packets");
  const unsigned long long rx_direct =
      uccl::transport::counter_sum(nic, "rx_direct");
  const unsigned long long rc_timeouts =
      uccl::transport::counter_sum(nic, "rc_timeouts");
  for (size_t pos = 0; pos < nic.size();) {
    size_t e = nic.find('\n', pos);
    line =
        nic.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
    pos = e == std::string::npos ? nic.size() : e + 1;
    const size_t sp = line.rfind(' ');  // "name value" lines
    if (sp == std::string::npos) continue;
    if ((line.rfind("drop_", 0) == 0 || line.rfind("tx_errors", 0) == 0 ||
         line.rfind("fault_tx_dropped", 0) == 0) &&
        line.substr(sp + 1) != "0") {
      drops += "  " + line;
    }
  }
  if (!drops.empty()) std::printf("  NIC drops:%s\n", drops.c_str());
  // RC QPs' retransmission timeouts in the NIC (the control QPs' in UC
  // mode): lost descriptors, or a peer slow to acknowledge them.
  if (rc_timeouts > 0) std::printf("  NIC RC timeouts: %llu\n", rc_timeouts);
  if (rx_packets > 0) {
    std::printf("  NIC rx: %llu datagrams, %llu placed directly (%.1f%%)\n",
                rx_packets, rx_direct, 100.0 * rx_direct / rx_packets);
  }
  uint64_t fast, rto, tlp, chunks = 0, probes = 0;
  retx_totals(&fast, &rto, &tlp);
  for (const Flow& f : fl_) {
    auto st = ep_->conn_stats(f.conn);
    if (!st.ok()) continue;
    chunks += st->tx_chunks;
    probes += st->credit_probes;
  }
  // cc=credit: a sender that waited for credit with nothing in flight
  // asked for the receiver's grants again (a lost ACK, or a slow grant).
  if (probes > 0) {
    std::printf("  credit probes: %llu\n",
                static_cast<unsigned long long>(probes));
  }
  const uint64_t retx = fast + rto + tlp;
  std::printf(
      "  retransmits fast %llu rto %llu tlp %llu (%.2f%% of %llu chunks "
      "sent); integrity errors %llu\n",
      static_cast<unsigned long long>(fast),
      static_cast<unsigned long long>(rto),
      static_cast<unsigned long long>(tlp),
      chunks ? 100.0 * retx / chunks : 0.0,
      static_cast<unsigned long long>(chunks),
      static_cast<unsigned long long>(errors_ + peer_.errors));
}

void Runner::print_json(double secs, uint64_t errors, const double* lat) {
  uint64_t fast, rto, tlp, chunks = 0;
  retx_totals(&fast, &rto, &tlp);
  for (const Flow& f : fl_) {
    auto st = ep_->conn_stats(f.conn);
    if (st.ok()) chunks += st->tx_chunks;
  }
  const double gbps_tx = secs > 0 ? tx_bytes_ * 8 / secs / 1e9 : 0;
  const double gbps_rx = secs > 0 ? rx_bytes_ * 8 / secs / 1e9 : 0;
  std::printf(
      "{\"role\":\"%s\",\"session\":%d,\"perftype\":\"%s\",\"flows\":%zu,"
      "\"msize\":%llu,\"seconds\":%.4f,\"tx_bytes\":%llu,\"rx_bytes\":%llu,"
      "\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,\"tx_chunks\":%llu,"
      "\"retx_fast\":%llu,\"retx_rto\":%llu,\"retx_tlp\":%llu,"
      "\"errors\":%llu,\"lat_us\":{\"min\":%.3f,\"p50\":%.3f,\"p90\":%.3f,"
      "\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}}\n",
      opts_.server ? "server" : "client", opts_.session,
      kPerfNames[p_.perftype], fl_.size(),
      static_cast<unsigned long long>(p_.msize), secs,
      static_cast<unsigned long long>(tx_bytes_),
      static_cast<unsigned long long>(rx_bytes_), gbps_tx, gbps_rx,
      static_cast<unsigned long long>(chunks),
      static_cast<unsigned long long>(fast),
      static_cast<unsigned long long>(rto),
      static_cast<unsigned long long>(tlp),
      static_cast<unsigned long long>(errors), lat[0], lat[1], lat[2], lat[3],
      lat[4], lat[5]);
}

}  // namespace uccl::tt
