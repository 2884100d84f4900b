// Software NIC transmit batch: runs of equal-sized datagrams to one
// destination go as one UDP GSO message (tx_batch.h says when a run ends).
#include "transport/udp/tx_batch.h"

#include <netinet/udp.h>

#include <cerrno>
#include <cstring>

#include "util/logging.h"

namespace uccl::transport::udp {

void TxBatch::add(int fd, const WireHeader& hdr, const iovec* payload, int niov,
                  const sockaddr_in* dest) {
  const int k = count_++;
  fd_ = fd;
  hdrs_[k] = hdr;
  iov_[k][0].iov_base = &hdrs_[k];
  iov_[k][0].iov_len = sizeof(WireHeader);
  uint32_t len = sizeof(WireHeader);
  for (int i = 0; i < niov; ++i) {
    iov_[k][i + 1] = payload[i];
    len += static_cast<uint32_t>(payload[i].iov_len);
  }
  len_[k] = len;
  msghdr& m = msgs_[k].msg_hdr;
  std::memset(&m, 0, sizeof(m));
  m.msg_iov = iov_[k];
  m.msg_iovlen = static_cast<size_t>(niov + 1);
  if (dest != nullptr) {
    dest_[k] = *dest;
    m.msg_name = &dest_[k];
    m.msg_namelen = sizeof(sockaddr_in);
  }
}

bool TxBatch::same_dest(int a, int b) const {
  const msghdr& x = msgs_[a].msg_hdr;
  const msghdr& y = msgs_[b].msg_hdr;
  if (x.msg_name == nullptr || y.msg_name == nullptr) {
    return x.msg_name == y.msg_name;
  }
  return dest_[a].sin_addr.s_addr == dest_[b].sin_addr.s_addr &&
         dest_[a].sin_port == dest_[b].sin_port;
}

void TxBatch::build_run(int k, int first, int end) {
  first_[k] = first;
  run_[k] = end - first;
  if (end - first == 1) {
    out_[k] = msgs_[first];
    return;
  }
  // Every run's iovecs start at its first datagram's slot in run_iov_, so
  // runs never overlap (a run of n datagrams has at most n * kMaxIov).
  iovec* iov = run_iov_ + first * kMaxIov;
  size_t niov = 0;
  for (int i = first; i < end; ++i) {
    const msghdr& m = msgs_[i].msg_hdr;
    for (size_t j = 0; j < m.msg_iovlen; ++j) iov[niov++] = m.msg_iov[j];
  }
  msghdr& m = out_[k].msg_hdr;
  m = msgs_[first].msg_hdr;
  m.msg_iov = iov;
  m.msg_iovlen = niov;
  m.msg_control = cbuf_[k];
  m.msg_controllen = sizeof(cbuf_[k]);
  std::memset(cbuf_[k], 0, sizeof(cbuf_[k]));
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const uint16_t seg = static_cast<uint16_t>(len_[first]);
  std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
}

void TxBatch::flush(TxBatchCounters* c) {
  // A refused GSO run turns GSO off, and what is left goes again as
  // single datagrams.
  for (int first = 0; first < count_;) first = send_runs(build_runs(first), c);
  count_ = 0;
}

int TxBatch::build_runs(int from) {
  int runs = 0;
  for (int i = from; i < count_;) {
    const uint32_t seg = len_[i];
    uint32_t total = seg;
    int end = i + 1;
    while (gso_ && end < count_ && end - i < kMaxGsoSegments &&
           same_dest(i, end) && len_[end] <= seg &&
           total + len_[end] <= kMaxGsoBytes) {
      total += len_[end];
      if (len_[end++] < seg) break;  // only the last may be shorter
    }
    build_run(runs++, i, end);
    i = end;
  }
  return runs;
}

int TxBatch::send_runs(int n, TxBatchCounters* c) {
  int sent = 0;
  while (sent < n) {
    const int got = sendmmsg(fd_, out_ + sent, n - sent, MSG_DONTWAIT);
    if (got > 0) {
      for (int k = sent; k < sent + got; ++k) {
        if (run_[k] > 1) {
          ++c->gso_sends;
          c->gso_segments += run_[k];
        }
      }
      sent += got;
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    const int err = errno;
    if (run_[sent] > 1 && (err == EIO || err == EINVAL || err == EOPNOTSUPP ||
                           err == ENOPROTOOPT || err == EMSGSIZE)) {
      // The kernel takes no GSO here: this run and the rest go as single
      // datagrams, and so does everything after.
      ++c->gso_refused;
      gso_ = false;
      LOG(WARNING) << "software NIC: the kernel refused UDP GSO ("
                   << strerror(err) << "); sending single datagrams";
      return first_[sent];
    }
    // EAGAIN/ENOBUFS (socket full) or an ICMP error on a connected socket
    // (peer gone): the run's datagrams are lost, as on a congested or
    // broken link.
    c->errors += run_[sent];
    VLOG(kVlogPacket) << "sendmmsg: " << strerror(err);
    ++sent;
  }
  return count_;
}

}  // namespace uccl::transport::udp
