// UcclRDMAEngine: setup of the device context, the main loop, connection
// lifecycle and the receive path (chunks, control messages, ACKs). The send
// path (matching, chunking, reliability, CC) is in engine_tx.cc.
#include "engine/engine.h"

#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "engine/engine_internal.h"
#include "util/cpu.h"
#include "util/logging.h"

namespace uccl::engine {

using transport::QpConfig;
using transport::QpType;
using transport::RecvWr;
using transport::SendWr;
using transport::Sge;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WorkCompletion;
using transport::WrOpcode;

void RequestAccess::complete(Request* r, Status st) {
  r->status_ = std::move(st);
  uint32_t* word = reinterpret_cast<uint32_t*>(&r->state_);
  uint32_t old = r->state_.exchange(Request::kDone, std::memory_order_acq_rel);
  // From here on `r` may be gone; the futex wake only uses the address (a
  // stray wake of an unrelated waiter there is allowed by futex semantics).
  if (old & Request::kWaiter) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr,
            0);
  }
}

bool RequestAccess::wait(Request* r, uint64_t timeout_ns) {
  const uint64_t deadline =
      timeout_ns == UINT64_MAX ? UINT64_MAX : monotonic_ns() + timeout_ns;
  for (;;) {
    uint32_t s = r->state_.load(std::memory_order_acquire);
    if ((s & Request::kStateMask) == Request::kDone) return true;
    if (!(s & Request::kWaiter) &&
        !r->state_.compare_exchange_weak(s, s | Request::kWaiter,
                                         std::memory_order_acq_rel)) {
      continue;  // changed under us (maybe done): look again
    }
    uint64_t now = monotonic_ns();
    if (now >= deadline) return false;
    uint64_t left = std::min<uint64_t>(deadline - now, 100000000);
    timespec ts{0, static_cast<long>(left)};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&r->state_),
            FUTEX_WAIT_PRIVATE, s | Request::kWaiter, &ts, nullptr, 0);
  }
}

// ------------------------------------------------------------- creation

uint32_t whole_packet_chunk_bytes(uint32_t chunk_bytes, uint32_t mtu_bytes,
                                  uint32_t local_mtu_bytes) {
  if (local_mtu_bytes != 0)
    chunk_bytes = std::min(chunk_bytes, local_mtu_bytes);
  if (mtu_bytes == 0 || chunk_bytes <= mtu_bytes) return chunk_bytes;
  return chunk_bytes - chunk_bytes % mtu_bytes;
}

Result<std::unique_ptr<UcclRDMAEngine>> UcclRDMAEngine::create(
    const EngineConfig& cfg, const std::string& device,
    const transport::DeviceOptions& dev_opts, ConnRecord* records,
    Region* regions) {
  std::unique_ptr<UcclRDMAEngine> e(new UcclRDMAEngine());
  e->cfg_ = cfg;
  e->clock_ = cfg.clock ? cfg.clock : SystemClock::get();
  e->records_ = records;
  e->regions_ = regions;
  UCCL_ASSIGN_OR_RETURN(e->dev_, transport::open_device(device, dev_opts));
  e->dev_->set_owner_driven(cfg.drive_nic);
  if (cfg.window_bytes < 0) {
    e->cfg_.window_bytes =
        static_cast<int64_t>(e->dev_->info().rx_buffer_bytes / 8);
  }
  e->cfg_.chunk_bytes =
      whole_packet_chunk_bytes(cfg.chunk_bytes, e->dev_->info().mtu_bytes,
                               e->dev_->info().local_mtu_bytes);
  if (e->cfg_.chunk_bytes > sizeof(EagerHdr)) {  // an eager send is one chunk
    e->cfg_.eager_bytes = std::min<uint32_t>(
        cfg.eager_bytes, e->cfg_.chunk_bytes - sizeof(EagerHdr));
  } else {
    e->cfg_.eager_bytes = 0;
  }
  UCCL_ASSIGN_OR_RETURN(e->pd_, e->dev_->alloc_pd());
  UCCL_ASSIGN_OR_RETURN(e->scq_, e->dev_->create_cq(kCqDepth));
  UCCL_ASSIGN_OR_RETURN(e->rcq_, e->dev_->create_cq(kCqDepth));
  UCCL_ASSIGN_OR_RETURN(e->data_srq_,
                        e->dev_->create_srq(e->pd_.get(), kDataSrqDepth, 1));
  UCCL_ASSIGN_OR_RETURN(e->ctrl_srq_,
                        e->dev_->create_srq(e->pd_.get(), kCtrlBufs, 1));
  // Zero-length receives: WRITE_WITH_IMM needs one each; data goes by rkey.
  for (uint32_t i = 0; i < kDataSrqDepth; i += kRecvBatch) {
    RecvWr wrs[kRecvBatch];
    for (uint32_t k = 0; k < kRecvBatch; ++k) {
      wrs[k].next = k + 1 < kRecvBatch ? &wrs[k + 1] : nullptr;
    }
    UCCL_RETURN_IF_ERROR(e->data_srq_->post_recv(wrs, nullptr));
  }
  e->ctrl_bufs_.assign(static_cast<size_t>(kCtrlBufs) * kCtrlBufBytes, 0);
  UCCL_ASSIGN_OR_RETURN(
      e->ctrl_mr_, e->pd_->reg_mr(e->ctrl_bufs_.data(), e->ctrl_bufs_.size(),
                                  transport::kAccessLocalWrite));
  for (uint32_t i = 0; i < kCtrlBufs; ++i) {
    Sge sge{
        reinterpret_cast<uint64_t>(e->ctrl_bufs_.data()) + i * kCtrlBufBytes,
        kCtrlBufBytes, e->ctrl_mr_->lkey()};
    RecvWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    UCCL_RETURN_IF_ERROR(e->ctrl_srq_->post_recv(&wr, nullptr));
  }
  QpConfig ud;
  ud.type = QpType::kUD;
  ud.pd = e->pd_.get();
  ud.send_cq = e->scq_.get();
  ud.recv_cq = e->rcq_.get();
  ud.max_send_wr = kUdSendDepth;
  ud.max_recv_wr = kUdBufs;
  ud.max_inline_data = 256;
  ud.qkey = kUdQkey;
  ud.low_priority = cfg.drive_nic;  // ACKs after the loop's data
  UCCL_ASSIGN_OR_RETURN(e->ud_, e->dev_->create_qp(ud));
  UCCL_RETURN_IF_ERROR(e->ud_->activate());
  e->ud_bufs_.assign(static_cast<size_t>(kUdBufs) * kUdBufBytes, 0);
  UCCL_ASSIGN_OR_RETURN(e->ud_mr_,
                        e->pd_->reg_mr(e->ud_bufs_.data(), e->ud_bufs_.size(),
                                       transport::kAccessLocalWrite));
  for (uint32_t i = 0; i < kUdBufs; ++i) {
    Sge sge{reinterpret_cast<uint64_t>(e->ud_bufs_.data()) + i * kUdBufBytes,
            kUdBufBytes, e->ud_mr_->lkey()};
    RecvWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    UCCL_RETURN_IF_ERROR(e->ud_->post_recv(&wr, nullptr));
  }
  // Receive windows (per-receive rkeys) where the backend has them.
  e->windows_ = e->pd_->alloc_mw().ok();
  if (cfg.cc_name == "credit") {  // validated here, built in start()
    auto p = cc::CreditSender::params_from(cfg.cc_params);
    if (!p.ok()) return p.status();
  }
  e->conns_.resize(Imm::kMaxFlows);
  e->live_.reserve(Imm::kMaxFlows);
  e->active_.reserve(Imm::kMaxFlows);
  e->inflight_.reserve(Imm::kMaxFlows);
  e->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (e->epoll_fd_ < 0) return ErrnoStatus("epoll_create1", errno);
  e->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (e->wake_fd_ < 0) return ErrnoStatus("eventfd", errno);
  e->qpn_map_.assign(8192, QpnEntry{0, 0, false});
  if (!cfg.trace_file.empty()) {
    e->trace_.resize(1u << 20);
    e->dev_->set_trace(
        [](void* self, const char* name, uint32_t count, uint64_t ts_ns) {
          static_cast<UcclRDMAEngine*>(self)->trace(name, UINT32_MAX, count,
                                                    ts_ns);
        },
        e.get());
  }
  return e;
}

UcclRDMAEngine::~UcclRDMAEngine() {
  stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void UcclRDMAEngine::start() {
  if (cfg_.cc_name == "credit") {  // needs the final line rate
    auto p = cc::CreditSender::params_from(cfg_.cc_params);
    pacer_ = std::make_unique<cc::PullPacer>(*p, cfg_.line_rate_bps,
                                             Imm::kMaxFlows, clock_->now_ns());
  }
  thread_ = std::thread([this] { run(); });
}

void UcclRDMAEngine::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  if (waiting_.fetch_or(0, std::memory_order_acq_rel)) wake();  // as submit()
  thread_.join();
  // Everything still pending fails; the thread is gone, so this is safe.
  Command c;
  while (queue_.pop(&c)) {
    if (c.req && RequestAccess::pending(c.req)) {
      RequestAccess::complete(c.req, Cancelled("endpoint shut down"));
    }
    if (c.setup) {
      c.setup->status = Cancelled("endpoint shut down");
      c.setup->done.store(1, std::memory_order_release);
    }
    if (c.query) {
      c.query->status = Cancelled("endpoint shut down");
      c.query->done.store(1, std::memory_order_release);
    }
  }
  for (uint32_t i : std::vector<uint32_t>(live_)) {
    close_conn(i, Cancelled("endpoint shut down"));
  }
  for (auto& c : conns_) {
    if (c) close_conn(c->index, Cancelled("endpoint shut down"));
  }
  write_trace();
}

// -------------------------------------------------------- QPN map

void UcclRDMAEngine::qpn_put(uint32_t qpn, uint32_t conn, bool ctrl) {
  size_t mask = qpn_map_.size() - 1;
  for (size_t i = qpn * 2654435761u & mask;; i = (i + 1) & mask) {
    if (qpn_map_[i].qpn == 0 || qpn_map_[i].qpn == qpn) {
      qpn_map_[i] = QpnEntry{qpn, conn, ctrl};
      return;
    }
  }
}

const UcclRDMAEngine::QpnEntry* UcclRDMAEngine::qpn_get(uint32_t qpn) const {
  size_t mask = qpn_map_.size() - 1;
  for (size_t i = qpn * 2654435761u & mask;; i = (i + 1) & mask) {
    if (qpn_map_[i].qpn == qpn) return &qpn_map_[i];
    if (qpn_map_[i].qpn == 0) return nullptr;
  }
}

void UcclRDMAEngine::qpn_erase(uint32_t qpn) {
  // Backward-shift deletion keeps probe chains intact.
  size_t mask = qpn_map_.size() - 1;
  size_t i = qpn * 2654435761u & mask;
  while (qpn_map_[i].qpn != qpn) {
    if (qpn_map_[i].qpn == 0) return;
    i = (i + 1) & mask;
  }
  for (;;) {
    qpn_map_[i].qpn = 0;
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask;
      if (qpn_map_[j].qpn == 0) return;
      size_t home = qpn_map_[j].qpn * 2654435761u & mask;
      if (((j - home) & mask) >= ((j - i) & mask)) break;
    }
    qpn_map_[i] = qpn_map_[j];
    i = j;
  }
}

// ----------------------------------------------------------- the loop

void UcclRDMAEngine::run() {
  // Named for top -H, perf and ps -L: "uccl-eng-<index>" (15 chars at most).
  char name[16];
  std::snprintf(name, sizeof(name), "uccl-eng-%d", cfg_.index);
  pthread_setname_np(pthread_self(), name);
  if (cfg_.core >= 0) {
    Status st = pin_current_thread(cfg_.core);
    if (!st.ok()) LOG(WARNING) << "engine " << cfg_.index << ": " << st;
  }
  VLOG(kVlogLifecycle) << "engine " << cfg_.index << " running on cpu "
                       << current_cpu();
  uint64_t idle = 0;           // empty loops in a row
  uint64_t idle_since_ns = 0;  // when the first of them began
  trace_t0_ = clock_->now_ns();
  busy_.start(trace_t0_);
  while (!stop_.load(std::memory_order_acquire)) {
    // Receive and handle first, then take the application's commands, so a
    // send posted now leaves in this loop's flush with no syscall between.
    // (Else each CQ poll drives the device and only `work` marks busy.)
    const uint32_t rx_io = cfg_.drive_nic ? dev_->progress() : 0;
    uint64_t now = clock_->now_ns();
    busy_.tick(now, rx_io != 0);
    int work = poll_recv_cq(now);
    work += poll_send_cq(now);
    work += drain_commands();
    if (work) now = clock_->now_ns();  // an empty loop took ~0.1 us so far
    if (pacer_) {
      cc::PullPacer::Grant g[16];
      int n = pacer_->poll(now, g, 16);
      for (int i = 0; i < n; ++i) {
        Conn* c = conns_[g[i].flow].get();
        if (c && c->established) {
          c->rx.credit_granted += g[i].bytes;
          activate(c);
        }
      }
    }
    if (now >= next_timer_ns_) {
      timers(now);
      next_timer_ns_ = now + kTimerIntervalNs;
    }
    // Active connections take turns at the NIC queue: start one further
    // each loop. Then the quiescent ones leave the list.
    const size_t nact = active_.size();
    if (nact) {
      rr_start_ = (rr_start_ + 1) % nact;
      for (size_t k = 0; k < nact; ++k) {
        Conn* c = conns_[active_[(rr_start_ + k) % nact]].get();
        work += transmit(c, now);
        maybe_send_ack(c, now, false);
        flush_ctrl(c);
      }
      conn_visits_ += nact;
      size_t keep = 0;
      for (size_t k = 0; k < active_.size(); ++k) {
        Conn* c = conns_[active_[k]].get();
        if (quiescent(*c)) {
          c->active = false;
        } else {
          active_[keep++] = active_[k];
        }
      }
      active_.resize(keep);
    }
    // The loop's posts, data first.
    const uint32_t tx_io = cfg_.drive_nic ? dev_->flush() : 0;
    if (work || tx_io) busy_.mark_busy();
    ++loops_;
    if (work == 0) {
      // Spin briefly, then yield each empty loop (free when the core is
      // ours, essential when it is shared), then sleep once long idle: past
      // idle_spin_loops empty loops and idle_sleep_after_ns of idle time.
      ++idle_loops_;
      if (idle++ == 0) idle_since_ns = now;
      if (idle > cfg_.idle_spin_loops && cfg_.idle_sleep_ns > 0 &&
          now - idle_since_ns >= cfg_.idle_sleep_after_ns) {
        idle_wait();
      } else if (idle > cfg_.idle_yield_loops) {
        sched_yield();
      }
    } else {
      idle = 0;
    }
  }
}

void UcclRDMAEngine::idle_wait() {
  ++idle_sleeps_;
  const timespec ts{static_cast<time_t>(cfg_.idle_sleep_ns / 1000000000),
                    static_cast<long>(cfg_.idle_sleep_ns % 1000000000)};
  const int dev_fd = dev_->wait_fd();
  if (dev_fd < 0) {
    nanosleep(&ts, nullptr);
    return;
  }
  // Pairs with submit()'s and stop()'s read-modify-writes of waiting_: a
  // command (or stop) whose RMW came first is seen below; one whose RMW
  // comes after this sees 1 and wakes us.
  waiting_.exchange(1, std::memory_order_acq_rel);
  if (queue_.front() == nullptr && !stop_.load(std::memory_order_acquire)) {
    pollfd fds[3] = {
        {dev_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}, {epoll_fd_, POLLIN, 0}};
    const int n = ppoll(fds, 3, &ts, nullptr);
    if (n > 0) ++idle_wakes_;
    if (n > 0 && (fds[1].revents & POLLIN)) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof(v));  // resets the eventfd's count
    }
  }
  waiting_.store(0, std::memory_order_release);
}

void UcclRDMAEngine::wake() {
  const uint64_t one = 1;
  // Fails only with EAGAIN, where the count is already non-zero.
  (void)!write(wake_fd_, &one, sizeof(one));
}

int UcclRDMAEngine::drain_commands() {
  int n = 0;
  // In place: the slot is freed once the command is handled.
  while (n < 64) {
    const Command* c = queue_.front();
    if (c == nullptr) break;
    handle(*c);
    queue_.pop();
    ++n;
  }
  commands_ += n;
  return n;
}

void UcclRDMAEngine::handle(const Command& cmd) {
  if (cmd.type == CmdType::kCreateConn) return create_conn(cmd.setup);
  if (cmd.type == CmdType::kConnectConn) return connect_conn(cmd.setup);
  if (cmd.type == CmdType::kQuery) {
    Query* q = cmd.query;
    if (q->conn < 0) {
      q->engine.loops = loops_;
      q->engine.idle_loops = idle_loops_;
      q->engine.idle_sleeps = idle_sleeps_;
      q->engine.idle_wakes = idle_wakes_;
      q->engine.conn_visits = conn_visits_;
      q->engine.timer_visits = timer_visits_;
      q->engine.late_activations = late_activations_;
      q->engine.busy_ns = busy_.busy_ns();
      q->engine.run_ns = busy_.run_ns();
      q->engine.idle_sleep_ns = cfg_.idle_sleep_ns;
      q->engine.idle_sleep_after_ns = cfg_.idle_sleep_after_ns;
      q->engine.commands = commands_;
      q->engine.protocol_errors = protocol_errors_;
      fill_stats(UINT32_MAX, &q->engine.total);
    } else {
      Conn* c = q->conn < static_cast<int64_t>(conns_.size())
                    ? conns_[q->conn].get()
                    : nullptr;
      if (c == nullptr) {
        q->status = NotFound("no such connection");
      } else {
        fill_stats(static_cast<uint32_t>(q->conn), &q->flow);
      }
    }
    if (q->counters) q->counters_text = dev_->counters_text();
    q->done.store(1, std::memory_order_release);
    return;
  }
  Conn* c = cmd.conn < conns_.size() ? conns_[cmd.conn].get() : nullptr;
  if (cmd.type == CmdType::kCloseConn) {
    if (c) close_conn(cmd.conn, Cancelled("connection closed"));
    return;
  }
  if (c == nullptr || !c->established || c->failed) {
    Status why =
        c && c->failed ? c->fail_status : Cancelled("connection is closed");
    if (cmd.type == CmdType::kSend || cmd.type == CmdType::kWrite) {
      if (c) c->rec->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    } else if (c) {
      c->rec->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    }
    if (cmd.req) RequestAccess::complete(cmd.req, why);
    return;
  }
  TxFlow& tx = c->tx;
  trace_now(cmd.type == CmdType::kSend   ? "cmd_send"
            : cmd.type == CmdType::kRecv ? "cmd_recv"
                                         : "cmd",
            c->index, 0);
  switch (cmd.type) {
    case CmdType::kSend: {
      PendingSend& p = tx.pending[tx.pend_tail++ % kMaxPendingSends];
      p = PendingSend{cmd.req, cmd.addr, cmd.len, cmd.lkey, cmd.tag, 0, false};
      p.post_ns = clock_->now_ns();
      match_sends(c, p.post_ns);
      // Still queued: it waits for the peer's receive (FIFO, so it is last).
      if (tx.pend_head != tx.pend_tail) p.waited = true;
      break;
    }
    case CmdType::kWrite: {
      TxMsg& m = tx.msg(tx.msg_tail++);
      m = TxMsg{};
      m.req = cmd.req;
      m.addr = cmd.addr;
      m.len = cmd.len;
      m.lkey = cmd.lkey;
      m.raddr = cmd.remote_addr;
      m.rkey = cmd.remote_key;
      m.onesided = true;
      m.post_ns = clock_->now_ns();
      break;
    }
    case CmdType::kRecv:
    case CmdType::kRead:
      post_recv_slot(c, cmd);
      break;
    default:
      break;
  }
  activate(c);
}

// ---------------------------------------------------- connections

void UcclRDMAEngine::create_conn(ConnSetup* s) {
  uint32_t idx = 0;
  while (idx < conns_.size() && conns_[idx]) ++idx;
  if (idx == conns_.size()) {
    s->status =
        ResourceExhausted("engine has " + std::to_string(conns_.size()) +
                          " connections (the flow-id limit)");
    s->done.store(1, std::memory_order_release);
    return;
  }
  auto c = std::make_unique<Conn>();
  c->index = idx;
  c->rec = &records_[idx];
  Status st;
  QpConfig q;
  q.type = cfg_.rc_mode ? QpType::kRC : QpType::kUC;
  q.pd = pd_.get();
  q.send_cq = scq_.get();
  q.recv_cq = rcq_.get();
  q.srq = data_srq_.get();
  q.max_send_wr = kDataSendDepth;
  q.max_send_sge = 2;  // eager chunks: header + payload
  q.max_recv_sge = 1;
  q.max_inline_data = 0;
  q.own_source_port = true;
  q.rc.timeout = 10;  // ~4 ms: RC mode relies on the NIC's retransmission
  // The software NIC starts from the measured RTT where that is shorter
  // (200 us at least) and doubles its timeout per retry, each wait at most
  // 64x this (~268 ms): 30 retries are ~5.5-6.7 s, like UCCL_MAX_RETRIES in
  // UC mode (7, IB's maximum, were 0.8 s, which a stalled host can reach).
  // Verbs: 7 x 4 ms.
  const bool soft = dev_->info().backend == "udp";
  q.rc.retry_cnt = soft ? 30 : 7;
  for (uint32_t p = 0; p < s->paths && st.ok(); ++p) {
    auto qp = dev_->create_qp(q);
    if (!qp.ok()) {
      st = qp.status();
      break;
    }
    s->qps.push_back((*qp)->local_info());
    c->qps.push_back(std::move(*qp));
  }
  if (st.ok()) {
    QpConfig cq = q;
    cq.type = QpType::kRC;
    cq.srq = ctrl_srq_.get();
    cq.max_send_wr = kCtrlSendDepth;
    cq.max_inline_data = 256;
    cq.own_source_port = false;
    cq.low_priority = cfg_.drive_nic;  // descriptors after the loop's data
    // Descriptors and ACK requests must outlive any overload of the path
    // (the engine's own liveness check finds dead peers): about 3 s of
    // retries. A lost descriptor that nothing follows on the QP (no
    // sequence NAK) waits one timeout, and the sender's data waits with
    // it, so the software NIC starts at 1 ms, or at the measured RTT's
    // timeout where shorter (200 us at least; its timeout doubles per
    // retry, each wait at most 64x 1 ms: 55 retries are about 3.1-3.4 s; a
    // spurious retry costs a duplicate the peer drops). Verbs: 16.7 ms x 7
    // retries (IB's retry_cnt has 3 bits, and NICs do not double).
    cq.rc.timeout = soft ? 8 : 12;
    cq.rc.retry_cnt = soft ? 55 : 7;
    auto qp = dev_->create_qp(cq);
    if (qp.ok()) {
      s->ctrl = (*qp)->local_info();
      c->ctrl = std::move(*qp);
    } else {
      st = qp.status();
    }
  }
  if (st.ok()) {
    // Congestion control: one controller per flow, or one per path.
    size_t n = cfg_.cc_per_path ? c->qps.size() : 1;
    c->tx.ccs.resize(n);
    for (auto& pc : c->tx.ccs) {
      auto cc = cc::make_cc(cfg_.cc_name, cfg_.cc_params, cfg_.chunk_bytes,
                            cfg_.line_rate_bps);
      if (!cc.ok()) {
        st = cc.status();
        break;
      }
      pc.cc = std::move(*cc);
    }
    c->tx.paths = std::make_unique<cc::PathSelector>(
        static_cast<uint32_t>(c->qps.size()), idx * 7919 + cfg_.index);
    cc::ScoreboardConfig sc;
    sc.capacity = kChunkRing;
    sc.paths = static_cast<uint32_t>(c->qps.size());
    sc.rto_min_ns = cfg_.rto_min_ns;
    sc.rto_max_ns = cfg_.rto_max_ns;
    sc.rto_init_ns = cfg_.rto_init_ns;
    sc.max_retries = cfg_.max_retries;
    sc.dup_ack_threshold = cfg_.dup_ack_threshold;
    sc.tail_loss_probe = cfg_.tail_loss_probe;
    sc.ack_delay_ns = cfg_.ack_delay_ns;
    c->tx.sb = std::make_unique<cc::Scoreboard>(sc);
    c->qp_unsignaled.assign(c->qps.size(), 0);
    c->tx.engine_unacked = &unacked_bytes_;
    c->qp_outstanding.assign(c->qps.size(), 0);
  }
  if (st.ok()) st = setup_eager(c.get());
  if (!st.ok()) {
    s->status = st.with_context("creating connection QPs");
    s->done.store(1, std::memory_order_release);
    return;
  }
  for (uint32_t p = 0; p < c->qps.size(); ++p)
    qpn_put(c->qps[p]->qpn(), idx, false);
  qpn_put(c->ctrl->qpn(), idx, true);
  s->conn = idx;
  s->ud_addr = ud_->local_info().addr;
  s->ud_qpn = ud_->qpn();
  s->ud_qkey = kUdQkey;
  conns_[idx] = std::move(c);
  s->done.store(1, std::memory_order_release);
}

// Eager bounce slots this side offers (registered, a window each where the
// backend has them; granted with the first receive posted) and the
// headers it sends into the peer's.
Status UcclRDMAEngine::setup_eager(Conn* c) {
  TxFlow& tx = c->tx;
  UCCL_ASSIGN_OR_RETURN(tx.eager_hdr_mr,
                        pd_->reg_mr(tx.eager_hdr, sizeof(tx.eager_hdr),
                                    transport::kAccessLocalWrite));
  if (cfg_.eager_bytes == 0) return Status();
  RxFlow& rx = c->rx;
  rx.eager_slot_bytes = static_cast<uint32_t>(
      (sizeof(EagerHdr) + cfg_.eager_bytes + 63) / 64 * 64);
  const size_t total = size_t{kEagerSlots} * rx.eager_slot_bytes;
  // Not zeroed: pages a peer never writes stay untouched (a slot is read
  // only after its chunk arrived).
  rx.eager_mem.reset(new uint8_t[total]);
  UCCL_ASSIGN_OR_RETURN(rx.eager_mr,
                        pd_->reg_mr(rx.eager_mem.get(), total,
                                    transport::kAccessLocalWrite |
                                        transport::kAccessRemoteWrite));
  for (uint32_t k = 0; k < kEagerSlots; ++k) {
    rx.eager_rkeys[k] = rx.eager_mr->rkey();
    if (!windows_) continue;
    UCCL_ASSIGN_OR_RETURN(rx.eager_windows[k], pd_->alloc_mw());
    UCCL_ASSIGN_OR_RETURN(rx.eager_rkeys[k], bind_eager_slot(rx, k));
  }
  rx.grant_pending = kEagerSlots == 32 ? ~0u : (1u << kEagerSlots) - 1;
  return Status();
}

void UcclRDMAEngine::connect_conn(ConnSetup* s) {
  Conn* c = s->conn < conns_.size() ? conns_[s->conn].get() : nullptr;
  Status st;
  auto fix = [&](transport::PortAddress& a) {
    uint32_t ip = 0;
    if (transport::gid_to_ipv4(a.gid, &ip) && ip == 0 && s->peer_ipv4_be) {
      transport::ipv4_to_gid(s->peer_ipv4_be, a.gid);
    }
  };
  if (c == nullptr) {
    st = Internal("connect_conn: unknown connection");
  } else if (s->peer_qps.size() != c->qps.size()) {
    st = ProtocolError("peer sent " + std::to_string(s->peer_qps.size()) +
                       " QPs, expected " + std::to_string(c->qps.size()));
  }
  for (size_t p = 0; st.ok() && p < c->qps.size(); ++p) {
    fix(s->peer_qps[p].addr);
    st = c->qps[p]->connect(s->peer_qps[p]);
  }
  if (st.ok()) {
    fix(s->peer_ctrl.addr);
    st = c->ctrl->connect(s->peer_ctrl);
  }
  if (st.ok()) {
    fix(s->peer_ud);
    auto ah = dev_->create_ah(pd_.get(), s->peer_ud);
    if (ah.ok()) {
      c->peer_ah = std::move(*ah);
    } else {
      st = ah.status();
    }
  }
  if (!st.ok()) {
    s->status = st.with_context("connecting QPs");
    s->done.store(1, std::memory_order_release);
    return;
  }
  c->peer_ud_qpn = s->peer_ud_qpn;
  c->peer_ud_qkey = s->peer_ud_qkey;
  c->peer_flow = s->peer_flow;
  c->peer_engine = s->peer_engine;
  c->nonce_lo = static_cast<uint32_t>(s->nonce);
  // The liveness socket is readable or hung up only when the peer says bye
  // or goes away (or before the handshake read its ready byte):
  // check_liveness() looks at it then.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u32 = c->index;
  if (s->tcp_fd >= 0 &&
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->tcp_fd, &ev) != 0) {
    s->status = ErrnoStatus("watching the liveness socket", errno);
    s->done.store(1, std::memory_order_release);
    return;
  }
  c->tcp_fd = s->tcp_fd;
  s->tcp_fd = -1;  // ours now
  c->established = true;
  c->tx.sb->note_idle(clock_->now_ns());
  live_.push_back(c->index);
  activate(c);
  VLOG(kVlogLifecycle) << "engine " << cfg_.index << ": connection " << c->index
                       << " established, " << c->qps.size()
                       << " paths, peer flow " << c->peer_flow;
  s->done.store(1, std::memory_order_release);
}

void UcclRDMAEngine::fail_conn(Conn* c, Status why, bool warn) {
  if (c->failed) return;
  c->failed = true;
  c->fail_status = why;
  c->rec->failed.store(true, std::memory_order_release);
  if (warn && why.code() != StatusCode::kCancelled) {
    LOG(WARNING) << "engine " << cfg_.index << ": connection " << c->index
                 << " failed: " << why;
  } else {
    VLOG(kVlogLifecycle) << "engine " << cfg_.index << ": connection "
                         << c->index << " ended: " << why;
  }
  // Tell the peer through the liveness channel: it sees EOF and fails too.
  // Our end, now at EOF, is no longer watched.
  if (c->tcp_fd >= 0) {
    shutdown(c->tcp_fd, SHUT_RDWR);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->tcp_fd, nullptr);
  }
  TxFlow& tx = c->tx;
  for (; tx.pend_head != tx.pend_tail; ++tx.pend_head) {
    PendingSend& p = tx.pending[tx.pend_head % kMaxPendingSends];
    RequestAccess::complete(p.req, why);
    c->rec->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
  }
  for (uint32_t i = tx.msg_head; i != tx.msg_tail; ++i) {
    TxMsg& m = tx.msg(i);
    if (!m.done && m.req) {
      RequestAccess::complete(m.req, why);
      c->rec->tx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    }
    m.done = true;
  }
  tx.msg_head = tx.msg_chunk = tx.msg_tail;
  tx.owed_n = 0;
  // Its chunks no longer count against the engine's window.
  if (tx.sb) {
    for (uint32_t s = tx.sb->snd_una(); s != tx.sb->snd_nxt(); ++s) {
      if (tx.sb->seg(s).acked) continue;
      unacked_bytes_ -= std::min<uint64_t>(unacked_bytes_, tx.chunk(s).len);
    }
    tx.sb->abandon();
  }
  tx.eager_free = 0;
  for (RxSlot& s : c->rx.slots) {
    if (s.active) {
      RequestAccess::complete(s.req, why);
      c->rec->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
      s.active = false;
    }
  }
  if (pacer_) pacer_->remove_flow(c->index);
}

void UcclRDMAEngine::close_conn(uint32_t idx, Status why) {
  Conn* c = conns_[idx].get();
  if (c == nullptr) return;
  if (c->tcp_fd >= 0 && !c->failed) {
    send(c->tcp_fd, &kBootBye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  fail_conn(c, why);
  for (auto& qp : c->qps) qpn_erase(qp->qpn());
  if (c->ctrl) qpn_erase(c->ctrl->qpn());
  if (c->tcp_fd >= 0) close(c->tcp_fd);
  live_.erase(std::remove(live_.begin(), live_.end(), idx), live_.end());
  active_.erase(std::remove(active_.begin(), active_.end(), idx),
                active_.end());
  inflight_.erase(std::remove(inflight_.begin(), inflight_.end(), idx),
                  inflight_.end());
  // Its chunks still inside the NIC no longer count against the engine's
  // NIC queue (their completions will find no connection).
  for (uint32_t q : conns_[idx]->qp_outstanding) {
    nic_queued_ -= std::min(nic_queued_, q);
  }
  closed_tx_bytes_ += c->tx.tx_bytes;
  closed_rx_bytes_ += c->rx.rx_bytes;
  conns_[idx].reset();
  VLOG(kVlogLifecycle) << "engine " << cfg_.index << ": connection " << idx
                       << " closed";
  // Hosts that never destroy their endpoint (NCCL keeps the plugin's) still
  // get their trace once every connection is closed.
  if (live_.empty()) write_trace();
}

void UcclRDMAEngine::check_liveness() {
  // Only sockets with news: a bye, EOF, an error (or a ready byte the
  // handshake has not read yet). More than 64 wait for the next check.
  epoll_event ev[64];
  const int n = epoll_wait(epoll_fd_, ev, 64, 0);
  for (int i = 0; i < n; ++i) {
    const uint32_t idx = ev[i].data.u32;
    Conn* c = idx < conns_.size() ? conns_[idx].get() : nullptr;
    if (c == nullptr || c->failed || c->tcp_fd < 0) continue;
    // Peek only: the handshake may not have read its ready byte yet.
    uint8_t b = 0;
    ssize_t r = recv(c->tcp_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r == 1 && b == kBootBye) {
      fail_conn(c, RemoteError("peer closed the connection"), false);
    } else if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
               (ev[i].events & (EPOLLERR | EPOLLHUP))) {
      fail_conn(c, RemoteError("peer went away (process exited or "
                               "connection lost)"));
    }
  }
}

// ------------------------------------------------------- receive path

int UcclRDMAEngine::poll_recv_cq(uint64_t now) {
  WorkCompletion wc[kPollBatch];
  int n = rcq_->poll(kPollBatch, wc);
  for (int i = 0; i < n; ++i) {
    const WorkCompletion& w = wc[i];
    if (w.opcode == WcOpcode::kRecvWriteImm) {
      ++data_srq_deficit_;
      if (w.status == WcStatus::kSuccess) on_chunk(w, now);
      continue;
    }
    if (w.qp_num == ud_->qpn()) {
      if (w.status == WcStatus::kSuccess &&
          w.byte_len >= transport::kGrhBytes + sizeof(AckPacket)) {
        AckPacket a;
        const uint8_t* buf = ud_bufs_.data() + w.wr_id * kUdBufBytes;
        std::memcpy(&a, buf + transport::kGrhBytes, sizeof(a));
        if (a.magic == kAckMagic) {
          on_ack(a, w, buf, now);
        } else {
          ++protocol_errors_;
        }
      } else if (w.status == WcStatus::kSuccess) {
        ++protocol_errors_;
      }
      if (w.status != WcStatus::kWrFlushError) {
        Sge sge{
            reinterpret_cast<uint64_t>(ud_bufs_.data()) + w.wr_id * kUdBufBytes,
            kUdBufBytes, ud_mr_->lkey()};
        RecvWr r;
        r.wr_id = w.wr_id;
        r.sg_list = &sge;
        r.num_sge = 1;
        ud_->post_recv(&r, nullptr);
      }
      continue;
    }
    // A control message on a connection's RC QP (SRQ buffer w.wr_id).
    const QpnEntry* e = qpn_get(w.qp_num);
    if (w.status == WcStatus::kSuccess && e && e->ctrl) {
      Conn* c = conns_[e->conn].get();
      if (c && c->established && !c->failed && w.wr_id < kCtrlBufs) {
        on_ctrl_batch(c, ctrl_bufs_.data() + w.wr_id * kCtrlBufBytes,
                      std::min<uint32_t>(w.byte_len, kCtrlBufBytes));
        activate(c);
      }
    } else if (w.status != WcStatus::kSuccess && e && e->ctrl &&
               w.status != WcStatus::kWrFlushError) {
      Conn* c = conns_[e->conn].get();
      if (c) fail_conn(c, RemoteError("control QP failed"));
    }
    if (w.wr_id < kCtrlBufs) {
      Sge sge{reinterpret_cast<uint64_t>(ctrl_bufs_.data()) +
                  w.wr_id * kCtrlBufBytes,
              kCtrlBufBytes, ctrl_mr_->lkey()};
      RecvWr r;
      r.wr_id = w.wr_id;
      r.sg_list = &sge;
      r.num_sge = 1;
      ctrl_srq_->post_recv(&r, nullptr);
    }
  }
  if (data_srq_deficit_ >= kRecvBatch) replenish_srq();
  return n;
}

void UcclRDMAEngine::replenish_srq() {
  RecvWr wrs[kRecvBatch];
  while (data_srq_deficit_ >= kRecvBatch) {
    for (uint32_t k = 0; k < kRecvBatch; ++k) {
      wrs[k] = RecvWr();
      wrs[k].next = k + 1 < kRecvBatch ? &wrs[k + 1] : nullptr;
    }
    if (!data_srq_->post_recv(wrs, nullptr).ok()) break;
    data_srq_deficit_ -= kRecvBatch;
  }
}

void UcclRDMAEngine::on_chunk(const WorkCompletion& wc, uint64_t now) {
  const Imm imm = Imm::decode(wc.imm_data);
  const QpnEntry* e = qpn_get(wc.qp_num);
  if (e == nullptr || e->ctrl || e->conn != imm.flow) {
    ++protocol_errors_;
    return;
  }
  Conn* c = conns_[e->conn].get();
  if (c == nullptr || !c->established || c->failed) return;
  activate(c);
  RxFlow& rx = c->rx;
  const uint32_t delta = (imm.csn - rx.rcv_cum) & (Imm::kCsnSpace - 1);
  if (delta >= kMaxChunksInFlight) {  // behind rcv_cum: a late duplicate
    ++rx.duplicates;
    rx.ack_now = true;
    return;
  }
  const uint32_t csn = rx.rcv_cum + delta;
  RxChunkInfo& info = rx.at(csn);
  if (info.valid) {
    ++rx.duplicates;
    rx.ack_now = true;
    return;
  }
  info = RxChunkInfo{true,
                     imm.last,
                     imm.trunc,
                     imm.onesided,
                     imm.eager,
                     static_cast<uint8_t>(imm.slot),
                     static_cast<uint8_t>(imm.buf),
                     wc.byte_len};
  rx.rx_bytes += wc.byte_len;
  ++rx.rx_chunks;
  if (delta != 0) rx.ack_now = true;  // a hole: tell the sender now
  if (rx.unacked++ == 0) rx.first_unacked_ns = now;
  rx.trigger_csn = csn;
  rx.trigger_arrival_ns =
      wc.timestamp_ns ? std::min(wc.timestamp_ns, now) : now;
  trace("rx", c->index, csn, now);
  VLOG(kVlogChunk) << "conn " << c->index << " rx csn " << csn << " slot "
                   << imm.slot << " len " << wc.byte_len
                   << (imm.last ? " last" : "") << " cum " << rx.rcv_cum;
  while (rx.at(rx.rcv_cum).valid) {
    RxChunkInfo done = rx.at(rx.rcv_cum);
    rx.at(rx.rcv_cum).valid = false;
    ++rx.rcv_cum;
    account_chunk(c, done);
  }
  // A hole, or ack_every chunks: ACK now. A completed message's ACK waits
  // for the loop's pass over the connections, so every message completed
  // in one receive batch shares one ACK (each is a loopback datagram of
  // ~1.5 us on the engine's thread).
  if (rx.ack_now || rx.unacked >= cfg_.ack_every) {
    maybe_send_ack(c, now, false);
  }
}

void UcclRDMAEngine::account_chunk(Conn* c, const RxChunkInfo& info) {
  if (info.onesided) return;
  if (info.eager) return on_eager(c, info);
  RxFlow& rx = c->rx;
  RxSlot& s = rx.slots[info.slot];
  if (!s.active || info.buf >= s.n || s.bufs[info.buf].done) {
    ++protocol_errors_;
    return;
  }
  RxBuf& b = s.bufs[info.buf];
  b.claimed = true;
  b.received += info.len;
  if (!info.last) return;
  b.trunc = info.trunc || b.received > b.size;
  rx.ack_due = true;
  finish_buf(c, info.slot, info.buf);
}

// Buffer `buf` of receive `slot` has its message (or its truncation); the
// receive completes with its last buffer.
void UcclRDMAEngine::finish_buf(Conn* c, int slot, int buf) {
  RxFlow& rx = c->rx;
  RxSlot& s = rx.slots[slot];
  s.bufs[buf].done = true;
  s.bufs[buf].claimed = true;
  if (windows_ && rx.windows[slot][buf]) {
    rx.windows[slot][buf]->invalidate();  // late copies now miss
  }
  if (++s.done < s.n) return;
  Status st;
  for (int i = 0; i < s.n; ++i) {
    RequestAccess::set_size(s.req, i, s.bufs[i].trunc ? 0 : s.bufs[i].received);
    if (s.bufs[i].trunc && st.ok()) {
      st = s.is_read ? RemoteError(
                           "peer refused the read (region unknown, out of "
                           "range, or larger than the buffer)")
                     : Truncated("message larger than the posted receive of " +
                                 std::to_string(s.bufs[i].size) + " bytes");
    }
  }
  s.active = false;
  c->rec->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
  trace_now("recv_done", c->index, rx.rcv_cum);
  RequestAccess::complete(s.req, std::move(st));
}

// An eager message, in CSN (send) order: the oldest posted receive with an
// untaken buffer of its tag takes it; with none, it waits in its slot for
// the next receive posted with that tag (wire.h).
void UcclRDMAEngine::on_eager(Conn* c, const RxChunkInfo& info) {
  RxFlow& rx = c->rx;
  const uint32_t k = info.slot;
  rx.ack_due = true;
  EagerHdr h{};
  const bool granted = rx.eager_mem && k < kEagerSlots && rx.eager[k].granted;
  if (granted && info.len >= sizeof(EagerHdr)) {
    std::memcpy(&h, rx.eager_slot(k), sizeof(h));
  }
  if (!granted || !eager_chunk_ok(h, info.len, rx.eager_slot_bytes)) {
    ++protocol_errors_;
    fail_conn(c, ProtocolError("malformed eager message from peer (slot " +
                               std::to_string(k) + ", " +
                               std::to_string(info.len) + " bytes)"));
    return;
  }
  EagerSlotRx& e = rx.eager[k];
  e = EagerSlotRx{false, h.tag, h.len};
  ++rx.eager_rx;
  int slot = -1, buf = -1;
  for (int i = 0; i < kMaxRequestsPerFlow; ++i) {
    const RxSlot& s = rx.slots[i];
    if (!s.active || s.is_read ||
        (slot >= 0 && s.post_seq > rx.slots[slot].post_seq)) {
      continue;
    }
    const int b = s.free_buf(h.tag);
    if (b >= 0) {
      slot = i;
      buf = b;
    }
  }
  trace_now("eager_rx", c->index, k);
  if (slot < 0) {
    rx.held[rx.held_n++] = static_cast<uint8_t>(k);
    ++rx.eager_held;
    return;
  }
  deliver_eager(c, k, slot, buf);
}

// Copies held eager message `k` into buffer `buf` of receive `slot` (or
// fails that buffer as truncated) and frees its bounce slot.
void UcclRDMAEngine::deliver_eager(Conn* c, uint32_t k, int slot, int buf) {
  RxFlow& rx = c->rx;
  RxBuf& b = rx.slots[slot].bufs[buf];
  const EagerSlotRx& e = rx.eager[k];
  b.claimed = true;
  b.received = e.len;
  b.trunc = e.len > b.size;
  if (!b.trunc && e.len > 0) {
    std::memcpy(reinterpret_cast<void*>(b.addr),
                rx.eager_slot(k) + sizeof(EagerHdr), e.len);
  }
  free_eager_slot(c, k);
  finish_buf(c, slot, buf);
}

// A new window over bounce slot `k` (its key is the slot's rkey for one use).
Result<uint32_t> UcclRDMAEngine::bind_eager_slot(RxFlow& rx, uint32_t k) {
  return rx.eager_windows[k]->bind(
      *rx.eager_mr, reinterpret_cast<uint64_t>(rx.eager_slot(k)),
      rx.eager_slot_bytes,
      transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
}

// Slot `k` is empty again: a new window (late duplicates of its last use
// miss) and a grant with the next descriptor.
void UcclRDMAEngine::free_eager_slot(Conn* c, uint32_t k) {
  RxFlow& rx = c->rx;
  rx.eager[k] = EagerSlotRx{};
  if (rx.eager_windows[k]) {
    auto key = bind_eager_slot(rx, k);
    if (!key.ok()) {  // not granted again: the peer has one slot fewer
      VLOG(kVlogRequest) << "conn " << c->index << " eager slot " << k << ": "
                         << key.status();
      return;
    }
    rx.eager_rkeys[k] = *key;
  }
  rx.grant_pending |= 1u << k;
}

// Writes grants of freed slots into bufs[first..kMaxRecvsPerRequest) of a
// control message; returns how many.
uint32_t UcclRDMAEngine::add_grants(Conn* c, CtrlMsg* m, uint32_t first) {
  RxFlow& rx = c->rx;
  uint32_t g = 0;
  while (rx.grant_pending && first + g < kMaxRecvsPerRequest) {
    const uint32_t k = static_cast<uint32_t>(__builtin_ctz(rx.grant_pending));
    rx.grant_pending &= rx.grant_pending - 1;
    rx.eager[k].granted = true;
    m->bufs[first + g++] = RecvBuf{reinterpret_cast<uint64_t>(rx.eager_slot(k)),
                                   rx.eager_slot_bytes, rx.eager_rkeys[k],
                                   static_cast<int32_t>(k)};
  }
  return g;
}

// Grants what the descriptor just sent had no room for.
void UcclRDMAEngine::send_grants(Conn* c) {
  while (c->rx.grant_pending && !c->failed) {
    CtrlMsg g;
    std::memset(&g, 0, sizeof(g));
    g.type = static_cast<uint32_t>(CtrlType::kEagerGrant);
    g.n = add_grants(c, &g, 0);
    send_ctrl(c, g);
  }
}

void UcclRDMAEngine::post_recv_slot(Conn* c, const Command& cmd) {
  RxFlow& rx = c->rx;
  int slot = -1;
  for (int i = 0; i < kMaxRequestsPerFlow; ++i) {
    if (!rx.slots[i].active) {
      slot = i;
      break;
    }
  }
  if (slot < 0) {  // cannot happen: the Endpoint bounds outstanding receives
    c->rec->rx_outstanding.fetch_sub(1, std::memory_order_relaxed);
    RequestAccess::complete(cmd.req, Internal("no free receive slot"));
    return;
  }
  const bool is_read = cmd.type == CmdType::kRead;
  const int n = is_read ? 1 : cmd.n;
  RxSlot& s = rx.slots[slot];
  s.active = true;
  s.req = cmd.req;
  s.n = n;
  s.done = 0;
  s.is_read = is_read;
  s.post_seq = rx.next_post_seq++;
  CtrlMsg m;
  std::memset(&m, 0, sizeof(m));
  m.type =
      static_cast<uint32_t>(is_read ? CtrlType::kReadReq : CtrlType::kRecvDesc);
  m.slot = static_cast<uint32_t>(slot);
  m.n = static_cast<uint32_t>(n);
  uint64_t demand = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t addr = is_read ? cmd.addr : cmd.bufs[i].addr;
    const uint64_t size = is_read ? cmd.len : cmd.bufs[i].size;
    const transport::MemoryRegion* mr = is_read ? cmd.mr : cmd.bufs[i].mr;
    const int32_t tag = is_read ? 0 : cmd.bufs[i].tag;
    s.bufs[i] = RxBuf{addr, size, 0, tag, false, false, false};
    uint32_t rkey = mr ? mr->rkey() : 0;
    if (windows_ && mr && size > 0) {
      auto& w = rx.windows[slot][i];
      if (!w) {
        auto mw = pd_->alloc_mw();
        if (mw.ok()) w = std::move(*mw);
      }
      auto k = w ? w->bind(*mr, addr, size,
                           transport::kAccessLocalWrite |
                               transport::kAccessRemoteWrite)
                 : Result<uint32_t>(Internal("no window"));
      if (k.ok()) rkey = *k;
    }
    m.bufs[i] = RecvBuf{addr, size, rkey, tag};
    VLOG(kVlogRequest) << "conn " << c->index << " receive in slot " << slot
                       << " buf " << i << " size " << size << " rkey 0x"
                       << std::hex << rkey << std::dec;
    demand += size;
  }
  if (is_read) {
    m.region = cmd.remote_key;
    m.read_addr = cmd.remote_addr;
    m.read_len = cmd.len;
  }
  if (pacer_) {
    pacer_->add_demand(c->index, demand, !rx.demand_started);
    rx.demand_started = true;
  }
  // Eager messages that arrived before this receive take their buffers
  // now, oldest first (it may complete here). The descriptor still goes:
  // the sender pays its owed sends with it. Freed slots are granted after.
  if (!is_read && rx.held_n) {
    uint32_t kept = 0;
    for (uint32_t h = 0; h < rx.held_n; ++h) {
      const uint32_t k = rx.held[h];
      const int buf = s.free_buf(rx.eager[k].tag);
      if (buf < 0) {
        rx.held[kept++] = static_cast<uint8_t>(k);
      } else {
        deliver_eager(c, k, slot, buf);
      }
    }
    rx.held_n = kept;
  }
  // Freed slots ride in the descriptor's spare entries (the peer applies
  // them after the descriptor, so a send it holds back for lack of a slot
  // takes this receive, zero-copy, instead).
  if (!is_read) m.region = add_grants(c, &m, m.n);
  send_ctrl(c, m);
  send_grants(c);
}

// Control messages of one loop leave together: appended here, sent as one
// SEND by flush_ctrl() in the loop's pass over the connections (wire.h).
void UcclRDMAEngine::send_ctrl(Conn* c, const CtrlMsg& m) {
  const uint32_t len = static_cast<uint32_t>(offsetof(CtrlMsg, bufs) +
                                             ctrl_entries(m) * sizeof(RecvBuf));
  if (c->ctrl_out_len + len > kCtrlBufBytes) flush_ctrl(c);
  const CtrlMsg* out = &m;
  CtrlMsg damaged;
  if (__builtin_expect(wire_fault_.load(std::memory_order_relaxed) != 0, 0) &&
      m.type == static_cast<uint32_t>(CtrlType::kRecvDesc)) {
    damaged = m;
    damage_descriptor(&damaged);
    out = &damaged;
  }
  std::memcpy(c->ctrl_out + c->ctrl_out_len, out, len);
  c->ctrl_out_len += len;
  activate(c);
  trace_now("ctrl_tx", c->index, m.slot);
}

void UcclRDMAEngine::activate(Conn* c) {
  if (c->active) return;
  c->active = true;
  active_.push_back(c->index);
}

bool UcclRDMAEngine::quiescent(const Conn& c) const {
  if (c.failed || !c.established) return true;
  const TxFlow& tx = c.tx;
  const RxFlow& rx = c.rx;
  return !tx.sb->urgent_pending() && tx.sb->lost_bytes() == 0 &&
         !tx.sb->resend_pending() && tx.msg_chunk == tx.msg_tail &&
         rx.unacked == 0 && !rx.ack_now && !rx.ack_due &&
         rx.credit_granted == rx.credit_acked && c.ctrl_out_len == 0;
}

// Test hook (inject_wire_fault): spoils a copy of one outgoing descriptor
// (its length on the wire stays that of the original).
void UcclRDMAEngine::damage_descriptor(CtrlMsg* m) {
  switch (
      take_wire_fault(WireFault::kDescNoBuffers, WireFault::kDescUnknownType)) {
    case WireFault::kDescNoBuffers:
      m->n = 0;
      break;
    case WireFault::kDescEntriesWrap:
      m->region = UINT32_MAX;  // n + region: 2^32 or more, not a small count
      break;
    case WireFault::kDescBadSlot:
      m->slot = Imm::kSlots;
      break;
    case WireFault::kDescUnknownType:
      m->type = 99;
      break;
    default:
      break;
  }
}

void UcclRDMAEngine::flush_ctrl(Conn* c) {
  if (c->ctrl_out_len == 0) return;
  const uint32_t len = c->ctrl_out_len;
  c->ctrl_out_len = 0;
  if (c->failed) return;
  Sge sge{reinterpret_cast<uint64_t>(c->ctrl_out), len, 0};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.inline_data = true;
  wr.signaled = ++c->ctrl_unsignaled >= kSignalEvery;
  wr.wr_id = make_wr_id(WrKind::kCtrl, c->index, 0,
                        wr.signaled ? c->ctrl_unsignaled : 0, 0);
  if (wr.signaled) c->ctrl_unsignaled = 0;
  Status st = c->ctrl->post_send(&wr, nullptr);
  if (!st.ok()) {
    fail_conn(c, st.with_context("posting control messages"));
    return;
  }
  ++ctrl_sends_;
}

// One control SEND: one or more messages back to back (wire.h).
void UcclRDMAEngine::on_ctrl_batch(Conn* c, const uint8_t* p, uint32_t len) {
  uint32_t off = 0;
  while (off < len && !c->failed) {
    CtrlMsg m;
    const uint32_t used = parse_ctrl_msg(p + off, len - off, &m);
    if (used == 0) {
      ++protocol_errors_;
      fail_conn(c, ProtocolError("malformed control message from peer"));
      return;
    }
    on_ctrl_msg(c, m);
    off += used;
  }
}

// One record of a batch, its length already checked by on_ctrl_batch().
void UcclRDMAEngine::on_ctrl_msg(Conn* c, const CtrlMsg& m) {
  if (m.type == static_cast<uint32_t>(CtrlType::kAckReq)) {
    maybe_send_ack(c, clock_->now_ns(), true);
    return;
  }
  if (m.type == static_cast<uint32_t>(CtrlType::kPullReq)) {
    // Bounded by what could be in flight, so a peer cannot inflate the
    // demand (and take every other flow's share of the pull pacer).
    const uint64_t cap = uint64_t{kMaxChunksInFlight} * cfg_.chunk_bytes * 2;
    if (pacer_ && m.read_len > 0) {
      pacer_->add_demand(c->index, std::min(m.read_len, cap), false);
    }
    return;
  }
  if (const char* problem = ctrl_msg_problem(m)) {
    ++protocol_errors_;
    fail_conn(c, ProtocolError(std::string(problem) + " (type " +
                               std::to_string(m.type) + ") from peer"));
    return;
  }
  TxFlow& tx = c->tx;
  if (m.type == static_cast<uint32_t>(CtrlType::kRecvDesc)) {
    if (tx.desc_tail - tx.desc_head >= kDescRing) {
      ++protocol_errors_;
      fail_conn(c, ProtocolError("peer posted more receives than allowed"));
      return;
    }
    trace_now("desc_rx", c->index, m.slot);
    Desc& d = tx.descs[tx.desc_tail++ % kDescRing];
    d.slot = m.slot;
    d.n = m.n;
    d.used_mask = 0;
    std::copy(m.bufs, m.bufs + m.n, d.bufs);
    pay_owed(c);
    match_sends(c, clock_->now_ns());
    if (m.region) take_grants(c, m.bufs + m.n, m.region);
    return;
  }
  if (m.type == static_cast<uint32_t>(CtrlType::kEagerGrant)) {
    take_grants(c, m.bufs, m.n);
    return;
  }
  // kReadReq (ctrl_msg_problem() refused other types: both sides run the
  // same protocol version, so a type we do not know is a broken peer, not
  // a newer one). Serve a read: send our region's bytes into the peer's slot.
  TxMsg& t = tx.msg(tx.msg_tail++);
  t = TxMsg{};
  t.slot = static_cast<uint8_t>(m.slot);
  t.buf = 0;
  t.raddr = m.bufs[0].addr;
  t.rkey = m.bufs[0].rkey;
  t.post_ns = clock_->now_ns();
  const Region* r = m.region < kMaxRegions ? &regions_[m.region] : nullptr;
  const bool ok = r && r->valid.load(std::memory_order_acquire) &&
                  m.read_addr >= r->addr && m.read_len <= r->len &&
                  m.read_addr - r->addr <= r->len - m.read_len &&
                  m.read_len <= m.bufs[0].size;
  if (ok) {
    t.addr = m.read_addr;
    t.len = m.read_len;
    t.lkey = r->lkeys[cfg_.index];
  } else {
    t.trunc = true;  // refuse: the reader's request fails
  }
}

// The peer's grants of its bounce slots (wire.h, kEagerGrant).
void UcclRDMAEngine::take_grants(Conn* c, const RecvBuf* g, uint32_t n) {
  TxFlow& tx = c->tx;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t k = static_cast<uint32_t>(g[i].tag);
    if (g[i].tag < 0 || k >= kEagerSlots || g[i].size < sizeof(EagerHdr) ||
        g[i].size > kMaxEagerSlotBytes || (tx.eager_free & (1u << k))) {
      ++protocol_errors_;
      fail_conn(c, ProtocolError("malformed eager grant from peer"));
      return;
    }
    tx.eager_slots[k] = EagerSlotTx{g[i].addr, g[i].rkey};
    tx.eager_free |= 1u << k;
    tx.eager_peer_bytes = static_cast<uint32_t>(g[i].size - sizeof(EagerHdr));
  }
  match_sends(c, clock_->now_ns());  // a waiting send may go now
}

void UcclRDMAEngine::maybe_send_ack(Conn* c, uint64_t now, bool force) {
  RxFlow& rx = c->rx;
  if (!c->established || c->failed) return;
  const bool new_credit = rx.credit_granted != rx.credit_acked;
  const bool due = rx.ack_now || rx.ack_due;
  if (rx.unacked == 0 && !due && !new_credit && !force) return;
  if (!force && !due && !new_credit && rx.unacked < cfg_.ack_every &&
      now - rx.first_unacked_ns < cfg_.ack_delay_ns) {
    return;
  }
  AckPacket a;
  std::memset(&a, 0, sizeof(a));
  a.magic = kAckMagic;
  a.flow_id = c->peer_flow;
  a.cum_ack = rx.rcv_cum;
  a.trigger_csn = rx.trigger_csn;
  for (int i = 0; i < kSackWords * 64; ++i) {
    if (rx.at(rx.rcv_cum + 1 + i).valid) a.sack[i / 64] |= 1ull << (i % 64);
  }
  a.rx_delay_ns = now > rx.trigger_arrival_ns ? now - rx.trigger_arrival_ns : 0;
  a.credit_bytes = rx.credit_granted;
  a.nonce_lo = c->nonce_lo;
  Sge sge{reinterpret_cast<uint64_t>(&a), sizeof(a), 0};
  SendWr wr;
  wr.opcode = WrOpcode::kSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.inline_data = true;
  wr.ah = c->peer_ah.get();
  wr.remote_qpn = c->peer_ud_qpn;
  wr.remote_qkey = c->peer_ud_qkey;
  wr.signaled = ++ud_unsignaled_ >= kSignalEvery;
  wr.wr_id = make_wr_id(WrKind::kAck, c->index, 0,
                        wr.signaled ? ud_unsignaled_ : 0, 0);
  if (wr.signaled) ud_unsignaled_ = 0;
  if (!ud_->post_send(&wr, nullptr).ok()) return;  // full: next loop
  trace("ack_tx", c->index, a.cum_ack, now);
  VLOG(kVlogChunk) << "conn " << c->index << " ack cum " << a.cum_ack
                   << " trigger " << a.trigger_csn;
  rx.unacked = 0;
  rx.ack_now = false;
  rx.ack_due = false;
  rx.credit_acked = rx.credit_granted;
  ++rx.acks_tx;
}

// ----------------------------------------------------- statistics, trace

void UcclRDMAEngine::fill_stats(uint32_t conn, FlowStats* out) {
  auto add = [&](Conn* c) {
    out->tx_bytes += c->tx.tx_bytes;
    out->rx_bytes += c->rx.rx_bytes;
    out->tx_chunks += c->tx.tx_chunks;
    out->rx_chunks += c->rx.rx_chunks;
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
    if (cfg_.eager_bytes) {  // slots we would use
      out->eager_slots_free +=
          __builtin_popcount(c->tx.eager_free & ~c->tx.eager_busy);
    }
    out->send_wait_ns += c->tx.send_wait_ns;
    out->rtos += rc.rtos;
    out->duplicate_chunks += c->rx.duplicates;
    out->acks_sent += c->rx.acks_tx;
    out->acks_received += c->tx.acks_rx;
    out->rtt_p50_ns = std::max(out->rtt_p50_ns, c->tx.rtt.quantile(0.5));
    out->rtt_p99_ns = std::max(out->rtt_p99_ns, c->tx.rtt.quantile(0.99));
    out->rtt_max_ns = std::max(out->rtt_max_ns, c->tx.rtt.max());
    out->max_inflight_bytes =
        std::max(out->max_inflight_bytes, c->tx.max_inflight);
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
            << f.rto_retransmits << "/" << f.tlp_retransmits << " sends "
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
