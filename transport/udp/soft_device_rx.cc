// Software NIC receive path: progress rounds, batched and direct receives,
// datagram validation (counted drops) and demultiplexing to QPs.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace uccl::transport::udp {

void SoftDevice::mark_pending(SoftQp* qp) {
  if (!qp->in_pending_list_) {
    qp->in_pending_list_ = true;
    pending_.push_back(qp);
  }
}

uint32_t SoftDevice::progress() {
  if (in_progress_) return 0;  // a completion handler polled re-entrantly
  in_progress_ = true;
  const uint64_t before = counters_.rx_packets + counters_.tx_packets;
  uint64_t now = now_ns();
  if (held_count_ > 0) release_held(now, false, Direction::kTx);
  if (held_count_ > 0) release_held(now, false, Direction::kRx);
  progress_rx(now);
  // RC timers of the QPs with sends outstanding; one whose send queue
  // emptied leaves (post_send() puts it back).
  size_t keep = 0;
  for (size_t i = 0; i < rc_armed_.size(); ++i) {
    SoftQp* qp = rc_armed_[i];
    qp->on_timer(now);
    if (qp->sq_head_ != qp->sq_tail_) {
      rc_armed_[keep++] = qp;
    } else {
      qp->timer_armed_ = false;
    }
  }
  counters_.rc_timer_checks += rc_armed_.size();
  rc_armed_.resize(keep);
  // Held ACKs whose time came (none was carried back by a request).
  if (!acks_held_.empty()) {
    keep = 0;
    for (SoftQp* qp : acks_held_) {
      qp->release_held_ack(now);
      if (qp->ack_held_until_ns_ != 0) {
        acks_held_[keep++] = qp;
      } else {
        qp->in_acks_held_ = false;
      }
    }
    acks_held_.resize(keep);
  }
  if (!owner_driven_) transmit_pending(now);  // else at flush()
  in_progress_ = false;
  return static_cast<uint32_t>(counters_.rx_packets + counters_.tx_packets -
                               before);
}

uint32_t SoftDevice::flush() {
  if (in_progress_) return 0;
  in_progress_ = true;
  const uint64_t before = counters_.tx_packets;
  const uint64_t now = now_ns();
  if (held_count_ > 0) release_held(now, false, Direction::kTx);
  transmit_pending(now);
  in_progress_ = false;
  return static_cast<uint32_t>(counters_.tx_packets - before);
}

void SoftDevice::transmit_pending(uint64_t now) {
  if (pending_.empty()) return;
  if (rate_bytes_per_ns_ > 0) {
    tokens_ = std::min(bucket_bytes_,
                       tokens_ + (now - tokens_ns_) * rate_bytes_per_ns_);
    tokens_ns_ = now;
  }
  const uint32_t budget = tx_budget_;
  // Sends up to the budget; true while the QP keeps work (stays pending).
  auto serve = [&](SoftQp* qp) {
    if (rate_bytes_per_ns_ == 0 || tokens_ > 0) qp->transmit(budget, now);
    flush_tx();
    if (qp->has_tx_work()) return true;
    qp->in_pending_list_ = false;
    return false;
  };
  // Round-robin over QPs with work, bounded per QP. Index loop: transmit()
  // may append (e.g. an ACK for another QP). later_ keeps its capacity, so
  // steady state allocates nothing.
  later_.clear();
  size_t keep = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    SoftQp* qp = pending_[i];
    if (qp->tx_later()) {
      later_.push_back(qp);  // still flagged as pending
      continue;
    }
    if (serve(qp)) pending_[keep++] = qp;
  }
  pending_.resize(keep);
  for (SoftQp* qp : later_) {
    if (serve(qp)) pending_.push_back(qp);
  }
}

void SoftDevice::progress_rx(uint64_t now) {
  // Rounds of up to kRxBatch buffers each, up to the budget of datagrams
  // per call (the owner reacts to completions only between calls). The
  // priority socket first: its control datagrams do not wait behind the
  // data socket's backlog, which at a few GB/s of 64 KiB datagrams is
  // hundreds of us.
  if (prio_fd_ >= 0) {
    for (int done = 0; done < rx_budget_;) {
      const int n = receive_batch(now, prio_fd_, kRxBatch);
      if (n < 0) break;
      done += n;
    }
  }
  for (int done = 0; done < rx_budget_;) {
    const int n = direct_mode_
                      ? receive_direct(now)
                      : receive_batch(now, fd_, rx_bufs_for(rx_budget_ - done));
    if (n < 0) return;  // the data socket is empty
    done += n;
  }
}

int SoftDevice::rx_bufs_for(int left) const {
  const int g = rx_segs_hint_;
  return std::clamp((left + g - 1) / g, 1, kRxBatch);
}

int SoftDevice::receive_batch(uint64_t now, int fd, int bufs) {
  // Control messages only for what was asked (timestamps, TTLs) and for
  // UDP GRO, whose message the kernel writes only with a coalesced buffer.
  // The kernel's drop count is read from the socket when the counters are
  // read; a SO_RXQ_OVFL message per datagram added 0.15-0.25 us to a
  // polled 64 B UDP trip on the GPU machine (socket_bench --lat_rxq_ovfl).
  // Each source address is written back with its length (always a
  // sockaddr_in on this IPv4 socket, so msg_namelen stays as set up).
  if (rx_meta_on_) prepare_rx_meta(rx_cmsg_used_);
  rx_cmsg_used_ = 0;
  int n = recvmmsg(fd, rx_msgs_, static_cast<unsigned>(bufs), MSG_DONTWAIT,
                   nullptr);
  if (n <= 0) return -1;
  rx_cmsg_used_ = n;
  if (trace_fn_) {
    trace_fn_(trace_ctx_, "nic_rx", static_cast<uint32_t>(n), now_ns());
  }
  int taken = 0;
  uint32_t most = 1;  // datagrams in the fullest buffer
  for (int i = 0; i < n; ++i) {
    auto* buf = static_cast<uint8_t*>(rx_iov_[i].iov_base);
    const uint32_t len = rx_msgs_[i].msg_len;
    if (rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) {
      ++counters_.rx_packets;
      counters_.rx_bytes += len;
      ++counters_.drop_malformed;
      ++taken;
      continue;
    }
    if (rx_meta_on_) take_rx_meta(rx_msgs_[i].msg_hdr);
    const uint32_t k = take_datagrams(buf, len, rx_from_[i], now, fd);
    taken += static_cast<int>(k);
    most = std::max(most, k);
  }
  cur_rx_ = RxMeta{};
  if (fd == fd_) rx_segs_hint_ = static_cast<int>(most);
  return n < bufs ? -1 : taken;
}

uint32_t SoftDevice::take_datagrams(uint8_t* buf, uint32_t len,
                                    const sockaddr_in& from, uint64_t now,
                                    int fd) {
  // Coalesced by the kernel (UDP GRO): datagrams of one size end to end,
  // the last possibly shorter, each taken as if it came alone.
  const uint32_t seg = cur_rx_.gro_segment;
  if (seg == 0 || seg >= len) {
    take_datagram(buf, len, from, now, fd, true);
    return 1;
  }
  ++counters_.rx_gro_packets;
  uint32_t k = 0;
  for (uint32_t off = 0; off < len; off += seg, ++k) {
    take_datagram(buf + off, std::min(seg, len - off), from, now, fd, false);
  }
  return k;
}

void SoftDevice::take_datagram(uint8_t* buf, uint32_t len,
                               const sockaddr_in& from, uint64_t now, int fd,
                               bool alone) {
  ++counters_.rx_packets;
  counters_.rx_bytes += len;
  FaultInjector* f = faults_.get();
  if (f->enabled(Direction::kRx)) {
    FaultDecision d = f->decide(Direction::kRx, now);
    if (held_count_ > 0) release_held(now, true, Direction::kRx);
    if (d.drop) return;
    if (d.corrupt && len > 0)
      buf[(d.corrupt_bit % (len * 8ull)) / 8] ^=
          static_cast<uint8_t>(1u << (d.corrupt_bit % 8));
    if ((d.delay_ns || d.reorder_after) &&
        hold(Direction::kRx, d, buf, len, -1, &from, now)) {
      if (d.duplicate) handle_datagram(buf, len, from, now);
      return;
    }
    if (d.duplicate) {
      // Process a copy first: handling may not modify buf, but keep the
      // second delivery independent of the first anyway.
      std::memcpy(scratch_.get(), buf, len);
      handle_datagram(scratch_.get(), len, from, now);
    }
  }
  handle_datagram(buf, len, from, now);
  // A large WRITE fragment that came alone: the ones after it are likely
  // too, so place them directly (a fault-injected receive path stays
  // staged; coalesced ones cannot be placed, as one receive takes them all).
  static_assert(offsetof(WireHeader, opcode) == 5, "peeked at below");
  if (alone && direct_rx_bytes_ > 0 && fd == fd_ &&
      len >= sizeof(WireHeader) + direct_rx_bytes_ &&
      (buf[5] == static_cast<uint8_t>(WireOp::kWrite) ||
       buf[5] == static_cast<uint8_t>(WireOp::kWriteImm)) &&
      !f->enabled(Direction::kRx)) {
    direct_mode_ = true;
    direct_large_ns_ = now;
  }
}

int SoftDevice::receive_direct(uint64_t now) {
  const uint32_t min_len = sizeof(WireHeader) + std::max(direct_rx_bytes_, 1u);
  if (rx_meta_on_) prepare_rx_meta(0);
  int taken = 0;  // datagrams (a coalesced buffer counts as those in it)
  for (int k = 0; k < kRxBatch; ++k) {
    if (faults_->enabled(Direction::kRx)) {  // switched on at run time
      direct_mode_ = false;
      return std::max(taken, 1);
    }
    WireHeader h;
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    // MSG_TRUNC: the datagram's whole length, not the 64 bytes copied.
    ssize_t n =
        recvfrom(fd_, &h, sizeof(h), MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT,
                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < 0) return -1;  // empty (or a socket error: staged path's)
    const uint32_t len = static_cast<uint32_t>(n);
    SoftQp* qp = nullptr;
    uint8_t* dst = nullptr;
    if (len >= min_len && len != sizeof(WireHeader) + h.payload_len &&
        header_problem(h, sizeof(WireHeader) + h.payload_len) == nullptr) {
      // Datagrams the kernel coalesced (UDP GRO): one receive takes them
      // all, so none is placed; batched receives again.
      const int s = receive_one_staged(now);
      if (s < 0) return -1;
      direct_mode_ = false;
      return taken + s;
    }
    if (len >= min_len) {
      direct_misses_ = 0;
      direct_large_ns_ = now;
      if (header_problem(h, len) == nullptr) {
        auto it = qps_.find(h.dst_qpn);
        if (it != qps_.end()) {
          qp = it->second;
          dst = qp->direct_dst(h, from);
        }
      }
    } else if (++direct_misses_ >= kDirectRxMisses &&
               now - direct_large_ns_ >= kDirectRxQuietNs) {
      direct_mode_ = false;  // small datagrams only: batched receives again
      direct_misses_ = 0;
      return std::max(taken, 1);
    }
    if (dst == nullptr) {  // validated, counted and handled as usual
      const int s = receive_one_staged(now);
      if (s < 0) return -1;
      taken += s;
      continue;
    }
    WireHeader got;
    sockaddr_in got_from{};
    iovec iov[2] = {{&got, sizeof(got)}, {dst, h.payload_len}};
    msghdr m{};
    m.msg_name = &got_from;
    m.msg_namelen = sizeof(got_from);
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    if (rx_meta_on_) {
      m.msg_control = rx_cbuf_[0];
      m.msg_controllen = kRxCmsgBytes;
    }
    ssize_t r = recvmsg(fd_, &m, MSG_DONTWAIT);
    if (r < 0) return -1;
    ++taken;
    ++counters_.rx_packets;
    counters_.rx_bytes += static_cast<uint64_t>(r);
    if (trace_fn_) trace_fn_(trace_ctx_, "nic_rx", 1, now_ns());
    // Only this thread reads the socket, so this is the datagram peeked at.
    if (static_cast<uint32_t>(r) != len || (m.msg_flags & MSG_TRUNC) ||
        std::memcmp(&got, &h, sizeof(h)) != 0 ||
        got_from.sin_addr.s_addr != from.sin_addr.s_addr ||
        got_from.sin_port != from.sin_port) {
      ++counters_.drop_malformed;
      continue;
    }
    ++counters_.rx_direct;
    if (rx_meta_on_) take_rx_meta(m);
    qp->on_packet(got, dst, got_from, now);  // checks payload_crc in place
    cur_rx_ = RxMeta{};
  }
  return taken;
}

int SoftDevice::receive_one_staged(uint64_t now) {
  sockaddr_in from{};
  iovec iov{rx_iov_[0].iov_base, kRxBufBytes};
  msghdr m{};
  m.msg_name = &from;
  m.msg_namelen = sizeof(from);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (rx_meta_on_) {
    m.msg_control = rx_cbuf_[0];
    m.msg_controllen = kRxCmsgBytes;
  }
  ssize_t n = recvmsg(fd_, &m, MSG_DONTWAIT);
  if (n < 0) return -1;
  if (rx_meta_on_) take_rx_meta(m);
  uint32_t k = 1;
  if (m.msg_flags & MSG_TRUNC) {
    ++counters_.rx_packets;
    counters_.rx_bytes += static_cast<uint64_t>(n);
    ++counters_.drop_malformed;
  } else {
    k = take_datagrams(static_cast<uint8_t*>(iov.iov_base),
                       static_cast<uint32_t>(n), from, now, fd_);
  }
  cur_rx_ = RxMeta{};
  return static_cast<int>(k);
}

uint64_t* SoftDevice::header_problem(const WireHeader& h, uint32_t len) {
  if (h.magic != kWireMagic) return &counters_.drop_malformed;
  WireHeader z = h;
  z.hdr_crc = 0;
  z.payload_crc = 0;
  if (crc32c(0, &z, sizeof(z)) != h.hdr_crc) return &counters_.drop_bad_crc;
  if (h.version != kWireVersion) return &counters_.drop_bad_version;
  if (h.opcode == 0 || h.opcode > kMaxWireOp || h.qp_type > 2 ||
      h.payload_len != len - sizeof(WireHeader) ||
      h.payload_len > kMaxFragmentPayload ||
      static_cast<uint64_t>(h.frag_offset) + h.payload_len > h.msg_len) {
    return &counters_.drop_malformed;
  }
  return nullptr;
}

void SoftDevice::handle_datagram(uint8_t* buf, uint32_t len,
                                 const sockaddr_in& from, uint64_t now) {
  if (len < sizeof(WireHeader)) {
    ++counters_.drop_malformed;
    return;
  }
  WireHeader h;
  std::memcpy(&h, buf, sizeof(h));
  if (uint64_t* counter = header_problem(h, len)) {
    ++*counter;
    return;
  }
  auto it = qps_.find(h.dst_qpn);
  if (it == qps_.end()) {
    ++counters_.drop_unknown_qp;
    return;
  }
  it->second->on_packet(h, buf + sizeof(WireHeader), from, now);
}

void SoftDevice::prepare_rx_meta(int count) {
  // The kernel writes back how much of each control buffer it used, in the
  // slots it filled: those of the last batch (`count`), each set once at
  // open (alloc_buffers), so an empty poll costs nothing here.
  for (int i = 0; i < count; ++i) {
    rx_msgs_[i].msg_hdr.msg_controllen = kRxCmsgBytes;
  }
  if (rx_ts_) {
    timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    rx_ts_offset_ns_ =
        static_cast<int64_t>(now_ns()) -
        (static_cast<int64_t>(rt.tv_sec) * 1000000000 + rt.tv_nsec);
  }
}

}  // namespace uccl::transport::udp
