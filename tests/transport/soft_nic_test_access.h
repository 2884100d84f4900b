// Test hooks into the software NIC (friend of SoftQp and SoftDevice), for
// unit tests and fuzz targets that need to reach below the verbs interface.
#pragma once

#include <netinet/in.h>

#include <cstdint>

#include "transport/udp/soft_nic.h"

namespace uccl::transport::udp {

class SoftNicTestAccess {
 public:
  // The socket a QP sends from (its own source port, or the device's),
  // connected to its peer: tests send crafted datagrams through it to
  // forge the peer's address exactly.
  static int tx_fd(QueuePair* qp) { return static_cast<SoftQp*>(qp)->tx_fd_; }
  // Hands `len` bytes to the device as a datagram received from `from`
  // (the path every received datagram takes after the socket).
  static void handle_datagram(Device* dev, uint8_t* buf, uint32_t len,
                              const sockaddr_in& from, uint64_t now_ns) {
    static_cast<SoftDevice*>(dev)->handle_datagram(buf, len, from, now_ns);
  }
  // Hands `len` bytes to the device as a buffer the kernel coalesced (UDP
  // GRO) into datagrams of `segment` bytes (the last may be shorter), as
  // the socket path does; returns how many datagrams it took.
  static uint32_t take_gro_buffer(Device* dev, uint8_t* buf, uint32_t len,
                                  uint32_t segment, const sockaddr_in& from,
                                  uint64_t now_ns) {
    auto* d = static_cast<SoftDevice*>(dev);
    d->cur_rx_.gro_segment = segment;
    const uint32_t n = d->take_datagrams(buf, len, from, now_ns, d->fd_);
    d->cur_rx_ = RxMeta{};
    return n;
  }
  // The device's data socket.
  static int rx_fd(Device* dev) { return static_cast<SoftDevice*>(dev)->fd_; }
  // The PSN a UC/RC QP expects next from its peer.
  static uint32_t expected_psn(QueuePair* qp) {
    return static_cast<SoftQp*>(qp)->epsn_;
  }
  // The address and port a QP's datagrams come from, as its peer sees it.
  static sockaddr_in source_of(QueuePair* qp) {
    auto* q = static_cast<SoftQp*>(qp);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(q->tx_port_);
    return a;
  }
};

}  // namespace uccl::transport::udp
