// Software NIC QP transmit side: fragmenting posted work into packets,
// RC acknowledgements and NAKs, READ responses, the retransmit timer.

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "transport/udp/soft_qp_ops.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace uccl::transport::udp {

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
  if (nak_pending_ || ack_pending_) ack_held_until_ns_ = 0;  // covered
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
    if (e.tagged) {
      h.flags |= kFlagTagged;
      h.aux = e.guard_tag;
    }
    if (off + frag == e.length) {
      h.flags |= kFlagLast;
      if (type_ == QpType::kRC) h.flags |= kFlagAckReq;
    }
    if (type_ == QpType::kRC && (h.psn & 15) == 0) h.flags |= kFlagAckReq;
    if (type_ == QpType::kRC && ack_held_until_ns_ != 0) {
      h.flags |= kFlagAck;  // the held ACK rides back on this request
      h.aux2 = epsn_ - 1;
      ack_held_until_ns_ = 0;
      ++dev_->counters_.acks_carried;
    } else if (type_ == QpType::kRC && !hold_acks_ &&
               cfg_.rc.ack_delay_ns > 0 &&
               now - last_ack_req_ns_ < cfg_.rc.ack_delay_ns) {
      hold_acks_ = true;  // a reply within the delay: holding pays again
    }
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
    base = std::max(min_rto_ns_, srtt_ns_ + 4 * rttvar_ns_);
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

}  // namespace uccl::transport::udp
