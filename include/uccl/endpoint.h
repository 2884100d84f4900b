// UCCL's C++ API: an Endpoint owns engine threads on one NIC; connections
// carry two-sided (send/recv, grouped and tagged) and one-sided (write/read)
// transfers, completed through caller-owned Request objects without locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "uccl/types.h"

namespace uccl {

namespace testing {
class EndpointTestAccess;  // tests/engine/engine_test_util.h
}

struct EndpointConfig {
  // NIC: "udp" (software NIC, every interface), "udp:<if>", "udp:<ip>",
  // or a verbs device ("mlx5_0").
  std::string device;
  int num_engines = 0;            // engine threads; 0 = UCCL_ENGINES
  std::vector<int> engine_cores;  // pin engines here; empty = near the NIC
  uint32_t chunk_bytes = 0;       // 0 = UCCL_CHUNK_KB
  uint32_t paths = 0;             // QPs per connection; 0 = UCCL_PATHS
  int rc_mode = -1;               // 1 RC QPs, 0 UC + software reliability,
                                  // -1 = UCCL_RC_MODE
  std::string cc;                 // "" = UCCL_CC
  std::string cc_params;          // "" = UCCL_CC_PARAMS
  // Software NIC fault injection for this endpoint ("" = UCCL_FAULT_*).
  std::string fault_tx, fault_rx;
  uint64_t fault_seed = 0;    // 0 = UCCL_FAULT_SEED
  double nic_rate_gbps = -1;  // NIC transmit rate limit; <0 = knob
  // The NIC backend's own options, "key=value,..." (docs/nic.md), e.g. the
  // software NIC's "splice=0,local_crc=1"; keys not given take its knobs.
  std::string nic_params;
  double link_gbps = 0;        // line rate CC assumes; 0 = UCCL_LINK_GBPS
                               // or the device's speed
  std::string trace_file;      // Chrome trace; "" = UCCL_TRACE_FILE
  int64_t eager_bytes = -1;    // eager sends up to this size; -1 =
                               // UCCL_EAGER_BYTES (docs/engine.md)
  int64_t inline_bytes = -1;   // inline sends up to this size; -1 =
                               // UCCL_INLINE_BYTES (docs/engine.md)
  int64_t idle_sleep_us = -1;  // an idle engine's sleep per empty loop, us
                               // (0: never sleeps); -1 = UCCL_IDLE_SLEEP_US
                               // (from_knobs() fills it only when set)
  int64_t idle_sleep_after_ms = -1;  // and only once idle this long, ms (0:
                                     // the empty-loop count alone decides);
                                     // -1 = UCCL_IDLE_SLEEP_AFTER_MS (filled
                                     // by from_knobs() only when set)
  int64_t idle_spin_loops = -1;      // empty loops an engine spins (then
                                     // yields) before it may sleep; -1 =
                                     // UCCL_IDLE_SPIN_LOOPS
  int64_t bootstrap_timeout_ms = 0;  // connect/accept handshake deadline;
                                     // 0 = UCCL_BOOTSTRAP_TIMEOUT_MS

  // Builds a config from UCCL_* knobs; fields set above override them.
  static EndpointConfig from_knobs();
};

class Endpoint {
 public:
  // Opens the device, starts and pins the engines. Errors (bad device,
  // knobs, cores) come back as Status; nothing aborts.
  static Result<std::unique_ptr<Endpoint>> create(const EndpointConfig& cfg);
  // Cores that engines are pinned to on this host: this process's, and
  // those other UCCL processes claim (their uccl-core-<n>.lock files under
  // UCCL_CORE_LOCK_DIR, flock'ed while they run), sorted. An engine spins on
  // its core, so another thread placed there waits for the scheduler.
  static std::vector<int> engine_cores_on_host();
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // --- connections (TCP bootstrap, magic + version checked) ---
  // Starts listening; port 0 picks one. Returns the port.
  Result<uint16_t> listen(uint16_t port = 0);
  // Blocking forms, bounded by timeout_ms.
  Result<ConnId> connect(const std::string& ip, uint16_t port,
                         int timeout_ms = 30000);
  Result<ConnId> accept(int timeout_ms = 30000);
  // Non-blocking forms (NCCL calls these repeatedly): start, then poll until
  // it returns a ConnId (or an error). kUnavailable means "not yet".
  // `tag` travels in the handshake: accept_poll(tag) hands the connection
  // only to an acceptor of that tag, so several logical listeners (NCCL's
  // listen comms) share one port.
  // Placement: a connection runs on one engine thread. By default it gets
  // the engine with the fewest connections; `engine` (0..num_engines-1)
  // puts it on that one instead, and place_accepts() does the same for
  // connections accepted with a given tag (-1 forgets it; at most
  // kMaxAcceptPlacements tags). Spreading latency-critical connections over
  // engines is the caller's business (the NCCL plugin does, per comm).
  Result<uint64_t> connect_start(const std::string& ip, uint16_t port,
                                 uint64_t tag = 0, int engine = -1);
  static constexpr size_t kMaxAcceptPlacements = 4096;
  Status place_accepts(uint64_t tag, int engine);
  // The engine a connection runs on.
  Result<int> engine_of(ConnId c) const;
  Result<ConnId> connect_poll(uint64_t pending);
  Result<ConnId> accept_poll();  // any tag; kUnavailable until one finished
  Result<ConnId> accept_poll(uint64_t tag);
  // Incoming connections are validated before anything is reported: one
  // that never identifies as a UCCL endpoint (garbage, another magic or
  // version, a hang-up, or silence until the bootstrap timeout) is logged,
  // counted here and dropped, and accept keeps waiting. A UCCL peer whose
  // handshake fails later (e.g. another QP mode) fails the accept of its
  // tag. At most 256 handshakes are pending; beyond, the oldest
  // unidentified one is dropped.
  uint64_t rejected_handshakes() const;
  // Address of the connection's peer ("10.0.0.2").
  std::string peer_ip(ConnId c) const;
  // Closes a connection: its pending requests complete with kCancelled, the
  // peer's with kRemoteError.
  Status close(ConnId c);

  // --- memory ---
  Result<MrHandle*> reg_mr(void* addr, size_t len);
  // Device memory at [addr, addr + len) that the NIC reaches itself
  // (GPUDirect RDMA), exported as dma-buf `fd` (`offset` bytes in); the
  // caller may close `fd` afterwards. NotSupported on NICs that cannot
  // (the software NIC).
  Result<MrHandle*> reg_dmabuf_mr(void* addr, size_t len, int fd,
                                  uint64_t offset);
  Status dereg_mr(MrHandle* mh);
  // Lets peers write/read [addr, addr+len) of a registered region.
  Result<RemoteRegion> advertise(MrHandle* mh, void* addr, size_t len);

  // --- two-sided ---
  // Sends len bytes; matches the peer's oldest posted receive having a
  // buffer with this tag. kResourceExhausted when too many are outstanding.
  Status send_async(ConnId c, const void* data, size_t len, MrHandle* mh,
                    Request* req, int tag = 0);
  // Posts n (1..8) receive buffers as one request; each takes one message
  // with its tag. sizes are maxima; req->size(i) gives what arrived.
  Status recv_async(ConnId c, int n, void* const* data, const size_t* sizes,
                    const int* tags, MrHandle* const* mhs, Request* req);
  Status recv_async(ConnId c, void* data, size_t size, MrHandle* mh,
                    Request* req) {
    int tag = 0;
    return recv_async(c, 1, &data, &size, &tag, &mh, req);
  }
  // Makes received data visible to the local device (GPU) before use; host
  // memory needs nothing, so this completes at once there.
  Status flush_async(ConnId c, int n, void* const* data, const size_t* sizes,
                     MrHandle* const* mhs, Request* req);

  // --- one-sided, on a region the peer advertised ---
  // notify: the peer's writes_landed(c) counts this write once every byte
  // of it is in place there (its request here completes later, when the
  // peer's acknowledgement comes back). On the software NIC nothing of it
  // lands again after that: the peer's engine refuses every later copy of
  // a chunk it has accounted (a resend that crossed its ACK, an original
  // held in the network) before its NIC places it (docs/nic.md, "receive
  // guard"), so the peer may read and rewrite the region at once, however
  // long a copy was held. Not covered: a verbs NIC in UC mode, which
  // places a copy before software can look: there a retransmission may
  // land again until this request completes, and a resend that crossed
  // the acknowledgement even after it, where it reaches the peer behind
  // what is sent next (UCCL_RC_MODE=1 resends nothing above the NIC).
  Status write_async(ConnId c, const void* src, size_t len, MrHandle* mh,
                     const RemoteRegion& dst, uint64_t dst_offset, Request* req,
                     bool notify = false);
  // How many of the peer's notifying writes on `c` have landed here, every
  // byte of each (a count that only grows; the data is visible to this
  // thread once read).
  Result<uint64_t> writes_landed(ConnId c) const;
  Status read_async(ConnId c, void* dst, size_t len, MrHandle* mh,
                    const RemoteRegion& src, uint64_t src_offset, Request* req);

  // --- completion ---
  bool test(const Request* req) const { return req->done(); }
  // Blocks until done or timeout (kTimedOut, request stays pending).
  Status wait(Request* req, int timeout_ms = -1);
  // Polls a set; returns how many are done.
  int poll(Request* const* reqs, int n) const;

  // --- observability ---
  Result<FlowStats> conn_stats(ConnId c) const;
  std::vector<EngineStats> engine_stats() const;
  // One engine's (a round trip to that engine alone).
  Result<EngineStats> engine_stats(int engine) const;
  std::string stats_text() const;  // one line per engine
  // The NIC's own counters per engine (packets, drops by reason, faults).
  std::string nic_counters() const;
  const EndpointConfig& config() const;
  // Whether a one-sided write, once writes_landed() counted it at the
  // target, is final there: no copy of it lands afterwards. True on the
  // software NIC (its receive guard refuses copies of accounted chunks;
  // RC's PSNs drop duplicates), false on a verbs NIC (see write_async).
  bool landed_writes_final() const;
  // Device facts (for NCCL properties).
  std::string device_name() const;
  uint64_t link_speed_mbps() const;
  int numa_node() const;
  std::string pci_path() const;
  // The IPv4 address the device binds ("0.0.0.0" for a wildcard device).
  std::string local_ip() const;

 private:
  friend class testing::EndpointTestAccess;
  struct Impl;
  explicit Endpoint(std::unique_ptr<Impl> impl);
  Result<ConnId> accept_impl(bool by_tag, uint64_t tag);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uccl
