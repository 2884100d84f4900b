// The null NIC: in-process verbs objects that deliver immediates and control
// SENDs through a lock-free queue per device and move no payload.
#include "transport/null/null_nic.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <sstream>

namespace uccl::transport::nullnic {

namespace {

using soft::MrTable;
using soft::RecvEntry;
using soft::RecvRing;
using soft::RingCq;
using soft::SoftPd;
using soft::SoftSrq;

// Process-wide table of open null devices (control path only).
struct Registry {
  std::mutex mu;
  std::unordered_map<uint16_t, std::weak_ptr<Port>> ports;
  uint16_t next = 1;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: devices may close
  return *r;                            // during static destruction
}

// Counters have one writer (the thread driving the device); readers on other
// threads see a recent value. No locked instruction on the datapath.
void bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

uint32_t loopback_be() { return htonl(0x7f000001); }

}  // namespace

std::shared_ptr<Port> find_port(uint16_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.ports.find(id);
  return it == r.ports.end() ? nullptr : it->second.lock();
}

// ---------------------------------------------------------------------- QP

NullQp::NullQp(NullDevice* dev, const QpConfig& cfg, uint32_t qpn)
    : dev_(dev), cfg_(cfg) {
  type_ = cfg.type;
  qpn_ = qpn;
  if (cfg.srq == nullptr) {
    rq_ = std::make_unique<RecvRing>(cfg.max_recv_wr, cfg.max_recv_sge);
  }
}

NullQp::~NullQp() { dev_->remove_qp(qpn_); }

QpInfo NullQp::local_info() const {
  QpInfo q;
  q.addr = dev_->port_address();
  q.qpn = qpn_;
  q.psn = 0;
  q.mtu_bytes = dev_->info_.mtu_bytes;
  q.type = type_;
  return q;
}

Status NullQp::connect(const QpInfo& remote) {
  if (type_ == QpType::kUD) {
    return InvalidArgument("connect: UD QPs are activated, not connected");
  }
  if (state_ != QpState::kReset) {
    return InvalidArgument(std::string("connect: QP is ") +
                           qp_state_name(state_));
  }
  if (remote.type != type_) {
    return InvalidArgument(std::string("connect: peer QP is ") +
                           qp_type_name(remote.type) + ", this one " +
                           qp_type_name(type_));
  }
  std::shared_ptr<Port> p = find_port(remote.addr.udp_port);
  if (!p) {
    return NotFound("connect: no null device with port id " +
                    std::to_string(remote.addr.udp_port) +
                    " in this process (the null NIC is in-process only)");
  }
  peer_ = std::move(p);
  peer_port_id_ = remote.addr.udp_port;
  peer_qpn_ = remote.qpn;
  state_ = QpState::kRts;
  return Status::OK();
}

Status NullQp::activate() {
  if (type_ != QpType::kUD) {
    return InvalidArgument("activate: only UD QPs; connect UC/RC QPs");
  }
  state_ = QpState::kRts;
  return Status::OK();
}

Status NullQp::set_error() {
  state_ = QpState::kError;
  return Status::OK();
}

RecvRing& NullQp::recvs() {
  return rq_ ? *rq_ : static_cast<SoftSrq*>(cfg_.srq)->ring();
}

Status NullQp::post_recv(const RecvWr* wr, const RecvWr** bad_wr) {
  if (cfg_.srq != nullptr) {
    if (bad_wr) *bad_wr = wr;
    return InvalidArgument("post_recv: QP takes receives from its SRQ");
  }
  return rq_->post(wr, bad_wr, &static_cast<SoftPd*>(cfg_.pd)->table());
}

Status NullQp::post_send(const SendWr* wr, const SendWr** bad_wr) {
  for (; wr != nullptr; wr = wr->next) {
    Status st = post_one(*wr);
    if (!st.ok()) {
      if (bad_wr) *bad_wr = wr;
      return st;
    }
  }
  return Status::OK();
}

// post_one()'s checks: QP state, opcode for the QP type, SGEs inside
// their regions, size limits. The payload's length, or why it is refused.
Result<uint64_t> NullQp::check_send(const SendWr& wr, bool is_send) const {
  if (state_ != QpState::kRts) {
    return InvalidArgument(std::string("post_send: QP is ") +
                           qp_state_name(state_));
  }
  if (type_ == QpType::kUD && !is_send) {
    return InvalidArgument("post_send: UD QPs only SEND");
  }
  if (type_ != QpType::kRC && wr.opcode == WrOpcode::kRead) {
    return InvalidArgument("post_send: READ needs an RC QP");
  }
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > cfg_.max_send_sge ||
      wr.num_sge > soft::kMaxSge) {
    return InvalidArgument("post_send: " + std::to_string(wr.num_sge) +
                           " SGEs > max_send_sge " +
                           std::to_string(cfg_.max_send_sge));
  }
  uint64_t len = 0;
  MrTable& mrs = static_cast<SoftPd*>(cfg_.pd)->table();
  for (int i = 0; i < wr.num_sge; ++i) {
    const Sge& s = wr.sg_list[i];
    len += s.length;
    if (wr.inline_data || s.length == 0) continue;
    const uint32_t need =
        wr.opcode == WrOpcode::kRead ? uint32_t{kAccessLocalWrite} : 0u;
    if (mrs.check(s.lkey, s.addr, s.length, need) != MrTable::Check::kOk) {
      return PermissionDenied("post_send: SGE " + std::to_string(i) +
                              " is not inside a region with its lkey");
    }
  }
  if (wr.inline_data && len > cfg_.max_inline_data) {
    return InvalidArgument("post_send: " + std::to_string(len) +
                           " inline bytes > max_inline_data " +
                           std::to_string(cfg_.max_inline_data));
  }
  if (is_send && len > kMaxSendBytes) {
    return InvalidArgument("post_send: the null NIC carries SENDs of up to " +
                           std::to_string(kMaxSendBytes) + " bytes, not " +
                           std::to_string(len));
  }
  if (len > 0x80000000ull) {
    return InvalidArgument("post_send: message larger than 2 GiB");
  }
  return len;
}

// Queues a SEND or an immediate on `dest`'s inbound queue (payload copied
// for SENDs). A peer that is gone fails an RC QP (*status), like a silent
// peer on real RC; a full queue refuses the post.
Status NullQp::deliver(const SendWr& wr, Port* dest, uint64_t len, bool is_send,
                       WcStatus* status) {
  Packet p;
  p.dst_qpn = type_ == QpType::kUD ? wr.remote_qpn : peer_qpn_;
  p.src_qpn = qpn_;
  p.src_port = dev_->port_->id;
  p.op = wr.opcode == WrOpcode::kWriteWithImm  ? PktOp::kWriteImm
         : wr.opcode == WrOpcode::kSendWithImm ? PktOp::kSendImm
                                               : PktOp::kSend;
  p.src_type = type_;
  p.imm = wr.imm_data;
  p.len = static_cast<uint32_t>(len);
  p.rkey = wr.rkey;
  p.qkey = wr.remote_qkey;
  p.remote_addr = wr.remote_addr;
  if (is_send) {
    uint32_t off = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      const Sge& s = wr.sg_list[i];
      if (s.length == 0) continue;
      std::memcpy(p.payload + off, reinterpret_cast<const void*>(s.addr),
                  s.length);
      off += s.length;
    }
  }
  if (!dest->open.load(std::memory_order_acquire)) {
    bump(dev_->c_.tx_peer_gone);
    if (type_ == QpType::kRC) {
      *status = WcStatus::kRetryExceeded;
      state_ = QpState::kError;
    }
  } else if (!dest->queue.bounded_push(p)) {
    bump(dev_->c_.tx_queue_full);
    return ResourceExhausted("post_send: peer's inbound queue full");
  } else {
    bump(dev_->c_.tx_packets);
  }
  return Status::OK();
}

Status NullQp::post_one(const SendWr& wr) {
  const bool is_send =
      wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithImm;
  UCCL_ASSIGN_OR_RETURN(const uint64_t len, check_send(wr, is_send));
  RingCq* scq = static_cast<RingCq*>(cfg_.send_cq);
  if (wr.signaled && !scq->has_space()) {
    return ResourceExhausted("post_send: send CQ full");
  }
  Port* dest = peer_.get();
  if (type_ == QpType::kUD) {
    if (wr.ah == nullptr) return InvalidArgument("post_send: UD without AH");
    dest = static_cast<NullAh*>(wr.ah)->port();
  }
  WcStatus status = WcStatus::kSuccess;
  if (wr.opcode != WrOpcode::kRead && wr.opcode != WrOpcode::kWrite) {
    UCCL_RETURN_IF_ERROR(deliver(wr, dest, len, is_send, &status));
  }
  if (wr.signaled || status != WcStatus::kSuccess) {
    WorkCompletion wc;
    wc.wr_id = wr.wr_id;
    wc.status = status;
    wc.opcode = is_send                        ? WcOpcode::kSend
                : wr.opcode == WrOpcode::kRead ? WcOpcode::kRead
                                               : WcOpcode::kWrite;
    wc.byte_len = static_cast<uint32_t>(len);
    wc.qp_num = qpn_;
    wc.timestamp_ns = dev_->clock_->now_ns();
    if (!scq->push(wc)) bump(dev_->c_.drop_cq_full);
  }
  return Status::OK();
}

// ------------------------------------------------------------------ Device

Result<std::unique_ptr<NullDevice>> NullDevice::open(
    const std::string& name, const DeviceOptions& opts) {
  std::unique_ptr<NullDevice> d(new NullDevice());
  d->clock_ = opts.clock ? opts.clock : SystemClock::get();
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> g(r.mu);
    for (uint32_t tries = 0; tries < 65535 && !d->port_; ++tries) {
      const uint16_t id = r.next;
      r.next = static_cast<uint16_t>(r.next == 65535 ? 1 : r.next + 1);
      auto it = r.ports.find(id);
      if (it != r.ports.end() && !it->second.expired()) continue;
      d->port_ = std::make_shared<Port>(id);
      r.ports[id] = d->port_;
    }
  }
  if (!d->port_) return ResourceExhausted("null NIC: 65535 devices open");
  d->held_.resize(kInboundDepth);
  DeviceInfo& i = d->info_;
  i.name = name;
  i.backend = "null";
  i.ip = "127.0.0.1";
  i.link_speed_mbps = kLinkSpeedMbps;
  i.link_speed_known = true;
  i.mtu_bytes = opts.mtu_bytes ? opts.mtu_bytes : 4096;
  i.wire_overhead_bytes = 0;
  i.active = true;
  return d;
}

NullDevice::~NullDevice() {
  port_->open.store(false, std::memory_order_release);
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.ports.find(port_->id);
  if (it != r.ports.end() && it->second.lock() == port_) r.ports.erase(it);
}

PortAddress NullDevice::port_address() const {
  PortAddress a;
  ipv4_to_gid(loopback_be(), a.gid);
  a.udp_port = port_->id;
  return a;
}

Result<std::unique_ptr<ProtectionDomain>> NullDevice::alloc_pd() {
  return std::unique_ptr<ProtectionDomain>(new SoftPd());
}

Result<std::unique_ptr<CompletionQueue>> NullDevice::create_cq(uint32_t cqe) {
  if (cqe == 0) return InvalidArgument("create_cq: zero entries");
  return std::unique_ptr<CompletionQueue>(new RingCq(this, cqe));
}

Result<std::unique_ptr<SharedReceiveQueue>> NullDevice::create_srq(
    ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) {
  auto* spd = dynamic_cast<SoftPd*>(pd);
  if (spd == nullptr) return InvalidArgument("create_srq: foreign PD");
  if (max_wr == 0) return InvalidArgument("create_srq: zero entries");
  return std::unique_ptr<SharedReceiveQueue>(
      new SoftSrq(spd, max_wr, std::max(max_sge, 1u)));
}

Result<std::unique_ptr<QueuePair>> NullDevice::create_qp(const QpConfig& cfg) {
  UCCL_RETURN_IF_ERROR(soft::check_qp_config(cfg, this));
  const uint32_t qpn = next_qpn_;
  next_qpn_ = next_qpn_ >= 0xFFFFFF ? 0x100 : next_qpn_ + 1;
  auto qp = std::make_unique<NullQp>(this, cfg, qpn);
  qps_[qpn] = qp.get();
  return std::unique_ptr<QueuePair>(std::move(qp));
}

Result<std::unique_ptr<AddressHandle>> NullDevice::create_ah(
    ProtectionDomain*, const PortAddress& dest) {
  std::shared_ptr<Port> p = find_port(dest.udp_port);
  if (!p) {
    return NotFound("create_ah: no null device with port id " +
                    std::to_string(dest.udp_port) + " in this process");
  }
  return std::unique_ptr<AddressHandle>(new NullAh(dest, std::move(p)));
}

uint32_t NullDevice::progress() {
  constexpr int kBatch = 64;
  uint32_t moved = 0;
  while (held_head_ != held_tail_) {
    if (!deliver(held_[held_head_ % kInboundDepth])) break;
    ++held_head_;
    ++moved;
  }
  Packet p;
  for (int n = 0; n < kBatch; ++n) {
    // Only take what could be held: RC order is kept by never passing a
    // held message.
    if (held_tail_ - held_head_ >= kInboundDepth) break;
    if (!port_->queue.pop(p)) break;
    bump(c_.rx_packets);
    ++moved;
    const bool rc = p.src_type == QpType::kRC;
    if (rc && held_head_ != held_tail_) {
      held_[held_tail_++ % kInboundDepth] = p;
      bump(c_.rnr_held);
    } else if (!deliver(p)) {
      held_[held_tail_++ % kInboundDepth] = p;
      bump(c_.rnr_held);
    }
  }
  return moved;
}

bool NullDevice::deliver(const Packet& p) {
  auto it = qps_.find(p.dst_qpn);
  if (it == qps_.end()) {
    bump(c_.drop_unknown_qp);
    return true;
  }
  NullQp* qp = it->second;
  if (qp->state_ != QpState::kRts && qp->state_ != QpState::kRtr) {
    bump(c_.drop_wrong_state);
    return true;
  }
  if (qp->type_ != p.src_type) {
    bump(c_.drop_unknown_qp);
    return true;
  }
  if (qp->type_ == QpType::kUD) {
    if (p.qkey != qp->cfg_.qkey) {
      bump(c_.drop_qkey);
      return true;
    }
  } else if (p.src_port != qp->peer_port_id_ || p.src_qpn != qp->peer_qpn_) {
    bump(c_.drop_unknown_qp);
    return true;
  }
  if (p.op == PktOp::kWriteImm && p.len > 0) {
    MrTable& mrs = static_cast<SoftPd*>(qp->cfg_.pd)->table();
    switch (mrs.check(p.rkey, p.remote_addr, p.len, kAccessRemoteWrite)) {
      case MrTable::Check::kOk:
        break;
      case MrTable::Check::kBadKey:
        bump(c_.drop_bad_rkey);
        return true;
      case MrTable::Check::kOutOfBounds:
        bump(c_.drop_out_of_bounds);
        return true;
      case MrTable::Check::kNoAccess:
        bump(c_.drop_no_access);
        return true;
    }
  }
  RecvRing& ring = qp->recvs();
  RingCq* rcq = static_cast<RingCq*>(qp->cfg_.recv_cq);
  if (ring.empty()) {
    if (qp->type_ == QpType::kRC) return false;
    bump(c_.drop_no_recv);
    return true;
  }
  if (!rcq->has_space()) {
    if (qp->type_ == QpType::kRC) return false;
    bump(c_.drop_cq_full);
    return true;
  }
  RecvEntry r;
  ring.pop(&r);
  WorkCompletion wc;
  wc.wr_id = r.wr_id;
  wc.qp_num = qp->qpn_;
  wc.src_qp = p.src_qpn;
  wc.imm_data = p.imm;
  wc.timestamp_ns = clock_->now_ns();
  if (p.op == PktOp::kWriteImm) {
    wc.opcode = WcOpcode::kRecvWriteImm;
    wc.with_imm = true;
    wc.byte_len = p.len;
  } else {
    const uint32_t grh = qp->type_ == QpType::kUD ? kGrhBytes : 0;
    wc.opcode = WcOpcode::kRecv;
    wc.with_imm = p.op == PktOp::kSendImm;
    wc.byte_len = p.len + grh;
    if (r.total_len < p.len + grh) {
      bump(c_.drop_recv_too_small);
      wc.status = WcStatus::kLocalLengthError;
      wc.byte_len = 0;
    } else {
      // Scatter [GRH][payload] over the receive's SGEs.
      static const uint8_t kZeroGrh[kGrhBytes] = {};
      const uint8_t* parts[2] = {kZeroGrh, p.payload};
      uint32_t part_len[2] = {grh, p.len};
      int part = 0;
      uint32_t part_off = 0;
      for (int s = 0; s < r.num_sge && part < 2; ++s) {
        uint8_t* dst = reinterpret_cast<uint8_t*>(r.sge[s].addr);
        uint32_t room = r.sge[s].length;
        while (room > 0 && part < 2) {
          const uint32_t n = std::min(room, part_len[part] - part_off);
          std::memcpy(dst, parts[part] + part_off, n);
          dst += n;
          room -= n;
          part_off += n;
          if (part_off == part_len[part]) {
            ++part;
            part_off = 0;
          }
        }
      }
    }
  }
  rcq->push(wc);
  return true;
}

std::string NullDevice::counters_text() const {
  std::ostringstream o;
  auto line = [&](const char* n, const std::atomic<uint64_t>& v) {
    o << n << " " << v.load(std::memory_order_relaxed) << "\n";
  };
  line("tx_packets", c_.tx_packets);
  line("rx_packets", c_.rx_packets);
  line("tx_queue_full", c_.tx_queue_full);
  line("tx_peer_gone", c_.tx_peer_gone);
  line("drop_unknown_qp", c_.drop_unknown_qp);
  line("drop_wrong_state", c_.drop_wrong_state);
  line("drop_bad_rkey", c_.drop_bad_rkey);
  line("drop_out_of_bounds", c_.drop_out_of_bounds);
  line("drop_no_access", c_.drop_no_access);
  line("drop_no_recv", c_.drop_no_recv);
  line("drop_recv_too_small", c_.drop_recv_too_small);
  line("drop_qkey", c_.drop_qkey);
  line("drop_cq_full", c_.drop_cq_full);
  line("rnr_held", c_.rnr_held);
  return o.str();
}

uint64_t NullDevice::drops() const {
  auto v = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  return v(c_.drop_unknown_qp) + v(c_.drop_wrong_state) + v(c_.drop_bad_rkey) +
         v(c_.drop_out_of_bounds) + v(c_.drop_no_access) + v(c_.drop_no_recv) +
         v(c_.drop_recv_too_small) + v(c_.drop_qkey) + v(c_.drop_cq_full);
}

}  // namespace uccl::transport::nullnic
