// UcclRDMAEngine: creation of the device context, the main loop, idle
// waits and commands. The other engine_*.cc files hold one concern each.
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
#include "transport/registry.h"
#include "util/cpu.h"
#include "util/logging.h"

namespace uccl::engine {

using transport::QpConfig;
using transport::QpType;
using transport::RecvWr;
using transport::Sge;

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

// create()'s step: PD, CQs, the data SRQ full of zero-length receives
// (WRITE_WITH_IMM needs one each; data goes by rkey) and the control SRQ
// with its buffers.
Status UcclRDMAEngine::open_queues() {
  UCCL_ASSIGN_OR_RETURN(pd_, dev_->alloc_pd());
  UCCL_ASSIGN_OR_RETURN(scq_, dev_->create_cq(kCqDepth));
  UCCL_ASSIGN_OR_RETURN(rcq_, dev_->create_cq(kCqDepth));
  UCCL_ASSIGN_OR_RETURN(data_srq_,
                        dev_->create_srq(pd_.get(), kDataSrqDepth, 1));
  UCCL_ASSIGN_OR_RETURN(ctrl_srq_, dev_->create_srq(pd_.get(), kCtrlBufs, 1));
  // Zero-length receives: WRITE_WITH_IMM needs one each; data goes by rkey.
  for (uint32_t i = 0; i < kDataSrqDepth; i += kRecvBatch) {
    RecvWr wrs[kRecvBatch];
    for (uint32_t k = 0; k < kRecvBatch; ++k) {
      wrs[k].next = k + 1 < kRecvBatch ? &wrs[k + 1] : nullptr;
    }
    UCCL_RETURN_IF_ERROR(data_srq_->post_recv(wrs, nullptr));
  }
  ctrl_bufs_.assign(static_cast<size_t>(kCtrlBufs) * kCtrlBufBytes, 0);
  UCCL_ASSIGN_OR_RETURN(ctrl_mr_,
                        pd_->reg_mr(ctrl_bufs_.data(), ctrl_bufs_.size(),
                                    transport::kAccessLocalWrite));
  for (uint32_t i = 0; i < kCtrlBufs; ++i) {
    Sge sge{reinterpret_cast<uint64_t>(ctrl_bufs_.data()) + i * kCtrlBufBytes,
            kCtrlBufBytes, ctrl_mr_->lkey()};
    RecvWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    UCCL_RETURN_IF_ERROR(ctrl_srq_->post_recv(&wr, nullptr));
  }
  return Status::OK();
}

// create()'s step: the UD QP that carries ACKs, with its receive buffers.
Status UcclRDMAEngine::open_ud_qp() {
  QpConfig ud;
  ud.type = QpType::kUD;
  ud.pd = pd_.get();
  ud.send_cq = scq_.get();
  ud.recv_cq = rcq_.get();
  ud.max_send_wr = kUdSendDepth;
  ud.max_recv_wr = kUdBufs;
  ud.max_inline_data = 256;
  ud.qkey = kUdQkey;
  ud.low_priority = cfg_.drive_nic;  // ACKs after the loop's data
  ud.priority_rx = true;  // ... but not behind a backlog at the receiver
  UCCL_ASSIGN_OR_RETURN(ud_, dev_->create_qp(ud));
  UCCL_RETURN_IF_ERROR(ud_->activate());
  ud_bufs_.assign(static_cast<size_t>(kUdBufs) * kUdBufBytes, 0);
  UCCL_ASSIGN_OR_RETURN(ud_mr_, pd_->reg_mr(ud_bufs_.data(), ud_bufs_.size(),
                                            transport::kAccessLocalWrite));
  for (uint32_t i = 0; i < kUdBufs; ++i) {
    Sge sge{reinterpret_cast<uint64_t>(ud_bufs_.data()) + i * kUdBufBytes,
            kUdBufBytes, ud_mr_->lkey()};
    RecvWr wr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    UCCL_RETURN_IF_ERROR(ud_->post_recv(&wr, nullptr));
  }
  return Status::OK();
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
  // Inline sends and control SENDs past 256 bytes: on the software NIC
  // only (verbs devices inline no more, and their receive buffers may be
  // GPU memory, which the engine cannot copy into).
  const bool soft = e->dev_->info().backend == "udp";
  e->ctrl_batch_bytes_ = soft ? kCtrlBatchBytes : kCtrlBatchBytesSmall;
  e->cfg_.inline_bytes =
      soft ? std::min<uint32_t>(cfg.inline_bytes, kMaxInlineBytes) : 0;
  UCCL_RETURN_IF_ERROR(e->open_queues());
  UCCL_RETURN_IF_ERROR(e->open_ud_qp());
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
    // Grants are payload; each packet's headers share the link too.
    const transport::DeviceInfo& di = dev_->info();
    pacer_ = std::make_unique<cc::PullPacer>(
        *p,
        cc::PullPacer::payload_rate_bps(cfg_.line_rate_bps, di.mtu_bytes,
                                        di.wire_overhead_bytes),
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
    if (round_.chunks != 0) time_lone_chunk();
    if (work || tx_io) busy_.mark_busy();
    ++loops_;
    if (work == 0) {
      // Spin briefly, then yield each empty loop (free when the core is
      // ours, essential when it is shared), then sleep once long idle: past
      // idle_spin_loops empty loops and idle_sleep_after_ns of idle time.
      ++idle_loops_;
      if (idle++ == 0) idle_since_ns = now;
      const bool sleep = idle > cfg_.idle_spin_loops &&
                         cfg_.idle_sleep_ns > 0 &&
                         now - idle_since_ns >= cfg_.idle_sleep_after_ns;
      // A delayed ACK waits for more chunks to cover; an engine about to
      // give its core away sends it first, or its wait (milliseconds on a
      // busy host) would read as the receiver's endpoint delay.
      if (sleep || idle > cfg_.idle_yield_loops) send_held_acks(now);
      if (sleep) {
        idle_wait();
      } else if (idle > cfg_.idle_yield_loops) {
        sched_yield();  // on a busy host: gone for a time slice
        woke_ns_ = clock_->now_ns();
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
    woke_ns_ = clock_->now_ns();
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
  woke_ns_ = clock_->now_ns();
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
      m.notify = cmd.tag != 0;
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

}  // namespace uccl::engine
