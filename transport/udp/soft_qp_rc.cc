// Software NIC RC responder and requester: in-order requests with
// sequence/RNR/access NAKs, cumulative ACKs, READ responses (verbs spec).

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "transport/udp/soft_qp_ops.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace uccl::transport::udp {

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
      begin_message(op, h);
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
    if (last || (h.flags & kFlagAckReq)) request_ack(last, now);
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

// An in-order request asked for an ACK: send one this round, or hold it
// (RcAttrs::ack_delay_ns) for the reply a completed message usually draws,
// which carries it (kFlagAck). A second request to ACK does not wait: both
// go in one ACK now, so a stream is acknowledged every other message.
// Holding is for exchanges (TCP's delayed-ACK "pingpong" mode): a held ACK
// whose time runs out (no reply came) stops it, so a one-way stream does
// not wait the delay per message; a request of ours that leaves within the
// delay of a message we acknowledged starts it again.
void SoftQp::request_ack(bool message_done, uint64_t now) {
  last_ack_req_ns_ = now;
  if (message_done && cfg_.rc.ack_delay_ns > 0 && hold_acks_ && !ack_pending_ &&
      ack_held_until_ns_ == 0) {
    ack_held_until_ns_ = now + cfg_.rc.ack_delay_ns;
    if (!in_acks_held_) {
      in_acks_held_ = true;
      dev_->acks_held_.push_back(this);
    }
    return;
  }
  ack_held_until_ns_ = 0;  // leaves acks_held_ at the device's next pass
  ack_pending_ = true;
  dev_->mark_pending(this);
}

// A held ACK whose time came: it goes this round.
void SoftQp::release_held_ack(uint64_t now) {
  if (ack_held_until_ns_ == 0 || now < ack_held_until_ns_) return;
  ack_held_until_ns_ = 0;
  hold_acks_ = false;  // no reply in time: ACK at once from now on
  ack_pending_ = true;
  dev_->mark_pending(this);
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
