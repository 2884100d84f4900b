// transport_test: UCCL's server/client performance and integrity tool
// (perftypes basic, lat, tpt, bi), in the spirit of perftest.
// Run `transport_test --help` for the flags; exit 0 ok, 1 integrity error,
// 2 transport/connection error, 3 bad usage.
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "transport/nic.h"
#include "uccl/endpoint.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/logging.h"
#include "util/pattern.h"

DEFINE_bool(server, false, "Run as the server (the receiver in tpt).");
DEFINE_string(serverip, "", "Client: the server's address.");
DEFINE_string(perftype, "tpt",
              "basic (patterned data, every byte verified), lat (ping-pong "
              "latency), tpt (throughput client -> server), bi (both ways).");
DEFINE_bool(warmup, false, "Run a short warm-up before measuring.");
DEFINE_uint32(nflow, 4, "Connections (flows) between client and server.");
DEFINE_uint32(nmsg, 1, "Messages per request (one grouped receive), 1..8.");
DEFINE_uint32(nreq, 2, "Outstanding requests per flow.");
DEFINE_uint64(msize, 1000000, "Bytes per message.");
DEFINE_uint64(iterations, 0,
              "basic/lat: iterations (0: 8 for basic, 10000 for lat); "
              "tpt/bi: requests per flow instead of --duration_s (0: time).");
DEFINE_bool(flush, false, "Flush after each receive (as NCCL does for GPUs).");
DEFINE_bool(bi, false, "Same as --perftype=bi.");
DEFINE_bool(verify, false, "tpt/bi: check every received byte (basic always).");
DEFINE_string(
    device, "udp",
    "NIC: udp (software NIC), udp:<if>, udp:<ip>, or a verbs device.");
DEFINE_int32(engines, 1, "Engine threads.");
DEFINE_string(engine_cores, "", "Engine cores, e.g. '2,3' (default: auto).");
DEFINE_uint32(chunk_kb, 64, "Chunk size, KiB.");
DEFINE_uint32(paths, 4, "QPs (paths) per connection.");
DEFINE_string(
    cc, "none",
    "Congestion control: none, timely, timely_patched, swift, credit.");
DEFINE_string(cc_params, "", "Congestion-control parameters 'key=value,...'.");
DEFINE_bool(rc_mode, false, "RC QPs (the NIC retransmits) instead of UC.");
DEFINE_double(duration_s, 5.0, "tpt/bi: seconds to run.");
DEFINE_uint32(oobport, 19999, "TCP port of the server's bootstrap listener.");
DEFINE_double(loss, 0.0, "Inject this packet loss probability on transmit.");
DEFINE_string(fault_tx, "", "Transmit fault spec (see UCCL_FAULT_TX).");
DEFINE_string(fault_rx, "", "Receive fault spec (see UCCL_FAULT_RX).");
DEFINE_uint64(fault_seed, 1, "Fault injection seed.");
DEFINE_double(link_gbps, 0,
              "Line rate the congestion control assumes, Gb/s (credit grants "
              "at it; 0: the device's link speed). Set it to a bottleneck's "
              "rate.");
DEFINE_double(nic_rate_gbps, 0,
              "Software NIC line-rate limit, Gb/s (0: none).");
DEFINE_double(connect_timeout_s, 10, "Client: give up connecting after this.");
DEFINE_uint64(seed, 42, "Data pattern seed.");
DEFINE_bool(json, false, "Also print the summary as one JSON line.");
DEFINE_int64(test_corrupt_rx_at, -1,
             "Testing only: flip the byte at this offset of the first "
             "received message before it is verified (exercises the "
             "mismatch report and exit code).");
DEFINE_bool(flow_stats, false,
            "Print each flow's transport statistics (CC state, RTT, "
            "retransmissions) in the summary.");

namespace {

using namespace uccl;

enum PerfType : uint32_t { kBasic = 0, kLat = 1, kTpt = 2, kBi = 3 };
const char* const kPerfNames[] = {"basic", "lat", "tpt", "bi"};

// Control messages on the extra control connection (client -> server:
// Params first, Done last; server -> client: Done with its counts).
constexpr uint32_t kParamsMagic = 0x55545450;  // "UTTP"
constexpr uint32_t kDoneMagic = 0x5554444e;    // "UTDN"
constexpr uint32_t kFinMagic = 0x5554464e;     // "UTFN"
struct Params {
  uint32_t magic, version;
  uint32_t perftype, nflow, nmsg, nreq;
  uint64_t msize, iterations, seed;
  double duration_s;
  uint8_t flush, verify, warmup, pad[5];
};
struct Done {
  uint32_t magic, pad;
  uint64_t tx_bytes, tx_msgs, rx_bytes, rx_msgs, errors;
};

enum ExitCode {
  kExitOk = 0,
  kExitIntegrity = 1,
  kExitTransport = 2,
  kExitUsage = 3
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "transport_test: %s\n", msg.c_str());
  std::_Exit(code);
}

const char* role() { return FLAGS_server ? "server" : "client"; }

uint64_t msg_seed(uint64_t seed, uint64_t iter, uint32_t flow, uint32_t msg) {
  return seed ^ (iter * 0x9E3779B97F4A7C15ull) ^ (uint64_t{flow} << 40) ^ msg;
}

// A request slot: nmsg messages, sent or received together.
struct Slot {
  std::unique_ptr<Request[]> reqs;
  std::vector<uint8_t*> bufs;
  uint64_t iter = 0;
  bool posted = false;
  bool done(int n) const {
    for (int i = 0; i < n; ++i) {
      if (!reqs[i].done()) return false;
    }
    return true;
  }
};

struct Flow {
  ConnId conn = 0;
  std::vector<Slot> tx, rx;
  uint64_t tx_next = 0, rx_next = 0;    // next request number to post
  uint64_t tx_head = 0, rx_head = 0;    // oldest outstanding (FIFO order)
  uint64_t tx_bytes = 0, rx_bytes = 0;  // completed
};

class Runner {
 public:
  Runner(Endpoint* ep, ConnId ctl, const std::vector<ConnId>& conns,
         const Params& p)
      : ep_(ep), ctl_(ctl), p_(p), fl_(conns.size()) {
    for (size_t f = 0; f < conns.size(); ++f) fl_[f].conn = conns[f];
  }
  int run();

 private:
  bool sends() const {
    return p_.perftype == kBi || (p_.perftype != kLat && !FLAGS_server);
  }
  bool receives() const {
    return p_.perftype == kBi || (p_.perftype != kLat && FLAGS_server);
  }
  void alloc();
  void post_send(uint32_t f, uint64_t iter, bool fill);
  void post_recv(uint32_t f, uint64_t iter);
  // Checks a completed receive slot; counts bytes, messages and errors.
  void complete_recv(uint32_t f, Slot& s);
  void complete_send(uint32_t f, Slot& s);
  int run_stream();
  int run_lat();
  void progress(double t, bool last);
  int finish(double secs, const std::vector<double>* lat_us);
  void send_done();
  void ctl_post_recv();
  [[noreturn]] void fail(const Status& st, const std::string& what) {
    die(kExitTransport, what + ": " + st.to_string());
  }

  Endpoint* ep_;
  ConnId ctl_;
  Params p_;
  std::vector<Flow> fl_;
  std::vector<uint8_t> txmem_, rxmem_, ctlmem_;
  MrHandle *tx_mh_ = nullptr, *rx_mh_ = nullptr, *ctl_mh_ = nullptr;
  Request ctl_rreq_, ctl_sreq_;
  uint64_t tx_bytes_ = 0, tx_msgs_ = 0, rx_bytes_ = 0, rx_msgs_ = 0,
           errors_ = 0;
  uint64_t last_tx_ = 0, last_rx_ = 0;
  uint64_t last_basic_ = 0;
  double last_t_ = 0, start_ = 0;
  Done peer_{};
};

void Runner::alloc() {
  const size_t per_flow = size_t{p_.nreq} * p_.nmsg * p_.msize;
  const size_t total = std::max<size_t>(per_flow * fl_.size(), 1);
  try {
    if (sends() || p_.perftype == kLat) txmem_.resize(total);
    if (receives() || p_.perftype == kLat) rxmem_.resize(total);
    ctlmem_.resize(2 * sizeof(Done) + sizeof(Params));
  } catch (const std::bad_alloc&) {
    die(kExitUsage, "cannot allocate " + std::to_string(2 * total) +
                        " bytes (nflow x nreq x nmsg x msize, each way)");
  }
  auto reg = [&](std::vector<uint8_t>& v) -> MrHandle* {
    if (v.empty()) return nullptr;
    auto r = ep_->reg_mr(v.data(), v.size());
    if (!r.ok()) fail(r.status(), "registering buffers");
    return *r;
  };
  tx_mh_ = reg(txmem_);
  rx_mh_ = reg(rxmem_);
  ctl_mh_ = reg(ctlmem_);
  for (size_t f = 0; f < fl_.size(); ++f) {
    fl_[f].tx.resize(p_.nreq);
    fl_[f].rx.resize(p_.nreq);
    for (uint32_t r = 0; r < p_.nreq; ++r) {
      for (Slot* s : {&fl_[f].tx[r], &fl_[f].rx[r]}) {
        s->reqs.reset(new Request[p_.nmsg]);
      }
      for (uint32_t m = 0; m < p_.nmsg; ++m) {
        size_t off = f * per_flow + (size_t{r} * p_.nmsg + m) * p_.msize;
        fl_[f].tx[r].bufs.push_back(txmem_.empty() ? nullptr
                                                   : txmem_.data() + off);
        fl_[f].rx[r].bufs.push_back(rxmem_.empty() ? nullptr
                                                   : rxmem_.data() + off);
      }
    }
  }
}

void Runner::post_send(uint32_t f, uint64_t iter, bool fill) {
  Flow& fl = fl_[f];
  Slot& s = fl.tx[iter % p_.nreq];
  s.iter = iter;
  s.posted = true;
  for (uint32_t m = 0; m < p_.nmsg; ++m) {
    if (fill) fill_pattern(s.bufs[m], p_.msize, msg_seed(p_.seed, iter, f, m));
    Status st = ep_->send_async(fl.conn, s.bufs[m], p_.msize, tx_mh_,
                                &s.reqs[m], static_cast<int>(m));
    if (!st.ok()) fail(st, "posting a send on flow " + std::to_string(f));
  }
  ++fl.tx_next;
}

void Runner::post_recv(uint32_t f, uint64_t iter) {
  Flow& fl = fl_[f];
  Slot& s = fl.rx[iter % p_.nreq];
  s.iter = iter;
  s.posted = true;
  std::vector<void*> data(s.bufs.begin(), s.bufs.end());
  std::vector<size_t> sizes(p_.nmsg, p_.msize);
  std::vector<int> tags(p_.nmsg);
  std::vector<MrHandle*> mhs(p_.nmsg, rx_mh_);
  for (uint32_t m = 0; m < p_.nmsg; ++m) tags[m] = static_cast<int>(m);
  // One grouped receive: its request is reqs[0].
  Status st =
      ep_->recv_async(fl.conn, static_cast<int>(p_.nmsg), data.data(),
                      sizes.data(), tags.data(), mhs.data(), &s.reqs[0]);
  if (!st.ok()) fail(st, "posting a receive on flow " + std::to_string(f));
  ++fl.rx_next;
}

void Runner::complete_recv(uint32_t f, Slot& s) {
  Request& r = s.reqs[0];
  if (!r.status().ok()) {
    fail(r.status(), "receive on flow " + std::to_string(f));
  }
  if (p_.flush) {
    Request fr;
    std::vector<void*> data(s.bufs.begin(), s.bufs.end());
    std::vector<size_t> sizes(p_.nmsg, p_.msize);
    std::vector<MrHandle*> mhs(p_.nmsg, rx_mh_);
    Status st = ep_->flush_async(fl_[f].conn, static_cast<int>(p_.nmsg),
                                 data.data(), sizes.data(), mhs.data(), &fr);
    if (st.ok()) st = ep_->wait(&fr, 10000);
    if (!st.ok()) fail(st, "flush");
  }
  for (uint32_t m = 0; m < p_.nmsg; ++m) {
    rx_bytes_ += r.size(m);
    fl_[f].rx_bytes += r.size(m);
    ++rx_msgs_;
    if (r.size(m) != p_.msize) {
      ++errors_;
      std::printf(
          "[%s] flow %u request %llu message %u: got %zu bytes, "
          "expected %llu\n",
          role(), f, static_cast<unsigned long long>(s.iter), m, r.size(m),
          static_cast<unsigned long long>(p_.msize));
      continue;
    }
    if (!(p_.verify || p_.perftype == kBasic)) continue;
    if (FLAGS_test_corrupt_rx_at >= 0 &&
        static_cast<uint64_t>(FLAGS_test_corrupt_rx_at) < p_.msize) {
      s.bufs[m][FLAGS_test_corrupt_rx_at] ^= 0xff;
      FLAGS_test_corrupt_rx_at = -1;  // once
    }
    const uint64_t seed = msg_seed(p_.seed, s.iter, f, m);
    int64_t bad = find_pattern_mismatch(s.bufs[m], p_.msize, seed);
    if (bad >= 0) {
      ++errors_;
      std::printf(
          "[%s] MISMATCH flow %u request %llu message %u: offset %lld "
          "expected 0x%02x got 0x%02x\n",
          role(), f, static_cast<unsigned long long>(s.iter), m,
          static_cast<long long>(bad), pattern_byte(seed, bad), s.bufs[m][bad]);
    }
  }
  s.posted = false;
}

void Runner::complete_send(uint32_t f, Slot& s) {
  for (uint32_t m = 0; m < p_.nmsg; ++m) {
    if (!s.reqs[m].status().ok()) {
      fail(s.reqs[m].status(), "send on flow " + std::to_string(f));
    }
    tx_bytes_ += s.reqs[m].size(0);
    fl_[f].tx_bytes += s.reqs[m].size(0);
    ++tx_msgs_;
  }
  s.posted = false;
}

void Runner::ctl_post_recv() {
  Status st = ep_->recv_async(ctl_, ctlmem_.data() + sizeof(Done), sizeof(Done),
                              ctl_mh_, &ctl_rreq_);
  if (!st.ok()) fail(st, "control receive");
}

void Runner::progress(double t, bool last) {
  if (!last && t - last_t_ < 1.0) return;
  double dt = t - last_t_;
  if (dt <= 0) return;
  uint64_t fast = 0, rto = 0, tlp = 0;
  for (const Flow& f : fl_) {
    auto st = ep_->conn_stats(f.conn);
    if (st.ok()) {
      fast += st->fast_retransmits;
      rto += st->rto_retransmits;
      tlp += st->tlp_retransmits;
    }
  }
  std::printf(
      "[%s] %6.1fs  TX %8.2f Gb/s  RX %8.2f Gb/s  retx fast %llu rto %llu "
      "tlp %llu\n",
      role(), t, (tx_bytes_ - last_tx_) * 8 / dt / 1e9,
      (rx_bytes_ - last_rx_) * 8 / dt / 1e9,
      static_cast<unsigned long long>(fast),
      static_cast<unsigned long long>(rto),
      static_cast<unsigned long long>(tlp));
  std::fflush(stdout);
  last_tx_ = tx_bytes_;
  last_rx_ = rx_bytes_;
  last_t_ = t;
}

// Back-off for the app thread: spin a little, then yield, then sleep, so
// client, server and their engines can share a small machine.
// The application thread's back-off between polls: a few spins, then short
// sleeps. (Yielding instead keeps it runnable, and on a host with fewer cores
// than busy threads it then takes CPU time from the engines.)
class Idle {
 public:
  void busy() { n_ = 0; }
  void wait() {
    if (++n_ < 64) return;
    usleep(20);
  }

 private:
  uint64_t n_ = 0;
};

// basic, tpt and bi: every flow keeps nreq requests in flight in FIFO order.
// Each side sends its Done once it will send no more; it leaves after it
// has the peer's Done and has drained its receives (the peer's data was all
// acknowledged before the peer's Done, so it is complete).
int Runner::run_stream() {
  const bool basic = p_.perftype == kBasic;
  const bool fill_each = basic || p_.verify;
  uint64_t per_flow = p_.iterations;  // 0: until time is up (tpt/bi)
  if (basic && per_flow == 0) per_flow = 8;
  const bool client = !FLAGS_server;
  if (sends() && !fill_each) {  // fill once: the pattern of request 0
    for (uint32_t f = 0; f < fl_.size(); ++f) {
      for (uint32_t r = 0; r < p_.nreq; ++r) {
        for (uint32_t m = 0; m < p_.nmsg; ++m) {
          fill_pattern(fl_[f].tx[r].bufs[m], p_.msize,
                       msg_seed(p_.seed, 0, f, m));
        }
      }
    }
  }
  ctl_post_recv();
  start_ = monotonic_ns() / 1e9;
  last_t_ = 0;
  bool stop_sending = false;
  bool peer_done = false, sent_done = false;
  uint64_t basic_done = 0;
  auto more_to_send = [&](const Flow& f) {
    return !stop_sending && !(per_flow && f.tx_next >= per_flow);
  };
  auto more_to_recv = [&](const Flow& f) {
    return per_flow ? f.rx_next < per_flow : !peer_done;
  };
  for (uint32_t f = 0; f < fl_.size(); ++f) {
    for (uint32_t r = 0; r < p_.nreq; ++r) {
      if (receives() && more_to_recv(fl_[f])) post_recv(f, fl_[f].rx_next);
      if (sends() && more_to_send(fl_[f]))
        post_send(f, fl_[f].tx_next, fill_each);
    }
  }
  Idle idle;
  for (;;) {
    const double t = monotonic_ns() / 1e9 - start_;
    if (client && !per_flow && t >= p_.duration_s) stop_sending = true;
    bool busy = false;
    for (uint32_t f = 0; f < fl_.size(); ++f) {
      Flow& fl = fl_[f];
      if (sends() && fl.tx_head < fl.tx_next) {
        Slot& s = fl.tx[fl.tx_head % p_.nreq];
        if (s.done(p_.nmsg)) {
          complete_send(f, s);
          ++fl.tx_head;
          busy = true;
          if (more_to_send(fl)) post_send(f, fl.tx_next, fill_each);
        }
      }
      if (receives() && fl.rx_head < fl.rx_next) {
        Slot& s = fl.rx[fl.rx_head % p_.nreq];
        if (s.reqs[0].done()) {
          complete_recv(f, s);
          ++fl.rx_head;
          busy = true;
          if (basic) ++basic_done;
          if (more_to_recv(fl)) post_recv(f, fl.rx_next);
        }
      }
    }
    if (basic && receives() && basic_done / fl_.size() > last_basic_) {
      last_basic_ = basic_done / fl_.size();
      std::printf(
          "[%s] iteration %llu: %s (%zu flows x %u messages x %llu bytes)\n",
          role(), static_cast<unsigned long long>(last_basic_ - 1),
          errors_ ? "ERRORS" : "OK", fl_.size(), p_.nmsg,
          static_cast<unsigned long long>(p_.msize));
      std::fflush(stdout);
    }
    if (!peer_done && ctl_rreq_.done()) {
      if (!ctl_rreq_.status().ok())
        fail(ctl_rreq_.status(), "control connection");
      std::memcpy(&peer_, ctlmem_.data() + sizeof(Done), sizeof(Done));
      if (peer_.magic != kDoneMagic) die(kExitTransport, "bad control message");
      peer_done = true;
      stop_sending = true;  // the server sends (bi) until the client is done
      busy = true;
    }
    if (!basic) progress(t, false);
    // Done with sending: all posted sends completed and no more will be.
    bool sends_over = true, recvs_over = true;
    for (const Flow& fl : fl_) {
      if (sends() && (fl.tx_head < fl.tx_next || more_to_send(fl)))
        sends_over = false;
      if (receives() && per_flow && fl.rx_head < per_flow) recvs_over = false;
    }
    if (receives() && !per_flow && !peer_done) recvs_over = false;
    if (!sent_done && sends_over && (client || (recvs_over && !busy))) {
      send_done();
      sent_done = true;
    }
    if (sent_done && peer_done && recvs_over && !busy) break;
    if (busy) {
      idle.busy();
    } else {
      idle.wait();
    }
  }
  double secs = monotonic_ns() / 1e9 - start_;
  if (!basic && secs - last_t_ >= 0.5) progress(secs, true);
  return finish(secs, nullptr);
}

void Runner::send_done() {
  Done mine{kDoneMagic, 0, tx_bytes_, tx_msgs_, rx_bytes_, rx_msgs_, errors_};
  std::memcpy(ctlmem_.data(), &mine, sizeof(mine));
  Status st =
      ep_->send_async(ctl_, ctlmem_.data(), sizeof(mine), ctl_mh_, &ctl_sreq_);
  if (!st.ok()) fail(st, "control message");
}

int Runner::run_lat() {
  const uint64_t iters = p_.iterations ? p_.iterations : 10000;
  const uint64_t warm =
      p_.warmup ? std::min<uint64_t>(iters / 10 + 1, 1000) : 0;
  Flow& fl = fl_[0];
  Slot& tx = fl.tx[0];
  Slot& rx = fl.rx[0];
  fill_pattern(tx.bufs[0], p_.msize, p_.seed);
  std::vector<double> lat_us;
  lat_us.reserve(iters);
  ctl_post_recv();
  start_ = monotonic_ns() / 1e9;
  auto recv1 = [&]() {
    Status st =
        ep_->recv_async(fl.conn, rx.bufs[0], p_.msize, rx_mh_, &rx.reqs[0]);
    if (!st.ok()) fail(st, "posting a receive");
  };
  auto send1 = [&]() {
    Status st =
        ep_->send_async(fl.conn, tx.bufs[0], p_.msize, tx_mh_, &tx.reqs[0]);
    if (!st.ok()) fail(st, "posting a send");
  };
  // Waits for `r`; the server also watches for the client's Done.
  auto await = [&](Request* r) {
    if (!FLAGS_server) {
      Status st = ep_->wait(r, 60000);
      if (!st.ok()) fail(st, "ping-pong");
      return true;
    }
    // Block (futex) in 1 ms slices, looking for the client's Done between.
    while (!r->done()) {
      if (ctl_rreq_.done()) return false;
      (void)ep_->wait(r, 1);
    }
    if (!r->status().ok()) fail(r->status(), "ping-pong");
    return true;
  };
  if (FLAGS_server) {
    // The next receive is posted before the reply goes out (as an RPC server
    // keeps one posted): its clear-to-send then travels ahead of the reply,
    // so the client's next ping never waits for it. Posting it after the
    // reply's completion (its ACK) would add two one-way trips per ping.
    recv1();
    for (;;) {
      if (!await(&rx.reqs[0])) break;
      ++rx_msgs_;
      rx_bytes_ += rx.reqs[0].size(0);
      recv1();
      send1();
      if (!await(&tx.reqs[0])) break;
      ++tx_msgs_;
      tx_bytes_ += p_.msize;
    }
    std::memcpy(&peer_, ctlmem_.data() + sizeof(Done), sizeof(Done));
    send_done();
  } else {
    for (uint64_t i = 0; i < warm + iters; ++i) {
      uint64_t t0 = monotonic_ns();
      recv1();
      send1();
      await(&tx.reqs[0]);
      await(&rx.reqs[0]);
      uint64_t t1 = monotonic_ns();
      if (i >= warm) lat_us.push_back((t1 - t0) / 2e3);
      ++tx_msgs_;
      ++rx_msgs_;
      tx_bytes_ += p_.msize;
      rx_bytes_ += rx.reqs[0].size(0);
    }
    send_done();
    Status st = ep_->wait(&ctl_rreq_, 30000);
    if (!st.ok()) fail(st, "waiting for the server's summary");
    std::memcpy(&peer_, ctlmem_.data() + sizeof(Done), sizeof(Done));
  }
  double secs = monotonic_ns() / 1e9 - start_;
  return finish(secs, FLAGS_server ? nullptr : &lat_us);
}

int Runner::finish(double secs, const std::vector<double>* lat_us) {
  // Our Done must have left before the process (and its endpoint) ends.
  Status dst = ep_->wait(&ctl_sreq_, 30000);
  if (!dst.ok()) fail(dst, "sending the summary");
  // Closing handshake: the server has everything once the client's Done
  // arrives, but that Done completes at the client only when acknowledged;
  // the server stays for the client's Fin (sent after that) so it does not
  // leave under it. A Fin that fails (the peer already left) is harmless.
  if (FLAGS_server) {
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
  uint64_t fast = 0, rto = 0, tlp = 0;
  for (const Flow& f : fl_) {
    auto st = ep_->conn_stats(f.conn);
    if (st.ok()) {
      fast += st->fast_retransmits;
      rto += st->rto_retransmits;
      tlp += st->tlp_retransmits;
    }
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
  if (FLAGS_flow_stats) {
    for (size_t i = 0; i < fl_.size(); ++i) {
      auto st = ep_->conn_stats(fl_[i].conn);
      if (!st.ok()) continue;
      std::printf(
          "  flow %zu: rtt p50/p99 %.0f/%.0f us, retx fast %llu rto %llu "
          "tlp %llu (%llu timeouts), max in flight %llu B, %s\n",
          i, st->rtt_p50_ns / 1e3, st->rtt_p99_ns / 1e3,
          static_cast<unsigned long long>(st->fast_retransmits),
          static_cast<unsigned long long>(st->rto_retransmits),
          static_cast<unsigned long long>(st->tlp_retransmits),
          static_cast<unsigned long long>(st->rtos),
          static_cast<unsigned long long>(st->max_inflight_bytes),
          st->cc_state.c_str());
    }
  }
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
  uint64_t lost = 0;
  if (peer_.tx_bytes != rx_bytes_ || peer_.tx_msgs != rx_msgs_ ||
      (!FLAGS_server &&
       (peer_.rx_bytes != tx_bytes_ || peer_.rx_msgs != tx_msgs_))) {
    lost = 1;
    std::printf("  MISMATCH between what was sent and what was received\n");
  }
  // The NIC's drop counters, where any are non-zero, and how many received
  // datagrams the kernel copied straight to their destination.
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
    if ((line.rfind("drop_", 0) == 0 ||
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
  std::printf(
      "  retransmits fast %llu rto %llu tlp %llu; integrity errors %llu\n",
      static_cast<unsigned long long>(fast),
      static_cast<unsigned long long>(rto),
      static_cast<unsigned long long>(tlp),
      static_cast<unsigned long long>(total_errors));
  total_errors += lost;
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
  if (FLAGS_json) {
    std::printf(
        "{\"role\":\"%s\",\"perftype\":\"%s\",\"flows\":%zu,\"msize\":%llu,"
        "\"seconds\":%.4f,\"tx_bytes\":%llu,\"rx_bytes\":%llu,"
        "\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,\"retx_fast\":%llu,"
        "\"retx_rto\":%llu,\"retx_tlp\":%llu,\"errors\":%llu,\"lat_us\":{"
        "\"min\":%.3f,"
        "\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}}\n",
        role(), kPerfNames[p_.perftype], fl_.size(),
        static_cast<unsigned long long>(p_.msize), secs,
        static_cast<unsigned long long>(tx_bytes_),
        static_cast<unsigned long long>(rx_bytes_), gbps_tx, gbps_rx,
        static_cast<unsigned long long>(fast),
        static_cast<unsigned long long>(rto),
        static_cast<unsigned long long>(tlp),
        static_cast<unsigned long long>(total_errors), p[0], p[1], p[2], p[3],
        p[4], p[5]);
  }
  std::fflush(stdout);
  return total_errors ? kExitIntegrity : kExitOk;
}

int Runner::run() {
  alloc();
  return p_.perftype == kLat ? run_lat() : run_stream();
}

Params params_from_flags() {
  Params p{};
  p.magic = kParamsMagic;
  p.version = 1;
  std::string t = FLAGS_bi ? "bi" : FLAGS_perftype;
  p.perftype = 99;  // invalid unless one matches
  for (uint32_t i = 0; i <= kBi; ++i) {
    if (t == kPerfNames[i]) p.perftype = i;
  }
  p.nflow = FLAGS_nflow;
  p.nmsg = FLAGS_nmsg;
  p.nreq = FLAGS_nreq;
  p.msize = FLAGS_msize;
  p.iterations = FLAGS_iterations;
  p.seed = FLAGS_seed;
  p.duration_s = FLAGS_duration_s;
  p.flush = FLAGS_flush;
  p.verify = FLAGS_verify;
  p.warmup = FLAGS_warmup;
  return p;
}

void check_params(const Params& p) {
  if (p.perftype > kBi)
    die(kExitUsage, "--perftype must be basic, lat, tpt or bi");
  if (p.nflow < 1 || p.nflow > 1000)
    die(kExitUsage, "--nflow must be in [1, 1000]");
  if (p.nmsg < 1 || p.nmsg > static_cast<uint32_t>(kMaxRecvsPerRequest)) {
    die(kExitUsage, "--nmsg must be in [1, 8]");
  }
  if (p.nreq < 1 || p.nreq > static_cast<uint32_t>(kMaxRequestsPerFlow)) {
    die(kExitUsage, "--nreq must be in [1, 32]");
  }
  if (p.msize > (uint64_t{1} << 36)) die(kExitUsage, "--msize is too large");
  if (!(p.duration_s > 0)) die(kExitUsage, "--duration_s must be positive");
}

EndpointConfig config_from_flags() {
  EndpointConfig c;
  c.device = FLAGS_device;
  c.num_engines = FLAGS_engines;
  if (!FLAGS_engine_cores.empty()) {
    auto cores = parse_cpu_list(FLAGS_engine_cores);
    if (!cores.ok())
      die(kExitUsage, "--engine_cores: " + cores.status().to_string());
    c.engine_cores = *cores;
  }  // else: the endpoint claims free cores (UCCL_CORE_LOCK_DIR), so a
     // client and a server on one host do not share them
  c.chunk_bytes = FLAGS_chunk_kb * 1024;
  c.paths = FLAGS_paths;
  c.rc_mode = FLAGS_rc_mode ? 1 : 0;
  c.cc = FLAGS_cc;
  c.cc_params = FLAGS_cc_params;
  std::string tx = FLAGS_fault_tx;
  if (FLAGS_loss > 0) {
    if (FLAGS_loss > 1) die(kExitUsage, "--loss must be in [0, 1]");
    tx += (tx.empty() ? "" : ",") + std::string("drop=") +
          std::to_string(FLAGS_loss);
  }
  c.fault_tx = tx;
  c.fault_rx = FLAGS_fault_rx;
  c.fault_seed = FLAGS_fault_seed;
  c.nic_rate_gbps = FLAGS_nic_rate_gbps > 0 ? FLAGS_nic_rate_gbps : -1;
  if (FLAGS_link_gbps < 0) die(kExitUsage, "--link_gbps must be >= 0");
  c.link_gbps = FLAGS_link_gbps;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "UCCL transport test.\n"
      "  server: transport_test --server [--oobport=19999]\n"
      "  client: transport_test --serverip=<ip> [--perftype=tpt|basic|lat|bi] "
      "...\n"
      "The client's test flags (perftype, nflow, nmsg, nreq, msize, "
      "iterations,\n"
      "duration_s, verify, flush, seed) are sent to the server, which follows "
      "them.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  init_logging(argv[0]);
  if (!FLAGS_server && FLAGS_serverip.empty()) {
    die(kExitUsage, "give --server, or --serverip=<address> for the client");
  }
  Params p = params_from_flags();
  if (!FLAGS_server) check_params(p);
  auto ep = Endpoint::create(config_from_flags());
  if (!ep.ok()) die(kExitUsage, "cannot start: " + ep.status().to_string());

  ConnId ctl = 0;
  std::vector<ConnId> conns;
  if (FLAGS_server) {
    auto port = (*ep)->listen(static_cast<uint16_t>(FLAGS_oobport));
    if (!port.ok()) die(kExitTransport, port.status().to_string());
    std::printf("[server] listening on port %u (device %s)\n", *port,
                FLAGS_device.c_str());
    std::fflush(stdout);
    auto c = (*ep)->accept(24 * 3600 * 1000);
    if (!c.ok()) die(kExitTransport, "accept: " + c.status().to_string());
    ctl = *c;
    // The client's parameters come first.
    std::vector<uint8_t> buf(sizeof(Params));
    auto mh = (*ep)->reg_mr(buf.data(), buf.size());
    Request r;
    Status st = (*ep)->recv_async(ctl, buf.data(), buf.size(), *mh, &r);
    if (st.ok()) st = (*ep)->wait(&r, 30000);
    if (!st.ok())
      die(kExitTransport, "reading the client's parameters: " + st.to_string());
    std::memcpy(&p, buf.data(), sizeof(p));
    (*ep)->dereg_mr(*mh);
    if (p.magic != kParamsMagic || p.version != 1) {
      die(kExitTransport, "the client sent bad parameters (version mismatch?)");
    }
    check_params(p);
    for (uint32_t i = 0; i < p.nflow; ++i) {
      auto d = (*ep)->accept(30000);
      if (!d.ok())
        die(kExitTransport, "accept flow: " + d.status().to_string());
      conns.push_back(*d);
    }
    std::printf(
        "[server] client %s: %s, %u flows, nreq %u, nmsg %u, msize %llu\n",
        (*ep)->peer_ip(ctl).c_str(), kPerfNames[p.perftype], p.nflow, p.nreq,
        p.nmsg, static_cast<unsigned long long>(p.msize));
  } else {
    const int timeout_ms = static_cast<int>(FLAGS_connect_timeout_s * 1000);
    auto c = (*ep)->connect(FLAGS_serverip,
                            static_cast<uint16_t>(FLAGS_oobport), timeout_ms);
    if (!c.ok()) {
      die(kExitTransport, "cannot connect to " + FLAGS_serverip + ":" +
                              std::to_string(FLAGS_oobport) + ": " +
                              c.status().to_string());
    }
    ctl = *c;
    std::vector<uint8_t> buf(sizeof(Params));
    std::memcpy(buf.data(), &p, sizeof(p));
    auto mh = (*ep)->reg_mr(buf.data(), buf.size());
    Request r;
    Status st = (*ep)->send_async(ctl, buf.data(), buf.size(), *mh, &r);
    if (st.ok()) st = (*ep)->wait(&r, 30000);
    if (!st.ok()) die(kExitTransport, "sending parameters: " + st.to_string());
    (*ep)->dereg_mr(*mh);
    for (uint32_t i = 0; i < p.nflow; ++i) {
      auto d = (*ep)->connect(FLAGS_serverip,
                              static_cast<uint16_t>(FLAGS_oobport), timeout_ms);
      if (!d.ok())
        die(kExitTransport, "connect flow: " + d.status().to_string());
      conns.push_back(*d);
    }
    std::printf(
        "[client] connected %u flows to %s (%s, %s mode, %u paths, cc %s)\n",
        p.nflow, FLAGS_serverip.c_str(), kPerfNames[p.perftype],
        FLAGS_rc_mode ? "RC" : "UC", FLAGS_paths, FLAGS_cc.c_str());
  }
  std::fflush(stdout);
  Runner runner(ep->get(), ctl, conns, p);
  int rc = runner.run();
  std::fflush(stdout);
  // Requests still posted (a failed or timed-out run) live in the runner:
  // stop the engines, which complete them, before the runner goes away.
  ep->reset();
  return rc;
}
