// What the kernel tells the software NIC about each received datagram in
// control messages: its arrival time, IP TTL and, if coalesced, segment size.
#pragma once

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <time.h>

#include <cstdint>
#include <cstring>

namespace uccl::transport::udp {

struct RxMeta {
  uint64_t arrival_ns = 0;  // on the device's clock; 0 = unknown
  int ttl = -1;             // -1 = unknown
  // UDP GRO (UDP_GRO on the socket): the buffer holds datagrams of this
  // size end to end, the last possibly shorter; 0 = one datagram.
  uint32_t gro_segment = 0;
};

// Control-message room per datagram for all three.
constexpr size_t kRxCmsgBytes = CMSG_SPACE(sizeof(timespec)) +
                                CMSG_SPACE(sizeof(int)) +
                                CMSG_SPACE(sizeof(int));

// Reads m's control messages. The kernel stamps CLOCK_REALTIME;
// `realtime_to_clock_ns` is the device clock minus CLOCK_REALTIME, taken
// when the batch was received (0 with `convert` false: no timestamps).
inline RxMeta parse_rx_meta(const msghdr& m, bool convert,
                            int64_t realtime_to_clock_ns) {
  RxMeta r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS &&
        c->cmsg_len >= CMSG_LEN(sizeof(timespec)) && convert) {
      timespec ts;
      std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
      const int64_t t = static_cast<int64_t>(ts.tv_sec) * 1000000000 +
                        ts.tv_nsec + realtime_to_clock_ns;
      if (t > 0) r.arrival_ns = static_cast<uint64_t>(t);
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL &&
               c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      std::memcpy(&r.ttl, CMSG_DATA(c), sizeof(int));
    } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
               c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int seg = 0;
      std::memcpy(&seg, CMSG_DATA(c), sizeof(int));
      if (seg > 0) r.gro_segment = static_cast<uint32_t>(seg);
    }
  }
  return r;
}

}  // namespace uccl::transport::udp
