// ChannelProxy's setup: the memory table, descriptors (made, checked and
// swapped over the connection by open_channel), channels and their handles.
#include <cstdlib>
#include <cstring>

#include "channels/proxy_internal.h"
#include "util/gpu.h"

namespace uccl::channels {

namespace {

constexpr size_t kOpsPerChannel = 1024;
constexpr size_t kWritesPerChannel = 64;

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
  } else {
    st = ep->wait(*s, timeout_ms);
    if (st.ok()) st = ep->wait(*r, timeout_ms, got);
  }
  if (!st.ok()) {
    // Nothing posted may outlive `in` and `out`: closing fails what is
    // still posted, and the waits spend those handles.
    (void)ep->close(conn);
    if (r.ok()) (void)ep->wait(*r, 1000);
    if (s.ok()) (void)ep->wait(*s, 1000);
  }
  (void)ep->dereg(*in_mr);
  (void)ep->dereg(out_mr);
  return st;
}

}  // namespace

Result<uint32_t> ChannelProxy::register_memory(void* p, size_t len) {
  if (started_) return InvalidArgument("channels: register before start");
  if (p == nullptr && len > 0) return InvalidArgument("channels: null memory");
  if (len > device::kOffsetMask) {
    return InvalidArgument("channels: memory past 2^48 bytes");
  }
  if (mems_.size() >= device::kMaxMemIds) {
    return ResourceExhausted("channels: memory table full");
  }
  const bool host = len == 0 || !dev_->is_device(p, len);
  Mem m{static_cast<uint8_t*>(p), len, host, 0, p2p::RegionDesc{}};
  if (m.host && len > 0 && cfg_.write_min_bytes > 0) {
    UCCL_ASSIGN_OR_RETURN(m.mr, ep_->reg(p, len));
    auto region = ep_->advertise(m.mr, 0, len);
    if (!region.ok()) {
      (void)ep_->dereg(m.mr);
      return region.status().with_context("channels: advertising memory");
    }
    m.region = *region;
  }
  mems_.push_back(m);
  return static_cast<uint32_t>(mems_.size() - 1);
}

std::string ChannelProxy::descriptor() const {
  DescHead h{kDescMagic, cfg_.num_semaphores,
             static_cast<uint32_t>(mems_.size()), 0};
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  for (const Mem& m : mems_) {
    DescMem d{};
    d.len = m.len;
    if (m.mr) {
      d.flags = kMemWritable;
      const std::string r = m.region.to_bytes();
      std::memcpy(d.region, r.data(), sizeof(d.region));
    }
    out.append(reinterpret_cast<const char*>(&d), sizeof(d));
  }
  return out;
}

Status ChannelProxy::parse_peer(const std::string& peer, Channel* c) const {
  DescHead h{};
  if (peer.size() < sizeof(h)) {
    return InvalidArgument("channels: peer descriptor too short");
  }
  std::memcpy(&h, peer.data(), sizeof(h));
  if (h.magic != kDescMagic || h.reserved != 0 ||
      h.count > device::kMaxMemIds ||
      peer.size() != sizeof(h) + size_t{h.count} * sizeof(DescMem)) {
    return InvalidArgument("channels: not a channel descriptor");
  }
  c->peer_semaphores = h.num_semaphores;
  c->peer_mem_len.assign(h.count, 0);
  c->peer_writable.assign(h.count, 0);
  c->peer_regions.assign(h.count, p2p::RegionDesc{});
  for (uint32_t i = 0; i < h.count; ++i) {
    DescMem d;
    std::memcpy(&d, peer.data() + sizeof(h) + size_t{i} * sizeof(d), sizeof(d));
    if ((d.flags & ~kMemWritable) != 0 || d.reserved != 0) {
      return InvalidArgument("channels: descriptor entry " + std::to_string(i) +
                             " has unknown flags");
    }
    c->peer_mem_len[i] = d.len;
    if (!(d.flags & kMemWritable)) continue;
    auto r = p2p::RegionDesc::from_bytes(
        std::string(reinterpret_cast<const char*>(d.region), sizeof(d.region)));
    if (!r.ok() || r->region.len != d.len) {
      return InvalidArgument("channels: descriptor entry " + std::to_string(i) +
                             " has a bad region");
    }
    c->peer_writable[i] = 1;
    c->peer_regions[i] = *r;
  }
  return Status::OK();
}

Result<uint32_t> ChannelProxy::add_channel(p2p::ConnHandle conn,
                                           const std::string& peer) {
  if (started_) return InvalidArgument("channels: add before start");
  auto c = std::make_unique<Channel>();
  UCCL_RETURN_IF_ERROR(parse_peer(peer, c.get()));
  if (channels_.size() >= device::kMaxChannels) {
    return ResourceExhausted("channels: channel table full");
  }
  c->id = static_cast<uint32_t>(channels_.size());
  c->conn = conn;
  const size_t block =
      sizeof(device::ChannelShared) + size_t{cfg_.num_semaphores} * 8;
  if (cfg_.gpu >= 0) {
    UCCL_ASSIGN_OR_RETURN(c->block, gpu_alloc_mapped(cfg_.gpu, block));
  } else {
    c->block = std::aligned_alloc(64, (block + 63) & ~size_t{63});
    if (c->block == nullptr) return ResourceExhausted("channels: no memory");
  }
  std::memset(c->block, 0, block);
  c->shared = static_cast<device::ChannelShared*>(c->block);
  c->sems = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(c->block) +
                                        sizeof(device::ChannelShared));
  // Buffers: the piece plus its header, each.
  c->buf_bytes = sizeof(MsgHdr) + cfg_.piece_bytes;
  const size_t all = c->buf_bytes * static_cast<size_t>(cfg_.buffers);
  Channel* ch = c.get();
  channels_.push_back(std::move(c));  // freed by the destructor from here
  UCCL_ASSIGN_OR_RETURN(void* tx, dev_->alloc_host(all));
  ch->tx = static_cast<uint8_t*>(tx);
  UCCL_ASSIGN_OR_RETURN(void* rx, dev_->alloc_host(all));
  ch->rx = static_cast<uint8_t*>(rx);
  UCCL_ASSIGN_OR_RETURN(ch->tx_mr, ep_->reg(ch->tx, all));
  UCCL_ASSIGN_OR_RETURN(ch->rx_mr, ep_->reg(ch->rx, all));
  ch->ops = Ring<Op>(kOpsPerChannel);
  ch->pieces = Ring<Piece>(static_cast<size_t>(cfg_.buffers));
  ch->writes = Ring<p2p::XferHandle>(kWritesPerChannel);
  for (int b = cfg_.buffers - 1; b >= 0; --b) ch->free_bufs.push_back(b);
  ch->rx_bufs.assign(static_cast<size_t>(cfg_.buffers), RxBuf{});
  return ch->id;
}

Result<device::ChannelHandle> ChannelProxy::handle(uint32_t channel) const {
  if (channel >= channels_.size()) {
    return InvalidArgument("channels: no channel " + std::to_string(channel));
  }
  const Channel& c = *channels_[channel];
  device::ChannelHandle h{};
  h.fifo = fifo_->handle();
  h.id = c.id;
  h.num_semaphores = cfg_.num_semaphores;
  h.semaphores = c.sems;
  h.shared = c.shared;
  h.timeout_ns = cfg_.timeout_ns;
  return h;
}

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
  auto ch = add_channel(conn, peer);
  if (!ch.ok()) (void)ep_->close(conn);  // a malformed descriptor
  return ch;
}

}  // namespace uccl::channels
