// Engine receive path: chunk completions in CSN order, receive buffers and
// their completion, posted receives (descriptors to the peer), ACKs.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "util/logging.h"

namespace uccl::engine {

using transport::RecvWr;
using transport::SendWr;
using transport::Sge;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WorkCompletion;
using transport::WrOpcode;

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

UcclRDMAEngine::Conn* UcclRDMAEngine::live_conn(const QpnEntry* e) const {
  Conn* c = conns_[e->conn].get();
  return c && c->established && !c->failed ? c : nullptr;
}

// The engine tags every chunk with its whole CSN (post_chunk), which the
// software NIC carries beside the immediate: a tag whose low bits are not
// the immediate's CSN was not sent by a peer engine.
static bool tag_contradicts(const transport::RxGuard::Fragment& f,
                            const Imm& i) {
  return f.tagged && (f.tag & (Imm::kCsnSpace - 1)) != i.csn;
}

// Runs inside the device's progress, on this engine's thread: the window
// it reads is the one on_chunk() updates, and a chunk is accounted only
// after every fragment of its first copy is in place. So a copy refused
// here is one whose bytes are there already, and from the moment the
// sender can have seen an ACK for it, no copy is placed again. With the
// whole CSN (tagged), also a copy older than the immediate's CSN space.
bool UcclRDMAEngine::ChunkGuard::admits(uint32_t qpn, const Fragment& f) const {
  const Imm i = Imm::decode(f.imm);
  if (tag_contradicts(f, i)) return false;
  const QpnEntry* e = e_->qpn_get(qpn);
  const Conn* c = chunk_qp(e, i.flow) ? e_->live_conn(e) : nullptr;
  return c != nullptr &&
         !c->rx.win.holds_csn(f.tagged ? f.tag : c->rx.win.extend(i.csn));
}

void UcclRDMAEngine::ChunkGuard::refused(uint32_t qpn, const Fragment& f) {
  const Imm i = Imm::decode(f.imm);
  const QpnEntry* e = e_->qpn_get(qpn);
  if (!chunk_qp(e, i.flow) || tag_contradicts(f, i)) {
    ++e_->protocol_errors_;  // as on_chunk() counts a chunk for no flow
    return;
  }
  Conn* c = e_->live_conn(e);
  if (c == nullptr) return;  // closed or failed: on_chunk() ignores it too
  const uint32_t csn = f.tagged ? f.tag : c->rx.win.extend(i.csn);
  c->rx.win.refused(csn, e_->clock_->now_ns());  // ACKed in the loop
  e_->activate(c);
}

void UcclRDMAEngine::on_chunk(const WorkCompletion& wc, uint64_t now) {
  const Imm imm = Imm::decode(wc.imm_data);
  const QpnEntry* e = qpn_get(wc.qp_num);
  if (!chunk_qp(e, imm.flow)) {
    ++protocol_errors_;
    return;
  }
  Conn* c = live_conn(e);
  if (c == nullptr) return;
  activate(c);
  RxFlow& rx = c->rx;
  const RxChunkInfo info{true,
                         imm.last,
                         imm.trunc,
                         imm.onesided,
                         imm.eager,
                         static_cast<uint8_t>(imm.slot),
                         static_cast<uint8_t>(imm.buf),
                         wc.byte_len};
  uint32_t csn;
  if (!rx.win.arrive(imm.csn, info, arrived_ns(wc, now), now, &csn,
                     busy_from_ns(wc, now))) {
    return;  // a duplicate: counted, and ACKed at once
  }
  trace("rx", c->index, csn, now);
  VLOG(kVlogChunk) << "conn " << c->index << " rx csn " << csn << " slot "
                   << imm.slot << " len " << wc.byte_len
                   << (imm.last ? " last" : "") << " cum " << rx.win.rcv_cum();
  RxChunkInfo done;
  while (rx.win.next_in_order(&done)) account_chunk(c, done);
  // A hole, or ack_every chunks: ACK now. A completed message's ACK waits
  // for the loop's pass over the connections, so every message completed
  // in one receive batch shares one ACK (each is a loopback datagram of
  // ~1.5 us on the engine's thread).
  if (rx.win.ack_at_once()) maybe_send_ack(c, now, false);
}

void UcclRDMAEngine::account_chunk(Conn* c, const RxChunkInfo& info) {
  if (info.onesided) {
    // Accounted in sequence order: the write's earlier chunks (lower
    // CSNs) are all in place, so every byte of it has landed.
    if (info.last)
      c->rec->writes_landed.fetch_add(1, std::memory_order_release);
    return;
  }
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
  rx.win.message_done();
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
  fill_cc(c, &RequestAccess::cc(s.req));
  trace_now("recv_done", c->index, rx.win.rcv_cum());
  RequestAccess::complete(s.req, std::move(st));
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

void UcclRDMAEngine::send_held_acks(uint64_t now) {
  bool sent = false;
  for (const uint32_t i : active_) {
    Conn* c = conns_[i].get();
    if (c->rx.win.quiet()) continue;
    maybe_send_ack(c, now, true);
    sent = true;
  }
  if (sent && cfg_.drive_nic) dev_->flush();  // before the core is given away
}

void UcclRDMAEngine::maybe_send_ack(Conn* c, uint64_t now, bool force) {
  RxFlow& rx = c->rx;
  if (!c->established || c->failed) return;
  const bool new_credit = rx.credit_granted != rx.credit_acked;
  if (!rx.win.should_ack(now, force, new_credit)) return;
  if (new_credit && !force &&
      wire_fault_.load(std::memory_order_relaxed) ==
          static_cast<uint32_t>(WireFault::kLoseGrantAcks) &&
      !rx.win.should_ack(now, false, false)) {
    rx.win.ack_sent();  // test hook: sent, and lost on the way
    rx.credit_acked = rx.credit_granted;
    return;
  }
  AckPacket a;
  std::memset(&a, 0, sizeof(a));
  a.magic = kAckMagic;
  a.flow_id = c->peer_flow;
  rx.win.fill_ack(&a, now);
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
  rx.win.ack_sent();
  rx.credit_acked = rx.credit_granted;
  ++rx.acks_tx;
}

}  // namespace uccl::engine
