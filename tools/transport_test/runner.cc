// transport_test's sessions: posting, completing and verifying transfers
// (basic, lat, tpt, bi) and progress lines; the summary is runner_report.cc.
#include "tools/transport_test/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "transport/nic.h"
#include "util/clock.h"
#include "util/pattern.h"

namespace uccl::tt {

std::string params_problem(const Params& p) {
  if (p.perftype > kBi) return "--perftype must be basic, lat, tpt or bi";
  if (p.nflow < 1 || p.nflow > 1000) return "--nflow must be in [1, 1000]";
  if (p.nmsg < 1 || p.nmsg > static_cast<uint32_t>(kMaxRecvsPerRequest)) {
    return "--nmsg must be in [1, " + std::to_string(kMaxRecvsPerRequest) + "]";
  }
  if (p.nreq < 1 || p.nreq > static_cast<uint32_t>(kMaxRequestsPerFlow)) {
    return "--nreq must be in [1, " + std::to_string(kMaxRequestsPerFlow) + "]";
  }
  if (p.msize > (uint64_t{1} << 36)) return "--msize must be at most 64 GiB";
  if (!(p.duration_s > 0)) return "--duration_s must be positive";
  if (p.session == 0 || p.session > kSessionMask) return "bad session id";
  return "";
}

namespace {

uint64_t msg_seed(uint64_t seed, uint64_t iter, uint32_t flow, uint32_t msg) {
  return seed ^ (iter * 0x9E3779B97F4A7C15ull) ^ (uint64_t{flow} << 40) ^ msg;
}

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

}  // namespace

Runner::Runner(Endpoint* ep, ConnId ctl, const std::vector<ConnId>& conns,
               const Params& p, RunOptions opts)
    : ep_(ep), ctl_(ctl), p_(p), opts_(std::move(opts)), fl_(conns.size()) {
  for (size_t f = 0; f < conns.size(); ++f) fl_[f].conn = conns[f];
}

Runner::~Runner() {
  // A failed session may leave requests posted: closing its connections
  // completes them (kCancelled); the engines write into the requests and
  // buffers until then, so they are freed only after.
  for (const Flow& f : fl_) (void)ep_->close(f.conn);
  (void)ep_->close(ctl_);
  const uint64_t deadline = monotonic_ns() + 10000000000ull;
  while (!all_requests_done() && monotonic_ns() < deadline) usleep(100);
  if (!all_requests_done()) {
    // Never expected: keep what an engine may still write into.
    std::fprintf(stderr, "[%s] requests still pending at exit; kept\n", role());
    for (Flow& f : fl_) {
      for (auto* slots : {&f.tx, &f.rx}) {
        for (Slot& sl : *slots) (void)sl.reqs.release();
      }
    }
    new std::vector<uint8_t>(std::move(txmem_));
    new std::vector<uint8_t>(std::move(rxmem_));
    new std::vector<uint8_t>(std::move(ctlmem_));
    return;
  }
  for (MrHandle* mh : {tx_mh_, rx_mh_, ctl_mh_}) {
    if (mh != nullptr) (void)ep_->dereg_mr(mh);
  }
}

bool Runner::all_requests_done() const {
  if (ctl_rreq_.pending() || ctl_sreq_.pending()) return false;
  for (const Flow& f : fl_) {
    for (const auto* slots : {&f.tx, &f.rx}) {
      for (const Slot& sl : *slots) {
        for (uint32_t m = 0; sl.reqs && m < p_.nmsg; ++m) {
          if (sl.reqs[m].pending()) return false;
        }
      }
    }
  }
  return true;
}

void Runner::alloc() {
  const size_t per_flow = size_t{p_.nreq} * p_.nmsg * p_.msize;
  const size_t total = std::max<size_t>(per_flow * fl_.size(), 1);
  try {
    if (sends() || p_.perftype == kLat) txmem_.resize(total);
    if (receives() || p_.perftype == kLat) rxmem_.resize(total);
    ctlmem_.resize(2 * sizeof(Done) + sizeof(Params));
  } catch (const std::bad_alloc&) {
    throw RunError{kExitUsage,
                   "cannot allocate " + std::to_string(2 * total) +
                       " bytes (nflow x nreq x nmsg x msize, each way)"};
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
    if (opts_.corrupt_rx_at >= 0 &&
        static_cast<uint64_t>(opts_.corrupt_rx_at) < p_.msize) {
      s.bufs[m][opts_.corrupt_rx_at] ^= 0xff;
      opts_.corrupt_rx_at = -1;  // once
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
  uint64_t fast, rto, tlp;
  retx_totals(&fast, &rto, &tlp);
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

// basic, tpt and bi: every flow keeps nreq requests in flight in FIFO order.
// Each side sends its Done once it will send no more; it leaves after it
// has the peer's Done and has drained its receives (the peer's data was all
// acknowledged before the peer's Done, so it is complete).
// Fills every send buffer once with the pattern of request 0 (tpt and bi
// without --verify: the payload is not checked per iteration).
void Runner::fill_once() {
  for (uint32_t f = 0; f < fl_.size(); ++f) {
    for (uint32_t r = 0; r < p_.nreq; ++r) {
      for (uint32_t m = 0; m < p_.nmsg; ++m) {
        fill_pattern(fl_[f].tx[r].bufs[m], p_.msize,
                     msg_seed(p_.seed, 0, f, m));
      }
    }
  }
}

// basic: a line per iteration that every flow has received.
void Runner::report_basic_iteration(uint64_t basic_done) {
  if (basic_done / fl_.size() <= last_basic_) return;
  last_basic_ = basic_done / fl_.size();
  std::printf(
      "[%s] iteration %llu: %s (%zu flows x %u messages x %llu bytes)\n",
      role(), static_cast<unsigned long long>(last_basic_ - 1),
      errors_ ? "ERRORS" : "OK", fl_.size(), p_.nmsg,
      static_cast<unsigned long long>(p_.msize));
  std::fflush(stdout);
}

// True once the peer's Done message arrived on the control connection (its
// totals are then in peer_); a failed or forged one ends the run.
bool Runner::take_peer_done() {
  if (!ctl_rreq_.done()) return false;
  if (!ctl_rreq_.status().ok()) fail(ctl_rreq_.status(), "control connection");
  std::memcpy(&peer_, ctlmem_.data() + sizeof(Done), sizeof(Done));
  if (peer_.magic != kDoneMagic) {
    throw RunError{kExitTransport, "bad control message from the peer"};
  }
  return true;
}

int Runner::run_stream() {
  const bool basic = p_.perftype == kBasic;
  const bool fill_each = basic || p_.verify;
  uint64_t per_flow = p_.iterations;  // 0: until time is up (tpt/bi)
  if (basic && per_flow == 0) per_flow = 8;
  const bool client = !opts_.server;
  if (sends() && !fill_each) fill_once();
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
    if (basic && receives()) report_basic_iteration(basic_done);
    if (!peer_done && take_peer_done()) {
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
    if (!opts_.server) {
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
  if (opts_.server) {
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
  return finish(secs, opts_.server ? nullptr : &lat_us);
}

int Runner::run() {
  alloc();
  return p_.perftype == kLat ? run_lat() : run_stream();
}

}  // namespace uccl::tt
