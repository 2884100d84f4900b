// Software NIC QP receive side: UC and UD packets, placing fragments into
// receive buffers or memory regions, completing messages.

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "transport/udp/soft_qp_ops.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace uccl::transport::udp {

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
    if (!guard_admits(h)) return nullptr;  // staged: on_uc() drops it
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

// A first fragment starts a message (one still open is abandoned).
void SoftQp::begin_message(WireOp op, const WireHeader& h) {
  if (msg_.active) abort_message();
  msg_.active = true;
  msg_.op = op;
  msg_.msg_len = h.msg_len;
  msg_.next_offset = 0;
  msg_.imm = h.imm_data;
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
  if (h.flags & kFlagAck) {  // the peer's ACK for our requests, carried
    WireHeader a = h;
    a.opcode = static_cast<uint8_t>(WireOp::kAck);
    a.psn = h.aux2;
    a.aux = static_cast<uint32_t>(AckSyndrome::kAck);
    a.aux2 = 0;
    ++dev_->counters_.acks_carried_received;
    on_rc_ack(a, now);
    if (state_ == QpState::kError) return;
  }
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
  wc.timestamp_ns = dev_->arrival_ns(now);
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
  grh[7] = static_cast<uint8_t>(dev_->rx_ttl() >= 0 ? dev_->rx_ttl() : 64);
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
    const uint64_t dst = h.remote_addr + h.frag_offset;
    // Placed directly: the guard admitted it at the peek (direct_dst), and
    // nothing has run on this thread since.
    const bool direct = payload == reinterpret_cast<const uint8_t*>(dst);
    // A copy of bytes the QP's owner has accounted (QpConfig::rx_guard).
    if (!direct && !guard_admits(h)) {
      ++c.drop_refused;
      cfg_.rx_guard->refused(qpn_, guarded(h));
      return false;
    }
    if (h.payload_len == 0) return true;
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
    if (!direct) {
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
  wc.timestamp_ns = dev_->arrival_ns(now);  // the last fragment's
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
    begin_message(op, h);
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

}  // namespace uccl::transport::udp
