// Software NIC transmit path: datagrams (batched, spliced between local
// QPs), the rate limiter, and the fault-injection delay line.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/udp/soft_nic.h"
#include "util/crc32c.h"
#include "util/logging.h"

namespace uccl::transport::udp {

namespace {

// Pages that `n` payload pieces span (each from its own start).
uint32_t pages_spanned(const iovec* iov, int n) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t pages = 0;
  for (int i = 0; i < n; ++i) {
    if (iov[i].iov_len == 0) continue;
    const uint64_t a = reinterpret_cast<uint64_t>(iov[i].iov_base);
    pages += (a + iov[i].iov_len - 1) / page - a / page + 1;
  }
  return static_cast<uint32_t>(pages);
}

}  // namespace

void SoftDevice::send_datagram(WireHeader* hdr, const iovec* payload, int niov,
                               int fd, const sockaddr_in* dest, bool unsummed,
                               bool by_reference) {
  FaultInjector* f = faults_.get();
  uint32_t pcrc = 0;
  bool spliced = false;
  if (unsummed && !f->enabled(Direction::kTx)) {
    // The peer, on this host, agreed to take it (wire.h, "Unsummed").
    hdr->flags |= kFlagUnsummed;
    ++counters_.tx_unsummed;
    spliced = by_reference && splice_w_ >= 0 &&
              hdr->payload_len >= kSpliceMinPayload &&
              pages_spanned(payload, niov) <= kSpliceMaxPages;
  } else {
    for (int i = 0; i < niov; ++i) {
      pcrc = crc32c(pcrc, payload[i].iov_base, payload[i].iov_len);
    }
  }
  hdr->magic = kWireMagic;
  hdr->version = kWireVersion;
  hdr->hdr_crc = 0;
  hdr->payload_crc = 0;
  hdr->hdr_crc = crc32c(0, hdr, sizeof(*hdr));
  hdr->payload_crc = pcrc;
  ++counters_.tx_packets;
  counters_.tx_bytes += hdr->payload_len;
  if (rate_bytes_per_ns_ > 0) tokens_ -= hdr->payload_len + sizeof(WireHeader);

  if (spliced) {  // no faults here: unsummed payloads have none
    flush_tx();   // what was queued before it leaves before it
    splice_datagram(hdr, payload, niov, fd, dest);
    return;
  }
  FaultDecision d;
  if (f->enabled(Direction::kTx)) {
    const uint64_t fnow = now_ns();
    d = f->decide(Direction::kTx, fnow);
    if (held_count_ > 0) release_held(fnow, true, Direction::kTx);
    if (d.drop) return;
    if (d.stall_ns) {
      // The call that carries this packet is slow (a cold or preempted
      // stack): the engine waits in it, and the packet leaves after.
      const timespec ts{static_cast<time_t>(d.stall_ns / 1000000000),
                        static_cast<long>(d.stall_ns % 1000000000)};
      nanosleep(&ts, nullptr);
    }
    if (d.corrupt || d.delay_ns || d.reorder_after) {
      // Work on a private copy: the payload is the application's memory.
      uint8_t* s = tx_scratch_.get();
      uint32_t len = sizeof(WireHeader);
      std::memcpy(s, hdr, sizeof(WireHeader));
      for (int i = 0; i < niov; ++i) {
        std::memcpy(s + len, payload[i].iov_base, payload[i].iov_len);
        len += payload[i].iov_len;
      }
      if (d.corrupt) {
        s[(d.corrupt_bit % (len * 8ull)) / 8] ^=
            static_cast<uint8_t>(1u << (d.corrupt_bit % 8));
      }
      bool held = (d.delay_ns || d.reorder_after) &&
                  hold(Direction::kTx, d, s, len, fd, dest, now_ns());
      if (!held) {
        flush_tx();
        raw_send(fd, dest, s, len);
      }
      if (d.duplicate) {
        flush_tx();
        raw_send(fd, dest, s, len);
      }
      return;
    }
  }
  for (int copy = 0; copy < (d.duplicate ? 2 : 1); ++copy) {
    if (tx_batch_.needs_flush_for(fd)) flush_tx();
    tx_batch_.add(fd, *hdr, payload, niov, dest);
  }
}

void SoftDevice::flush_tx() {
  if (tx_batch_.empty()) return;
  if (trace_fn_) {
    trace_fn_(trace_ctx_, "nic_tx", static_cast<uint32_t>(tx_batch_.size()),
              now_ns());
  }
  TxBatchCounters c;
  tx_batch_.flush(&c);
  counters_.tx_errors += c.errors;
  counters_.tx_gso_sends += c.gso_sends;
  counters_.tx_gso_segments += c.gso_segments;
  counters_.tx_gso_refused += c.gso_refused;
}

void SoftDevice::splice_datagram(const WireHeader* hdr, const iovec* payload,
                                 int niov, int fd, const sockaddr_in* dest) {
  const uint32_t len = hdr->payload_len;
  // 1. The header, corked. UDP_SEGMENT of the whole datagram: one segment,
  // so nothing is cut, and the kernel leaves the checksum to the device
  // (loopback needs none) instead of summing the pages.
  iovec hv{const_cast<WireHeader*>(hdr), sizeof(WireHeader)};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(uint16_t))];
  std::memset(cbuf, 0, sizeof(cbuf));
  msghdr m;
  std::memset(&m, 0, sizeof(m));
  m.msg_iov = &hv;
  m.msg_iovlen = 1;
  if (dest != nullptr) {
    m.msg_name = const_cast<sockaddr_in*>(dest);
    m.msg_namelen = sizeof(sockaddr_in);
  }
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const uint16_t seg = static_cast<uint16_t>(sizeof(WireHeader) + len);
  std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
  if (sendmsg(fd, &m, MSG_MORE | MSG_DONTWAIT) < 0) {
    ++counters_.tx_errors;  // nothing is pending: the datagram is lost
    VLOG(kVlogPacket) << "splice header: " << strerror(errno);
    return;
  }
  // 2. The payload's pages into the pipe.
  ssize_t v = vmsplice(splice_w_, payload, static_cast<unsigned long>(niov),
                       SPLICE_F_NONBLOCK);
  if (v != static_cast<ssize_t>(len)) {
    // Pages the kernel cannot take (e.g. a PFN mapping): finish the corked
    // datagram with a copy of the whole payload. A failure there discards
    // what was pending (udp_sendmsg flushes it), i.e. a lost datagram.
    if (v > 0) drain_splice_pipe();
    ++counters_.tx_splice_fallbacks;
    msghdr mc;
    std::memset(&mc, 0, sizeof(mc));
    mc.msg_iov = const_cast<iovec*>(payload);
    mc.msg_iovlen = static_cast<size_t>(niov);
    if (sendmsg(fd, &mc, MSG_DONTWAIT) < 0) ++counters_.tx_errors;
    return;
  }
  // 3. The pipe into the socket: the last part goes without MSG_MORE and
  // sends the datagram.
  ssize_t s = splice(splice_r_, nullptr, fd, nullptr, len, SPLICE_F_NONBLOCK);
  if (s != static_cast<ssize_t>(len)) {
    // The kernel flushes the pending datagram when an append fails; push
    // whatever might still be corked (a short datagram, which the receiver
    // drops as malformed) so the next one starts clean.
    ++counters_.tx_errors;
    VLOG(kVlogPacket) << "splice: " << (s < 0 ? strerror(errno) : "short");
    drain_splice_pipe();
    int off = 0;
    setsockopt(fd, IPPROTO_UDP, UDP_CORK, &off, sizeof(off));
    return;
  }
  ++counters_.tx_spliced;
}

void SoftDevice::set_rate(double gbps) {
  rate_bytes_per_ns_ = gbps > 0 ? gbps / 8.0 : 0;  // Gb/s == bits per ns
  bucket_bytes_ = std::max(256.0 * 1024, gbps / 8.0 * 20000.0);  // 20 us
  tokens_ = bucket_bytes_;
  tokens_ns_ = now_ns();
}

bool SoftDevice::set_splice_pipe_bytes_for_test(int bytes) {
  return splice_w_ >= 0 && fcntl(splice_w_, F_SETPIPE_SZ, bytes) >= 0;
}

void SoftDevice::drain_splice_pipe() {
  uint8_t* s = tx_scratch_.get();
  while (read(splice_r_, s, kRxBufBytes) > 0) {
  }
}

void SoftDevice::raw_send(int fd, const sockaddr_in* dest, const void* data,
                          uint32_t len) {
  ssize_t n = sendto(fd, data, len, MSG_DONTWAIT,
                     reinterpret_cast<const sockaddr*>(dest),
                     dest ? sizeof(sockaddr_in) : 0);
  if (n < 0) ++counters_.tx_errors;
}

bool SoftDevice::hold(Direction dir, const FaultDecision& d,
                      const uint8_t* data, uint32_t len, int fd,
                      const sockaddr_in* dest, uint64_t now) {
  for (Held& h : held_) {
    if (h.used) continue;
    std::memcpy(h.data.get(), data, len);
    h.len = len;
    h.dir = dir;
    h.fd = fd;
    h.connected = dest == nullptr;
    if (dest) h.addr = *dest;
    // Reordered packets also leave after a time (FaultSpec::reorder_max_us)
    // so that none waits forever.
    h.release_ns = now + (d.delay_ns              ? d.delay_ns
                          : d.reorder_max_ns != 0 ? d.reorder_max_ns
                                                  : 1000000);
    h.release_after = d.delay_ns ? 0 : d.reorder_after;
    h.used = true;
    ++held_count_;
    return true;
  }
  ++counters_.fault_hold_overflow;
  return false;
}

void SoftDevice::release_held(uint64_t now, bool packet_passed, Direction dir) {
  for (Held& h : held_) {
    // Only this direction's: the transmit path calls this from inside a QP's
    // transmit(), where handling a received packet (an ACK that retires the
    // WR being sent) would change the send queue under it.
    if (!h.used || h.dir != dir) continue;
    bool due = now >= h.release_ns;
    if (packet_passed && h.release_after > 0) {
      if (--h.release_after == 0) due = true;
    }
    if (!due) continue;
    h.used = false;
    --held_count_;
    if (h.dir == Direction::kTx) {
      flush_tx();
      raw_send(h.fd, h.connected ? nullptr : &h.addr, h.data.get(), h.len);
    } else {
      // Copy out: handling may hold more packets and reuse this slot.
      std::memcpy(scratch_.get(), h.data.get(), h.len);
      // Held by fault injection: its kernel metadata is gone.
      const RxMeta current = cur_rx_;
      cur_rx_ = RxMeta{};
      handle_datagram(scratch_.get(), h.len, h.addr, now);
      cur_rx_ = current;
    }
  }
}

}  // namespace uccl::transport::udp
