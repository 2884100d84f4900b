// p2p notifications: small messages on a connection's own engine
// connection, beside its striped group. Each side keeps
// kNotifSlots receives posted and harvests them in posting order, which is
// the order the engine fills them in.
#include <cstring>

#include "p2p/p2p_impl.h"

namespace uccl::p2p {

Status Endpoint::Impl::post_notif_recv(P2pConn* pc, int slot) {
  void* data = pc->notif_buf.get() + slot * kMaxNotifBytes;
  size_t size = kMaxNotifBytes;
  int tag = kNotifTag;
  MrHandle* mh = pc->notif_mh;
  return ep->recv_async(pc->notif_conn, 1, &data, &size, &tag, &mh,
                        &pc->notif_reqs[slot]);
}

Status Endpoint::Impl::start_notifs(P2pConn* pc) {
  const size_t bytes = 2 * kNotifSlots * kMaxNotifBytes;
  pc->notif_buf.reset(new uint8_t[bytes]());
  pc->notif_reqs.reset(new Request[2 * kNotifSlots]);
  UCCL_ASSIGN_OR_RETURN(pc->notif_mh, ep->reg_mr(pc->notif_buf.get(), bytes));
  for (int i = 0; i < kNotifSlots; ++i) {
    UCCL_RETURN_IF_ERROR(post_notif_recv(pc, i));
  }
  return Status::OK();
}

Status Endpoint::send_notif(ConnHandle c, const std::string& data) {
  if (data.size() > kMaxNotifBytes) {
    return InvalidArgument("notification of " + std::to_string(data.size()) +
                           " bytes; at most " + std::to_string(kMaxNotifBytes));
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  UCCL_ASSIGN_OR_RETURN(P2pConn * pc, impl_->conn_of(c));
  if (pc->closed) return InvalidArgument("connection closed");
  const int slot = kNotifSlots + pc->notif_tx_next;
  Request* r = &pc->notif_reqs[slot];
  if (r->pending()) {
    return ResourceExhausted(
        "notifications in flight: the peer has not "
        "taken them (get_notifs)");
  }
  uint8_t* buf = pc->notif_buf.get() + slot * kMaxNotifBytes;
  std::memcpy(buf, data.data(), data.size());
  UCCL_RETURN_IF_ERROR(impl_->ep->send_async(pc->notif_conn, buf, data.size(),
                                             pc->notif_mh, r, kNotifTag));
  pc->notif_tx_next = (pc->notif_tx_next + 1) % kNotifSlots;
  return Status::OK();
}

std::vector<Notif> Endpoint::get_notifs() {
  std::vector<Notif> out;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [id, pc] : impl_->conns) {
    while (!pc.notif_rx_dead) {
      Request& r = pc.notif_reqs[pc.notif_rx_head];
      if (!r.done()) break;
      if (!r.status().ok()) {  // the connection is gone: stop here
        pc.notif_rx_dead = true;
        break;
      }
      const uint8_t* d = pc.notif_buf.get() + pc.notif_rx_head * kMaxNotifBytes;
      out.push_back(
          Notif{id, std::string(reinterpret_cast<const char*>(d), r.size(0))});
      if (!impl_->post_notif_recv(&pc, pc.notif_rx_head).ok()) {
        pc.notif_rx_dead = true;
      }
      pc.notif_rx_head = (pc.notif_rx_head + 1) % kNotifSlots;
    }
  }
  return out;
}

}  // namespace uccl::p2p
