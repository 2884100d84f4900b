// Software NIC transmit batch: the datagrams of one sendmmsg, with each run of
// equal-sized datagrams to one destination sent as one UDP GSO message.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>

#include "transport/soft/soft_pd.h"
#include "transport/udp/wire.h"

namespace uccl::transport::udp {

// What a flush did, added to the device's counters (SoftCounters).
struct TxBatchCounters {
  uint64_t errors = 0;        // datagrams the kernel refused (lost)
  uint64_t gso_sends = 0;     // GSO messages the kernel took
  uint64_t gso_segments = 0;  // datagrams that went in them
  uint64_t gso_refused = 0;   // GSO messages refused; GSO is off after one
};

// Segmentation offload (UDP_SEGMENT): the kernel cuts one message into
// datagrams of the segment size (the last may be shorter), each with its own
// UDP/IP header, as late as it can: at the device, or not at all where the
// device takes GSO packets (lo, veth), so one pass of the IP stack, the
// qdisc and a veth carries several datagrams. On the wire and at the
// receiver they are the datagrams the batch held, in order. A run ends at a
// new destination, a longer datagram, after a shorter one, at
// kMaxGsoSegments or at kMaxGsoBytes (one IPv4 packet's UDP payload). Where
// the kernel refuses GSO (a device without UDP checksum offload: EIO; a
// socket without UDP checksums: EINVAL), the refused run goes again as
// single datagrams and the batch sends single datagrams from then on.
class TxBatch {
 public:
  static constexpr int kMaxDatagrams = 32;
  static constexpr int kMaxIov = soft::kMaxSge + 1;
  static constexpr int kMaxGsoSegments = 64;  // the kernel's UDP_MAX_SEGMENTS
  static constexpr uint32_t kMaxGsoBytes = 65535 - 20 - 8;

  bool empty() const { return count_ == 0; }
  int size() const { return count_; }
  // Whether a datagram for `fd` must wait for a flush first (full, or the
  // batch is another socket's: one sendmmsg is one socket's).
  bool needs_flush_for(int fd) const {
    return count_ == kMaxDatagrams || (count_ > 0 && fd != fd_);
  }
  void set_gso(bool on) { gso_ = on; }
  bool gso() const { return gso_; }

  // Queues [hdr][payload...] on `fd` to `dest` (nullptr: the socket is
  // connected). The header is copied; the payload must stay until flush().
  void add(int fd, const WireHeader& hdr, const iovec* payload, int niov,
           const sockaddr_in* dest);
  // Sends what is queued and empties the batch.
  void flush(TxBatchCounters* c);

 private:
  bool same_dest(int a, int b) const;
  // Datagrams [first, end) of a run, as one message at out_[k].
  void build_run(int k, int first, int end);
  // Datagrams [from, count_) as runs at out_ (single datagrams with GSO
  // off); how many runs.
  int build_runs(int from);
  // Sends out_[0..n) (run k: datagrams first_[k].. of count run_[k]).
  // Returns count_, or the first datagram of a run the kernel refused GSO
  // for (GSO is off from then on).
  int send_runs(int n, TxBatchCounters* c);

  bool gso_ = true;
  int count_ = 0;
  int fd_ = -1;
  WireHeader hdrs_[kMaxDatagrams];
  mmsghdr msgs_[kMaxDatagrams];
  iovec iov_[kMaxDatagrams][kMaxIov];
  sockaddr_in dest_[kMaxDatagrams];
  uint32_t len_[kMaxDatagrams];  // header + payload bytes
  // The runs of one flush: a message each, their datagrams' iovecs end to
  // end, and the UDP_SEGMENT control message of those of two or more.
  mmsghdr out_[kMaxDatagrams];
  int first_[kMaxDatagrams];
  int run_[kMaxDatagrams];
  iovec run_iov_[kMaxDatagrams * kMaxIov];
  alignas(cmsghdr) char cbuf_[kMaxDatagrams][CMSG_SPACE(sizeof(uint16_t))];
};

}  // namespace uccl::transport::udp
