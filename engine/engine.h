// UcclRDMAEngine: one pinned thread that owns a device context, its QPs,
// CQs, SRQs and flows (shared-nothing), and runs the transport loop:
// commands -> data completions -> control completions -> timers -> sends.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cc/credit.h"
#include "cc/delay_floor.h"
#include "cc/params.h"
#include "engine/busy_meter.h"
#include "engine/channel.h"
#include "engine/flow.h"
#include "engine/wire.h"
#include "transport/nic.h"
#include "uccl/types.h"
#include "util/clock.h"

namespace uccl::engine {

// The chunk size an engine uses: `chunk_bytes`, at most one packet to a peer
// on this host (`local_mtu_bytes`, 0: no such limit), rounded down to whole
// packets of `mtu_bytes` payload (0: unknown, unchanged), never below one
// packet. A chunk just over a multiple of either MTU costs a short tail
// packet per chunk, each a full trip through the kernel's stack: 64 KiB
// over lo's 65408-byte payload MTU was two datagrams, 65408 B and 128 B;
// on a 1400-MTU eth0 (cloud VMs'), 65280-byte chunks (whole packets of
// eth0's MTU) were 61440 + 3840 B to another rank on the host through lo
// (splice's MTU), the tail copied rather than spliced.
uint32_t whole_packet_chunk_bytes(uint32_t chunk_bytes, uint32_t mtu_bytes,
                                  uint32_t local_mtu_bytes);

struct EngineConfig {
  int index = 0;
  int core = -1;  // -1: not pinned
  // Largest chunk (one WRITE_WITH_IMM); the engine uses
  // whole_packet_chunk_bytes() of it for its device's MTUs.
  uint32_t chunk_bytes = 64 << 10;
  bool rc_mode = false;
  std::string cc_name = "none";
  cc::CcParams cc_params;
  bool cc_per_path = false;
  // Floors of delay-based controllers shared by the flows to one peer host
  // (cc/delay_floor.h; UCCL_CC_SHARED_FLOOR), one table for an Endpoint's
  // engines; null: every flow learns its own.
  std::shared_ptr<cc::DelayFloorTable> delay_floors;
  double line_rate_bps = 100e9;
  // Reliability (UC mode).
  uint64_t rto_min_ns = 1000000;
  uint64_t rto_max_ns = 100000000;
  uint64_t rto_init_ns = 5000000;
  uint32_t max_retries = 12;  // per chunk, RTO-driven
  uint32_t dup_ack_threshold = 3;
  bool tail_loss_probe = true;  // RFC 8985 TLP before the RTO
  uint32_t path_queue = 16;     // chunks per path inside the NIC at most
  uint32_t nic_queue = 32;      // chunks inside the NIC over all connections
  // Bytes the engine's flows may have sent and not had acknowledged in all,
  // so the peer's host does not drop what it cannot buffer and its queue
  // (hence the RTTs the timers follow) stays short: -1 an eighth of the
  // device's receive buffer (transport::DeviceInfo::rx_buffer_bytes, which
  // counts headers and bookkeeping too; the peer's is taken to be as
  // large), 0 no limit (verbs, or none known).
  int64_t window_bytes = -1;
  // ACK coalescing (receiver).
  uint32_t ack_every = 4;
  uint64_t ack_delay_ns = 20000;
  // Idle back-off: spin this many empty loops, then sleep this long.
  uint64_t idle_spin_loops = 20000;
  uint64_t idle_yield_loops = 64;  // empty loops before yielding each loop
  uint64_t idle_sleep_ns = 20000;
  uint64_t idle_sleep_after_ns = 0;  // and only once idle this long (0: the
                                     // loop count alone decides)
  // Software NIC: the engine drives it once per loop (receive and handle
  // everything, then transmit the loop's posts in one round, descriptors and
  // ACKs after data) instead of every CQ poll driving it in post order.
  bool drive_nic = true;
  // Eager sends (wire.h): payload bytes up to which a send that finds no
  // receive descriptor is written at once into one of the receiver's
  // bounce slots (kEagerSlots per connection, this size each, which this
  // side offers its peer). 0: off. At most chunk_bytes - sizeof(EagerHdr) (one
  // chunk).
  uint32_t eager_bytes = 0;
  // Inline sends (wire.h): payload bytes up to which a send that finds its
  // receive's descriptor, on a connection with nothing outstanding, goes
  // whole in the control SEND (at most kMaxInlineBytes; 0: off). Used on
  // the software NIC only, and to a peer that offers eager slots (its
  // receive buffers are host memory).
  uint32_t inline_bytes = 0;
  // The control QP holds the ACK of a received control SEND this long for
  // the next SEND of its own to carry it (transport RcAttrs::ack_delay_ns;
  // the software NIC): in a ping-pong each side's reply carries it, one
  // datagram per message instead of two, but a one-way sender's completion
  // then waits for the peer application's next receive. 0: ACK at once.
  uint32_t ctrl_ack_delay_ns = 0;
  std::string trace_file;       // Chrome trace of chunk events, or ""
  double stats_interval_s = 0;  // periodic stats log line, 0 = off
  Clock* clock = nullptr;
};

// Endpoint-owned, app-visible per-connection record (outlives the engine's
// connection state so a stale ConnId can be detected).
struct ConnRecord {
  std::atomic<uint64_t> id{0};  // ConnId while usable, 0 otherwise
  std::atomic<int> tx_outstanding{0};
  std::atomic<int> rx_outstanding{0};
  std::atomic<bool> failed{false};
  // The peer's notifying writes (write_async(notify)) whose every byte has
  // landed here: the engine adds one as it accounts a write's last chunk
  // in sequence order (release), the application reads it (acquire).
  std::atomic<uint64_t> writes_landed{0};
  uint32_t peer_engine = 0;
  std::string peer_ip;
};

// An advertised region (one-sided reads and writes), published once.
// Written once by advertise() before `valid` is published; invalidated
// (never rewritten) when its memory is deregistered.
struct Region {
  std::atomic<bool> valid{false};
  uint64_t addr = 0, len = 0;
  std::vector<uint32_t> lkeys;  // per engine
};
constexpr uint32_t kMaxRegions = 4096;

// Bootstrap <-> engine: connection creation and connection of its QPs.
struct ConnSetup {
  std::atomic<int> done{0};
  Status status;
  // kCreateConn in/out.
  uint32_t paths = 1;
  uint32_t conn = 0;  // out: engine-local index (our flow id)
  std::vector<transport::QpInfo> qps;
  transport::QpInfo ctrl;
  transport::PortAddress ud_addr;
  uint32_t ud_qpn = 0, ud_qkey = 0;
  // kConnectConn in.
  uint32_t peer_flow = 0, peer_engine = 0;
  std::vector<transport::QpInfo> peer_qps;
  transport::QpInfo peer_ctrl;
  transport::PortAddress peer_ud;
  uint32_t peer_ud_qpn = 0, peer_ud_qkey = 0;
  uint32_t peer_ipv4_be = 0;  // replaces 0.0.0.0 in the peer's addresses
  int tcp_fd = -1;            // liveness channel, owned by the engine after
  uint64_t nonce = 0;
};

// A statistics request answered by the engine thread.
struct Query {
  std::atomic<int> done{0};
  int64_t conn = -1;  // -1: the whole engine
  bool counters = false;
  Status status;
  FlowStats flow;
  EngineStats engine;
  std::string counters_text;
};

class UcclRDMAEngine {
 public:
  // Opens its device context and creates CQs, SRQs and the UD QP.
  static Result<std::unique_ptr<UcclRDMAEngine>> create(
      const EngineConfig& cfg, const std::string& device,
      const transport::DeviceOptions& dev_opts, ConnRecord* records,
      Region* regions);
  ~UcclRDMAEngine();

  // Set before start(): the core to pin to and the line rate CC assumes.
  void set_core(int core) { cfg_.core = core; }
  void set_line_rate(double bps) { cfg_.line_rate_bps = bps; }
  void start();
  void stop();  // joins the thread; pending requests fail with kCancelled

  // Thread-safe: false when the queue is full. Wakes the engine where it
  // waits idle (idle_wait()).
  bool submit(const Command& c) {
    if (!queue_.try_push(c)) return false;
    // A read-modify-write, like idle_wait()'s exchange: whichever of the
    // two comes second in waiting_'s order sees the other's side (this
    // command, or the engine waiting, which it then wakes). Not a fence:
    // the same for ThreadSanitizer, which does not model fences.
    if (waiting_.fetch_or(0, std::memory_order_acq_rel)) wake();
    return true;
  }
  // Test hook: the engine is blocked in idle_wait() now (any thread).
  bool waiting() const { return waiting_.load(std::memory_order_acquire); }
  // Blocking round trip through the engine for a statistics snapshot
  // (no shared counters between threads).
  Result<FlowStats> conn_stats(uint32_t conn);
  EngineStats stats();
  // Returns once the engine has handled every command submitted before it
  // (so none of them still refers to a buffer being deregistered).
  Status sync();
  transport::ProtectionDomain* pd() { return pd_.get(); }
  const transport::DeviceInfo& device_info() const { return dev_->info(); }
  int index() const { return cfg_.index; }
  // In effect (after create): whole packets of the device's MTU.
  uint32_t chunk_bytes() const { return cfg_.chunk_bytes; }
  uint32_t eager_bytes() const { return cfg_.eager_bytes; }
  uint32_t inline_bytes() const { return cfg_.inline_bytes; }
  bool windows_supported() const { return windows_; }
  std::string device_counters();

  // Test hook: the next eager header (kEager*), receive descriptor
  // (kDesc*) or inline message (kInline*) this engine writes is damaged the
  // way `f` says, as a buggy or hostile peer would write it; the receiver
  // must refuse it (tests/engine/hostile_peer_test.cc). Any thread; when
  // unset, one relaxed load per eager send, descriptor and inline send.
  enum class WireFault : uint32_t {
    kNone = 0,
    kEagerBadMagic = 1,
    kEagerLenPastChunk = 2,     // claims one byte more than the chunk carries
    kEagerLenShortOfChunk = 3,  // claims one byte less
    kDescNoBuffers = 4,         // n = 0
    kDescEntriesWrap = 5,       // n + region wraps 32 bits
    kDescBadSlot = 6,           // slot outside the peer's slot space
    kDescUnknownType = 7,       // a type this protocol version lacks
    kInlineBadBuf = 8,          // names a buffer the receive does not have
    kInlineNoRecv = 9,          // names a slot with no receive posted
    kInlineOverLength = 10,     // claims more payload than a message holds
    // Sticky until another fault is set: this engine's ACKs sent only to
    // carry new credit (cc=credit: no chunk to acknowledge, no kAckReq
    // asked for them) are lost, as a lossy path loses them; the peer learns
    // those grants from a later ACK, or by asking.
    kLoseGrantAcks = 11,
    kChunkTagContradicts = 12,  // the next chunk's tag not its immediate's CSN
    // The next message's last chunk is resent as soon as it is posted, as a
    // spurious loss would resend it: the resend may still wait in the NIC
    // (behind a rate limit) when the first copy's ACK arrives.
    kResendLastChunk = 13,
    kLast = kResendLastChunk,
  };
  void inject_wire_fault(WireFault f) {
    wire_fault_.store(static_cast<uint32_t>(f), std::memory_order_release);
  }

 private:
  struct Conn;
  UcclRDMAEngine() = default;
  // create()'s steps (engine.cc).
  Status open_queues();
  Status open_ud_qp();
  void run();
  // An idle engine's sleep: blocks until its device has a datagram, a
  // command arrives (submit() or stop() writes wake_fd_), a connection's
  // liveness socket has news, or idle_sleep_ns passes. Devices without a
  // file to wait on (verbs) sleep idle_sleep_ns.
  void idle_wait();
  void wake();
  int drain_commands();
  void handle(const Command& c);
  void create_conn(ConnSetup* s);
  Status create_qps(Conn* c, ConnSetup* s);
  Status init_sender(Conn* c);
  void connect_conn(ConnSetup* s);
  Status setup_eager(Conn* c);
  void close_conn(uint32_t idx, Status why);
  void fail_conn(Conn* c, Status why, bool warn = true);
  // Test hook: applies an armed WireFault of the right kind, then disarms.
  WireFault take_wire_fault(WireFault lo, WireFault hi);
  void damage_eager_header(EagerHdr* h);
  void damage_descriptor(CtrlMsg* m);

  // Receive side.
  // Asked by the NIC before it places a data chunk's bytes: refuses copies
  // of chunks already accounted (a resend that crossed its ACK, say), which
  // could otherwise land after the writer's request completed and overwrite
  // what was written since (transport::RxGuard; engine_rx.cc).
  class ChunkGuard final : public transport::RxGuard {
   public:
    explicit ChunkGuard(UcclRDMAEngine* e) : e_(e) {}
    bool admits(uint32_t qpn, const Fragment& f) const override;
    void refused(uint32_t qpn, const Fragment& f) override;

   private:
    UcclRDMAEngine* e_;
  };
  ChunkGuard guard_{this};
  int poll_recv_cq(uint64_t now);
  void on_chunk(const transport::WorkCompletion& wc, uint64_t now);
  void account_chunk(Conn* c, const RxChunkInfo& info);
  void on_ctrl_msg(Conn* c, const CtrlMsg& m);
  // cc=credit: asks the receiver for an ACK when this flow has waited a
  // liveness interval for credit with nothing in flight (a lost grant).
  void probe_credit(Conn* c, uint64_t now);
  void request_ack(Conn* c);  // kAckReq on the control QP
  // `w` and `grh`: the UD completion and receive buffer it came in; an ACK
  // counts only from the connection's peer UD QP (and, where the NIC gives
  // a GRH, the peer's address).
  void on_ack(const AckPacket& a, const transport::WorkCompletion& w,
              const uint8_t* grh, uint64_t now);
  void post_recv_slot(Conn* c, const Command& cmd);
  void maybe_send_ack(Conn* c, uint64_t now, bool force);
  // Every ACK the active connections are holding back, now (the engine is
  // about to yield or sleep).
  void send_held_acks(uint64_t now);
  void send_ctrl(Conn* c, const CtrlMsg& m);
  void append_ctrl(Conn* c, const void* msg, uint32_t len);
  void flush_ctrl(Conn* c);
  void on_ctrl_batch(Conn* c, const uint8_t* p, uint32_t len);

  // Send side.
  int poll_send_cq(uint64_t now);
  void match_sends(Conn* c, uint64_t now);
  bool send_eager(Conn* c, const PendingSend& p, uint64_t now);
  // Inline sends (engine_inline.cc).
  bool inline_fits(const Conn* c, const PendingSend& p, const RecvBuf& b) const;
  void send_inline(Conn* c, const PendingSend& p, const Desc& d, uint32_t buf,
                   uint64_t now);
  void complete_inline(Conn* c, uint32_t ctrl_seq);
  void on_inline(Conn* c, const CtrlMsg& m, const uint8_t* payload);
  void damage_inline(CtrlMsg* h);
  void pay_owed(Conn* c);
  void on_eager(Conn* c, const RxChunkInfo& info);
  void deliver_eager(Conn* c, uint32_t k, int slot, int buf);
  void free_eager_slot(Conn* c, uint32_t k);
  Result<uint32_t> bind_eager_slot(RxFlow& rx, uint32_t k);
  void send_grants(Conn* c);
  uint32_t add_grants(Conn* c, CtrlMsg* m, uint32_t first);
  void take_grants(Conn* c, const RecvBuf* g, uint32_t n);
  void finish_buf(Conn* c, int slot, int buf);
  int transmit(Conn* c, uint64_t now);
  // The loop's pass visits only active connections: one joins active_ on
  // any event that may give it work (a command, a completion or ACK for it,
  // a control message to send, a credit grant, a timer that found work) and
  // leaves once quiescent(): nothing to send, resend, acknowledge or flush.
  // An idle connection then costs nothing per loop; the timers visit it
  // only in their 1 ms safety-net pass (timers(), late_activations_).
  void activate(Conn* c);
  bool quiescent(const Conn& c) const;
  bool post_chunk(Conn* c, uint32_t csn, uint16_t path, bool retx,
                  uint64_t now);
  void ack_chunk(Conn* c, uint32_t csn);
  void complete_tx_msg(Conn* c, TxMsg& m);
  void resend_left_nic(Conn* c, uint32_t msg);
  // The connection's RTT sample, window and rate into a completing request.
  void fill_cc(const Conn* c, RequestCc* out) const;
  void timers(uint64_t now);
  void check_rto(Conn* c, uint64_t now);
  void report_losses(Conn* c, const cc::LossReport& r, uint64_t now);
  void sample_delay(Conn* c, const AckPacket& a,
                    const transport::WorkCompletion& w, const cc::AckOutcome& o,
                    uint64_t now);
  void time_lone_chunk();
  // The NIC round being filled (chunks posted since the last flush), and
  // the last first transmission among them.
  struct NicRound {
    uint32_t chunks = 0;
    bool fresh = false;  // conn/csn/posted_ns name a first transmission
    uint32_t conn = 0;
    uint32_t csn = 0;
    uint64_t posted_ns = 0;
  };
  NicRound round_;
  void check_liveness();
  void replenish_srq();
  // Records an event when UCCL_TRACE_FILE is set; otherwise nothing, and
  // trace_now() reads no clock (a clock read is ~22 ns on the GPU machine).
  void trace(const char* name, uint32_t conn, uint32_t csn, uint64_t ts_ns) {
    if (trace_n_ < trace_.size()) trace_[trace_n_++] = {name, conn, csn, ts_ns};
  }
  void trace_now(const char* name, uint32_t conn, uint32_t csn) {
    if (trace_n_ < trace_.size()) trace(name, conn, csn, clock_->now_ns());
  }
  void write_trace();
  void fill_stats(uint32_t conn, FlowStats* out);
  void log_stats(uint64_t now);
  Status wait_query(Query* q);

  EngineConfig cfg_;
  Clock* clock_ = nullptr;
  std::unique_ptr<transport::Device> dev_;
  std::unique_ptr<transport::ProtectionDomain> pd_;
  std::unique_ptr<transport::CompletionQueue> scq_, rcq_;
  std::unique_ptr<transport::SharedReceiveQueue> data_srq_, ctrl_srq_;
  std::unique_ptr<transport::QueuePair> ud_;
  std::vector<uint8_t> ctrl_bufs_, ud_bufs_;
  std::unique_ptr<transport::MemoryRegion> ctrl_mr_, ud_mr_;
  uint32_t data_srq_deficit_ = 0;
  uint32_t ud_unsignaled_ = 0;
  bool windows_ = false;
  std::unique_ptr<cc::PullPacer> pacer_;  // cc == credit
  uint64_t last_stats_drops_ = 0;
  uint64_t last_stats_rc_timeouts_ = 0;
  // Stats line: the NIC's datagram counts at the last line (software NIC;
  // log_stats names them), engine ACKs and control SENDs (one per
  // flush_ctrl(), any number of messages each) then and now.
  static constexpr int kNicCounters = 5;
  uint64_t last_stats_nic_[kNicCounters] = {};
  uint64_t last_stats_acks_ = 0, last_stats_ctrl_sends_ = 0;
  uint64_t ctrl_sends_ = 0;
  // Bytes one control SEND may carry: the peer's buffer on the software
  // NIC, 256 elsewhere (engine.cc).
  uint32_t ctrl_batch_bytes_ = kCtrlBatchBytes;
  uint64_t last_stats_loops_ = 0, last_stats_idle_ = 0;
  uint64_t last_stats_busy_ns_ = 0, last_stats_run_ns_ = 0;
  size_t rr_start_ = 0;         // first connection served by the next loop
  uint32_t nic_queued_ = 0;     // data WRs inside the NIC, all connections
  uint64_t unacked_bytes_ = 0;  // all flows' (TxFlow::engine_unacked)

  ConnRecord* records_ = nullptr;  // kMaxFlows, Endpoint-owned
  Region* regions_ = nullptr;      // kMaxRegions, Endpoint-owned
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<uint32_t> live_;    // indices of connections in use
  std::vector<uint32_t> active_;  // of those, the ones the pass visits
  // Of the live ones, those with chunks unacknowledged (UC mode): the only
  // ones whose RTO the 50 us timer checks. One joins when a chunk is posted
  // and leaves at the timer once everything it sent is acknowledged.
  std::vector<uint32_t> inflight_;
  uint64_t conn_visits_ = 0;       // connections the loop's passes visited
  uint64_t timer_visits_ = 0;      // connections the timers visited
  uint64_t late_activations_ = 0;  // work found by the 1 ms pass alone
  // The liveness channels (each connection's TCP socket), so that finding
  // the few with news costs one epoll_wait, not a poll() over all of them.
  int epoll_fd_ = -1;
  struct QpnEntry {
    uint32_t qpn;
    uint32_t conn;
    bool ctrl;
  };
  std::vector<QpnEntry> qpn_map_;  // open addressing, power-of-two size
  void qpn_put(uint32_t qpn, uint32_t conn, bool ctrl);
  const QpnEntry* qpn_get(uint32_t qpn) const;
  // Whether `e` (qpn_get's) is a data QP of connection `flow`: else a
  // chunk on it is a protocol error.
  static bool chunk_qp(const QpnEntry* e, uint32_t flow) {
    return e != nullptr && !e->ctrl && e->conn == flow;
  }
  // The live connection of data QP entry `e` (chunk_qp), or null (closed,
  // failed, not yet established).
  Conn* live_conn(const QpnEntry* e) const;
  void qpn_erase(uint32_t qpn);

  CommandQueue queue_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  int wake_fd_ = -1;  // eventfd: a command for a waiting engine
  // On a cache line of its own: every submit() writes it (an RMW), while
  // the engine reads stop_ every loop.
  alignas(64) std::atomic<uint32_t> waiting_{0};  // 1: in idle_wait()
  alignas(64) uint64_t next_liveness_ns_ = 0;
  uint64_t next_timer_ns_ = 0;
  uint64_t next_stats_ns_ = 0;

  // Statistics (engine thread only; read through kQuery commands).
  uint64_t loops_ = 0, idle_loops_ = 0, commands_ = 0, idle_sleeps_ = 0;
  // When the engine last came back from giving its core away while idle
  // (a sleep, or a yield: a time slice on a busy host). A packet that
  // arrived meanwhile counts as arrived then: an idle engine is not a
  // congested one, so the time it took to come back is no endpoint delay
  // (delay-based control would otherwise hold a lightly loaded flow down,
  // which keeps the engines idle).
  uint64_t woke_ns_ = 0;
  // When a completion's packet reached the host (the NIC's stamp, not
  // after now), and when this engine got to it: not before it came back
  // from being idle.
  static uint64_t arrived_ns(const transport::WorkCompletion& w, uint64_t now) {
    return w.timestamp_ns != 0 && w.timestamp_ns < now ? w.timestamp_ns : now;
  }
  uint64_t busy_from_ns(const transport::WorkCompletion& w,
                        uint64_t now) const {
    return std::min(std::max(arrived_ns(w, now), woke_ns_), now);
  }
  uint64_t idle_wakes_ = 0;  // idle sleeps an event ended early
  BusyMeter busy_;
  uint64_t protocol_errors_ = 0;
  std::atomic<uint32_t> wire_fault_{0};  // WireFault, test hook
  uint64_t last_stats_tx_ = 0, last_stats_rx_ = 0;
  uint64_t closed_tx_bytes_ = 0, closed_rx_bytes_ = 0;  // of closed conns

  // Chrome trace ring (allocated only when tracing).
  struct TraceEvent {
    const char* name;
    uint32_t conn, csn;
    uint64_t ts_ns;
  };
  std::vector<TraceEvent> trace_;
  size_t trace_n_ = 0;
  uint64_t trace_t0_ = 0;
};

// Completes `req` (engine side): fills sizes and status, then publishes
// done with release ordering and wakes a blocked wait().
class RequestAccess {
 public:
  static void start(Request* r, uint32_t engine, uint32_t conn, int n) {
    r->status_ = Status::OK();
    r->n_ = n;
    r->engine_ = engine;
    r->conn_ = conn;
    for (auto& s : r->sizes_) s = 0;
    r->cc_ = RequestCc{};
    r->state_.store(Request::kPending, std::memory_order_relaxed);
  }
  static bool pending(const Request* r) {
    return (r->state_.load(std::memory_order_acquire) & Request::kStateMask) ==
           Request::kPending;
  }
  static void set_size(Request* r, int i, size_t v) { r->sizes_[i] = v; }
  static RequestCc& cc(Request* r) { return r->cc_; }
  static void complete(Request* r, Status st);
  static std::atomic<uint32_t>& state(Request* r) { return r->state_; }
  // Blocks until done or `timeout_ns` (true if done).
  static bool wait(Request* r, uint64_t timeout_ns);
  static uint32_t conn(const Request* r) { return r->conn_; }
};

}  // namespace uccl::engine
