// The NIC layer's interface, shaped like rdma-core verbs: Device, PD, MR, CQ,
// QP (RC/UC/UD), SRQ, AH. Every backend implements it; registry.h opens one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/fault/fault_injector.h"
#include "uccl/status.h"
#include "util/clock.h"

namespace uccl::transport {

// ---------------------------------------------------------------------------
// Semantics (both backends; docs/nic.md):
//  * UC: a message (one WR) lands whole or not at all from the receiver's
//    point of view: no completion when any part is lost. No retransmission.
//  * RC: reliable and in order; the NIC retransmits; RDMA_READ allowed.
//  * UD: one datagram per message, up to the MTU, to an AH + QPN + qkey.
//    Receive buffers start with a 40-byte GRH, as on verbs (kGrhBytes).
//  * WRITE_WITH_IMM and SEND consume a posted receive. With none posted, UC
//    and UD drop the message; RC answers RNR and the sender retries.
// Threading: one thread at a time drives a Device and its objects (posting
// and polling); reg_mr/dereg_mr may be called from any thread.
// ---------------------------------------------------------------------------

enum class QpType : uint8_t { kRC = 0, kUC = 1, kUD = 2 };
const char* qp_type_name(QpType t);

enum class WrOpcode : uint8_t {
  kWrite = 0,
  kWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRead = 4,
};
const char* wr_opcode_name(WrOpcode op);

enum class WcOpcode : uint8_t {
  kSend = 0,          // local completion of SEND / SEND_WITH_IMM
  kWrite = 1,         // local completion of WRITE / WRITE_WITH_IMM
  kRead = 2,          // local completion of READ
  kRecv = 3,          // a SEND arrived into a posted receive
  kRecvWriteImm = 4,  // a WRITE_WITH_IMM arrived (consumed a receive)
};

enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocalLengthError,      // receive too small / message too long
  kLocalProtectionError,  // bad lkey or SGE outside its region
  kLocalQpError,          // QP in a state that cannot execute the WR
  kWrFlushError,          // QP went to error; WR flushed unexecuted
  kRemoteAccessError,     // peer refused rkey / bounds / access rights
  kRemoteInvalidRequest,  // peer could not execute (e.g. its recv too small)
  kRemoteOperationError,  // peer failed while executing
  kRetryExceeded,         // RC: no ACK after retry_cnt retransmissions
  kRnrRetryExceeded,      // RC: peer had no receive posted, rnr_retry times
  kGeneralError,
};
const char* wc_status_name(WcStatus s);

// The sum of the values of the "name value" lines called `name` in a
// Device::counters_text() (a wrapped device lists its inner device's too);
// 0 if there are none.
uint64_t counter_sum(const std::string& counters_text, const std::string& name);

// "name=value" for each line of a Device::counters_text() whose name starts
// with `prefix` and whose value is not 0, space-separated in the text's
// order; "" if there are none. Stats lines use it to say why datagrams were
// dropped (prefix "drop_").
std::string nonzero_counters(const std::string& counters_text,
                             const std::string& prefix);

// MR access rights (same meaning as IBV_ACCESS_*).
enum Access : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
};

constexpr uint32_t kGrhBytes = 40;  // UD receive prefix (global route header)

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

class AddressHandle;

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
  bool signaled = true;      // generate a completion (else only on error)
  bool inline_data = false;  // copy payload at post time (<= max_inline)
  uint32_t imm_data = 0;     // for *_WITH_IMM, host byte order
  // RDMA WRITE / READ target.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  // UD destination.
  AddressHandle* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // Properties of the request that a backend may exploit; ignoring them is
  // always correct. `retransmit`: the destination may already hold these
  // bytes intact (a resend of a WRITE), so a backend that can place before
  // verifying should verify first. `payload_stable`: the caller leaves the
  // payload unchanged until its peer acknowledges it at a higher layer, and
  // this is its first transmission, so a backend may transmit from the
  // caller's pages instead of a copy.
  bool retransmit = false;
  bool payload_stable = false;
  // WRITE_WITH_IMM: a value the receiving QP's RxGuard is shown with the
  // immediate (`tagged`), for what the immediate's few bits cannot say (the
  // engine's whole chunk sequence number, where the immediate has 11 bits).
  // The software NIC carries it in each fragment's header; a verbs NIC has
  // no room for it, and its receivers ask no guard.
  bool tagged = false;
  uint32_t guard_tag = 0;
  SendWr* next = nullptr;
};

struct RecvWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
  RecvWr* next = nullptr;
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  bool with_imm = false;
  uint32_t byte_len = 0;  // receives: bytes placed (UD: includes the GRH)
  uint32_t imm_data = 0;  // host byte order
  uint32_t qp_num = 0;    // local QP
  uint32_t src_qp = 0;    // UD: sender's QPN
  // UD: the receive buffer starts with a valid GRH whose source GID (bytes
  // 8-23) is the sender's (verbs' IBV_WC_GRH). Backends over UDP always set
  // it, with the sender's UDP port as the low 16 bits of the flow label
  // (bytes 2-3, network order).
  bool with_grh = false;
  uint64_t timestamp_ns = 0;  // when the completion was generated/received
};

// Where a port lives: a GID (IPv6, or IPv4-mapped ::ffff:a.b.c.d as RoCEv2
// uses), plus the UDP port of the device context where the backend has one
// per context (RoCE NICs share the well-known 4791 and leave it 0).
struct PortAddress {
  uint8_t gid[16] = {};
  uint16_t lid = 0;       // InfiniBand LID (0 over Ethernet)
  uint16_t udp_port = 0;  // the context's receive port; 0: none of its own
  uint8_t port_num = 1;   // device port number
  uint8_t pad[3] = {};

  bool gid_is_zero() const;
  std::string to_string() const;  // "10.0.0.2:4791" or a GID
};

// What a peer needs to connect one of its QPs to this one (exchanged out of
// band by the engine's bootstrap).
struct QpInfo {
  PortAddress addr;
  uint32_t qpn = 0;
  uint32_t psn = 0;        // first packet sequence number we send
  uint32_t mtu_bytes = 0;  // path MTU we support
  QpType type = QpType::kUC;
  uint8_t flags = 0;  // QpInfoFlags
  // The UDP source port this QP sends from, where the backend lets the
  // peer check it: the peer takes only datagrams from this port and the
  // address it connected to. 0: from any port of that address.
  uint16_t src_port = 0;
};
enum QpInfoFlags : uint8_t {
  // Takes payloads without an end-to-end checksum from a peer on its host,
  // where the backend sums payloads itself (docs/nic.md). Peers that
  // predate the flag send 0.
  kQpInfoTakesUnsummed = 1u << 0,
};
static_assert(sizeof(PortAddress) == 24,
              "PortAddress is exchanged on the wire");
static_assert(sizeof(QpInfo) == 40, "QpInfo is exchanged on the wire");
static_assert(offsetof(QpInfo, src_port) == 38, "QpInfo layout");

// RC timers, in verbs' encodings (timeout: 4.096 us * 2^timeout).
struct RcAttrs {
  // 4.096 us << timeout: ~67 ms. A backend that runs its own RC timer may
  // start from the measured RTT where that is shorter (doubling per retry,
  // at most 64x this), but gives up no sooner than verbs would: after
  // retry_cnt retries and (retry_cnt + 1) timeouts of silence.
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;       // retransmissions before kRetryExceeded
  uint8_t rnr_retry = 7;       // 7 = retry forever
  uint8_t min_rnr_timer = 12;  // 0.64 ms
  uint8_t max_rd_atomic = 16;  // outstanding READs
  // Responder ACK coalescing: hold the ACK of a received message up to this
  // long, for a request of this QP's own to carry it back, as a reply
  // usually follows at once (0: ACK at once). A second message to ACK, a
  // duplicate or a NAK does not wait. Backends without it ACK at once (the
  // software NIC has it; verbs NICs coalesce as they do).
  uint32_t ack_delay_ns = 0;
};

class ProtectionDomain;
class CompletionQueue;
class SharedReceiveQueue;

// Asked by the NIC, before it places any fragment of a UC WRITE_WITH_IMM,
// whether the owner of the QP still wants that message's bytes. A sender
// that resends above UC (the engine) may have a copy of a chunk still on
// its way when the receiver has accounted the chunk and the sender's
// request has completed; that copy must not land on bytes rewritten since.
// The NIC's PSNs cannot tell (every UC resend is a new message); the
// immediate names the chunk, and the owner knows which it holds. Called on
// the thread that drives the device (progress(), or a CQ poll), so it may
// read that thread's state without locks. The software NIC asks; a verbs
// NIC places before software can look, and the null NIC places nothing:
// both ignore it.
class RxGuard {
 public:
  // What a fragment says of its message: the immediate, and the tag its
  // sender attached (SendWr::guard_tag), where it did.
  struct Fragment {
    uint32_t imm = 0;
    bool tagged = false;
    uint32_t tag = 0;
  };
  virtual ~RxGuard() = default;
  // Whether fragment `f` of a message to QP `qpn` may be placed. Without
  // side effects: the NIC may ask more than once about one fragment (a peek
  // that declines direct placement, then the staged path).
  virtual bool admits(uint32_t qpn, const Fragment& f) const = 0;
  // The NIC dropped a fragment admits() refused (once per fragment; the
  // rest of its message is dropped as out of sequence, unasked).
  virtual void refused(uint32_t qpn, const Fragment& f) = 0;
};

struct QpConfig {
  QpType type = QpType::kUC;
  ProtectionDomain* pd = nullptr;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // receives come from the SRQ if set
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 4;
  uint32_t max_inline_data = 256;
  uint32_t qkey = 0x11111111;  // UD
  // Give this QP's packets flow entropy of their own (the source port or
  // flow label a multipath fabric hashes on), so they may take another path
  // than other QPs'. false: share the device's (one socket, fewer files).
  bool own_flow_entropy = true;
  // A lower service level: each round this QP's requests go after those of
  // normal QPs (control traffic that must not delay data). Backends without
  // service levels ignore it.
  bool low_priority = false;
  // Its packets arrive on a receive queue of their own, served before the
  // data queue (control traffic a backlog of data must not delay:
  // descriptors, ACKs). Backends whose NIC drains its queues at line rate
  // ignore it.
  bool priority_rx = false;
  // UC only (the software NICs refuse it on other types): consulted before any
  // WRITE_WITH_IMM fragment is placed (RxGuard). Outlives the QP.
  RxGuard* rx_guard = nullptr;
  RcAttrs rc;
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  uint64_t addr() const { return addr_; }
  size_t length() const { return length_; }
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  uint32_t access() const { return access_; }

 protected:
  uint64_t addr_ = 0;
  size_t length_ = 0;
  uint32_t lkey_ = 0, rkey_ = 0, access_ = 0;
};

// A window onto part of a registered region with an rkey of its own, like a
// verbs type-2 memory window: bind() hands out a fresh rkey each time and
// invalidate() makes the current one fail at the NIC. The engine binds one
// per posted receive, so a late duplicate of an old chunk cannot land in a
// buffer that was already handed back. Used by one thread (not thread-safe).
class MemoryWindow {
 public:
  virtual ~MemoryWindow() = default;
  virtual Result<uint32_t> bind(const MemoryRegion& mr, uint64_t addr,
                                uint64_t len, uint32_t access) = 0;
  virtual void invalidate() = 0;
};

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  // Thread-safe. Overlapping and repeated registrations are allowed; each
  // gets its own keys. Zero-length regions are refused.
  virtual Result<std::unique_ptr<MemoryRegion>> reg_mr(void* addr, size_t len,
                                                       uint32_t access) = 0;
  // Device memory (a GPU's) the NIC reaches itself, exported as a dma-buf:
  // `len` bytes at `offset` into `fd`, addressed as `iova` (the device's
  // virtual address, so peers use the addresses they were advertised). The
  // caller keeps `fd` open for the call only. NotSupported where the NIC
  // cannot reach device memory (the software NIC: memory is staged above).
  virtual Result<std::unique_ptr<MemoryRegion>> reg_dmabuf_mr(
      int fd, uint64_t offset, size_t len, uint64_t iova, uint32_t access) {
    (void)fd, (void)offset, (void)len, (void)iova, (void)access;
    return NotSupported("this NIC does not reach device memory (dma-buf)");
  }
  // NotSupported where the backend has no windows (verbs, for now).
  virtual Result<std::unique_ptr<MemoryWindow>> alloc_mw() {
    return NotSupported("memory windows are not supported by this backend");
  }
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Up to `max` completions, oldest first; 0 when none. On a backend that
  // progresses in software, this also drives the device (receive, transmit,
  // timers) unless its owner does (Device::set_owner_driven).
  virtual int poll(int max, WorkCompletion* wc) = 0;
  virtual uint32_t capacity() const = 0;
};

class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;
  virtual Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) = 0;
};

class AddressHandle {
 public:
  virtual ~AddressHandle() = default;
  const PortAddress& address() const { return addr_; }

 protected:
  PortAddress addr_;
};

enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kError };
const char* qp_state_name(QpState s);

class QueuePair {
 public:
  virtual ~QueuePair() = default;
  QpType type() const { return type_; }
  uint32_t qpn() const { return qpn_; }
  // Our side of the connection, to send to the peer.
  virtual QpInfo local_info() const = 0;
  virtual QpState state() const = 0;

  // RESET -> INIT -> RTR -> RTS. UC/RC need the peer's info; UD does not.
  virtual Status connect(const QpInfo& remote) = 0;  // RC / UC
  virtual Status activate() = 0;                     // UD
  // Moves to ERROR: outstanding WRs complete with kWrFlushError.
  virtual Status set_error() = 0;

  // Validates and queues every WR in the list, or none from the first bad
  // one on (returned in bad_wr with a Status saying why).
  virtual Status post_send(const SendWr* wr, const SendWr** bad_wr) = 0;
  virtual Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) = 0;

 protected:
  QpType type_ = QpType::kUC;
  uint32_t qpn_ = 0;
};

struct DeviceInfo {
  std::string name;     // "udp:lo", "mlx5_0"
  std::string backend;  // "udp" or "verbs"
  std::string netdev;   // kernel interface, if any
  std::string ip;       // IPv4 address it binds, where it binds one
  uint64_t link_speed_mbps = 0;
  // False when link_speed_mbps is a stand-in: a virtual interface (lo, most
  // VM NICs) whose kernel reports no speed, or a verbs port not queried.
  bool link_speed_known = false;
  uint32_t mtu_bytes = 0;  // largest message payload per packet
  // Largest payload per packet to a peer on this host, where that differs
  // (a backend that reaches those through loopback, whose MTU is often far
  // larger than the interface's: lo 64 KiB, a VM's eth0 1500). 0: mtu_bytes.
  uint32_t local_mtu_bytes = 0;
  // Header bytes each packet adds on the wire around mtu_bytes of payload
  // (link, network, transport); pacing to a line rate in payload bytes uses
  // mtu / (mtu + this).
  uint32_t wire_overhead_bytes = 0;
  // Bytes of received packets the device can hold before the host drops
  // them (a kernel socket's receive buffer, as the kernel counts it, headers
  // and bookkeeping included); 0: no such limit (hardware queues).
  uint64_t rx_buffer_bytes = 0;
  int numa_node = -1;
  std::string pci_path;  // "" when unknown/virtual
  uint64_t guid = 0;
  bool active = false;  // link up
};

// Options given when opening a device. Defaults come from UCCL_* knobs.
struct DeviceOptions {
  Clock* clock = nullptr;         // nullptr: SystemClock
  FaultOptions faults;            // default: from UCCL_FAULT_* knobs
  uint32_t mtu_bytes = 0;         // 0: backend default (or its knob)
  bool faults_from_knobs = true;  // false: use `faults` as given
  // Transmit rate limit where the backend has one; < 0: its knob's value.
  double rate_gbps = -1;
  // The opening backend's own options, "key=value,..." (docs/nic.md lists
  // each backend's keys); a key the backend does not know fails the open.
  // Keys not given take the backend's knobs.
  std::string backend_params;
  // Receive completions' timestamp_ns is when the packet reached the host,
  // not when the device's owner polled it, where the backend learns that
  // at a cost (the software NIC: the kernel's receive time, one control
  // message per datagram). Delay-based congestion control asks for it, so
  // the time a packet waited for the polling thread counts as host delay
  // rather than fabric delay. The verbs backend ignores it: its
  // completions carry the NIC's completion time where the CQ reports one
  // (extended CQs), else the poll time.
  bool rx_timestamps = false;
  // UD receives' GRH carries the hop limit (IP TTL) the packet arrived
  // with, where the backend must ask the kernel for it (the software NIC;
  // otherwise it writes 64, as sent). Verbs NICs always fill it in.
  bool hop_limits = false;
};

// The hop limit a received UD packet arrived with, from its GRH: the IPv6
// form's (byte 7), or the TTL of the IPv4 header that RoCEv2 NICs put in
// the GRH's last 20 bytes (byte 28); -1 when neither form is there.
int grh_hop_limit(const uint8_t* grh);
// Routers a packet crossed, from the hop limit it arrived with: senders
// start at 64, 128 or 255 (Linux, Windows, RoCE NICs' GRH), so the
// smallest of those not below it is taken as the start; 0 for -1.
uint32_t hops_from_hop_limit(int hop_limit);

// An opened device context (ibv_context + port). Owns nothing it hands out:
// callers keep the objects and destroy them before the device.
class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  virtual PortAddress port_address() const = 0;

  virtual Result<std::unique_ptr<ProtectionDomain>> alloc_pd() = 0;
  virtual Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t cqe) = 0;
  virtual Result<std::unique_ptr<SharedReceiveQueue>> create_srq(
      ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) = 0;
  virtual Result<std::unique_ptr<QueuePair>> create_qp(const QpConfig& cfg) = 0;
  virtual Result<std::unique_ptr<AddressHandle>> create_ah(
      ProtectionDomain* pd, const PortAddress& dest) = 0;

  // Drives a device that progresses in software without polling a
  // particular CQ.
  // Returns the packets it moved (received, or sent where it transmits):
  // its owner counts a loop that moved any as busy. Hardware: 0.
  virtual uint32_t progress() { return 0; }
  // Owner-driven progress (software backends; hardware ignores it). Off, the
  // default: every CQ poll drives the device (receive, timers, transmit).
  // On: CQ polls only take completions, and the owner calls progress()
  // (receive, timers) and flush() (transmit what was posted: the doorbell)
  // once per loop, so that everything received is handled before anything
  // is sent and a loop's posts leave together. One thread, like the rest.
  void set_owner_driven(bool on) { owner_driven_ = on; }
  bool owner_driven() const { return owner_driven_; }
  // Returns the packets it handed to the wire (0 on hardware).
  virtual uint32_t flush() { return 0; }
  // A file that polls readable (POLLIN) when progress() has datagrams to
  // take, for an idle owner to block on instead of sleeping blind; -1 where
  // there is none (hardware, the null device). Owned by the device.
  virtual int wait_fd() const { return -1; }
  // Research tracing (UCCL_TRACE_FILE): the device reports each batch of
  // datagrams it hands to / takes from the kernel as (name, count, monotonic
  // ns), where it has batches to report (hardware does not). nullptr: off.
  using TraceFn = void (*)(void* ctx, const char* name, uint32_t count,
                           uint64_t ts_ns);
  virtual void set_trace(TraceFn fn, void* ctx) {
    (void)fn;
    (void)ctx;
  }
  // Counters as "name value" lines (packets, bytes, drops by reason, faults).
  // counter_sum() reads one back.
  virtual std::string counters_text() const = 0;
  // Received packets dropped for any reason (the kernel's socket overflow
  // included) and packets that could not be sent, for health log lines.
  virtual uint64_t drops() const { return 0; }
  FaultInjector* fault_injector() { return faults_.get(); }

 protected:
  std::unique_ptr<FaultInjector> faults_;
  bool owner_driven_ = false;
};

// IPv4 <-> IPv4-mapped GID helpers.
void ipv4_to_gid(uint32_t ipv4_be, uint8_t gid[16]);
bool gid_to_ipv4(const uint8_t gid[16], uint32_t* ipv4_be);

}  // namespace uccl::transport
