// Engine connections: creating and connecting a connection's QPs (and its
// eager slots), failing and closing it, liveness, the loop's active list.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

using transport::QpConfig;
using transport::QpType;

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
  // Before any chunk of the connection can arrive: nothing has landed yet.
  c->rec->writes_landed.store(0, std::memory_order_relaxed);
  Status st = create_qps(c.get(), s);
  if (st.ok()) st = init_sender(c.get());
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

// The connection's data QPs (UC, or RC in RC mode) and its RC control QP;
// their addresses go back to the bootstrap in `s`.
Status UcclRDMAEngine::create_qps(Conn* c, ConnSetup* s) {
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
  q.own_flow_entropy = true;
  // UC: this engine resends chunks itself, so a copy may outlive its ACK.
  if (q.type == QpType::kUC) q.rx_guard = &guard_;
  q.rc.timeout = 10;  // ~4 ms: RC mode relies on the NIC's retransmission
  // The software NIC starts from the measured RTT where that is shorter
  // (200 us at least) and doubles its timeout per retry, each wait at most
  // 64x this (~268 ms): 30 retries are ~5.5-6.7 s, like UCCL_MAX_RETRIES in
  // UC mode (7, IB's maximum, were 0.8 s, which a stalled host can reach).
  // Verbs: 7 x 4 ms.
  const bool soft = dev_->info().backend == "udp";
  q.rc.retry_cnt = soft ? 30 : 7;
  for (uint32_t p = 0; p < s->paths; ++p) {
    UCCL_ASSIGN_OR_RETURN(auto qp, dev_->create_qp(q));
    s->qps.push_back(qp->local_info());
    c->qps.push_back(std::move(qp));
  }
  QpConfig cq = q;
  cq.type = QpType::kRC;
  cq.rx_guard = nullptr;  // RC: the NIC drops duplicates by PSN
  cq.srq = ctrl_srq_.get();
  cq.max_send_wr = kCtrlSendDepth;
  cq.max_inline_data = ctrl_batch_bytes_;
  cq.rc.ack_delay_ns = cfg_.ctrl_ack_delay_ns;
  cq.own_flow_entropy = false;
  cq.low_priority = cfg_.drive_nic;  // descriptors after the loop's data
  cq.priority_rx = true;  // ... but not behind a backlog at the receiver
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
  UCCL_ASSIGN_OR_RETURN(c->ctrl, dev_->create_qp(cq));
  s->ctrl = c->ctrl->local_info();
  return Status::OK();
}

// The sender's state: a controller per flow (or per path), the path
// selector, and the loss-recovery scoreboard (cc/scoreboard.h).
Status UcclRDMAEngine::init_sender(Conn* c) {
  const size_t n = cfg_.cc_per_path ? c->qps.size() : 1;
  c->tx.ccs.resize(n);
  for (auto& pc : c->tx.ccs) {
    UCCL_ASSIGN_OR_RETURN(
        pc.cc, cc::make_cc(cfg_.cc_name, cfg_.cc_params, cfg_.chunk_bytes,
                           cfg_.line_rate_bps));
  }
  c->tx.paths = std::make_unique<cc::PathSelector>(
      static_cast<uint32_t>(c->qps.size()), c->index * 7919 + cfg_.index);
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
  c->rx.win.configure(cfg_.ack_every, cfg_.ack_delay_ns);
  c->qp_unsignaled.assign(c->qps.size(), 0);
  c->tx.engine_unacked = &unacked_bytes_;
  c->qp_outstanding.assign(c->qps.size(), 0);
  return Status::OK();
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
  if (cfg_.delay_floors) {
    // The peer host's address names the fabric path its flows share.
    auto floor = cfg_.delay_floors->get(std::string(
        reinterpret_cast<const char*>(s->peer_ud.gid), sizeof(s->peer_ud.gid)));
    for (auto& pc : c->tx.ccs) pc.cc->share_delay_floor(floor);
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
  closed_rx_bytes_ += c->rx.win.rx_bytes();
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
         rx.win.quiet() && rx.credit_granted == rx.credit_acked &&
         c.ctrl_out_len == 0;
}

}  // namespace uccl::engine
