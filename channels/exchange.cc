// ChannelProxy::open_channel: the two sides swap descriptors over the
// connection the channel then takes over, so no program passes them by hand.
#include <cstring>

#include "channels/proxy_internal.h"

namespace uccl::channels {

namespace {

// The largest descriptor a peer may announce: every memory id used.
constexpr uint64_t kMaxDescBytes =
    sizeof(DescHead) + uint64_t{device::kMaxMemIds} * sizeof(DescMem);

// Sends `out` and takes the peer's message into `in` (at most its size),
// both over `conn`, each registered for the call only. The peer's size in
// *got.
Status swap_message(p2p::Endpoint* ep, p2p::ConnHandle conn, void* out,
                    size_t out_len, void* in, size_t in_len, int timeout_ms,
                    size_t* got) {
  UCCL_ASSIGN_OR_RETURN(p2p::MrId out_mr, ep->reg(out, out_len));
  auto in_mr = ep->reg(in, in_len);
  if (!in_mr.ok()) {
    (void)ep->dereg(out_mr);
    return in_mr.status();
  }
  Status st;
  auto r = ep->recv_async(conn, *in_mr, in, in_len);
  auto s = ep->send_async(conn, out_mr, out, out_len);
  if (!r.ok() || !s.ok()) {
    st = !r.ok() ? r.status() : s.status();
    (void)ep->close(conn);  // a posted receive must not outlive `in`
  } else {
    st = ep->wait(*s, timeout_ms);
    if (st.ok()) st = ep->wait(*r, timeout_ms, got);
    if (!st.ok()) (void)ep->close(conn);  // as above: fail what is posted
  }
  (void)ep->dereg(*in_mr);
  (void)ep->dereg(out_mr);
  return st;
}

}  // namespace

Result<uint32_t> ChannelProxy::open_channel(p2p::ConnHandle conn,
                                            int timeout_ms) {
  if (started_) return InvalidArgument("channels: add before start");
  std::string mine = descriptor();
  uint64_t my_len = mine.size(), peer_len = 0;
  size_t got = 0;
  Status st = swap_message(ep_, conn, &my_len, sizeof(my_len), &peer_len,
                           sizeof(peer_len), timeout_ms, &got);
  if (st.ok() && (got != sizeof(peer_len) || peer_len < sizeof(DescHead) ||
                  peer_len > kMaxDescBytes)) {
    (void)ep_->close(conn);
    st = InvalidArgument("the peer announced a descriptor of " +
                         std::to_string(peer_len) + " bytes");
  }
  if (!st.ok()) return st.with_context("channels: swapping descriptors");
  std::string peer(static_cast<size_t>(peer_len), '\0');
  st = swap_message(ep_, conn, mine.data(), mine.size(), peer.data(),
                    peer.size(), timeout_ms, &got);
  if (st.ok() && got != peer.size()) {
    (void)ep_->close(conn);
    st = InvalidArgument("the peer's descriptor was cut short");
  }
  if (!st.ok()) return st.with_context("channels: swapping descriptors");
  return add_channel(conn, peer);
}

}  // namespace uccl::channels
