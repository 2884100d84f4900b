// p2p vectored transfers: one handle whose slices are ordinary transfers
// (children in the same pool), checked together before any is posted.
#include <string>

#include "p2p/p2p_impl.h"

namespace uccl::p2p {

Result<XferHandle> Endpoint::Impl::post_vec(
    XferKind kind, ConnHandle c, const std::vector<IoSlice>& v,
    const std::vector<RemoteSlice>* remote) {
  if (v.empty() || v.size() > kMaxSlices) {
    return InvalidArgument("a vectored transfer takes 1 to " +
                           std::to_string(kMaxSlices) + " slices, not " +
                           std::to_string(v.size()));
  }
  if (remote != nullptr) {
    if (remote->size() != v.size()) {
      return InvalidArgument(std::to_string(v.size()) + " local slices but " +
                             std::to_string(remote->size()) + " remote ones");
    }
    for (size_t i = 0; i < v.size(); ++i) {
      UCCL_RETURN_IF_ERROR(
          check_remote((*remote)[i].region, (*remote)[i].offset, v[i].len));
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, conn_of(c));
  if (pc->closed) return InvalidArgument("connection closed");
  for (const IoSlice& sl : v) {
    UCCL_RETURN_IF_ERROR(region_of(sl.mr, sl.data, sl.len).status());
  }
  if (free_slots.size() < v.size() + 1) {
    return ResourceExhausted("too many transfers outstanding for " +
                             std::to_string(v.size()) + " more slices");
  }
  // Nothing below fails before every slice is a child: a slice the
  // engines refuse is a child done with that error.
  const uint32_t p = take_slot().value();
  slots[p].kind = XferKind::kVec;
  slots[p].conn = c;
  slots[p].posted = true;
  uint32_t* link = &slots[p].first_child;
  for (size_t i = 0; i < v.size(); ++i) {
    P2pConn* unused = nullptr;
    const uint32_t s =
        new_xfer(kind, c, v[i].mr, v[i].data, v[i].len, &unused).value();
    slots[s].parent = p;
    *link = s;
    link = &slots[s].next_child;
    if (remote == nullptr) {
      enqueue(&pc->unposted[kind == XferKind::kRecv], s);
      continue;
    }
    Status st =
        post_one_sided_slot(s, pc, (*remote)[i].region, (*remote)[i].offset);
    if (!st.ok()) slots[s].error = st;
  }
  if (remote == nullptr) UCCL_RETURN_IF_ERROR(post_unposted(pc));
  return handle_of(slots[p], p);
}

Result<bool> Endpoint::Impl::poll_vec(uint32_t slot, size_t* bytes) {
  Xfer& x = slots[slot];
  uint32_t* link = &x.first_child;
  while (*link != kNoSlot) {
    const uint32_t child = *link;
    const uint32_t next = slots[child].next_child;
    size_t n = 0;
    Result<bool> r = poll_locked(child, &n);  // frees the child once done
    if (!r.ok()) {
      if (x.error.ok()) x.error = r.status();
    } else if (*r) {
      x.moved += n;
    } else {
      link = &slots[child].next_child;
      continue;
    }
    *link = next;
  }
  if (x.first_child != kNoSlot) return false;
  return finish_xfer(slot, x.moved, bytes);
}

Result<XferHandle> Endpoint::sendv_async(ConnHandle c,
                                         const std::vector<IoSlice>& msgs) {
  return impl_->post_vec(XferKind::kSend, c, msgs, nullptr);
}

Result<XferHandle> Endpoint::recvv_async(ConnHandle c,
                                         const std::vector<IoSlice>& bufs) {
  return impl_->post_vec(XferKind::kRecv, c, bufs, nullptr);
}

Result<XferHandle> Endpoint::writev_async(ConnHandle c,
                                          const std::vector<IoSlice>& src,
                                          const std::vector<RemoteSlice>& dst) {
  return impl_->post_vec(XferKind::kWrite, c, src, &dst);
}

Result<XferHandle> Endpoint::readv_async(ConnHandle c,
                                         const std::vector<IoSlice>& dst,
                                         const std::vector<RemoteSlice>& src) {
  return impl_->post_vec(XferKind::kRead, c, dst, &src);
}

}  // namespace uccl::p2p
