// The software NIC: verbs semantics (UC, RC with go-back-N, UD, WRITE, SEND,
// READ, SRQ) over kernel UDP sockets, progressed only by the caller's polls.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/nic.h"
#include "transport/soft/soft_pd.h"
#include "transport/udp/netif.h"
#include "transport/udp/rx_meta.h"
#include "transport/udp/soft_counters.h"
#include "transport/udp/tx_batch.h"
#include "transport/udp/wire.h"

namespace uccl::transport::udp {

// The host-memory objects shared with the null NIC (transport/soft/).
using soft::check_qp_config;
using soft::kMaxSge;
using soft::MrTable;
using soft::RecvEntry;
using soft::RecvRing;
using soft::RingCq;
using soft::round_pow2;
using soft::SoftCq;
using soft::SoftMr;
using soft::SoftMw;
using soft::SoftPd;
using soft::SoftSrq;

// The backend registry's entries (transport/registry.cc): names "udp",
// "udp:*" (every interface), "udp:<ifname>" and "udp:<ipv4>".
bool is_soft_device_name(const std::string& name);
std::vector<DeviceInfo> list_soft_devices();
Result<std::unique_ptr<Device>> open_soft_device(const std::string& name,
                                                 const DeviceOptions& opts);

// The software NIC's own options, from DeviceOptions::backend_params
// ("splice=0,local_crc=1"); -1: not given, its UCCL_SOFTNIC_* knob decides.
struct SoftNicParams {
  // Smallest WRITE payload (bytes) the kernel places straight into its
  // destination (wire.h, "Direct placement"); 0 = never.
  int64_t direct_rx_bytes = -1;
  // 1 = sum every payload; 0 = leave the CRC out between QPs of this host
  // that agree to (wire.h, "Unsummed payloads").
  int local_crc = -1;
  // 1 = splice large unsummed payloads marked SendWr::payload_stable (the
  // kernel takes the pages, no copy; wire.h, "Spliced payloads"); 0 = copy.
  int splice = -1;
  // 1 = QPs with QpConfig::priority_rx receive on a socket of their own,
  // read first; 0 = one receive socket (UCCL_SOFTNIC_PRIORITY_RX).
  int priority_rx = -1;
  // 1 = runs of equal-sized datagrams to one peer go as one UDP GSO
  // message (tx_batch.h); 0 = one message per datagram (UCCL_SOFTNIC_GSO).
  int gso = -1;
  // 1 = the data socket takes datagrams the kernel coalesced (UDP_GRO),
  // split here; 0 = one datagram per receive (UCCL_SOFTNIC_GRO).
  int gro = -1;
  // IP TTL of every datagram this device sends, 1..255 (-1: the system's,
  // net.ipv4.ip_default_ttl). Peers see hops as the start's distance to
  // what arrives (transport::hops_from_hop_limit).
  int ttl = -1;
  static Result<SoftNicParams> parse(const std::string& text);
};

class SoftDevice;
class SoftQp;
class SoftNicTestAccess;  // tests/transport/nic_test_util.h

class SoftAh final : public AddressHandle {
 public:
  SoftAh(const PortAddress& a, const sockaddr_in& dest, uint32_t path_mtu)
      : dest_(dest), path_mtu_(path_mtu) {
    addr_ = a;
  }
  const sockaddr_in& dest() const { return dest_; }
  uint32_t path_mtu() const { return path_mtu_; }

 private:
  sockaddr_in dest_;
  uint32_t path_mtu_;
};

// A send work request as the NIC keeps it until it completes.
struct SqEntry {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  bool signaled = false;
  bool is_inline = false;
  bool retransmit = false;    // SendWr::retransmit: kFlagRetransmit on the wire
  bool by_reference = false;  // SendWr::payload_stable: may be spliced
  bool tagged = false;        // SendWr::tagged: kFlagTagged, aux = guard_tag
  uint32_t imm = 0;
  uint32_t guard_tag = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  int num_sge = 0;
  Sge sge[kMaxSge];
  // UD destination.
  sockaddr_in ud_dest{};
  uint32_t ud_qpn = 0, ud_qkey = 0;
  // Progress.
  bool started = false;    // PSNs assigned
  uint32_t first_psn = 0;  // PSN of the first packet
  uint32_t npkts = 0;      // packets the message takes (READ: 1 request)
  uint32_t sent = 0;       // next byte offset to transmit
  bool all_sent = false;
  uint32_t read_done = 0;                // READ: bytes received so far
  uint32_t rerequested_at = UINT32_MAX;  // READ: offset last re-asked for
  bool done = false;  // RC: finished, waiting to retire in order
  WcStatus status = WcStatus::kSuccess;
};

// Message being received by a UC/RC responder.
struct RxMessage {
  bool active = false;
  bool discard = false;  // UC: drop until the next first fragment
  WireOp op = WireOp::kWrite;
  uint32_t msg_len = 0;
  uint32_t next_offset = 0;
  uint32_t imm = 0;
  bool has_recv = false;  // SEND: receive taken at the first fragment
  RecvEntry recv;
};

// RC responder job: stream READ_RESP fragments of [addr+offset, addr+len).
struct ReadJob {
  uint32_t psn = 0;
  uint64_t addr = 0;
  uint32_t len = 0;
  uint32_t offset = 0;
};

class SoftQp final : public QueuePair {
 public:
  SoftQp(SoftDevice* dev, const QpConfig& cfg, uint32_t qpn, int tx_fd);
  ~SoftQp() override;

  QpInfo local_info() const override;
  QpState state() const override { return state_; }
  Status connect(const QpInfo& remote) override;
  Status activate() override;
  Status set_error() override;
  Status post_send(const SendWr* wr, const SendWr** bad_wr) override;
  Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override;

 private:
  // post_send()'s steps for one WR.
  Status check_send(const SendWr& wr, uint64_t* total) const;
  Status fill_send(const SendWr& wr, uint32_t idx, uint64_t total, SqEntry* e);
  friend class SoftDevice;
  friend class SoftNicTestAccess;

  // --- transmit side (called by the device's progress) ---
  // Sends up to `budget` packets; returns packets sent. Keeps itself on the
  // device's pending list while it has work.
  uint32_t transmit(uint32_t budget, uint64_t now_ns);
  bool has_tx_work() const;
  // Transmits after normal QPs: low priority, or nothing but an ACK/NAK.
  bool tx_later() const;
  void emit_fragment(SqEntry& e, uint64_t now_ns);
  void emit_control(AckSyndrome syn, uint32_t psn, uint32_t about_psn);
  uint32_t serve_reads(uint32_t budget);
  void complete_send(SqEntry& e, WcStatus st, uint64_t now_ns);
  void retire_rc(uint64_t now_ns);
  // `psn`, or the PSN before the oldest started READ at or below it whose
  // response has not all arrived.
  uint32_t ack_point(uint32_t psn) const;
  void rewind_to(uint32_t psn);
  void on_timer(uint64_t now_ns);
  // The wait before the next retransmission: the RTT-based timeout (or the
  // configured one before any sample), doubled per retry, at most 64x the
  // configured one. The QP fails after retry_cnt retries once the stall has
  // also lasted retry_cnt + 1 configured timeouts (on_timer).
  uint64_t retransmit_timeout_ns() const;
  void rtt_sample(uint64_t rtt_ns);
  void flush(uint64_t now_ns);
  void to_error(uint64_t now_ns);
  uint32_t packets_for(const SqEntry& e) const;
  uint32_t gather(const Sge* sge, int n, uint32_t offset, uint32_t len,
                  iovec* iov, int max_iov, bool* bad_key) const;

  // --- receive side ---
  // `from`: the datagram's source. UC/RC QPs take datagrams only from the
  // address and port they are connected to; UD reports it in the GRH.
  void on_packet(const WireHeader& h, const uint8_t* payload,
                 const sockaddr_in& from, uint64_t now_ns);
  bool from_peer(const sockaddr_in& from) const;
  void on_ud(const WireHeader& h, const uint8_t* payload,
             const sockaddr_in& from, uint64_t now_ns);
  void on_uc(const WireHeader& h, const uint8_t* payload, uint64_t now_ns);
  void on_rc_request(const WireHeader& h, const uint8_t* payload,
                     uint64_t now_ns);
  void on_rc_ack(const WireHeader& h, uint64_t now_ns);
  void request_ack(bool message_done, uint64_t now_ns);
  void release_held_ack(uint64_t now_ns);
  void on_read_resp(const WireHeader& h, const uint8_t* payload,
                    uint64_t now_ns);
  // Validates and places one WRITE/SEND fragment; false = dropped (reason
  // counted, and *syn set for RC NAKs).
  bool place_fragment(const WireHeader& h, const uint8_t* payload,
                      AckSyndrome* syn);
  // Where the kernel may copy this WRITE fragment's payload before it is
  // verified (wire.h, "Direct placement"), or nullptr. Changes nothing: the
  // fragment then goes through on_packet() as usual, with the payload at
  // the returned address.
  uint8_t* direct_dst(const WireHeader& h, const sockaddr_in& from) const;
  // Copies `len` bytes into the receive's scatter list at `offset`, after
  // checking them against header `h`'s payload CRC (nullptr: our own bytes).
  bool place_sges(const RecvEntry& r, uint32_t offset, const uint8_t* src,
                  uint32_t len, const WireHeader* h, bool* bad_key);
  // The payload passes: its CRC matches, or it is unsummed from a peer this
  // QP agreed to take that from (wire.h, "Unsummed payloads").
  bool payload_ok(const WireHeader& h, const uint8_t* payload) const;
  bool take_recv(RecvEntry* out);
  bool recv_available() const;
  void begin_message(WireOp op, const WireHeader& h);
  void finish_message(uint64_t now_ns);
  void abort_message();

  SoftDevice* dev_;
  QpConfig cfg_;
  SoftPd* pd_;
  SoftCq* send_cq_;
  SoftCq* recv_cq_;
  SoftSrq* srq_;
  int tx_fd_;  // own socket (own source port) or the device's
  bool own_fd_;
  uint16_t tx_port_ = 0;  // tx_fd_'s port, host order (QpInfo::src_port)
  QpState state_ = QpState::kReset;
  uint32_t mtu_ = 0;  // path MTU (payload bytes per packet)
  QpInfo remote_{};
  sockaddr_in peer_{};
  // The port the peer sends from, network order (0: any; QpInfo::src_port).
  uint16_t peer_src_port_be_ = 0;
  bool tx_connected_ = false;  // tx_fd_ connected to peer_
  // Unsummed payloads with a peer on this host (wire.h): we take them (and
  // offered to), and the peer takes ours.
  bool take_unsummed_ = false;
  bool send_unsummed_ = false;

  // Send queue ring.
  std::vector<SqEntry> sq_;
  std::vector<uint8_t> inline_arena_;  // max_inline bytes per slot
  uint32_t sq_mask_;
  uint32_t sq_head_ = 0;  // oldest not retired
  uint32_t sq_send_ = 0;  // next to (re)transmit
  uint32_t sq_tail_ = 0;  // next free
  uint32_t next_psn_ = 0;
  uint32_t highest_sent_psn_ = 0;  // RC: to count retransmissions

  // RC requester.
  uint32_t acked_psn_ = 0;  // highest cumulatively acknowledged
  // Highest PSN the responder's ACKs covered; acked_psn_ stops short of it
  // at a READ whose response has not all arrived (see advance_ack).
  uint32_t peer_acked_psn_ = 0;
  uint32_t reads_in_sq_ = 0;  // READs posted and not yet completed
  uint64_t last_progress_ns_ = 0;
  uint32_t retries_ = 0;
  uint64_t stall_since_ns_ = 0;  // last progress before the first retry
  uint32_t rnr_retries_ = 0;
  uint64_t rnr_until_ns_ = 0;
  uint64_t rto_ns_ = 0;  // the configured timeout (QpConfig::rc.timeout)
  // Measured RTT (one packet timed at a time, none across a resend, as
  // Karn's rule says) and the timeout it gives, srtt + 4 rttvar, at least
  // min_rto_ns_, once rtt_valid_: below the configured timeout on a quick
  // path, above it on a slow one (a queue behind a shaped link), where the
  // configured one would resend what is merely queued.
  uint64_t min_rto_ns_ = 0;
  bool rtt_valid_ = false;
  uint64_t srtt_ns_ = 0;
  uint64_t rttvar_ns_ = 0;
  bool rtt_timing_ = false;
  uint32_t rtt_psn_ = 0;
  uint64_t rtt_sent_ns_ = 0;
  uint32_t window_pkts_ = 0;

  // Receive side.
  RecvRing rq_;
  uint32_t epsn_ = 0;  // next expected PSN
  // UC: the newest PSN received, from connect() on the one before the
  // peer's first (epsn_ follows every packet, also old ones): direct
  // placement only for PSNs beyond it.
  uint32_t uc_newest_psn_ = 0;
  // UC WRITE_WITH_IMM fragments the QP's receive guard (QpConfig::rx_guard)
  // lets in; everything else is not its to judge.
  bool guard_admits(const WireHeader& h) const {
    return cfg_.rx_guard == nullptr ||
           h.opcode != static_cast<uint8_t>(WireOp::kWriteImm) ||
           cfg_.rx_guard->admits(qpn_, guarded(h));
  }
  static RxGuard::Fragment guarded(const WireHeader& h) {
    const bool tagged = h.flags & kFlagTagged;
    return RxGuard::Fragment{h.imm_data, tagged, tagged ? h.aux : 0};
  }
  RxMessage msg_;
  bool spare_recv_valid_ = false;  // receive taken by an aborted SEND
  RecvEntry spare_recv_;
  // RC responder control to send.
  bool ack_pending_ = false;
  // A held ACK (RcAttrs::ack_delay_ns): due then, unless a request of ours
  // carries it first (kFlagAck); 0: none held. In the device's acks_held_.
  uint64_t ack_held_until_ns_ = 0;
  bool in_acks_held_ = false;
  // Whether ACKs are held (replies come within the delay), and when the
  // last message to ACK arrived.
  bool hold_acks_ = true;
  uint64_t last_ack_req_ns_ = 0;
  bool nak_pending_ = false;
  AckSyndrome nak_syn_ = AckSyndrome::kAck;
  uint32_t nak_psn_ = 0;
  bool nak_sent_for_epsn_ = false;
  std::vector<ReadJob> reads_;  // ring
  uint32_t reads_head_ = 0, reads_tail_ = 0;

  bool in_pending_list_ = false;
  bool timer_armed_ = false;  // in the device's rc_armed_
};

class SoftDevice final : public Device {
 public:
  // Direct placement (wire.h) is on while large WRITE fragments arrive and
  // goes off, back to batched receives that serve small datagrams better,
  // once kDirectRxMisses datagrams in a row were too small for it and none
  // was large for kDirectRxQuietNs. The time rule keeps it on where data
  // and ACKs share the socket (traffic both ways): leaving on misses alone
  // staged ~70% of a two-way stream's data, each datagram then copied twice.
  static constexpr uint32_t kDirectRxMisses = 16;
  static constexpr uint64_t kDirectRxQuietNs = 200000;

  // Binds the receive socket on `nif` (ipv4 0 = every interface).
  static Result<std::unique_ptr<SoftDevice>> open(const NetIf& nif,
                                                  const std::string& name,
                                                  const DeviceOptions& opts);
  ~SoftDevice() override;

  const DeviceInfo& info() const override { return info_; }
  PortAddress port_address() const override;
  Result<std::unique_ptr<ProtectionDomain>> alloc_pd() override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t cqe) override;
  Result<std::unique_ptr<SharedReceiveQueue>> create_srq(
      ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<QueuePair>> create_qp(const QpConfig& cfg) override;
  Result<std::unique_ptr<AddressHandle>> create_ah(
      ProtectionDomain* pd, const PortAddress& dest) override;
  uint32_t progress() override;
  uint32_t flush() override;
  // Both receive sockets (an epoll set), or the data socket alone.
  int wait_fd() const override { return wait_fd_ >= 0 ? wait_fd_ : fd_; }
  void set_trace(TraceFn fn, void* ctx) override {
    trace_fn_ = fn;
    trace_ctx_ = ctx;
  }
  std::string counters_text() const override;
  uint64_t drops() const override;

  // With the kernel's drop count read now; from the thread that drives the
  // device, like everything else here.
  const SoftCounters& counters() const;
  uint16_t udp_port() const { return ntohs(local_.sin_port); }
  // Where a QP with QpConfig::priority_rx is reached: the priority
  // socket's port (the data socket's with UCCL_SOFTNIC_PRIORITY_RX off).
  PortAddress priority_address() const;
  uint32_t mtu() const { return mtu_; }
  // Test hook: sets the splice pipe's capacity (F_SETPIPE_SZ), so that a
  // payload larger than it is taken in part and must be copied after all.
  // False when splicing is off or the kernel refuses the size.
  bool set_splice_pipe_bytes_for_test(int bytes);
  // Test hook: the line-rate limit from now on, Gb/s (0: none).
  void set_rate_gbps_for_test(double gbps) { set_rate(gbps); }

 private:
  // open()'s steps.
  Status open_socket(const NetIf& nif, bool priority_rx);
  void choose_mtu(const NetIf& nif, const std::string& name,
                  const DeviceOptions& opts, const SoftNicParams& params);
  void fill_info(const NetIf& nif, const std::string& name);
  void alloc_buffers(const DeviceOptions& opts, const SoftNicParams& params);
  void enable_rx_meta(const DeviceOptions& opts);
  friend class SoftQp;
  friend class SoftNicTestAccess;
  SoftDevice() = default;

  struct Held {
    std::unique_ptr<uint8_t[]> data;
    uint32_t len = 0;
    Direction dir = Direction::kTx;
    int fd = -1;
    bool connected = false;
    sockaddr_in addr{};  // kTx: the destination; kRx: the source
    uint64_t release_ns = 0;
    uint32_t release_after = 0;  // packets still to pass (reorder)
    bool used = false;
  };

  // Transmit one datagram [hdr][iov...]: fills CRCs, applies TX faults and
  // queues it in the current batch (flushed by flush_tx()). `unsummed`: the
  // peer takes it without a payload CRC (SoftQp::send_unsummed_), unless TX
  // faults are on (injected corruption must stay detectable).
  // `by_reference`: the payload may be spliced (SendWr::payload_stable) if
  // it also goes unsummed and is large enough.
  void send_datagram(WireHeader* hdr, const iovec* payload, int niov, int fd,
                     const sockaddr_in* dest, bool unsummed = false,
                     bool by_reference = false);
  // Sends [hdr][payload] with the payload's pages handed to the kernel
  // (wire.h, "Spliced payloads"); anything short of that is finished by a
  // copy or counted as a lost datagram.
  void splice_datagram(const WireHeader* hdr, const iovec* payload, int niov,
                       int fd, const sockaddr_in* dest);
  // Empties the splice pipe after a failed splice (its pages are dropped).
  void drain_splice_pipe();
  // Whether this device's QPs offer to take unsummed payloads from a peer on
  // this host (UCCL_SOFTNIC_LOCAL_CRC off, no receive faults).
  bool offers_unsummed() const {
    return local_unsummed_ && !faults_->enabled(Direction::kRx);
  }
  // The token bucket's rate (UCCL_SOFTNIC_RATE_GBPS; 0: unlimited).
  void set_rate(double gbps);
  void flush_tx();
  void raw_send(int fd, const sockaddr_in* dest, const void* data,
                uint32_t len);
  void progress_rx(uint64_t now_ns);
  // One transmit round: each QP with work sends up to its budget; QPs with
  // requests first, low-priority ones and pure ACKs after them.
  void transmit_pending(uint64_t now_ns);
  void handle_datagram(uint8_t* buf, uint32_t len, const sockaddr_in& from,
                       uint64_t now_ns);
  // The counter a datagram of `len` bytes with header `h` is dropped under
  // before any QP sees it (bad CRC, version, lengths), or nullptr.
  uint64_t* header_problem(const WireHeader& h, uint32_t len);
  // One round: a recvmmsg batch of up to `bufs` kernel buffers from socket
  // `fd`, each datagram handled (and, on the data socket, direct placement
  // turned on by a large WRITE fragment). Datagrams taken (a GRO buffer
  // counts as those in it), or -1 once the socket is empty.
  int receive_batch(uint64_t now_ns, int fd, int bufs);
  // Kernel buffers to ask for so that `left` datagrams of the call's budget
  // are not overrun by more than a buffer's worth (rx_segs_hint_).
  int rx_bufs_for(int left) const;
  // Takes a received buffer: one datagram, or (UDP GRO, cur_rx_) several
  // end to end, each counted, fault-injected and handled on its own.
  // Returns how many it held.
  uint32_t take_datagrams(uint8_t* buf, uint32_t len, const sockaddr_in& from,
                          uint64_t now_ns, int fd);
  // `alone`: not one of several coalesced (direct placement may follow).
  void take_datagram(uint8_t* buf, uint32_t len, const sockaddr_in& from,
                     uint64_t now_ns, int fd, bool alone);
  // One round of direct placement: peeks at each datagram's header and lets
  // the kernel copy a large WRITE fragment's payload straight into its
  // destination. Returns like receive_batch().
  int receive_direct(uint64_t now_ns);
  // Receives the next buffer alone into staging and handles it: the
  // datagrams it held, or -1 when the socket is empty.
  int receive_one_staged(uint64_t now_ns);
  // Sends / handles the held packets of direction `dir` that are due (by
  // time, or by count when a packet of that direction passed).
  void release_held(uint64_t now_ns, bool packet_passed, Direction dir);
  bool hold(Direction dir, const FaultDecision& d, const uint8_t* data,
            uint32_t len, int fd, const sockaddr_in* dest, uint64_t now_ns);
  void mark_pending(SoftQp* qp);
  uint64_t now_ns() const { return clock_->now_ns(); }
  // The datagram being handled: when it reached the host (its kernel
  // receive time where DeviceOptions::rx_timestamps asked for it and that
  // is before `now`, else `now`), and the IP TTL it came with (-1: not
  // asked for, or held by fault injection and handled later).
  uint64_t arrival_ns(uint64_t now) const {
    const uint64_t a = cur_rx_.arrival_ns;
    return a != 0 && a < now ? a : now;
  }
  int rx_ttl() const { return cur_rx_.ttl; }
  // Control messages: set up for the next receive call (`count`: slots
  // the last one used), and read per datagram.
  void prepare_rx_meta(int count);
  void take_rx_meta(const msghdr& m) {
    cur_rx_ = parse_rx_meta(m, rx_ts_, rx_ts_offset_ns_);
  }
  uint64_t kernel_drops() const;
  Status open_bound_socket(uint32_t ipv4_be, int* fd, sockaddr_in* local);
  // Payload bytes per packet towards `ipv4_be`; `*local` (if given): the
  // route is loopback, i.e. the peer is on this host.
  Result<uint32_t> path_mtu_to(uint32_t ipv4_be, bool* local = nullptr) const;

  DeviceInfo info_;
  Clock* clock_ = nullptr;
  int fd_ = -1;  // the data socket (and the shared QPs' transmit socket)
  sockaddr_in local_{};
  // The priority socket (receive only; -1: off) and the epoll set of both.
  int prio_fd_ = -1, wait_fd_ = -1;
  sockaddr_in prio_local_{};
  uint32_t mtu_ = 0;
  uint32_t mtu_cap_ = 0;  // knob/option cap on path MTUs
  uint32_t next_qpn_ = 0;
  int sockbuf_bytes_ = 0;
  std::unordered_map<uint32_t, SoftQp*> qps_;
  std::vector<SoftQp*> pending_;  // QPs with transmit work
  std::vector<SoftQp*> later_;    // this round's low-priority / ACK-only
  // RC QPs with sends not yet retired, whose timers progress() runs (an
  // RC QP joins at post_send and leaves once its send queue is empty), so
  // idle QPs cost nothing per call.
  std::vector<SoftQp*> rc_armed_;
  std::vector<SoftQp*> acks_held_;  // QPs holding an ACK for a reply
  bool in_progress_ = false;

  // Receive staging (recvmmsg batch).
  static constexpr int kRxBatch = 32;
  static constexpr uint32_t kRxBufBytes = 65536;
  // Most datagrams the kernel coalesces into one GRO buffer (its
  // UDP_GRO_CNT_MAX; also a GSO run's most, TxBatch::kMaxGsoSegments).
  static constexpr int kGroMaxSegments = 64;
  // Datagrams one progress() call takes (UCCL_SOFTNIC_RX_BUDGET): its owner
  // reacts to completions, sends and ACKs only between calls. Counted in
  // datagrams, not kernel buffers: one GRO buffer holds up to 64 KiB of
  // them (7 at a 9000-byte MTU, 45 at 1500).
  int rx_budget_ = 128;
  // Most datagrams per kernel buffer in the data socket's last batch (1
  // without GRO), which sizes the next batch; a GRO socket starts at
  // kGroMaxSegments, so a backlog the first call finds is not taken whole.
  int rx_segs_hint_ = 1;
  std::unique_ptr<uint8_t[]> rx_bufs_;
  mmsghdr rx_msgs_[kRxBatch];
  iovec rx_iov_[kRxBatch];
  sockaddr_in rx_from_[kRxBatch];  // each datagram's source
  // Direct placement: smallest payload placed directly (0 = off); see
  // kDirectRxMisses for when it is on.
  uint32_t direct_rx_bytes_ = 0;
  // Packets a pending QP may send per progress round (UCCL_SOFTNIC_TX_BUDGET,
  // read once at open).
  uint32_t tx_budget_ = 32;
  // RC QPs' go-back-N window and least RTT-based timeout (the
  // UCCL_SOFTNIC_RC_* knobs, read once at open).
  uint32_t rc_window_pkts_ = 64;
  uint64_t rc_min_timeout_ns_ = 200000;
  // Control messages (DeviceOptions::rx_timestamps, hop_limits, UDP GRO): one
  // buffer per batch slot; the device clock minus CLOCK_REALTIME, taken
  // per receive call; the datagram being handled's.
  bool rx_meta_on_ = false, rx_ts_ = false;
  int64_t rx_ts_offset_ns_ = 0;
  int tx_ttl_ = -1;  // SoftNicParams::ttl
  alignas(cmsghdr) char rx_cbuf_[kRxBatch][kRxCmsgBytes];
  int rx_cmsg_used_ = 0;  // slots whose msg_controllen the kernel set
  RxMeta cur_rx_;
  bool direct_mode_ = false;
  uint32_t direct_misses_ = 0;
  uint64_t direct_large_ns_ = 0;  // when the last large datagram was seen

  TxBatch tx_batch_;  // the next sendmmsg (UDP GSO where the kernel has it)
  // Private copies of a datagram: a received one handled again (duplicate,
  // released after a hold), and one transmitted with faults. Separate, as
  // handling a received datagram may transmit.
  std::unique_ptr<uint8_t[]> scratch_;
  std::unique_ptr<uint8_t[]> tx_scratch_;
  bool local_unsummed_ = false;  // !UCCL_SOFTNIC_LOCAL_CRC
  // Splicing (UCCL_SOFTNIC_SPLICE): the pipe that takes a payload's pages
  // on their way to the socket; -1 when off.
  int splice_r_ = -1, splice_w_ = -1;

  // Token bucket (UCCL_SOFTNIC_RATE_GBPS); rate 0 = unlimited.
  double rate_bytes_per_ns_ = 0;
  double tokens_ = 0;
  double bucket_bytes_ = 0;
  uint64_t tokens_ns_ = 0;

  std::vector<Held> held_;  // fault injection delay line
  uint32_t held_count_ = 0;

  mutable SoftCounters counters_;  // counters() refreshes the kernel's drops
  TraceFn trace_fn_ = nullptr;
  void* trace_ctx_ = nullptr;
};

}  // namespace uccl::transport::udp
