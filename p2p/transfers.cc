// p2p transfers: two-sided ones go through the connection's striped group
// (parts of stripe_bytes, part j on engine connection j); one-sided ones are
// cut evenly over the engine connections. Handles index a fixed pool.
#include <chrono>
#include <numeric>
#include <thread>

#include "p2p/p2p_impl.h"
#include "util/clock.h"

namespace uccl::p2p {
size_t one_sided_stripe(size_t len, int k, size_t min_part) {
  constexpr size_t kAlign = 4096;
  size_t s = (len + k - 1) / k;
  s = (s + kAlign - 1) / kAlign * kAlign;
  return std::max(s, min_part);
}

Result<uint32_t> Endpoint::Impl::take_slot() {
  if (free_slots.empty()) {
    return ResourceExhausted("too many transfers outstanding (" +
                             std::to_string(num_slots) + ")");
  }
  const uint32_t s = free_slots.back();
  free_slots.pop_back();
  Xfer& x = slots[s];
  x.in_use = true;
  x.posted = false;
  x.owned = false;
  x.error = Status::OK();
  x.nreqs = 0;
  x.parent = x.first_child = x.next_child = kNoSlot;
  x.moved = 0;
  x.device = x.segmented = x.notify = false;
  if (++x.gen == 0) x.gen = 1;
  return s;
}

void Endpoint::Impl::free_slot(uint32_t s) {
  Xfer& x = slots[s];
  if (x.owned && !x.segmented && x.sreq.finishing()) {
    // Done for the caller, parts still out: the handle is spent (new
    // generation), the slot stays taken until the group lets it go.
    if (++x.gen == 0) x.gen = 1;
    finishing_slots.push_back(s);
    return;
  }
  x.in_use = false;
  free_slots.push_back(s);
}

void Endpoint::Impl::reap_finishing() {
  for (size_t i = 0; i < finishing_slots.size();) {
    Xfer& x = slots[finishing_slots[i]];
    if (!conns[x.conn].striped->reusable(&x.sreq)) {
      ++i;
      continue;
    }
    x.in_use = false;
    free_slots.push_back(finishing_slots[i]);
    finishing_slots[i] = finishing_slots.back();
    finishing_slots.pop_back();
  }
  for (size_t i = 0; i < finishing_segs.size();) {
    SegCtx& g = segs[finishing_segs[i]];
    if (!conns[g.conn].striped->reusable(&g.sreq)) {
      ++i;
      continue;
    }
    free_segs.push_back(finishing_segs[i]);
    finishing_segs[i] = finishing_segs.back();
    finishing_segs.pop_back();
  }
}

Result<Xfer*> Endpoint::Impl::xfer_of(XferHandle h, uint32_t* slot) {
  *slot = static_cast<uint32_t>(h);
  if (*slot >= num_slots || !slots[*slot].in_use ||
      slots[*slot].parent != kNoSlot ||
      slots[*slot].gen != static_cast<uint32_t>(h >> 32)) {
    return InvalidArgument("unknown or spent transfer handle");
  }
  return &slots[*slot];
}

Status Endpoint::Impl::post_unposted(P2pConn* pc) {
  post_queue(&pc->unposted[0], pc);
  post_queue(&pc->unposted[1], pc);
  return Status::OK();
}

void Endpoint::Impl::enqueue(SlotFifo* q, uint32_t s) {
  slots[s].next_queued = SlotFifo::kEnd;
  if (q->empty()) {
    q->head = s;
  } else {
    slots[q->tail].next_queued = s;
  }
  q->tail = s;
}

void Endpoint::Impl::post_queue(SlotFifo* q, P2pConn* pc) {
  auto pop = [&] {
    q->head = slots[q->head].next_queued;
    if (q->head == SlotFifo::kEnd) q->tail = SlotFifo::kEnd;
  };
  while (!q->empty()) {
    Xfer& x = slots[q->head];
    if (x.segmented) {
      if (!post_segments(q->head, pc)) break;
      x.posted = true;
      pop();
      continue;
    }
    bool taken = false;
    Status st =
        x.kind == XferKind::kSend
            ? pc->striped->send(&x.sreq, x.data, x.len, x.mh, 0, &taken)
            : pc->striped->recv(&x.sreq, x.data, x.len, x.mh, 0, &taken);
    if (st.ok() && !taken) break;  // the group takes it later
    x.posted = true;
    x.owned = st.ok();
    x.error = st;
    pop();
  }
}

Result<uint32_t> Endpoint::Impl::new_xfer(XferKind kind, ConnHandle c, MrId mr,
                                          const void* data, size_t len,
                                          P2pConn** pc) {
  UCCL_ASSIGN_OR_RETURN(*pc, conn_of(c));
  if ((*pc)->closed) return InvalidArgument("connection closed");
  // An empty buffer has no address of its own (torch gives an empty
  // tensor none): it stands at the start of its registration.
  if (len == 0) {
    auto it = mrs.find(mr);
    if (it != mrs.end()) data = reinterpret_cast<const void*>(it->second.addr);
  }
  UCCL_ASSIGN_OR_RETURN(MrHandle * mh, region_of(mr, data, len));
  const bool device = mh == nullptr;
  UCCL_ASSIGN_OR_RETURN(uint32_t s, take_slot());
  Xfer& x = slots[s];
  x.kind = kind;
  x.conn = c;
  x.data = static_cast<uint8_t*>(const_cast<void*>(data));
  x.len = len;
  x.mh = mh;
  x.mr = mr;
  x.device = device;
  start_segmented(s, *pc);
  return s;
}

Result<XferHandle> Endpoint::Impl::post_two_sided(XferKind kind, ConnHandle c,
                                                  MrId mr, const void* data,
                                                  size_t len) {
  std::lock_guard<std::mutex> lock(mu);
  P2pConn* pc = nullptr;
  UCCL_ASSIGN_OR_RETURN(uint32_t s, new_xfer(kind, c, mr, data, len, &pc));
  enqueue(&pc->unposted[kind == XferKind::kRecv], s);
  UCCL_RETURN_IF_ERROR(post_unposted(pc));
  return handle_of(slots[s], s);
}

Status check_remote(const RegionDesc& remote, uint64_t remote_offset,
                    size_t len) {
  if (remote.magic != RegionDesc::kMagic) {
    return InvalidArgument("not a region descriptor");
  }
  if (remote_offset > remote.region.len ||
      len > remote.region.len - remote_offset) {
    return OutOfRange("range outside the peer's advertised region");
  }
  return Status::OK();
}

Status Endpoint::Impl::post_parts_one_sided(uint32_t s, P2pConn* pc,
                                            const RegionDesc& remote,
                                            uint64_t remote_offset) {
  Xfer& x = slots[s];
  x.posted = true;
  const int k = static_cast<int>(pc->conns.size());
  const size_t stripe = one_sided_stripe(x.len, k, pc->stripe_bytes / 4);
  for (int j = 0; j < k; ++j) {
    size_t off = 0, n = 0;
    stripe_part(x.len, j, k, stripe, &off, &n);
    if (n == 0) continue;
    Request* r = &x.reqs[x.nreqs];
    Status st =
        x.kind == XferKind::kWrite
            ? ep->write_async(pc->conns[j], x.data + off, n, x.mh,
                              remote.region, remote_offset + off, r, x.notify)
            : ep->read_async(pc->conns[j], x.data + off, n, x.mh, remote.region,
                             remote_offset + off, r);
    if (!st.ok()) {
      if (x.nreqs == 0) return st;
      x.error = st;  // the parts posted finish first, then this is reported
      break;
    }
    ++x.nreqs;
    x.owned = true;
    if (x.notify) ++pc->notified_sent_each[j];
  }
  return Status::OK();
}

Status Endpoint::Impl::post_one_sided_slot(uint32_t s, P2pConn* pc,
                                           const RegionDesc& remote,
                                           uint64_t remote_offset) {
  Xfer& x = slots[s];
  if (!x.segmented) return post_parts_one_sided(s, pc, remote, remote_offset);
  // Device memory: segments through the staging buffers, made and posted
  // as buffers come free (progress_segments).
  x.remote = remote.region;
  x.remote_off = remote_offset;
  x.owned = true;
  if (post_segments(s, pc)) x.posted = true;
  return Status::OK();
}

Result<XferHandle> Endpoint::Impl::post_one_sided(
    XferKind kind, ConnHandle c, MrId mr, void* local, size_t len,
    const RegionDesc& remote, uint64_t remote_offset, bool notify) {
  UCCL_RETURN_IF_ERROR(check_remote(remote, remote_offset, len));
  std::lock_guard<std::mutex> lock(mu);
  P2pConn* pc = nullptr;
  if (notify && len > 0) {
    UCCL_ASSIGN_OR_RETURN(MrHandle * mh, region_of(mr, local, len));
    if (mh == nullptr) {
      return NotSupported(
          "a notifying write goes from memory the NIC reaches (device memory "
          "here moves in segments through staging buffers)");
    }
  }
  UCCL_ASSIGN_OR_RETURN(uint32_t s, new_xfer(kind, c, mr, local, len, &pc));
  slots[s].notify = notify;
  Status st = post_one_sided_slot(s, pc, remote, remote_offset);
  if (!st.ok()) {
    free_slot(s);
    return st;
  }
  return handle_of(slots[s], s);
}

Result<XferHandle> Endpoint::send_async(ConnHandle c, MrId mr, const void* data,
                                        size_t len) {
  return impl_->post_two_sided(XferKind::kSend, c, mr, data, len);
}

Result<XferHandle> Endpoint::recv_async(ConnHandle c, MrId mr, void* data,
                                        size_t capacity) {
  return impl_->post_two_sided(XferKind::kRecv, c, mr, data, capacity);
}

Result<XferHandle> Endpoint::write_async(ConnHandle c, MrId mr, const void* src,
                                         size_t len, const RegionDesc& dst,
                                         uint64_t dst_offset, bool notify) {
  return impl_->post_one_sided(XferKind::kWrite, c, mr, const_cast<void*>(src),
                               len, dst, dst_offset, notify);
}

Result<uint64_t> Endpoint::notified_parts_sent(ConnHandle c) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  return std::accumulate(pc->notified_sent_each.begin(),
                         pc->notified_sent_each.end(), uint64_t{0});
}

static_assert(WriteMark::kMaxParts >= static_cast<uint32_t>(kMaxStripes),
              "a mark holds a part count per engine connection");

Result<WriteMark> Endpoint::notified_mark(ConnHandle c) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  WriteMark m;
  if (pc->notified_sent_each.size() > WriteMark::kMaxParts) {
    return Internal("more engine connections than a mark holds");
  }
  m.n = static_cast<uint32_t>(pc->notified_sent_each.size());
  for (uint32_t j = 0; j < m.n; ++j) m.parts[j] = pc->notified_sent_each[j];
  return m;
}

Result<bool> Endpoint::landed(ConnHandle c, const WriteMark& mark) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  if (mark.n != pc->conns.size() || mark.reserved != 0) {
    return InvalidArgument("write mark of " + std::to_string(mark.n) +
                           " parts for a connection of " +
                           std::to_string(pc->conns.size()));
  }
  for (uint32_t j = 0; j < mark.n; ++j) {
    // Each engine connection counts its parts in sequence order.
    UCCL_ASSIGN_OR_RETURN(uint64_t k, impl_->ep->writes_landed(pc->conns[j]));
    if (k < mark.parts[j]) return false;
  }
  return true;
}

Result<uint64_t> Endpoint::notified_parts_landed(ConnHandle c) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  uint64_t n = 0;
  for (ConnId id : pc->conns) {
    UCCL_ASSIGN_OR_RETURN(uint64_t k, impl_->ep->writes_landed(id));
    n += k;
  }
  return n;
}

Result<XferHandle> Endpoint::read_async(ConnHandle c, MrId mr, void* dst,
                                        size_t len, const RegionDesc& src,
                                        uint64_t src_offset) {
  return impl_->post_one_sided(XferKind::kRead, c, mr, dst, len, src,
                               src_offset);
}

Result<bool> Endpoint::Impl::poll_locked(uint32_t slot, size_t* bytes) {
  Xfer& x = slots[slot];
  if (x.kind == XferKind::kVec) return poll_vec(slot, bytes);
  size_t moved = 0;
  if (x.kind == XferKind::kSend || x.kind == XferKind::kRecv) {
    P2pConn& pc = conns[x.conn];
    if (!seg_active.empty()) progress_segments();
    if (!finishing_slots.empty() || !finishing_segs.empty()) reap_finishing();
    UCCL_RETURN_IF_ERROR(post_unposted(&pc));
    if (x.segmented) return poll_segmented(slot, bytes);
    if (!x.posted) return false;
    if (x.owned) {
      bool done = false;
      Status st = pc.striped->test(&x.sreq, &done, &moved);
      if (!done) return false;
      x.error = st;
    }
  } else if (x.segmented) {
    progress_segments();
    return poll_segmented(slot, bytes);
  } else {
    for (int j = 0; j < x.nreqs; ++j) {
      if (!x.reqs[j].done()) return false;
    }
    for (int j = 0; j < x.nreqs; ++j) {
      if (x.error.ok() && !x.reqs[j].status().ok())
        x.error = x.reqs[j].status();
      moved += x.reqs[j].size(0);
    }
  }
  return finish_xfer(slot, moved, bytes);
}

Result<bool> Endpoint::Impl::finish_xfer(uint32_t slot, size_t moved,
                                         size_t* bytes) {
  Status st = slots[slot].error;
  free_slot(slot);
  if (!st.ok()) return st;
  if (bytes != nullptr) *bytes = moved;
  return true;
}

Result<bool> Endpoint::poll(XferHandle h, size_t* bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  uint32_t slot;
  UCCL_RETURN_IF_ERROR(impl_->xfer_of(h, &slot).status());
  return impl_->poll_locked(slot, bytes);
}

Status Endpoint::wait(XferHandle h, int timeout_ms, size_t* bytes) {
  // Spin first (a reply a few microseconds away is seen at once), then give
  // the core away per poll, then sleep between polls of a long transfer.
  constexpr uint64_t kSpinNs = 50000, kYieldNs = 2000000;
  const uint64_t start = monotonic_ns();
  const uint64_t deadline =
      start + static_cast<uint64_t>(std::max(timeout_ms, 0)) * 1000000;
  for (;;) {
    UCCL_ASSIGN_OR_RETURN(bool done, poll(h, bytes));
    if (done) return Status::OK();
    const uint64_t now = monotonic_ns();
    if (now > deadline) {
      return TimedOut("transfer not done in " + std::to_string(timeout_ms) +
                      " ms");
    }
    if (now - start < kSpinNs) continue;
    if (now - start < kYieldNs) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace uccl::p2p
