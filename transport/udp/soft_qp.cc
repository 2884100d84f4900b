// Software NIC queue pairs: creation, connection, state, and posting (the
// rest: soft_qp_tx.cc, soft_qp_rx.cc, soft_qp_rc.cc) following verbs.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "transport/udp/soft_qp_ops.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace uccl::transport::udp {

SoftQp::SoftQp(SoftDevice* dev, const QpConfig& cfg, uint32_t qpn, int tx_fd)
    : dev_(dev),
      cfg_(cfg),
      pd_(static_cast<SoftPd*>(cfg.pd)),
      send_cq_(static_cast<SoftCq*>(cfg.send_cq)),
      recv_cq_(static_cast<SoftCq*>(cfg.recv_cq)),
      srq_(static_cast<SoftSrq*>(cfg.srq)),
      tx_fd_(tx_fd),
      own_fd_(tx_fd != dev->fd_ && tx_fd != dev->prio_fd_),
      rq_(cfg.srq ? 1 : std::max(cfg.max_recv_wr, 1u), cfg.max_recv_sge) {
  type_ = cfg.type;
  qpn_ = qpn;
  sq_.resize(round_pow2(cfg.max_send_wr));
  sq_mask_ = sq_.size() - 1;
  inline_arena_.resize(sq_.size() * static_cast<size_t>(cfg.max_inline_data));
  reads_.resize(round_pow2(std::max<uint32_t>(cfg.rc.max_rd_atomic, 1) * 2));
  next_psn_ = (qpn * 2654435761u) & 0xffffff;
  acked_psn_ = peer_acked_psn_ = next_psn_ - 1;
  highest_sent_psn_ = next_psn_ - 1;
  mtu_ = dev->mtu_;
  window_pkts_ = dev->rc_window_pkts_;
  rto_ns_ = 4096ull << std::min<uint8_t>(cfg.rc.timeout, 31);
  min_rto_ns_ = dev->rc_min_timeout_ns_;
  sockaddr_in a{};
  socklen_t alen = sizeof(a);
  if (getsockname(tx_fd_, reinterpret_cast<sockaddr*>(&a), &alen) == 0) {
    tx_port_ = ntohs(a.sin_port);
  }
}

SoftQp::~SoftQp() {
  dev_->qps_.erase(qpn_);
  auto& rc = dev_->rc_armed_;
  rc.erase(std::remove(rc.begin(), rc.end(), this), rc.end());
  auto& p = dev_->pending_;
  p.erase(std::remove(p.begin(), p.end(), this), p.end());
  auto& h = dev_->acks_held_;
  h.erase(std::remove(h.begin(), h.end(), this), h.end());
  if (own_fd_) close(tx_fd_);
}

QpInfo SoftQp::local_info() const {
  QpInfo i;
  i.addr = cfg_.priority_rx ? dev_->priority_address() : dev_->port_address();
  i.qpn = qpn_;
  i.psn = next_psn_;
  // The largest fragment we accept (a configured cap), not our interface's
  // MTU: each side finds the path MTU itself (a peer on this host is reached
  // through loopback, whatever interface its address is on).
  i.mtu_bytes = dev_->mtu_cap_;
  i.type = type_;
  if (type_ != QpType::kUD) i.src_port = tx_port_;
  if (type_ != QpType::kUD && dev_->offers_unsummed()) {
    i.flags |= kQpInfoTakesUnsummed;
  }
  return i;
}

Status SoftQp::connect(const QpInfo& remote) {
  if (type_ == QpType::kUD)
    return InvalidArgument("connect: UD QPs use activate()");
  if (state_ != QpState::kReset && state_ != QpState::kInit) {
    return InvalidArgument(std::string("connect: QP is in state ") +
                           qp_state_name(state_));
  }
  if (remote.type != type_) {
    return InvalidArgument(std::string("connect: local QP is ") +
                           qp_type_name(type_) + ", remote is " +
                           qp_type_name(remote.type));
  }
  uint32_t ip = 0;
  if (!gid_to_ipv4(remote.addr.gid, &ip) || ip == 0 ||
      remote.addr.udp_port == 0) {
    return InvalidArgument("connect: remote address " +
                           remote.addr.to_string() +
                           " is not a software-NIC IPv4 address");
  }
  // A peer on this host: datagrams go memory to memory (wire.h, "Unsummed").
  bool local = false;
  UCCL_ASSIGN_OR_RETURN(uint32_t mtu, dev_->path_mtu_to(ip, &local));
  take_unsummed_ = local && dev_->offers_unsummed();
  send_unsummed_ =
      local && dev_->local_unsummed_ && (remote.flags & kQpInfoTakesUnsummed);
  if (remote.mtu_bytes > 0) mtu = std::min(mtu, remote.mtu_bytes);
  mtu_ = std::max<uint32_t>(mtu & ~63u, 64);
  remote_ = remote;
  std::memset(&peer_, 0, sizeof(peer_));
  peer_.sin_family = AF_INET;
  peer_.sin_addr.s_addr = ip;
  peer_.sin_port = htons(remote.addr.udp_port);
  peer_src_port_be_ = htons(remote.src_port);
  if (own_fd_) {
    if (::connect(tx_fd_, reinterpret_cast<sockaddr*>(&peer_), sizeof(peer_)) !=
        0) {
      return ErrnoStatus("connect QP socket to " + remote.addr.to_string(),
                         errno);
    }
    tx_connected_ = true;
  }
  epsn_ = remote.psn;
  uc_newest_psn_ = remote.psn - 1;  // the peer's first PSN is beyond it
  acked_psn_ = peer_acked_psn_ = next_psn_ - 1;
  last_progress_ns_ = dev_->now_ns();
  state_ = QpState::kRts;
  VLOG(kVlogLifecycle) << "QP " << qpn_ << " (" << qp_type_name(type_)
                       << ") connected to " << remote.addr.to_string()
                       << " qpn " << remote.qpn << " mtu " << mtu_;
  return Status::OK();
}

Status SoftQp::activate() {
  if (type_ != QpType::kUD) {
    return InvalidArgument("activate: only UD QPs; RC/UC use connect()");
  }
  if (state_ == QpState::kError)
    return InvalidArgument("activate: QP in error");
  state_ = QpState::kRts;
  return Status::OK();
}

Status SoftQp::set_error() {
  to_error(dev_->now_ns());
  return Status::OK();
}

Status SoftQp::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  if (srq_ != nullptr) {
    if (bad_wr) *bad_wr = wr;
    return InvalidArgument("post_recv: this QP takes receives from its SRQ");
  }
  Status st = rq_.post(wr, bad_wr, &pd_->table());
  if (state_ == QpState::kError) dev_->mark_pending(this);  // flush them
  return st;
}

// What post_send checks of one WR before it takes a slot: the QP's state
// and room, the opcode for this QP type, the SGE count; *total: its bytes.
Status SoftQp::check_send(const SendWr& wr, uint64_t* total) const {
  if (state_ != QpState::kRts) {
    return InvalidArgument(std::string("post_send: QP ") +
                           std::to_string(qpn_) + " is in state " +
                           qp_state_name(state_) + ", not RTS");
  }
  if (sq_tail_ - sq_head_ >= sq_.size()) {
    return ResourceExhausted("post_send: send queue full (" +
                             std::to_string(sq_.size()) + " WRs)");
  }
  const WrOpcode op = wr.opcode;
  bool allowed = type_ == QpType::kUD
                     ? (op == WrOpcode::kSend || op == WrOpcode::kSendWithImm)
                     : (type_ == QpType::kRC || op != WrOpcode::kRead);
  if (!allowed || static_cast<int>(op) > 4) {
    return InvalidArgument(std::string("post_send: ") + wr_opcode_name(op) +
                           " is not allowed on " + qp_type_name(type_) +
                           " QPs");
  }
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > cfg_.max_send_sge) {
    return InvalidArgument("post_send: " + std::to_string(wr.num_sge) +
                           " SGEs > max_send_sge " +
                           std::to_string(cfg_.max_send_sge));
  }
  *total = 0;
  for (int i = 0; i < wr.num_sge; ++i) *total += wr.sg_list[i].length;
  if (*total > 0x80000000ull) {
    return InvalidArgument("post_send: message larger than 2 GiB");
  }
  return Status::OK();
}

// The payload of WR `wr` into entry `e` (slot `idx`): a UD destination,
// then the bytes copied inline, or its SGEs checked against their regions.
Status SoftQp::fill_send(const SendWr& wr, uint32_t idx, uint64_t total,
                         SqEntry* e) {
  const WrOpcode op = wr.opcode;
  if (type_ == QpType::kUD) {
    auto* ah = dynamic_cast<SoftAh*>(wr.ah);
    if (ah == nullptr) {
      return InvalidArgument(
          "post_send: UD send needs an address handle of this device");
    }
    if (total > ah->path_mtu()) {
      return InvalidArgument("post_send: UD message of " +
                             std::to_string(total) +
                             " bytes exceeds the path MTU of " +
                             std::to_string(ah->path_mtu()) + " bytes");
    }
    e->ud_dest = ah->dest();
    e->ud_qpn = wr.remote_qpn;
    e->ud_qkey = wr.remote_qkey;
  }
  if (wr.inline_data) {
    if (op == WrOpcode::kRead) {
      return InvalidArgument("post_send: READ cannot be inline");
    }
    if (total > cfg_.max_inline_data) {
      return InvalidArgument(
          "post_send: inline payload of " + std::to_string(total) +
          " bytes > max_inline_data " + std::to_string(cfg_.max_inline_data));
    }
    uint8_t* dst =
        inline_arena_.data() + static_cast<size_t>(idx) * cfg_.max_inline_data;
    uint32_t off = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      std::memcpy(dst + off, reinterpret_cast<const void*>(wr.sg_list[i].addr),
                  wr.sg_list[i].length);
      off += wr.sg_list[i].length;
    }
    e->is_inline = true;
    return Status::OK();
  }
  const uint32_t need =
      op == WrOpcode::kRead ? static_cast<uint32_t>(kAccessLocalWrite) : 0u;
  for (int i = 0; i < wr.num_sge; ++i) {
    const Sge& s = wr.sg_list[i];
    if (s.length == 0) continue;
    MrTable::Check c = pd_->table().check(s.lkey, s.addr, s.length, need);
    if (c != MrTable::Check::kOk) {
      return PermissionDenied(
          "post_send: SGE " + std::to_string(i) +
          (c == MrTable::Check::kBadKey        ? " has an invalid lkey"
           : c == MrTable::Check::kOutOfBounds ? " is outside its region"
                                               : " lacks LOCAL_WRITE"));
    }
  }
  e->num_sge = wr.num_sge;
  std::copy(wr.sg_list, wr.sg_list + wr.num_sge, e->sge);
  return Status::OK();
}

Status SoftQp::post_send(const SendWr* wr, const SendWr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    uint64_t total = 0;
    Status st = check_send(*wr, &total);
    const uint32_t idx = sq_tail_ & sq_mask_;
    SqEntry& e = sq_[idx];
    if (st.ok()) {
      e = SqEntry();
      st = fill_send(*wr, idx, total, &e);
    }
    if (!st.ok()) {
      if (bad_wr) *bad_wr = wr;
      return st;
    }
    const WrOpcode op = wr->opcode;
    e.wr_id = wr->wr_id;
    e.opcode = op;
    e.signaled = wr->signaled;
    e.retransmit = wr->retransmit;
    e.by_reference = wr->payload_stable && !wr->retransmit && !e.is_inline &&
                     (op == WrOpcode::kWrite || op == WrOpcode::kWriteWithImm);
    e.imm = wr->imm_data;
    e.tagged = wr->tagged && op == WrOpcode::kWriteWithImm;
    e.guard_tag = wr->guard_tag;
    e.remote_addr = wr->remote_addr;
    e.rkey = wr->rkey;
    e.length = static_cast<uint32_t>(total);
    if (op == WrOpcode::kRead) ++reads_in_sq_;
    ++sq_tail_;
  }
  if (cfg_.type == QpType::kRC && !timer_armed_ && sq_head_ != sq_tail_) {
    // Its timer runs from now on. Nothing was outstanding, so the timeout
    // counts from here, as it would from an empty queue's last timer.
    timer_armed_ = true;
    dev_->rc_armed_.push_back(this);
    last_progress_ns_ = dev_->now_ns();
    retries_ = 0;
  }
  dev_->mark_pending(this);
  return Status::OK();
}

}  // namespace uccl::transport::udp
