// Software NIC device context: opening the UDP sockets, its knobs, and the
// CQ/SRQ/AH/QP objects (receive: soft_device_rx.cc; send: _tx.cc; PD:
// soft_pd.cc).
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sock_diag.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "transport/udp/soft_nic.h"
#include "util/crc32c.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace uccl::transport::udp {

UCCL_KNOB(int64_t, knob_softnic_mtu, "UCCL_SOFTNIC_MTU", 0,
          "Software NIC: cap on payload bytes per datagram (0 = interface "
          "MTU minus 92 bytes of IP/UDP/UCCL headers; loopback ~64 KiB).",
          0, kMaxFragmentPayload);
UCCL_KNOB(int64_t, knob_softnic_sockbuf_kb, "UCCL_SOFTNIC_SOCKBUF_KB", 16384,
          "Software NIC: kernel socket send/receive buffer per device "
          "context, KiB (set with SO_*BUFFORCE when root).",
          64, 1 << 21);
UCCL_KNOB(double, knob_softnic_rate_gbps, "UCCL_SOFTNIC_RATE_GBPS", 0.0,
          "Software NIC: transmit rate limit per device context in Gb/s, like "
          "a NIC's line rate (0 = unlimited).",
          0.0, 10000.0);
UCCL_KNOB(int64_t, knob_softnic_speed_mbps, "UCCL_SOFTNIC_SPEED_MBPS", 0,
          "Software NIC: link speed to report in Mb/s (0 = the interface's "
          "from sysfs, or 100000 for virtual interfaces such as lo).",
          0, 1 << 30);
UCCL_KNOB(int64_t, knob_softnic_direct_rx_bytes, "UCCL_SOFTNIC_DIRECT_RX_BYTES",
          16384,
          "Software NIC: smallest WRITE payload, bytes, that the kernel "
          "copies straight into its destination (a header peek, then one "
          "receive into place) instead of through a staging buffer; checked "
          "there before it counts (transport/udp/wire.h). 0 = always staged.",
          0, kMaxFragmentPayload);
UCCL_KNOB(bool, knob_softnic_local_crc, "UCCL_SOFTNIC_LOCAL_CRC", false,
          "Software NIC: payload CRC32C also between QPs of this host. "
          "false (default): a datagram to a peer on this host (the kernel "
          "routes it through loopback, memory to memory, as it does without "
          "a UDP checksum) carries none where the peer offered to take it "
          "so; a peer that injects receive faults does not offer. true: "
          "every payload is summed (transport/udp/wire.h, \"Unsummed "
          "payloads\").",
          false, true);
UCCL_KNOB(bool, knob_softnic_splice, "UCCL_SOFTNIC_SPLICE", true,
          "Software NIC: an unsummed WRITE payload of 16 KiB or more that "
          "the engine marks as kept until acknowledged leaves by reference "
          "(vmsplice and splice: the kernel takes the pages, the sender "
          "copies nothing; the receiver's one copy reads them). Caps the "
          "payload MTU at 15 pages (61440 B on loopback) so every fragment "
          "fits the kernel's 17 fragments with its header (transport/udp/"
          "wire.h, \"Spliced payloads\"). false: every payload is copied.",
          false, true);
UCCL_KNOB(int64_t, knob_softnic_tx_budget, "UCCL_SOFTNIC_TX_BUDGET", 32,
          "Software NIC: most datagrams one QP sends per progress call.", 1,
          4096);

UCCL_KNOB(int64_t, knob_softnic_rx_budget, "UCCL_SOFTNIC_RX_BUDGET", 128,
          "Software NIC: datagrams one progress call takes from the sockets "
          "before it returns (a GRO buffer counts as the datagrams in it; "
          "each receive asks for as many buffers as the last one's "
          "datagrams per buffer leave room for, so the last may pass it); "
          "the engine handles completions, sends and ACKs between calls.",
          1, 1 << 20);

UCCL_KNOB(int64_t, knob_softnic_rc_window, "UCCL_SOFTNIC_RC_WINDOW", 64,
          "Software NIC RC: most unacknowledged packets per QP (go-back-N "
          "window).",
          1, 1 << 20);
UCCL_KNOB(bool, knob_softnic_priority_rx, "UCCL_SOFTNIC_PRIORITY_RX", false,
          "Software NIC: QPs that ask for it (the engine's descriptors, "
          "messages and ACKs) receive on a socket of their own, read before "
          "the data socket, so a backlog of data datagrams does not delay "
          "them; costs a receive call per progress round (256 B ping-pong "
          "0.3-2.7 us slower), so off unless bulk traffic both ways waits "
          "on control.");
UCCL_KNOB(bool, knob_softnic_gso, "UCCL_SOFTNIC_GSO", true,
          "Software NIC: each run of equal-sized datagrams to one peer in a "
          "send batch goes to the kernel as one UDP GSO message (one pass of "
          "the IP stack, qdisc and veth for up to 64 datagrams, cut at the "
          "device or not at all); where the kernel refuses it, single "
          "datagrams. Matters where the MTU is small (Ethernet, veth), not on "
          "loopback's 64 KiB datagrams.");
UCCL_KNOB(bool, knob_softnic_gro, "UCCL_SOFTNIC_GRO", true,
          "Software NIC: the data socket takes UDP GRO buffers (datagrams of "
          "one flow the kernel coalesced, e.g. a peer's GSO run through lo "
          "or a veth, or a NIC's GRO) and splits them, so the kernel neither "
          "cuts them into skbs nor queues each alone.");
// The timeout an RC QP starts from follows its measured RTT (srtt + 4
// rttvar, RFC 6298) when that is shorter than the configured one, so a lost
// packet that nothing follows (a lone receive descriptor, the tail of a
// message) is resent after a few RTTs, not after the verbs timeout, which
// engines set for dead peers and stalled hosts. The floor keeps scheduling
// jitter on busy hosts from firing it early; at or above the configured
// timeout, RTTs change nothing. Retries double it, each wait at most 64x
// the configured timeout, so a dead peer still takes about as long to find.
UCCL_KNOB(int64_t, knob_softnic_rc_min_timeout_us,
          "UCCL_SOFTNIC_RC_MIN_TIMEOUT_US", 200,
          "Software NIC RC: the least retransmission timeout the measured "
          "RTT may give, microseconds (at or above a QP's configured "
          "timeout: no RTT-based timeout).",
          1, 100000000);

namespace {

void set_sockbuf(int fd, int bytes) {
  // FORCE variants ignore net.core.*mem_max (needs CAP_NET_ADMIN).
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  }
}

uint32_t payload_mtu_for(uint32_t if_mtu) {
  constexpr uint32_t kOverhead = 20 + 8 + sizeof(WireHeader);
  uint32_t m = if_mtu > kOverhead ? if_mtu - kOverhead : 256;
  m = std::min(m, kMaxFragmentPayload);
  return m & ~63u;  // keep fragments 64-byte aligned
}

}  // namespace

Result<std::unique_ptr<SoftDevice>> SoftDevice::open(
    const NetIf& nif, const std::string& name, const DeviceOptions& opts) {
  UCCL_ASSIGN_OR_RETURN(SoftNicParams params,
                        SoftNicParams::parse(opts.backend_params));
  std::unique_ptr<SoftDevice> d(new SoftDevice());
  d->clock_ = opts.clock ? opts.clock : SystemClock::get();
  FaultOptions faults = opts.faults;
  if (opts.faults_from_knobs) {
    auto f = FaultOptions::from_knobs();
    if (!f.ok()) return f.status();
    faults = *f;
  }
  d->faults_ = std::make_unique<FaultInjector>(faults);
  UCCL_RETURN_IF_ERROR(d->open_socket(
      nif, params.priority_rx >= 0 ? params.priority_rx == 1
                                   : knob_softnic_priority_rx().get()));
  d->enable_rx_meta(opts);
  if (params.gro >= 0 ? params.gro == 1 : knob_softnic_gro().get()) {
    // GRO's segment size comes in a control message (RxMeta).
    const int on = 1;
    if (setsockopt(d->fd_, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0) {
      d->rx_meta_on_ = true;
      d->rx_segs_hint_ = kGroMaxSegments;
    }
  }
  d->tx_ttl_ = params.ttl;
  d->tx_batch_.set_gso(params.gso >= 0 ? params.gso == 1
                                       : knob_softnic_gso().get());
  for (int fd : {d->fd_, d->prio_fd_}) {
    if (d->tx_ttl_ > 0 && fd >= 0 &&
        setsockopt(fd, IPPROTO_IP, IP_TTL, &d->tx_ttl_, sizeof(d->tx_ttl_)) !=
            0) {
      return ErrnoStatus("software NIC ttl", errno);
    }
  }
  d->choose_mtu(nif, name, opts, params);
  d->fill_info(nif, name);
  d->alloc_buffers(opts, params);
  VLOG(kVlogLifecycle) << "software NIC " << name << " on " << d->info_.ip
                       << ":" << d->udp_port() << " mtu " << d->mtu_
                       << " faults tx=" << faults.tx.to_string()
                       << " rx=" << faults.rx.to_string();
  return d;
}

// A UDP socket bound to `ipv4_be` on a port the kernel picks, its buffers
// sized by UCCL_SOFTNIC_SOCKBUF_KB; its address in `*local`.
Status SoftDevice::open_bound_socket(uint32_t ipv4_be, int* fd,
                                     sockaddr_in* local) {
  *fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return ErrnoStatus("software NIC socket", errno);
  set_sockbuf(*fd, sockbuf_bytes_);
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = ipv4_be;
  addr.sin_port = 0;
  if (bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus("bind software NIC to " + ipv4_to_string(ipv4_be),
                       errno);
  }
  socklen_t len = sizeof(*local);
  getsockname(*fd, reinterpret_cast<sockaddr*>(local), &len);
  return Status::OK();
}

// The data socket on the interface's address, the priority socket beside
// it (`priority_rx`) and, with both, an epoll set of the two for an idle
// owner to wait on; the knobs the datapath uses, read once.
Status SoftDevice::open_socket(const NetIf& nif, bool priority_rx) {
  sockbuf_bytes_ = static_cast<int>(knob_softnic_sockbuf_kb().get() * 1024);
  tx_budget_ = static_cast<uint32_t>(knob_softnic_tx_budget().get());
  rx_budget_ = static_cast<int>(knob_softnic_rx_budget().get());
  rc_window_pkts_ = static_cast<uint32_t>(knob_softnic_rc_window().get());
  rc_min_timeout_ns_ =
      static_cast<uint64_t>(knob_softnic_rc_min_timeout_us().get()) * 1000;
  UCCL_RETURN_IF_ERROR(open_bound_socket(nif.ipv4_be, &fd_, &local_));
  int rcvbuf = 0;
  socklen_t rl = sizeof(rcvbuf);
  if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rl) == 0) {
    info_.rx_buffer_bytes = static_cast<uint64_t>(rcvbuf);
  }
  if (!priority_rx) return Status::OK();
  UCCL_RETURN_IF_ERROR(open_bound_socket(nif.ipv4_be, &prio_fd_, &prio_local_));
  wait_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (wait_fd_ < 0) return ErrnoStatus("software NIC epoll", errno);
  for (int fd : {fd_, prio_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(wait_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return ErrnoStatus("software NIC epoll_ctl", errno);
    }
  }
  return Status::OK();
}

// Control messages the receive path asks the kernel for (nic.h,
// DeviceOptions). Timestamps need the system clock: another clock (a
// test's) has no known relation to the kernel's CLOCK_REALTIME stamps.
void SoftDevice::enable_rx_meta(const DeviceOptions& opts) {
  const int on = 1;
  auto both = [&](int level, int name) {
    return setsockopt(fd_, level, name, &on, sizeof(on)) == 0 &&
           (prio_fd_ < 0 ||
            setsockopt(prio_fd_, level, name, &on, sizeof(on)) == 0);
  };
  rx_ts_ = opts.rx_timestamps && clock_ == SystemClock::get() &&
           both(SOL_SOCKET, SO_TIMESTAMPNS);
  const bool ttl = opts.hop_limits && both(IPPROTO_IP, IP_RECVTTL);
  rx_meta_on_ = rx_ts_ || ttl;
}

// The payload MTU: the interface's, at most UCCL_SOFTNIC_MTU and the
// options', and one splice pipe's pages where payloads are spliced.
void SoftDevice::choose_mtu(const NetIf& nif, const std::string& name,
                            const DeviceOptions& opts,
                            const SoftNicParams& params) {
  mtu_cap_ = kMaxFragmentPayload & ~63u;
  if (knob_softnic_mtu().get() > 0) {
    mtu_cap_ = std::min<uint32_t>(mtu_cap_, knob_softnic_mtu().get());
  }
  if (opts.mtu_bytes > 0) mtu_cap_ = std::min(mtu_cap_, opts.mtu_bytes);
  mtu_ = std::min(payload_mtu_for(nif.mtu ? nif.mtu : 1500), mtu_cap_);
  local_unsummed_ = params.local_crc >= 0 ? params.local_crc == 0
                                          : !knob_softnic_local_crc().get();
  // Splicing applies to unsummed payloads only (a summed one is read for
  // its CRC anyway). Its pipe holds one payload's pages at a time.
  const bool splice =
      params.splice >= 0 ? params.splice == 1 : knob_softnic_splice().get();
  if (splice && local_unsummed_) {
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0) {
      splice_r_ = p[0];
      splice_w_ = p[1];
      // Room for a payload's 16 pages and more, whatever the default.
      fcntl(p[1], F_SETPIPE_SZ, 256 << 10);
      const long page = sysconf(_SC_PAGESIZE);
      const uint32_t max_payload = static_cast<uint32_t>(
          std::min<long>(page * (kSpliceMaxPages - 1), kMaxFragmentPayload));
      mtu_cap_ = std::min(mtu_cap_, max_payload & ~63u);
      mtu_ = std::min(mtu_, mtu_cap_);
    } else {
      LOG(WARNING) << name << ": no pipe for splicing (" << strerror(errno)
                   << "); payloads are copied";
    }
  }
}

void SoftDevice::fill_info(const NetIf& nif, const std::string& name) {
  info_.name = name;
  info_.backend = "udp";
  info_.netdev = nif.name;
  info_.ip = ipv4_to_string(nif.ipv4_be);
  info_.mtu_bytes = mtu_;
  // Peers on this host: what path_mtu_to() finds for them (through lo).
  bool through_lo = false;
  auto local_mtu = path_mtu_to(htonl(INADDR_LOOPBACK), &through_lo);
  if (local_mtu.ok() && through_lo) info_.local_mtu_bytes = *local_mtu;
  // Ethernet 14 (+4 FCS) + IPv4 20 + UDP 8 + our header.
  info_.wire_overhead_bytes = 18 + 20 + 8 + sizeof(WireHeader);
  info_.numa_node = nif.numa_node;
  info_.pci_path = nif.pci_path;
  info_.active = true;
  int64_t speed = knob_softnic_speed_mbps().get();
  info_.link_speed_mbps =
      speed > 0 ? speed : (nif.speed_mbps ? nif.speed_mbps : 100000);
  info_.link_speed_known = speed > 0 || nif.speed_mbps != 0;
  info_.guid = (static_cast<uint64_t>(ntohl(nif.ipv4_be)) << 16) |
               ntohs(local_.sin_port);
}

// Receive batches, scratch buffers, the fault delay line (always there, so
// faults can be switched on at run time without allocating), the rate
// limiter and a random first QPN.
void SoftDevice::alloc_buffers(const DeviceOptions& opts,
                               const SoftNicParams& params) {
  rx_bufs_.reset(new uint8_t[static_cast<size_t>(kRxBatch) * kRxBufBytes]);
  for (int i = 0; i < kRxBatch; ++i) {
    rx_iov_[i].iov_base = rx_bufs_.get() + static_cast<size_t>(i) * kRxBufBytes;
    rx_iov_[i].iov_len = kRxBufBytes;
    std::memset(&rx_msgs_[i], 0, sizeof(mmsghdr));
    rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
    rx_msgs_[i].msg_hdr.msg_iovlen = 1;
    rx_msgs_[i].msg_hdr.msg_name = &rx_from_[i];
    rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    if (rx_meta_on_) {
      rx_msgs_[i].msg_hdr.msg_control = rx_cbuf_[i];
      rx_msgs_[i].msg_hdr.msg_controllen = kRxCmsgBytes;
    }
  }
  direct_rx_bytes_ = static_cast<uint32_t>(
      params.direct_rx_bytes >= 0
          ? std::min<int64_t>(params.direct_rx_bytes, kMaxFragmentPayload)
          : knob_softnic_direct_rx_bytes().get());
  scratch_.reset(new uint8_t[kRxBufBytes]);
  tx_scratch_.reset(new uint8_t[kRxBufBytes]);
  // The delay line is always there (4 MiB) so faults can be switched on
  // at run time (FaultInjector::set_spec) without allocating later.
  held_.resize(64);
  for (auto& h : held_) h.data.reset(new uint8_t[kRxBufBytes]);
  set_rate(opts.rate_gbps >= 0 ? opts.rate_gbps
                               : knob_softnic_rate_gbps().get());
  // Random first QPN so a restarted peer's stale packets miss new QPs.
  uint64_t seed = now_ns() ^ (static_cast<uint64_t>(getpid()) << 20) ^
                  ntohs(local_.sin_port);
  next_qpn_ = static_cast<uint32_t>((seed * 0x9E3779B97F4A7C15ull) >> 40) | 1;
  qps_.reserve(1024);
  pending_.reserve(1024);
}

SoftDevice::~SoftDevice() {
  if (fd_ >= 0) close(fd_);
  if (prio_fd_ >= 0) close(prio_fd_);
  if (wait_fd_ >= 0) close(wait_fd_);
  if (splice_r_ >= 0) close(splice_r_);
  if (splice_w_ >= 0) close(splice_w_);
}

PortAddress SoftDevice::port_address() const {
  PortAddress a;
  ipv4_to_gid(local_.sin_addr.s_addr, a.gid);
  a.udp_port = udp_port();
  return a;
}

PortAddress SoftDevice::priority_address() const {
  PortAddress a = port_address();
  if (prio_fd_ >= 0) a.udp_port = ntohs(prio_local_.sin_port);
  return a;
}

Result<std::unique_ptr<ProtectionDomain>> SoftDevice::alloc_pd() {
  return std::unique_ptr<ProtectionDomain>(new SoftPd());
}

Result<std::unique_ptr<CompletionQueue>> SoftDevice::create_cq(uint32_t cqe) {
  if (cqe == 0 || cqe > (1u << 22)) {
    return InvalidArgument("create_cq: cqe must be in [1, 4M]");
  }
  return std::unique_ptr<CompletionQueue>(new SoftCq(this, cqe));
}

Result<std::unique_ptr<SharedReceiveQueue>> SoftDevice::create_srq(
    ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) {
  auto* spd = dynamic_cast<SoftPd*>(pd);
  if (spd == nullptr)
    return InvalidArgument("create_srq: PD of another device");
  if (max_wr == 0 || max_wr > (1u << 20) || max_sge > kMaxSge) {
    return InvalidArgument("create_srq: max_wr in [1, 1M], max_sge <= 8");
  }
  return std::unique_ptr<SharedReceiveQueue>(new SoftSrq(spd, max_wr, max_sge));
}

Result<uint32_t> SoftDevice::path_mtu_to(uint32_t ipv4_be, bool* local) const {
  uint32_t mtu = mtu_;
  // Wildcard device: the interface the route takes. Any device: a peer on
  // this host is reached through loopback (its MTU, often 64 KiB).
  auto nif = route_to(ipv4_be);
  if (local != nullptr) *local = nif.ok() && nif->loopback;
  if (nif.ok() && (local_.sin_addr.s_addr == 0 || nif->loopback)) {
    mtu = payload_mtu_for(nif->mtu ? nif->mtu : 1500);
  } else if (!nif.ok() && local_.sin_addr.s_addr == 0) {
    return nif.status();
  }
  return std::min(mtu, mtu_cap_);
}

Result<std::unique_ptr<AddressHandle>> SoftDevice::create_ah(
    ProtectionDomain* pd, const PortAddress& dest) {
  if (dynamic_cast<SoftPd*>(pd) == nullptr) {
    return InvalidArgument("create_ah: PD of another device");
  }
  uint32_t ip = 0;
  if (!gid_to_ipv4(dest.gid, &ip) || dest.udp_port == 0) {
    return InvalidArgument("create_ah: destination " + dest.to_string() +
                           " is not an IPv4 software-NIC address");
  }
  UCCL_ASSIGN_OR_RETURN(uint32_t mtu, path_mtu_to(ip));
  sockaddr_in sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = ip;
  sa.sin_port = htons(dest.udp_port);
  return std::unique_ptr<AddressHandle>(new SoftAh(dest, sa, mtu));
}

Result<std::unique_ptr<QueuePair>> SoftDevice::create_qp(const QpConfig& cfg) {
  UCCL_RETURN_IF_ERROR(check_qp_config(cfg, this));
  // A priority QP that shares a socket sends from the priority socket, so
  // that the address it gives its peers is also its datagrams' source.
  int tx_fd = cfg.priority_rx && prio_fd_ >= 0 ? prio_fd_ : fd_;
  if (cfg.own_flow_entropy && cfg.type != QpType::kUD) {
    tx_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (tx_fd < 0) return ErrnoStatus("QP source-port socket", errno);
    set_sockbuf(tx_fd, sockbuf_bytes_);
    if (tx_ttl_ > 0 &&
        setsockopt(tx_fd, IPPROTO_IP, IP_TTL, &tx_ttl_, sizeof(tx_ttl_)) != 0) {
      Status st = ErrnoStatus("QP source-port socket ttl", errno);
      close(tx_fd);
      return st;
    }
    sockaddr_in a = local_;
    a.sin_port = 0;
    if (bind(tx_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      Status st = ErrnoStatus("bind QP source port", errno);
      close(tx_fd);
      return st;
    }
  }
  uint32_t qpn;
  do {
    qpn = next_qpn_++ & 0xffffff;
  } while (qpn == 0 || qps_.count(qpn));
  auto* qp = new SoftQp(this, cfg, qpn, tx_fd);
  qps_[qpn] = qp;
  // A QP is in each work list at most once (its flag says so), so lists of
  // one slot per QP never grow on the datapath: capacity is taken here.
  pending_.reserve(qps_.size());
  later_.reserve(qps_.size());
  rc_armed_.reserve(qps_.size());
  acks_held_.reserve(qps_.size());
  VLOG(kVlogLifecycle) << info_.name << ": created " << qp_type_name(cfg.type)
                       << " QP " << qpn;
  return std::unique_ptr<QueuePair>(qp);
}

uint64_t SoftDevice::kernel_drops() const {
  // SK_MEMINFO_DROPS: datagrams the kernel dropped for a socket (receive
  // buffer full), the count SO_RXQ_OVFL would report; both sockets'.
  uint64_t drops = 0;
  for (int fd : {fd_, prio_fd_}) {
    uint32_t mem[SK_MEMINFO_VARS] = {};
    socklen_t len = sizeof(mem);
    if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &len) == 0 &&
        len >= sizeof(uint32_t) * (SK_MEMINFO_DROPS + 1)) {
      drops += mem[SK_MEMINFO_DROPS];
    }
  }
  return drops;
}

const SoftCounters& SoftDevice::counters() const {
  counters_.drop_kernel_rcvbuf = kernel_drops();
  return counters_;
}

uint64_t SoftDevice::drops() const {
  const SoftCounters& c = counters();
  return c.drop_malformed + c.drop_bad_version + c.drop_bad_crc +
         c.drop_unknown_qp + c.drop_wrong_source + c.drop_stale_ack +
         c.drop_wrong_state + c.drop_bad_rkey + c.drop_refused +
         c.drop_out_of_bounds + c.drop_no_access + c.drop_no_recv +
         c.drop_recv_too_small + c.drop_out_of_sequence + c.drop_duplicate +
         c.drop_qkey + c.drop_cq_full + c.drop_kernel_rcvbuf + c.tx_errors;
}

std::string SoftDevice::counters_text() const {
  std::ostringstream os;
  const SoftCounters& c = counters();
#define UCCL_COUNTER(name) os << #name " " << c.name << "\n"
  UCCL_COUNTER(tx_packets);
  UCCL_COUNTER(tx_bytes);
  UCCL_COUNTER(rx_packets);
  UCCL_COUNTER(rx_bytes);
  UCCL_COUNTER(rx_direct);
  UCCL_COUNTER(rx_gro_packets);
  UCCL_COUNTER(tx_unsummed);
  UCCL_COUNTER(tx_spliced);
  UCCL_COUNTER(tx_splice_fallbacks);
  UCCL_COUNTER(tx_gso_sends);
  UCCL_COUNTER(tx_gso_segments);
  UCCL_COUNTER(tx_gso_refused);
  UCCL_COUNTER(drop_malformed);
  UCCL_COUNTER(drop_bad_version);
  UCCL_COUNTER(drop_bad_crc);
  UCCL_COUNTER(drop_unknown_qp);
  UCCL_COUNTER(drop_wrong_source);
  UCCL_COUNTER(drop_stale_ack);
  UCCL_COUNTER(drop_wrong_state);
  UCCL_COUNTER(drop_bad_rkey);
  UCCL_COUNTER(drop_refused);
  UCCL_COUNTER(drop_out_of_bounds);
  UCCL_COUNTER(drop_no_access);
  UCCL_COUNTER(drop_no_recv);
  UCCL_COUNTER(drop_recv_too_small);
  UCCL_COUNTER(drop_out_of_sequence);
  UCCL_COUNTER(drop_duplicate);
  UCCL_COUNTER(drop_qkey);
  UCCL_COUNTER(drop_cq_full);
  UCCL_COUNTER(tx_errors);
  UCCL_COUNTER(rc_retransmits);
  UCCL_COUNTER(rc_timeouts);
  UCCL_COUNTER(rc_timer_checks);
  UCCL_COUNTER(acks_sent);
  UCCL_COUNTER(naks_sent);
  UCCL_COUNTER(rnr_naks_sent);
  UCCL_COUNTER(acks_received);
  UCCL_COUNTER(acks_carried);
  UCCL_COUNTER(acks_carried_received);
  UCCL_COUNTER(fault_hold_overflow);
  UCCL_COUNTER(drop_kernel_rcvbuf);
#undef UCCL_COUNTER
  os << faults_->counters_text();
  return os.str();
}

}  // namespace uccl::transport::udp
