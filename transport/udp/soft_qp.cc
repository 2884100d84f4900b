// Software NIC queue pairs: posting, fragmentation, UC/UD reception, and RC
// reliability (go-back-N with cumulative ACKs, sequence/RNR/access NAKs,
// retransmit timer, READ request/response) following the verbs spec.
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "util/crc32c.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace uccl::transport::udp {

UCCL_KNOB(int64_t, knob_softnic_rc_window, "UCCL_SOFTNIC_RC_WINDOW", 64,
          "Software NIC RC: most unacknowledged packets per QP (go-back-N "
          "window).",
          1, 1 << 20);
// The timeout an RC QP starts from follows its measured RTT (srtt + 4
// rttvar, RFC 6298) when that is shorter than the configured one, so a lost
// packet that nothing follows (a lone receive descriptor, the tail of a
// message) is resent after a few RTTs, not after the verbs timeout, which
// engines set for dead peers and stalled hosts. The floor keeps scheduling
// jitter on busy hosts from firing it early; at or above the configured
// timeout, RTTs change nothing. Retries double it, each wait at most 64x
// the configured timeout, so a dead peer still takes about as long to find.
UCCL_KNOB(int64_t, knob_softnic_rc_min_timeout_us,
          "UCCL_SOFTNIC_RC_MIN_TIMEOUT_US", 200,
          "Software NIC RC: the least retransmission timeout the measured "
          "RTT may give, microseconds (at or above a QP's configured "
          "timeout: no RTT-based timeout).",
          1, 100000000);

namespace {

// IB spec 9.7.5.2.8: min_rnr_timer encoding -> microseconds.
uint64_t rnr_delay_us(uint8_t code) {
  static const uint32_t kTable[32] = {
      655360, 10,    20,    30,     40,     60,     80,     120,
      160,    240,   320,   480,    640,    960,    1280,   1920,
      2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kTable[code & 31];
}

WcOpcode wc_opcode_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite:
    case WrOpcode::kWriteWithImm:
      return WcOpcode::kWrite;
    case WrOpcode::kRead:
      return WcOpcode::kRead;
    default:
      return WcOpcode::kSend;
  }
}

WireOp wire_op_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite:
      return WireOp::kWrite;
    case WrOpcode::kWriteWithImm:
      return WireOp::kWriteImm;
    case WrOpcode::kSend:
      return WireOp::kSend;
    case WrOpcode::kSendWithImm:
      return WireOp::kSendImm;
    case WrOpcode::kRead:
      return WireOp::kReadReq;
  }
  return WireOp::kSend;
}

bool is_send(WireOp op) {
  return op == WireOp::kSend || op == WireOp::kSendImm;
}

}  // namespace

SoftQp::SoftQp(SoftDevice* dev, const QpConfig& cfg, uint32_t qpn, int tx_fd)
    : dev_(dev),
      cfg_(cfg),
      pd_(static_cast<SoftPd*>(cfg.pd)),
      send_cq_(static_cast<SoftCq*>(cfg.send_cq)),
      recv_cq_(static_cast<SoftCq*>(cfg.recv_cq)),
      srq_(static_cast<SoftSrq*>(cfg.srq)),
      tx_fd_(tx_fd),
      own_fd_(tx_fd != dev->fd_),
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
  window_pkts_ = static_cast<uint32_t>(knob_softnic_rc_window().get());
  rto_ns_ = 4096ull << std::min<uint8_t>(cfg.rc.timeout, 31);
  min_rto_ns_ =
      static_cast<uint64_t>(knob_softnic_rc_min_timeout_us().get()) * 1000;
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
  if (own_fd_) close(tx_fd_);
}

QpInfo SoftQp::local_info() const {
  QpInfo i;
  i.addr = dev_->port_address();
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

Status SoftQp::post_send(const SendWr* wr, const SendWr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    auto fail = [&](Status st) {
      if (bad_wr) *bad_wr = wr;
      return st;
    };
    if (state_ != QpState::kRts) {
      return fail(InvalidArgument(std::string("post_send: QP ") +
                                  std::to_string(qpn_) + " is in state " +
                                  qp_state_name(state_) + ", not RTS"));
    }
    if (sq_tail_ - sq_head_ >= sq_.size()) {
      return fail(ResourceExhausted("post_send: send queue full (" +
                                    std::to_string(sq_.size()) + " WRs)"));
    }
    const WrOpcode op = wr->opcode;
    bool allowed = type_ == QpType::kUD
                       ? (op == WrOpcode::kSend || op == WrOpcode::kSendWithImm)
                       : (type_ == QpType::kRC || op != WrOpcode::kRead);
    if (!allowed || static_cast<int>(op) > 4) {
      return fail(InvalidArgument(std::string("post_send: ") +
                                  wr_opcode_name(op) + " is not allowed on " +
                                  qp_type_name(type_) + " QPs"));
    }
    if (wr->num_sge < 0 ||
        static_cast<uint32_t>(wr->num_sge) > cfg_.max_send_sge) {
      return fail(InvalidArgument("post_send: " + std::to_string(wr->num_sge) +
                                  " SGEs > max_send_sge " +
                                  std::to_string(cfg_.max_send_sge)));
    }
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
    if (total > 0x80000000ull) {
      return fail(InvalidArgument("post_send: message larger than 2 GiB"));
    }
    const uint32_t idx = sq_tail_ & sq_mask_;
    SqEntry& e = sq_[idx];
    e = SqEntry();
    if (type_ == QpType::kUD) {
      auto* ah = dynamic_cast<SoftAh*>(wr->ah);
      if (ah == nullptr) {
        return fail(
            InvalidArgument("post_send: UD send needs an address "
                            "handle of this device"));
      }
      if (total > ah->path_mtu()) {
        return fail(InvalidArgument("post_send: UD message of " +
                                    std::to_string(total) +
                                    " bytes exceeds the path MTU of " +
                                    std::to_string(ah->path_mtu()) + " bytes"));
      }
      e.ud_dest = ah->dest();
      e.ud_qpn = wr->remote_qpn;
      e.ud_qkey = wr->remote_qkey;
    }
    if (wr->inline_data) {
      if (op == WrOpcode::kRead) {
        return fail(InvalidArgument("post_send: READ cannot be inline"));
      }
      if (total > cfg_.max_inline_data) {
        return fail(InvalidArgument("post_send: inline payload of " +
                                    std::to_string(total) +
                                    " bytes > max_inline_data " +
                                    std::to_string(cfg_.max_inline_data)));
      }
      uint8_t* dst = inline_arena_.data() +
                     static_cast<size_t>(idx) * cfg_.max_inline_data;
      uint32_t off = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        std::memcpy(dst + off,
                    reinterpret_cast<const void*>(wr->sg_list[i].addr),
                    wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
      e.is_inline = true;
    } else {
      const uint32_t need =
          op == WrOpcode::kRead ? static_cast<uint32_t>(kAccessLocalWrite) : 0u;
      for (int i = 0; i < wr->num_sge; ++i) {
        const Sge& s = wr->sg_list[i];
        if (s.length == 0) continue;
        MrTable::Check c = pd_->table().check(s.lkey, s.addr, s.length, need);
        if (c != MrTable::Check::kOk) {
          return fail(PermissionDenied(
              "post_send: SGE " + std::to_string(i) +
              (c == MrTable::Check::kBadKey        ? " has an invalid lkey"
               : c == MrTable::Check::kOutOfBounds ? " is outside its region"
                                                   : " lacks LOCAL_WRITE")));
        }
      }
      e.num_sge = wr->num_sge;
      std::copy(wr->sg_list, wr->sg_list + wr->num_sge, e.sge);
    }
    e.wr_id = wr->wr_id;
    e.opcode = op;
    e.signaled = wr->signaled;
    e.retransmit = wr->retransmit;
    e.by_reference = wr->by_reference && !wr->retransmit && !e.is_inline &&
                     (op == WrOpcode::kWrite || op == WrOpcode::kWriteWithImm);
    e.imm = wr->imm_data;
    e.remote_addr = wr->remote_addr;
    e.rkey = wr->rkey;
    e.length = static_cast<uint32_t>(total);
    if (op == WrOpcode::kRead) ++reads_in_sq_;
    ++sq_tail_;
  }
  if (cfg_.type == QpType::kRC && !timer_armed_ && sq_head_ != sq_tail_) {
    // Its timer runs from now on. Nothing was outstanding, so the timeout
    // counts from here (what on_timer() of an empty queue used to record).
    timer_armed_ = true;
    dev_->rc_armed_.push_back(this);
    last_progress_ns_ = dev_->now_ns();
    retries_ = 0;
  }
  dev_->mark_pending(this);
  return Status::OK();
}

// ------------------------------------------------------------- transmit

uint32_t SoftQp::packets_for(const SqEntry& e) const {
  if (e.opcode == WrOpcode::kRead) return 1;
  return e.length == 0 ? 1 : (e.length + mtu_ - 1) / mtu_;
}

bool SoftQp::has_tx_work() const {
  if (state_ == QpState::kError) {
    return sq_head_ != sq_tail_ || !rq_.empty() || spare_recv_valid_ ||
           msg_.has_recv;
  }
  return ack_pending_ || nak_pending_ || reads_head_ != reads_tail_ ||
         (state_ == QpState::kRts && sq_send_ != sq_tail_);
}

bool SoftQp::tx_later() const {
  if (cfg_.low_priority) return true;
  return state_ != QpState::kError && reads_head_ == reads_tail_ &&
         !(state_ == QpState::kRts && sq_send_ != sq_tail_);
}

uint32_t SoftQp::transmit(uint32_t budget, uint64_t now) {
  if (state_ == QpState::kError) {
    flush(now);
    return 0;
  }
  if (state_ != QpState::kRts) return 0;
  uint32_t sent = 0;
  if (nak_pending_) {
    emit_control(nak_syn_, epsn_ - 1, nak_psn_);
    nak_pending_ = ack_pending_ = false;
    ++sent;
  } else if (ack_pending_) {
    emit_control(AckSyndrome::kAck, epsn_ - 1, 0);
    ack_pending_ = false;
    ++sent;
  }
  if (reads_head_ != reads_tail_) sent += serve_reads(budget);
  while (sent < budget && sq_send_ != sq_tail_ && state_ == QpState::kRts) {
    SqEntry& e = sq_[sq_send_ & sq_mask_];
    if (e.all_sent || e.done) {  // skipped after a rewind
      ++sq_send_;
      continue;
    }
    if (type_ == QpType::kRC) {
      if (now < rnr_until_ns_) break;
      uint32_t psn =
          e.started
              ? e.first_psn + (e.opcode == WrOpcode::kRead ? 0 : e.sent / mtu_)
              : next_psn_;
      if (psn - (acked_psn_ + 1) >= window_pkts_) break;
    } else if (e.signaled && !send_cq_->has_space()) {
      break;  // UC/UD complete as the last fragment leaves: need room
    }
    if (!e.started) {
      e.started = true;
      e.npkts = packets_for(e);
      e.first_psn = next_psn_;
      next_psn_ += e.npkts;
    }
    emit_fragment(e, now);
    ++sent;
    if (state_ != QpState::kRts) break;  // local protection error
    if (e.all_sent) {
      if (type_ != QpType::kRC) {
        complete_send(e, WcStatus::kSuccess, now);
        ++sq_head_;
      }
      ++sq_send_;
    }
  }
  return sent;
}

uint32_t SoftQp::gather(const Sge* sge, int n, uint32_t offset, uint32_t len,
                        iovec* iov, int max_iov, bool* bad_key) const {
  int k = 0;
  for (int i = 0; i < n && len > 0; ++i) {
    if (offset >= sge[i].length) {
      offset -= sge[i].length;
      continue;
    }
    if (pd_->table().check(sge[i].lkey, sge[i].addr, sge[i].length, 0) !=
        MrTable::Check::kOk) {
      *bad_key = true;  // deregistered after posting
      return 0;
    }
    uint32_t take = std::min(len, sge[i].length - offset);
    if (k == max_iov) {
      *bad_key = true;
      return 0;
    }
    iov[k].iov_base = reinterpret_cast<void*>(sge[i].addr + offset);
    iov[k].iov_len = take;
    ++k;
    len -= take;
    offset = 0;
  }
  return k;
}

void SoftQp::emit_fragment(SqEntry& e, uint64_t now) {
  WireHeader h;
  std::memset(&h, 0, sizeof(h));
  h.qp_type = static_cast<uint8_t>(type_);
  h.dst_qpn = type_ == QpType::kUD ? e.ud_qpn : remote_.qpn;
  h.src_qpn = qpn_;
  h.opcode = static_cast<uint8_t>(wire_op_for(e.opcode));
  h.msg_len = e.length;
  h.imm_data = e.imm;
  h.remote_addr = e.remote_addr;
  h.rkey = e.rkey;
  iovec iov[kMaxSge];
  int niov = 0;
  if (e.opcode == WrOpcode::kRead) {
    h.psn = e.first_psn;
    h.frag_offset = e.read_done;
    h.payload_len = 0;
    h.flags = kFlagFirst | kFlagLast | kFlagAckReq;
    e.all_sent = true;
  } else {
    const uint32_t off = e.sent;
    const uint32_t frag = std::min(mtu_, e.length - off);
    h.psn = type_ == QpType::kUD ? next_psn_++ : e.first_psn + off / mtu_;
    h.frag_offset = off;
    h.payload_len = frag;
    if (off == 0) h.flags |= kFlagFirst;
    if (e.retransmit) h.flags |= kFlagRetransmit;
    if (off + frag == e.length) {
      h.flags |= kFlagLast;
      if (type_ == QpType::kRC) h.flags |= kFlagAckReq;
    }
    if (type_ == QpType::kRC && (h.psn & 15) == 0) h.flags |= kFlagAckReq;
    if (type_ == QpType::kUD) {
      h.aux = e.ud_qkey;
      h.aux2 = dev_->udp_port();
    }
    if (frag > 0) {
      if (e.is_inline) {
        iov[0].iov_base =
            inline_arena_.data() +
            static_cast<size_t>(&e - sq_.data()) * cfg_.max_inline_data + off;
        iov[0].iov_len = frag;
        niov = 1;
      } else {
        bool bad = false;
        niov = static_cast<int>(
            gather(e.sge, e.num_sge, off, frag, iov, kMaxSge, &bad));
        if (bad) {
          complete_send(e, WcStatus::kLocalProtectionError, now);
          ++sq_head_;
          ++sq_send_;
          to_error(now);
          return;
        }
      }
    }
    e.sent = off + frag;
    if (e.sent == e.length) e.all_sent = true;
  }
  // A resend is copied: an earlier copy may have been acknowledged already
  // (wire.h, "Spliced payloads").
  bool by_reference = e.by_reference;
  if (type_ == QpType::kRC && e.started &&
      psn_lt(h.psn, highest_sent_psn_ + 1)) {
    by_reference = false;
    ++dev_->counters_.rc_retransmits;
    // Recovering: have every resent packet acknowledged, so one that gets
    // through restarts progress even if the next ones are lost.
    h.flags |= kFlagAckReq;
    rtt_timing_ = false;  // an ACK now may be for either copy
  } else if (type_ == QpType::kRC) {
    highest_sent_psn_ = h.psn;
    if (!rtt_timing_) {
      rtt_timing_ = true;
      rtt_psn_ = h.psn;
      rtt_sent_ns_ = now;
    }
  }
  const sockaddr_in* dest = type_ == QpType::kUD ? &e.ud_dest
                            : tx_connected_      ? nullptr
                                                 : &peer_;
  dev_->send_datagram(&h, iov, niov, tx_fd_, dest, send_unsummed_,
                      by_reference);
}

void SoftQp::emit_control(AckSyndrome syn, uint32_t psn, uint32_t about) {
  WireHeader h;
  std::memset(&h, 0, sizeof(h));
  h.qp_type = static_cast<uint8_t>(type_);
  h.opcode = static_cast<uint8_t>(WireOp::kAck);
  h.flags = kFlagFirst | kFlagLast;
  h.dst_qpn = remote_.qpn;
  h.src_qpn = qpn_;
  h.psn = psn;
  h.aux = static_cast<uint32_t>(syn);
  h.aux2 = about;
  switch (syn) {
    case AckSyndrome::kAck:
      ++dev_->counters_.acks_sent;
      break;
    case AckSyndrome::kNakRnr:
      ++dev_->counters_.rnr_naks_sent;
      break;
    default:
      ++dev_->counters_.naks_sent;
      break;
  }
  dev_->send_datagram(&h, nullptr, 0, tx_fd_, tx_connected_ ? nullptr : &peer_);
}

uint32_t SoftQp::serve_reads(uint32_t budget) {
  uint32_t sent = 0;
  const uint32_t mask = reads_.size() - 1;
  while (sent < budget && reads_head_ != reads_tail_) {
    ReadJob& j = reads_[reads_head_ & mask];
    const uint32_t frag = std::min(mtu_, j.len - j.offset);
    WireHeader h;
    std::memset(&h, 0, sizeof(h));
    h.qp_type = static_cast<uint8_t>(type_);
    h.opcode = static_cast<uint8_t>(WireOp::kReadResp);
    h.dst_qpn = remote_.qpn;
    h.src_qpn = qpn_;
    h.psn = j.psn;
    h.msg_len = j.len;
    h.frag_offset = j.offset;
    h.payload_len = frag;
    if (j.offset == 0) h.flags |= kFlagFirst;
    if (j.offset + frag == j.len) h.flags |= kFlagLast;
    iovec iov;
    iov.iov_base = reinterpret_cast<void*>(j.addr + j.offset);
    iov.iov_len = frag;
    dev_->send_datagram(&h, &iov, frag ? 1 : 0, tx_fd_,
                        tx_connected_ ? nullptr : &peer_);
    ++sent;
    j.offset += frag;
    if (j.offset >= j.len) ++reads_head_;
  }
  return sent;
}

void SoftQp::complete_send(SqEntry& e, WcStatus st, uint64_t now) {
  if (e.opcode == WrOpcode::kRead) --reads_in_sq_;
  if (!e.signaled && st == WcStatus::kSuccess) return;
  WorkCompletion wc;
  wc.wr_id = e.wr_id;
  wc.status = st;
  wc.opcode = wc_opcode_for(e.opcode);
  wc.byte_len = e.length;
  wc.qp_num = qpn_;
  wc.timestamp_ns = now;
  if (!send_cq_->push(wc)) ++dev_->counters_.drop_cq_full;
}

void SoftQp::retire_rc(uint64_t now) {
  while (sq_head_ != sq_tail_) {
    SqEntry& e = sq_[sq_head_ & sq_mask_];
    if (!e.started) break;
    if (e.opcode == WrOpcode::kRead) {
      if (!e.done) break;
    } else if (!psn_le(e.first_psn + e.npkts - 1, acked_psn_)) {
      break;
    }
    if (e.signaled && !send_cq_->has_space()) break;
    complete_send(e, WcStatus::kSuccess, now);
    if (sq_send_ == sq_head_) ++sq_send_;
    ++sq_head_;
  }
}

void SoftQp::rewind_to(uint32_t psn) {
  for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
    SqEntry& e = sq_[i & sq_mask_];
    if (!e.started) return;
    if (!psn_le(e.first_psn, psn) || !psn_lt(psn, e.first_psn + e.npkts)) {
      continue;
    }
    for (uint32_t k = i; k != sq_tail_; ++k) {
      SqEntry& x = sq_[k & sq_mask_];
      if (!x.started) break;
      if (x.done) continue;
      x.sent = 0;
      x.all_sent = false;
    }
    if (e.opcode != WrOpcode::kRead) e.sent = (psn - e.first_psn) * mtu_;
    sq_send_ = i;
    dev_->mark_pending(this);
    return;
  }
}

void SoftQp::on_timer(uint64_t now) {
  if (state_ != QpState::kRts) return;
  retire_rc(now);
  if (sq_head_ == sq_tail_ || !sq_[sq_head_ & sq_mask_].started) {
    last_progress_ns_ = now;
    retries_ = 0;
    return;
  }
  SqEntry& h = sq_[sq_head_ & sq_mask_];
  if (h.opcode != WrOpcode::kRead &&
      psn_le(h.first_psn + h.npkts - 1, acked_psn_)) {
    return;  // acknowledged; waiting for room in the CQ
  }
  if (now - last_progress_ns_ < retransmit_timeout_ns() ||
      now < rnr_until_ns_) {
    return;
  }
  ++dev_->counters_.rc_timeouts;
  if (retries_ == 0) stall_since_ns_ = last_progress_ns_;
  // Verbs gives a silent responder retry_cnt + 1 configured timeouts. The
  // retransmissions here come sooner (RTT-based, doubling), so the QP fails
  // once both have run out: retry_cnt retransmissions and that much time
  // since the stall began. A busy peer process is not a dead one.
  if (++retries_ > cfg_.rc.retry_cnt &&
      now - stall_since_ns_ >= rto_ns_ * (cfg_.rc.retry_cnt + 1ull)) {
    VLOG(kVlogLifecycle) << "QP " << qpn_ << ": retry count exceeded";
    complete_send(h, WcStatus::kRetryExceeded, now);
    ++sq_head_;
    to_error(now);
    return;
  }
  rewind_to(h.opcode == WrOpcode::kRead ? h.first_psn : acked_psn_ + 1);
  last_progress_ns_ = now;
}

uint64_t SoftQp::retransmit_timeout_ns() const {
  uint64_t base = rto_ns_;
  if (rtt_valid_) {
    base = std::min(base, std::max(min_rto_ns_, srtt_ns_ + 4 * rttvar_ns_));
  }
  // Unlike an IB NIC, the timeout doubles with each retry: a software NIC's
  // peer is a process that may be descheduled or flooded for tens of
  // milliseconds, which must not break the connection.
  const uint64_t cap = rto_ns_ << 6;
  const uint64_t rto = base << std::min<uint32_t>(retries_, 20);
  return std::min(rto, cap);
}

void SoftQp::rtt_sample(uint64_t rtt_ns) {
  if (!rtt_valid_) {
    rtt_valid_ = true;
    srtt_ns_ = rtt_ns;
    rttvar_ns_ = rtt_ns / 2;
    return;
  }
  const uint64_t dev =
      srtt_ns_ > rtt_ns ? srtt_ns_ - rtt_ns : rtt_ns - srtt_ns_;
  rttvar_ns_ = (3 * rttvar_ns_ + dev) / 4;
  srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
}

void SoftQp::to_error(uint64_t now) {
  if (state_ == QpState::kError) return;
  state_ = QpState::kError;
  ack_pending_ = nak_pending_ = false;
  reads_head_ = reads_tail_;
  sq_send_ = sq_tail_;
  flush(now);
  dev_->mark_pending(this);
}

void SoftQp::flush(uint64_t now) {
  while (sq_head_ != sq_tail_ && send_cq_->has_space()) {
    SqEntry& e = sq_[sq_head_ & sq_mask_];
    e.signaled = true;  // every WR flushed in error is reported
    complete_send(
        e, e.status != WcStatus::kSuccess ? e.status : WcStatus::kWrFlushError,
        now);
    ++sq_head_;
  }
  auto flush_recv = [&](const RecvEntry& r) {
    WorkCompletion wc;
    wc.wr_id = r.wr_id;
    wc.status = WcStatus::kWrFlushError;
    wc.opcode = WcOpcode::kRecv;
    wc.qp_num = qpn_;
    wc.timestamp_ns = now;
    recv_cq_->push(wc);
  };
  if (msg_.has_recv && recv_cq_->has_space()) {
    flush_recv(msg_.recv);
    msg_.has_recv = false;
  }
  if (spare_recv_valid_ && recv_cq_->has_space()) {
    flush_recv(spare_recv_);
    spare_recv_valid_ = false;
  }
  RecvEntry r;
  while (recv_cq_->has_space() && rq_.pop(&r)) flush_recv(r);
}

// --------------------------------------------------------------- receive

bool SoftQp::recv_available() const {
  return spare_recv_valid_ || (srq_ ? !srq_->ring().empty() : !rq_.empty());
}

bool SoftQp::take_recv(RecvEntry* out) {
  if (spare_recv_valid_) {
    *out = spare_recv_;
    spare_recv_valid_ = false;
    return true;
  }
  return srq_ ? srq_->ring().pop(out) : rq_.pop(out);
}

bool SoftQp::payload_ok(const WireHeader& h, const uint8_t* payload) const {
  if (h.flags & kFlagUnsummed) return take_unsummed_;
  return crc32c(0, payload, h.payload_len) == h.payload_crc;
}

bool SoftQp::place_sges(const RecvEntry& r, uint32_t offset, const uint8_t* src,
                        uint32_t len, const WireHeader* h, bool* bad_key) {
  // Verified before any byte is placed (as a RoCE NIC checks the ICRC before
  // its DMA): a corrupted duplicate must not overwrite bytes that already
  // arrived intact.
  if (h != nullptr && !payload_ok(*h, src)) return false;
  for (int i = 0; i < r.num_sge && len > 0; ++i) {
    const Sge& s = r.sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    if (pd_->table().check(s.lkey, s.addr, s.length, kAccessLocalWrite) !=
        MrTable::Check::kOk) {
      *bad_key = true;
      return false;
    }
    uint32_t take = std::min(len, s.length - offset);
    std::memcpy(reinterpret_cast<void*>(s.addr + offset), src, take);
    src += take;
    len -= take;
    offset = 0;
  }
  if (len > 0) {  // ran past the scatter list (checked by callers)
    *bad_key = true;
    return false;
  }
  return true;
}

uint8_t* SoftQp::direct_dst(const WireHeader& h,
                            const sockaddr_in& from) const {
  const auto op = static_cast<WireOp>(h.opcode);
  if ((state_ != QpState::kRts && state_ != QpState::kRtr) ||
      h.qp_type != static_cast<uint8_t>(type_) || h.src_qpn != remote_.qpn ||
      !from_peer(from) || (op != WireOp::kWrite && op != WireOp::kWriteImm) ||
      (h.flags & kFlagRetransmit) || h.payload_len == 0) {
    return nullptr;
  }
  // Only where no intact copy of these bytes can be there yet (wire.h).
  if (type_ == QpType::kUC) {
    if (!psn_lt(uc_newest_psn_, h.psn)) return nullptr;
    // Fragments on_uc() drops anyway (the message lost a packet) stay out.
    if (!(h.flags & kFlagFirst) &&
        (!msg_.active || msg_.discard || h.psn != epsn_ ||
         h.frag_offset != msg_.next_offset)) {
      return nullptr;
    }
  } else if (type_ != QpType::kRC || h.psn != epsn_) {
    return nullptr;
  }
  const uint64_t dst = h.remote_addr + h.frag_offset;
  if (dst < h.remote_addr ||
      pd_->table().check(h.rkey, dst, h.payload_len, kAccessRemoteWrite) !=
          MrTable::Check::kOk) {
    return nullptr;  // staged: place_fragment counts and NAKs it
  }
  return reinterpret_cast<uint8_t*>(dst);
}

void SoftQp::abort_message() {
  if (msg_.has_recv) {  // keep the receive for this QP's next SEND
    spare_recv_ = msg_.recv;
    spare_recv_valid_ = true;
  }
  msg_ = RxMessage();
}

bool SoftQp::from_peer(const sockaddr_in& from) const {
  return from.sin_addr.s_addr == peer_.sin_addr.s_addr &&
         (peer_src_port_be_ == 0 || from.sin_port == peer_src_port_be_);
}

void SoftQp::on_packet(const WireHeader& h, const uint8_t* payload,
                       const sockaddr_in& from, uint64_t now) {
  if (state_ != QpState::kRts && state_ != QpState::kRtr) {
    ++dev_->counters_.drop_wrong_state;
    return;
  }
  if (h.qp_type != static_cast<uint8_t>(type_)) {
    ++dev_->counters_.drop_malformed;
    return;
  }
  if (type_ == QpType::kUD) return on_ud(h, payload, from, now);
  if (h.src_qpn != remote_.qpn) {
    ++dev_->counters_.drop_unknown_qp;
    return;
  }
  // Connected QPs hear only their peer (as verbs RC/UC check the source
  // of every packet): a datagram from anywhere else changes nothing here,
  // whatever its PSN, so a forged NAK or request cannot end the connection.
  if (!from_peer(from)) {
    ++dev_->counters_.drop_wrong_source;
    return;
  }
  const auto op = static_cast<WireOp>(h.opcode);
  if (type_ == QpType::kUC) {
    if (op == WireOp::kReadReq || op == WireOp::kReadResp ||
        op == WireOp::kAck) {
      ++dev_->counters_.drop_malformed;
      return;
    }
    return on_uc(h, payload, now);
  }
  if (op == WireOp::kAck) return on_rc_ack(h, now);
  if (op == WireOp::kReadResp) return on_read_resp(h, payload, now);
  on_rc_request(h, payload, now);
}

void SoftQp::on_ud(const WireHeader& h, const uint8_t* payload,
                   const sockaddr_in& from, uint64_t now) {
  const auto op = static_cast<WireOp>(h.opcode);
  if (!is_send(op) ||
      (h.flags & (kFlagFirst | kFlagLast)) != (kFlagFirst | kFlagLast) ||
      h.frag_offset != 0 || h.msg_len != h.payload_len) {
    ++dev_->counters_.drop_malformed;
    return;
  }
  if (h.aux != cfg_.qkey) {
    ++dev_->counters_.drop_qkey;
    return;
  }
  if (!recv_cq_->has_space()) {
    ++dev_->counters_.drop_cq_full;
    return;
  }
  RecvEntry r;
  if (!take_recv(&r)) {
    ++dev_->counters_.drop_no_recv;
    return;
  }
  WorkCompletion wc;
  wc.wr_id = r.wr_id;
  wc.opcode = WcOpcode::kRecv;
  wc.qp_num = qpn_;
  wc.src_qp = h.src_qpn;
  wc.with_grh = true;
  wc.timestamp_ns = now;
  if (r.total_len < kGrhBytes + h.payload_len) {
    ++dev_->counters_.drop_recv_too_small;
    wc.status = WcStatus::kLocalLengthError;
    recv_cq_->push(wc);
    return;
  }
  // Global route header as verbs writes it: version 6, flow label, payload
  // length, next header, hop limit, source GID (v4-mapped sender),
  // destination GID. The flow label carries the sender's UDP source port
  // (RoCEv2 derives one from the other), so with the source GID it names
  // the sending port exactly (nic.h, WorkCompletion::with_grh).
  uint8_t grh[kGrhBytes] = {};
  grh[0] = 0x60;
  std::memcpy(grh + 2, &from.sin_port, 2);  // network order, low 16 bits
  uint16_t plen = htons(static_cast<uint16_t>(h.payload_len));
  std::memcpy(grh + 4, &plen, 2);
  grh[6] = 0x1b;
  grh[7] = 64;
  ipv4_to_gid(from.sin_addr.s_addr, grh + 8);
  PortAddress me = dev_->port_address();
  std::memcpy(grh + 24, me.gid, 16);
  bool bad = false;
  place_sges(r, 0, grh, kGrhBytes, nullptr, &bad);  // our own bytes
  if (bad || !place_sges(r, kGrhBytes, payload, h.payload_len, &h, &bad)) {
    if (bad) {
      wc.status = WcStatus::kLocalProtectionError;
      ++dev_->counters_.drop_no_access;
      recv_cq_->push(wc);
    } else {
      ++dev_->counters_.drop_bad_crc;
      spare_recv_ = r;  // not consumed
      spare_recv_valid_ = true;
    }
    return;
  }
  wc.with_imm = op == WireOp::kSendImm;
  wc.imm_data = h.imm_data;
  wc.byte_len = kGrhBytes + h.payload_len;
  recv_cq_->push(wc);
}

bool SoftQp::place_fragment(const WireHeader& h, const uint8_t* payload,
                            AckSyndrome* syn) {
  SoftCounters& c = dev_->counters_;
  const auto op = static_cast<WireOp>(h.opcode);
  *syn = AckSyndrome::kAck;
  if (!is_send(op)) {  // WRITE / WRITE_IMM
    if (h.payload_len == 0) return true;
    const uint64_t dst = h.remote_addr + h.frag_offset;
    if (dst < h.remote_addr) {
      ++c.drop_out_of_bounds;
      *syn = AckSyndrome::kNakRemoteAccess;
      return false;
    }
    switch (
        pd_->table().check(h.rkey, dst, h.payload_len, kAccessRemoteWrite)) {
      case MrTable::Check::kOk:
        break;
      case MrTable::Check::kBadKey:
        ++c.drop_bad_rkey;
        VLOG(kVlogPacket) << "QP " << qpn_ << ": bad rkey 0x" << std::hex
                          << h.rkey << std::dec << " psn " << h.psn;
        *syn = AckSyndrome::kNakRemoteAccess;
        return false;
      case MrTable::Check::kOutOfBounds:
        ++c.drop_out_of_bounds;
        *syn = AckSyndrome::kNakRemoteAccess;
        return false;
      case MrTable::Check::kNoAccess:
        ++c.drop_no_access;
        *syn = AckSyndrome::kNakRemoteAccess;
        return false;
    }
    // Verified before it is placed (see place_sges): a corrupted copy of a
    // chunk that already arrived must not overwrite it. A payload placed
    // directly (direct_dst) is checked where it landed.
    if (!payload_ok(h, payload)) {
      ++c.drop_bad_crc;
      return false;
    }
    if (payload != reinterpret_cast<const uint8_t*>(dst)) {
      std::memcpy(reinterpret_cast<void*>(dst), payload, h.payload_len);
    }
    return true;
  }
  // SEND / SEND_IMM: into the receive taken at the first fragment.
  if (!msg_.has_recv) {
    if (!take_recv(&msg_.recv)) {
      ++c.drop_no_recv;
      *syn = AckSyndrome::kNakRnr;
      return false;
    }
    msg_.has_recv = true;
    if (msg_.msg_len > msg_.recv.total_len) {
      ++c.drop_recv_too_small;
      WorkCompletion wc;
      wc.wr_id = msg_.recv.wr_id;
      wc.status = WcStatus::kLocalLengthError;
      wc.opcode = WcOpcode::kRecv;
      wc.qp_num = qpn_;
      wc.byte_len = msg_.msg_len;
      wc.timestamp_ns = dev_->now_ns();
      if (!recv_cq_->push(wc)) ++c.drop_cq_full;
      msg_.has_recv = false;
      *syn = AckSyndrome::kNakInvalid;
      return false;
    }
  }
  bool bad = false;
  if (!place_sges(msg_.recv, h.frag_offset, payload, h.payload_len, &h, &bad)) {
    if (bad) {
      ++c.drop_no_access;
      *syn = AckSyndrome::kNakInvalid;
    } else {
      ++c.drop_bad_crc;
    }
    return false;
  }
  return true;
}

void SoftQp::finish_message(uint64_t now) {
  WorkCompletion wc;
  wc.qp_num = qpn_;
  wc.timestamp_ns = now;
  wc.byte_len = msg_.msg_len;
  switch (msg_.op) {
    case WireOp::kWrite:
      msg_ = RxMessage();
      return;
    case WireOp::kWriteImm: {
      RecvEntry r;
      if (!recv_cq_->has_space() || !take_recv(&r)) {
        ++dev_->counters_.drop_no_recv;  // UC only: RC checked beforehand
        msg_ = RxMessage();
        return;
      }
      wc.wr_id = r.wr_id;
      wc.opcode = WcOpcode::kRecvWriteImm;
      wc.with_imm = true;
      break;
    }
    default:
      wc.wr_id = msg_.recv.wr_id;
      wc.opcode = WcOpcode::kRecv;
      wc.with_imm = msg_.op == WireOp::kSendImm;
      break;
  }
  wc.imm_data = msg_.imm;
  if (!recv_cq_->push(wc)) ++dev_->counters_.drop_cq_full;
  msg_ = RxMessage();
}

void SoftQp::on_uc(const WireHeader& h, const uint8_t* payload, uint64_t now) {
  SoftCounters& c = dev_->counters_;
  const auto op = static_cast<WireOp>(h.opcode);
  if (psn_lt(uc_newest_psn_, h.psn)) uc_newest_psn_ = h.psn;
  if (h.psn != epsn_ && msg_.active) abort_message();  // lost packets
  epsn_ = h.psn + 1;
  if (h.flags & kFlagFirst) {
    if (msg_.active) abort_message();
    msg_.active = true;
    msg_.op = op;
    msg_.msg_len = h.msg_len;
    msg_.next_offset = 0;
    msg_.imm = h.imm_data;
  } else if (!msg_.active || msg_.discard) {
    ++c.drop_out_of_sequence;
    return;
  }
  if (h.frag_offset != msg_.next_offset || h.msg_len != msg_.msg_len ||
      op != msg_.op) {
    ++c.drop_malformed;
    abort_message();
    return;
  }
  const bool last = h.flags & kFlagLast;
  if (last && h.frag_offset + h.payload_len != msg_.msg_len) {
    ++c.drop_malformed;
    abort_message();
    return;
  }
  AckSyndrome syn;
  if (!place_fragment(h, payload, &syn)) {
    // UC has no NAKs: drop the rest of this message.
    abort_message();
    msg_.active = true;
    msg_.discard = true;
    return;
  }
  msg_.next_offset += h.payload_len;
  if (last) finish_message(now);
}

void SoftQp::on_rc_request(const WireHeader& h, const uint8_t* payload,
                           uint64_t now) {
  SoftCounters& c = dev_->counters_;
  const auto op = static_cast<WireOp>(h.opcode);
  auto nak_now = [&](AckSyndrome syn, uint32_t psn) {
    nak_pending_ = true;
    nak_syn_ = syn;
    nak_psn_ = psn;
    dev_->mark_pending(this);
  };
  auto queue_read = [&]() -> bool {
    const uint32_t len = h.msg_len - h.frag_offset;
    if (len > 0) {
      MrTable::Check ck = pd_->table().check(
          h.rkey, h.remote_addr + h.frag_offset, len, kAccessRemoteRead);
      if (ck != MrTable::Check::kOk) {
        if (ck == MrTable::Check::kBadKey)
          ++c.drop_bad_rkey;
        else if (ck == MrTable::Check::kOutOfBounds)
          ++c.drop_out_of_bounds;
        else
          ++c.drop_no_access;
        return false;
      }
    }
    // A repeated READ (a response fragment was lost) restarts its response
    // where the requester asks, instead of adding a second stream: parallel
    // copies of a long response would overrun the requester again and again.
    for (uint32_t i = reads_head_; i != reads_tail_; ++i) {
      ReadJob& q = reads_[i & (reads_.size() - 1)];
      if (q.psn == h.psn && q.addr == h.remote_addr && q.len == h.msg_len) {
        q.offset = h.frag_offset;
        dev_->mark_pending(this);
        return true;
      }
    }
    if (reads_tail_ - reads_head_ >= reads_.size()) return true;  // busy:
    // the requester times out and asks again.
    ReadJob& j = reads_[reads_tail_++ & (reads_.size() - 1)];
    j.psn = h.psn;
    j.addr = h.remote_addr;
    j.len = h.msg_len;
    j.offset = h.frag_offset;
    dev_->mark_pending(this);
    return true;
  };

  if (h.psn == epsn_) {
    if (op == WireOp::kReadReq) {
      if (!queue_read()) {
        emit_control(AckSyndrome::kNakRemoteAccess, epsn_ - 1, h.psn);
        to_error(now);
        return;
      }
      ++epsn_;
      nak_sent_for_epsn_ = false;
      return;
    }
    if (op != WireOp::kWrite && op != WireOp::kWriteImm && !is_send(op)) {
      ++c.drop_malformed;
      return;
    }
    if (h.flags & kFlagFirst) {
      if (msg_.active) abort_message();
      msg_.active = true;
      msg_.op = op;
      msg_.msg_len = h.msg_len;
      msg_.next_offset = 0;
      msg_.imm = h.imm_data;
    } else if (!msg_.active || h.frag_offset != msg_.next_offset ||
               h.msg_len != msg_.msg_len || op != msg_.op) {
      ++c.drop_malformed;
      return;
    }
    const bool last = h.flags & kFlagLast;
    if (last && h.frag_offset + h.payload_len != msg_.msg_len) {
      ++c.drop_malformed;
      return;
    }
    if (last && (op == WireOp::kWriteImm || is_send(op)) &&
        (!recv_cq_->has_space() ||
         (op == WireOp::kWriteImm && !recv_available()))) {
      ++c.drop_no_recv;
      nak_now(AckSyndrome::kNakRnr, h.psn);
      return;
    }
    AckSyndrome syn;
    if (!place_fragment(h, payload, &syn)) {
      if (syn == AckSyndrome::kNakRnr) {
        nak_now(syn, h.psn);
      } else if (syn != AckSyndrome::kAck) {
        emit_control(syn, epsn_ - 1, h.psn);
        to_error(now);
      }
      // CRC failure: silent; the next packet draws a sequence NAK.
      return;
    }
    msg_.next_offset += h.payload_len;
    ++epsn_;
    nak_sent_for_epsn_ = false;
    if (last) finish_message(now);
    if (last || (h.flags & kFlagAckReq)) {
      ack_pending_ = true;
      dev_->mark_pending(this);
    }
  } else if (psn_lt(h.psn, epsn_)) {
    ++c.drop_duplicate;
    if (op == WireOp::kReadReq) {
      queue_read();  // re-execute a duplicate READ (it is idempotent)
      return;
    }
    ack_pending_ = true;
    dev_->mark_pending(this);
  } else {
    ++c.drop_out_of_sequence;
    if (!nak_sent_for_epsn_) {
      nak_sent_for_epsn_ = true;
      nak_now(AckSyndrome::kNakSequence, epsn_);
    }
  }
}

uint32_t SoftQp::ack_point(uint32_t psn) const {
  // An ACK past a READ says its request arrived, not that its response did:
  // the cumulative point stops before the oldest READ not yet done, so the
  // READ can still be asked again (the send window counts from there).
  if (reads_in_sq_ == 0) return psn;
  for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
    const SqEntry& x = sq_[i & sq_mask_];
    if (!x.started || !psn_le(x.first_psn, psn)) break;
    if (x.opcode == WrOpcode::kRead && !x.done) return x.first_psn - 1;
  }
  return psn;
}

void SoftQp::on_rc_ack(const WireHeader& h, uint64_t now) {
  ++dev_->counters_.acks_received;
  const auto syn = static_cast<AckSyndrome>(h.aux);
  if (psn_lt(peer_acked_psn_, h.psn) && psn_lt(h.psn, next_psn_)) {
    peer_acked_psn_ = h.psn;
  }
  const uint32_t ack = ack_point(h.psn);
  if (psn_lt(acked_psn_, ack) && psn_lt(ack, next_psn_)) {
    acked_psn_ = ack;
    last_progress_ns_ = now;
    retries_ = 0;
    if (rtt_timing_ && psn_le(rtt_psn_, acked_psn_)) {
      rtt_timing_ = false;
      rtt_sample(now - rtt_sent_ns_);
    }
    if (syn == AckSyndrome::kAck) rnr_retries_ = 0;
  }
  // A NAK counts only when it is about a packet still outstanding (sent and
  // not acknowledged): a stale NAK, or one forged with a PSN outside the
  // window, is dropped and counted and changes nothing. This matters most
  // for the fatal syndromes, which move the QP to ERROR.
  const uint32_t about = h.aux2;
  const bool about_outstanding =
      psn_lt(acked_psn_, about) && psn_lt(about, next_psn_);
  if (syn != AckSyndrome::kAck && !about_outstanding) {
    ++dev_->counters_.drop_stale_ack;
    retire_rc(now);
    return;
  }
  switch (syn) {
    case AckSyndrome::kAck:
      break;
    case AckSyndrome::kNakSequence:
      rewind_to(about);
      break;
    case AckSyndrome::kNakRnr:
      if (cfg_.rc.rnr_retry != 7 && ++rnr_retries_ > cfg_.rc.rnr_retry) {
        retire_rc(now);
        if (sq_head_ != sq_tail_) {
          complete_send(sq_[sq_head_ & sq_mask_], WcStatus::kRnrRetryExceeded,
                        now);
          ++sq_head_;
        }
        to_error(now);
        return;
      }
      rnr_until_ns_ = now + rnr_delay_us(cfg_.rc.min_rnr_timer) * 1000;
      last_progress_ns_ = rnr_until_ns_;
      rewind_to(about);
      break;
    case AckSyndrome::kNakRemoteAccess:
    case AckSyndrome::kNakInvalid:
      retire_rc(now);
      if (sq_head_ != sq_tail_) {
        complete_send(sq_[sq_head_ & sq_mask_],
                      syn == AckSyndrome::kNakRemoteAccess
                          ? WcStatus::kRemoteAccessError
                          : WcStatus::kRemoteInvalidRequest,
                      now);
        ++sq_head_;
      }
      to_error(now);
      return;
  }
  retire_rc(now);
}

void SoftQp::on_read_resp(const WireHeader& h, const uint8_t* payload,
                          uint64_t now) {
  SoftCounters& c = dev_->counters_;
  SqEntry* e = nullptr;
  for (uint32_t i = sq_head_; i != sq_tail_; ++i) {
    SqEntry& x = sq_[i & sq_mask_];
    if (!x.started) break;
    if (x.opcode == WrOpcode::kRead && x.first_psn == h.psn) {
      e = &x;
      break;
    }
  }
  if (e == nullptr || e->done || h.msg_len != e->length) {
    ++c.drop_duplicate;
    return;
  }
  if (h.frag_offset != e->read_done) {
    ++c.drop_out_of_sequence;
    if (psn_lt(e->read_done, h.frag_offset) &&
        e->rerequested_at != e->read_done) {
      e->rerequested_at = e->read_done;  // a response fragment was lost
      rewind_to(e->first_psn);
    }
    return;
  }
  RecvEntry view;
  view.num_sge = e->num_sge;
  std::copy(e->sge, e->sge + e->num_sge, view.sge);
  bool bad = false;
  if (h.payload_len > 0 &&
      !place_sges(view, h.frag_offset, payload, h.payload_len, &h, &bad)) {
    if (bad) {  // local buffer deregistered while the READ ran
      e->status = WcStatus::kLocalProtectionError;
      to_error(now);
      return;
    }
    ++c.drop_bad_crc;
    return;
  }
  e->read_done += h.payload_len;
  if (psn_lt(acked_psn_, h.psn - 1)) acked_psn_ = h.psn - 1;
  last_progress_ns_ = now;
  retries_ = 0;
  if (e->read_done >= e->length && (h.flags & kFlagLast)) {
    e->done = true;
    if (psn_lt(acked_psn_, h.psn)) acked_psn_ = h.psn;
    // What the responder acknowledged behind this READ counts now.
    const uint32_t behind = ack_point(peer_acked_psn_);
    if (psn_lt(acked_psn_, behind) && psn_lt(behind, next_psn_)) {
      acked_psn_ = behind;
    }
    retire_rc(now);
  }
}

}  // namespace uccl::transport::udp
