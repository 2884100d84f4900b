// Software NIC device context: the UDP receive socket, datagram validation
// and demultiplexing, batched transmit, rate limiting, the fault-injection
// delay line, and the PD/MR/CQ/SRQ/AH objects.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sock_diag.h>
#include <netinet/udp.h>
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

// ----------------------------------------------------------------- PD / MR

Result<std::unique_ptr<MemoryRegion>> SoftPd::reg_mr(void* addr, size_t len,
                                                     uint32_t access) {
  if (addr == nullptr || len == 0) {
    return InvalidArgument("reg_mr: empty region");
  }
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (a + len < a) return InvalidArgument("reg_mr: region wraps around");
  if (access & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)) {
    return InvalidArgument("reg_mr: unknown access flags");
  }
  if ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)) {
    // Same rule as verbs: remote write requires local write.
    return InvalidArgument("reg_mr: REMOTE_WRITE requires LOCAL_WRITE");
  }
  UCCL_ASSIGN_OR_RETURN(uint32_t key, table_.add(a, len, access));
  return std::unique_ptr<MemoryRegion>(new SoftMr(this, a, len, access, key));
}

Result<std::unique_ptr<MemoryWindow>> SoftPd::alloc_mw() {
  UCCL_ASSIGN_OR_RETURN(uint32_t index, table_.reserve());
  return std::unique_ptr<MemoryWindow>(new SoftMw(this, index));
}

SoftMw::~SoftMw() { pd_->table().release(index_); }

Result<uint32_t> SoftMw::bind(const MemoryRegion& mr, uint64_t addr,
                              uint64_t len, uint32_t access) {
  if (addr < mr.addr() || addr - mr.addr() > mr.length() ||
      len > mr.length() - (addr - mr.addr())) {
    return OutOfRange("memory window outside its region");
  }
  if ((mr.access() & access) != access) {
    return PermissionDenied("memory window needs rights its region lacks");
  }
  return pd_->table().rebind(index_, addr, len, access, mr.lkey());
}

void SoftMw::invalidate() { pd_->table().unbind(index_); }

SoftMr::SoftMr(SoftPd* pd, uint64_t addr, size_t len, uint32_t access,
               uint32_t key)
    : pd_(pd) {
  addr_ = addr;
  length_ = len;
  access_ = access;
  lkey_ = rkey_ = key;
}

SoftMr::~SoftMr() { pd_->table().remove(lkey_); }

// -------------------------------------------------------------- RecvRing

RecvRing::RecvRing(uint32_t capacity, uint32_t max_sge)
    : ring_(round_pow2(std::max(capacity, 1u))),
      mask_(ring_.size() - 1),
      max_sge_(std::min<uint32_t>(max_sge, kMaxSge)) {}

Status RecvRing::post(const RecvWr* wr, const RecvWr** bad_wr, MrTable* mrs) {
  for (; wr != nullptr; wr = wr->next) {
    Status st;
    if (tail_ - head_ >= ring_.size()) {
      st = ResourceExhausted("receive queue full (" +
                             std::to_string(ring_.size()) + " entries)");
    } else if (wr->num_sge < 0 ||
               static_cast<uint32_t>(wr->num_sge) > max_sge_) {
      st = InvalidArgument("post_recv: " + std::to_string(wr->num_sge) +
                           " SGEs > max_recv_sge " + std::to_string(max_sge_));
    }
    RecvEntry e;
    e.wr_id = wr->wr_id;
    e.num_sge = wr->num_sge;
    uint64_t total = 0;
    for (int i = 0; st.ok() && i < wr->num_sge; ++i) {
      const Sge& s = wr->sg_list[i];
      if (s.length > 0) {
        MrTable::Check c =
            mrs->check(s.lkey, s.addr, s.length, kAccessLocalWrite);
        if (c != MrTable::Check::kOk) {
          st = PermissionDenied(
              "post_recv: SGE " + std::to_string(i) +
              (c == MrTable::Check::kBadKey        ? " has an invalid lkey"
               : c == MrTable::Check::kOutOfBounds ? " is outside its region"
                                                   : " lacks LOCAL_WRITE"));
        }
      }
      e.sge[i] = s;
      total += s.length;
    }
    if (st.ok() && total > 0x80000000ull) {
      st = InvalidArgument("post_recv: receive larger than 2 GiB");
    }
    if (!st.ok()) {
      if (bad_wr) *bad_wr = wr;
      return st;
    }
    e.total_len = static_cast<uint32_t>(total);
    ring_[tail_ & mask_] = e;
    ++tail_;
  }
  return Status::OK();
}

bool RecvRing::pop(RecvEntry* out) {
  if (head_ == tail_) return false;
  *out = ring_[head_ & mask_];
  ++head_;
  return true;
}

// ------------------------------------------------------------------ Device

Result<std::unique_ptr<SoftDevice>> SoftDevice::open(
    const NetIf& nif, const std::string& name, const DeviceOptions& opts) {
  std::unique_ptr<SoftDevice> d(new SoftDevice());
  d->clock_ = opts.clock ? opts.clock : SystemClock::get();
  FaultOptions faults = opts.faults;
  if (opts.faults_from_knobs) {
    auto f = FaultOptions::from_knobs();
    if (!f.ok()) return f.status();
    faults = *f;
  }
  d->faults_ = std::make_unique<FaultInjector>(faults);

  d->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (d->fd_ < 0) return ErrnoStatus("software NIC socket", errno);
  d->sockbuf_bytes_ = static_cast<int>(knob_softnic_sockbuf_kb().get() * 1024);
  set_sockbuf(d->fd_, d->sockbuf_bytes_);
  int rcvbuf = 0;
  socklen_t rl = sizeof(rcvbuf);
  if (getsockopt(d->fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rl) == 0) {
    d->info_.rx_buffer_bytes = static_cast<uint64_t>(rcvbuf);
  }
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = nif.ipv4_be;
  addr.sin_port = 0;
  if (bind(d->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus("bind software NIC to " + ipv4_to_string(nif.ipv4_be),
                       errno);
  }
  socklen_t len = sizeof(d->local_);
  getsockname(d->fd_, reinterpret_cast<sockaddr*>(&d->local_), &len);

  d->mtu_cap_ = kMaxFragmentPayload & ~63u;
  if (knob_softnic_mtu().get() > 0) {
    d->mtu_cap_ = std::min<uint32_t>(d->mtu_cap_, knob_softnic_mtu().get());
  }
  if (opts.mtu_bytes > 0) d->mtu_cap_ = std::min(d->mtu_cap_, opts.mtu_bytes);
  d->mtu_ = std::min(payload_mtu_for(nif.mtu ? nif.mtu : 1500), d->mtu_cap_);
  d->local_unsummed_ = opts.local_crc >= 0 ? opts.local_crc == 0
                                           : !knob_softnic_local_crc().get();
  // Splicing applies to unsummed payloads only (a summed one is read for
  // its CRC anyway). Its pipe holds one payload's pages at a time.
  const bool splice =
      opts.splice >= 0 ? opts.splice == 1 : knob_softnic_splice().get();
  if (splice && d->local_unsummed_) {
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0) {
      d->splice_r_ = p[0];
      d->splice_w_ = p[1];
      // Room for a payload's 16 pages and more, whatever the default.
      fcntl(p[1], F_SETPIPE_SZ, 256 << 10);
      const long page = sysconf(_SC_PAGESIZE);
      const uint32_t max_payload = static_cast<uint32_t>(
          std::min<long>(page * (kSpliceMaxPages - 1), kMaxFragmentPayload));
      d->mtu_cap_ = std::min(d->mtu_cap_, max_payload & ~63u);
      d->mtu_ = std::min(d->mtu_, d->mtu_cap_);
    } else {
      LOG(WARNING) << name << ": no pipe for splicing (" << strerror(errno)
                   << "); payloads are copied";
    }
  }

  d->info_.name = name;
  d->info_.backend = "udp";
  d->info_.netdev = nif.name;
  d->info_.ip = ipv4_to_string(nif.ipv4_be);
  d->info_.mtu_bytes = d->mtu_;
  // Peers on this host: what path_mtu_to() finds for them (through lo).
  bool through_lo = false;
  auto local_mtu = d->path_mtu_to(htonl(INADDR_LOOPBACK), &through_lo);
  if (local_mtu.ok() && through_lo) d->info_.local_mtu_bytes = *local_mtu;
  // Ethernet 14 (+4 FCS) + IPv4 20 + UDP 8 + our header.
  d->info_.wire_overhead_bytes = 18 + 20 + 8 + sizeof(WireHeader);
  d->info_.numa_node = nif.numa_node;
  d->info_.pci_path = nif.pci_path;
  d->info_.active = true;
  int64_t speed = knob_softnic_speed_mbps().get();
  d->info_.link_speed_mbps =
      speed > 0 ? speed : (nif.speed_mbps ? nif.speed_mbps : 100000);
  d->info_.link_speed_known = speed > 0 || nif.speed_mbps != 0;
  d->info_.guid = (static_cast<uint64_t>(ntohl(nif.ipv4_be)) << 16) |
                  ntohs(d->local_.sin_port);

  d->rx_bufs_.reset(new uint8_t[static_cast<size_t>(kRxBatch) * kRxBufBytes]);
  for (int i = 0; i < kRxBatch; ++i) {
    d->rx_iov_[i].iov_base =
        d->rx_bufs_.get() + static_cast<size_t>(i) * kRxBufBytes;
    d->rx_iov_[i].iov_len = kRxBufBytes;
    std::memset(&d->rx_msgs_[i], 0, sizeof(mmsghdr));
    d->rx_msgs_[i].msg_hdr.msg_iov = &d->rx_iov_[i];
    d->rx_msgs_[i].msg_hdr.msg_iovlen = 1;
    d->rx_msgs_[i].msg_hdr.msg_name = &d->rx_from_[i];
    d->rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
  }
  d->direct_rx_bytes_ = static_cast<uint32_t>(
      opts.direct_rx_bytes >= 0
          ? std::min<int64_t>(opts.direct_rx_bytes, kMaxFragmentPayload)
          : knob_softnic_direct_rx_bytes().get());
  d->scratch_.reset(new uint8_t[kRxBufBytes]);
  d->tx_scratch_.reset(new uint8_t[kRxBufBytes]);
  // The delay line is always there (4 MiB) so faults can be switched on
  // at run time (FaultInjector::set_spec) without allocating later.
  d->held_.resize(64);
  for (auto& h : d->held_) h.data.reset(new uint8_t[kRxBufBytes]);
  d->set_rate(opts.rate_gbps >= 0 ? opts.rate_gbps
                                  : knob_softnic_rate_gbps().get());
  // Random first QPN so a restarted peer's stale packets miss new QPs.
  uint64_t seed = d->now_ns() ^ (static_cast<uint64_t>(getpid()) << 20) ^
                  ntohs(d->local_.sin_port);
  d->next_qpn_ =
      static_cast<uint32_t>((seed * 0x9E3779B97F4A7C15ull) >> 40) | 1;
  d->qps_.reserve(1024);
  d->pending_.reserve(1024);
  VLOG(kVlogLifecycle) << "software NIC " << name << " on " << d->info_.ip
                       << ":" << d->udp_port() << " mtu " << d->mtu_
                       << " faults tx=" << faults.tx.to_string()
                       << " rx=" << faults.rx.to_string();
  return d;
}

SoftDevice::~SoftDevice() {
  if (fd_ >= 0) close(fd_);
  if (splice_r_ >= 0) close(splice_r_);
  if (splice_w_ >= 0) close(splice_w_);
}

PortAddress SoftDevice::port_address() const {
  PortAddress a;
  ipv4_to_gid(local_.sin_addr.s_addr, a.gid);
  a.udp_port = udp_port();
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

Status check_qp_config(const QpConfig& cfg, const Device* dev) {
  if (dynamic_cast<SoftPd*>(cfg.pd) == nullptr) {
    return InvalidArgument("create_qp: missing PD or PD of another device");
  }
  if (!RingCq::of(cfg.send_cq, dev) || !RingCq::of(cfg.recv_cq, dev)) {
    return InvalidArgument(
        "create_qp: send_cq and recv_cq of this device are required");
  }
  if (cfg.srq != nullptr && dynamic_cast<SoftSrq*>(cfg.srq) == nullptr) {
    return InvalidArgument("create_qp: SRQ of another device");
  }
  if (cfg.max_send_wr == 0 || cfg.max_send_wr > (1u << 16) ||
      cfg.max_recv_wr > (1u << 16)) {
    return InvalidArgument(
        "create_qp: max_send_wr in [1, 65536], "
        "max_recv_wr <= 65536");
  }
  if (cfg.max_send_sge > kMaxSge || cfg.max_recv_sge > kMaxSge) {
    return InvalidArgument("create_qp: at most 8 SGEs per WR");
  }
  if (cfg.max_inline_data > 4096) {
    return InvalidArgument("create_qp: max_inline_data <= 4096");
  }
  return Status::OK();
}

Result<std::unique_ptr<QueuePair>> SoftDevice::create_qp(const QpConfig& cfg) {
  UCCL_RETURN_IF_ERROR(check_qp_config(cfg, this));
  int tx_fd = fd_;
  if (cfg.own_source_port && cfg.type != QpType::kUD) {
    tx_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (tx_fd < 0) return ErrnoStatus("QP source-port socket", errno);
    set_sockbuf(tx_fd, sockbuf_bytes_);
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
  VLOG(kVlogLifecycle) << info_.name << ": created " << qp_type_name(cfg.type)
                       << " QP " << qpn;
  return std::unique_ptr<QueuePair>(qp);
}

// ------------------------------------------------------------ progress

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
  const uint32_t budget = static_cast<uint32_t>(knob_softnic_tx_budget().get());
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
  // Rounds of up to kRxBatch datagrams each, up to the budget per call (the
  // owner reacts to completions only between calls).
  for (int done = 0; done < kRxBudget;) {
    const int n = direct_mode_ ? receive_direct(now) : receive_batch(now);
    if (n < 0) return;  // the data socket is empty
    done += n;
  }
}

int SoftDevice::receive_batch(uint64_t now) {
  // No control messages (the kernel writes each msg_flags back): the
  // kernel's drop count is read from the socket when the counters are
  // read; a SO_RXQ_OVFL message per datagram added 0.15-0.25 us to a
  // polled 64 B UDP trip on the GPU machine (socket_bench --lat_rxq_ovfl).
  // Each source address is written back with its length (always a
  // sockaddr_in on this IPv4 socket, so msg_namelen stays as set up).
  int n = recvmmsg(fd_, rx_msgs_, kRxBatch, MSG_DONTWAIT, nullptr);
  if (n <= 0) return -1;
  if (trace_fn_) {
    trace_fn_(trace_ctx_, "nic_rx", static_cast<uint32_t>(n), now_ns());
  }
  for (int i = 0; i < n; ++i) {
    auto* buf = static_cast<uint8_t*>(rx_iov_[i].iov_base);
    uint32_t len = rx_msgs_[i].msg_len;
    ++counters_.rx_packets;
    counters_.rx_bytes += len;
    if (rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) {
      ++counters_.drop_malformed;
      continue;
    }
    FaultInjector* f = faults_.get();
    if (f->enabled(Direction::kRx)) {
      FaultDecision d = f->decide(Direction::kRx, now);
      if (held_count_ > 0) release_held(now, true, Direction::kRx);
      if (d.drop) continue;
      if (d.corrupt && len > 0)
        buf[(d.corrupt_bit % (len * 8ull)) / 8] ^=
            static_cast<uint8_t>(1u << (d.corrupt_bit % 8));
      if ((d.delay_ns || d.reorder_after) &&
          hold(Direction::kRx, d, buf, len, -1, &rx_from_[i], now)) {
        if (d.duplicate) handle_datagram(buf, len, rx_from_[i], now);
        continue;
      }
      if (d.duplicate) {
        // Process a copy first: handling may not modify buf, but keep the
        // second delivery independent of the first anyway.
        std::memcpy(scratch_.get(), buf, len);
        handle_datagram(scratch_.get(), len, rx_from_[i], now);
      }
    }
    handle_datagram(buf, len, rx_from_[i], now);
    // A large WRITE fragment: the ones after it are likely too, so place
    // them directly (a fault-injected receive path stays staged).
    static_assert(offsetof(WireHeader, opcode) == 5, "peeked at below");
    if (direct_rx_bytes_ > 0 && len >= sizeof(WireHeader) + direct_rx_bytes_ &&
        (buf[5] == static_cast<uint8_t>(WireOp::kWrite) ||
         buf[5] == static_cast<uint8_t>(WireOp::kWriteImm)) &&
        !f->enabled(Direction::kRx)) {
      direct_mode_ = true;
      direct_large_ns_ = now;
    }
  }
  return n < kRxBatch ? -1 : n;
}

int SoftDevice::receive_direct(uint64_t now) {
  const uint32_t min_len = sizeof(WireHeader) + std::max(direct_rx_bytes_, 1u);
  for (int k = 0; k < kRxBatch; ++k) {
    if (faults_->enabled(Direction::kRx)) {  // switched on at run time
      direct_mode_ = false;
      return k + 1;
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
      return k + 1;
    }
    if (dst == nullptr) {  // validated, counted and handled as usual
      if (!receive_one_staged(now)) return -1;
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
    ssize_t r = recvmsg(fd_, &m, MSG_DONTWAIT);
    if (r < 0) return -1;
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
    qp->on_packet(got, dst, got_from, now);  // checks payload_crc in place
  }
  return kRxBatch;
}

bool SoftDevice::receive_one_staged(uint64_t now) {
  auto* buf = static_cast<uint8_t*>(rx_iov_[0].iov_base);
  sockaddr_in from{};
  socklen_t from_len = sizeof(from);
  ssize_t n = recvfrom(fd_, buf, kRxBufBytes, MSG_DONTWAIT,
                       reinterpret_cast<sockaddr*>(&from), &from_len);
  if (n < 0) return false;
  ++counters_.rx_packets;
  counters_.rx_bytes += static_cast<uint64_t>(n);
  handle_datagram(buf, static_cast<uint32_t>(n), from, now);
  return true;
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

// --------------------------------------------------------------- transmit

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
    if (tx_count_ == kTxBatch || (tx_count_ > 0 && fd != tx_fd_)) flush_tx();
    int k = tx_count_++;
    tx_fd_ = fd;
    tx_hdrs_[k] = *hdr;
    tx_iov_[k][0].iov_base = &tx_hdrs_[k];
    tx_iov_[k][0].iov_len = sizeof(WireHeader);
    for (int i = 0; i < niov; ++i) tx_iov_[k][i + 1] = payload[i];
    msghdr& m = tx_msgs_[k].msg_hdr;
    std::memset(&m, 0, sizeof(m));
    m.msg_iov = tx_iov_[k];
    m.msg_iovlen = static_cast<size_t>(niov + 1);
    if (dest != nullptr) {
      tx_dest_[k] = *dest;
      m.msg_name = &tx_dest_[k];
      m.msg_namelen = sizeof(sockaddr_in);
    }
  }
}

void SoftDevice::flush_tx() {
  int sent = 0;
  if (trace_fn_ && tx_count_ > 0) {
    trace_fn_(trace_ctx_, "nic_tx", static_cast<uint32_t>(tx_count_), now_ns());
  }
  while (sent < tx_count_) {
    int n = sendmmsg(tx_fd_, tx_msgs_ + sent, tx_count_ - sent, MSG_DONTWAIT);
    if (n > 0) {
      sent += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // EAGAIN/ENOBUFS (socket full) or an ICMP error on a connected socket
    // (peer gone): the datagram is lost, as on a congested or broken link.
    counters_.tx_errors += 1;
    VLOG(kVlogPacket) << "sendmmsg: " << strerror(errno);
    ++sent;
  }
  tx_count_ = 0;
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

// --------------------------------------------------------- fault delay line

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
    // Reordered packets also leave after 1 ms so they never wait forever.
    h.release_ns = now + (d.delay_ns ? d.delay_ns : 1000000);
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
      handle_datagram(scratch_.get(), h.len, h.addr, now);
    }
  }
}

uint64_t SoftDevice::kernel_drops() const {
  // SK_MEMINFO_DROPS: datagrams the kernel dropped for this socket (receive
  // buffer full), the count SO_RXQ_OVFL would report.
  uint32_t mem[SK_MEMINFO_VARS] = {};
  socklen_t len = sizeof(mem);
  if (fd_ < 0 || getsockopt(fd_, SOL_SOCKET, SO_MEMINFO, mem, &len) != 0 ||
      len < sizeof(uint32_t) * (SK_MEMINFO_DROPS + 1)) {
    return 0;
  }
  return mem[SK_MEMINFO_DROPS];
}

const SoftCounters& SoftDevice::counters() const {
  counters_.drop_kernel_rcvbuf = kernel_drops();
  return counters_;
}

uint64_t SoftDevice::drops() const {
  const SoftCounters& c = counters();
  return c.drop_malformed + c.drop_bad_version + c.drop_bad_crc +
         c.drop_unknown_qp + c.drop_wrong_source + c.drop_stale_ack +
         c.drop_wrong_state + c.drop_bad_rkey + c.drop_out_of_bounds +
         c.drop_no_access + c.drop_no_recv + c.drop_recv_too_small +
         c.drop_out_of_sequence + c.drop_duplicate + c.drop_qkey +
         c.drop_cq_full + c.drop_kernel_rcvbuf + c.tx_errors;
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
  UCCL_COUNTER(tx_unsummed);
  UCCL_COUNTER(tx_spliced);
  UCCL_COUNTER(tx_splice_fallbacks);
  UCCL_COUNTER(drop_malformed);
  UCCL_COUNTER(drop_bad_version);
  UCCL_COUNTER(drop_bad_crc);
  UCCL_COUNTER(drop_unknown_qp);
  UCCL_COUNTER(drop_wrong_source);
  UCCL_COUNTER(drop_stale_ack);
  UCCL_COUNTER(drop_wrong_state);
  UCCL_COUNTER(drop_bad_rkey);
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
  UCCL_COUNTER(fault_hold_overflow);
  UCCL_COUNTER(drop_kernel_rcvbuf);
#undef UCCL_COUNTER
  os << faults_->counters_text();
  return os.str();
}

}  // namespace uccl::transport::udp
