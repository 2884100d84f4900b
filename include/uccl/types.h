// The values UCCL's API hands across: requests, connection ids, remote
// region descriptors, statistics. The Endpoint class is in uccl/endpoint.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "uccl/status.h"

namespace uccl {

namespace engine {
class RequestAccess;
}
class Endpoint;

// Limits of one request and of one connection (the engine's wire formats
// are sized for them).
constexpr int kMaxRecvsPerRequest = 8;   // grouped receives (NCCL maxRecvs)
constexpr int kMaxRequestsPerFlow = 32;  // outstanding receives per direction
constexpr int kMaxPaths = 64;            // QPs per connection

// What the engine saw of a request's connection when the request completed
// (profilers show it per message: the NCCL plugin's NetPlugin events).
// Sends count their own chunks' resends and the paths those chunks took;
// receives leave both 0 (a receiver cannot tell a resend from a late
// chunk). Both carry the connection's latest RTT sample and its congestion
// controller's window and rate then.
struct RequestCc {
  uint32_t retransmits = 0;  // chunks of this message sent again
  uint32_t paths = 0;        // distinct paths (QPs) its chunks took
  uint64_t rtt_ns = 0;       // the connection's latest RTT sample (0: none)
  uint64_t cwnd_bytes = 0;   // window over its paths (0: unlimited)
  uint64_t rate_bps = 0;     // pacing rate over its paths
};

// One outstanding operation. The caller owns it and must keep it alive (and
// not move it) until test() reports done. Reusable after completion.
class Request {
 public:
  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  bool done() const {
    return (state_.load(std::memory_order_acquire) & kStateMask) == kDone;
  }
  // Posted and not yet done: the engine may still write into it (and into
  // its buffers), so neither may be freed.
  bool pending() const {
    return (state_.load(std::memory_order_acquire) & kStateMask) == kPending;
  }
  // Valid once done(): OK, or why it failed.
  const Status& status() const { return status_; }
  // Received (or sent) bytes per buffer, valid once done().
  size_t size(int i = 0) const { return sizes_[i]; }
  int count() const { return n_; }
  // The connection's congestion state at completion, valid once done().
  const RequestCc& cc() const { return cc_; }

 private:
  friend class Endpoint;
  friend class engine::RequestAccess;
  // One word: the state, plus a flag set by a thread blocked in wait(). The
  // engine publishes completion with a single exchange and never touches
  // the request afterwards (it may be gone the moment done() is true).
  enum : uint32_t {
    kIdle = 0,
    kPending = 1,
    kDone = 2,
    kStateMask = 3,
    kWaiter = 4
  };
  std::atomic<uint32_t> state_{kIdle};
  Status status_;
  int n_ = 0;
  size_t sizes_[kMaxRecvsPerRequest] = {};
  RequestCc cc_;
  // Engine-private routing.
  uint32_t engine_ = 0;
  uint32_t conn_ = 0;
  uint32_t slot_ = 0;
  uint64_t user_ = 0;  // free for the caller (e.g. the NCCL plugin)

 public:
  uint64_t user_data() const { return user_; }
  void set_user_data(uint64_t v) { user_ = v; }
};

// A registered memory region, usable on every connection of its endpoint.
struct MrHandle;

// Where a peer may write or read one-sidedly: advertise() output, sent to
// the peer out of band (fixed size, trivially copyable).
struct RemoteRegion {
  uint64_t addr = 0;
  uint64_t len = 0;
  uint32_t rkeys[16] = {};  // per engine of the owner
  uint32_t num_engines = 0;
  uint32_t region = 0;  // owner's region id (for reads)
};

using ConnId = uint64_t;

// Counters for one connection (both directions) or the whole endpoint.
struct FlowStats {
  uint64_t tx_bytes = 0, rx_bytes = 0;
  uint64_t tx_chunks = 0, rx_chunks = 0;
  uint64_t fast_retransmits = 0, rto_retransmits = 0, rtos = 0;
  uint64_t tlp_retransmits = 0;  // tail loss probes (RFC 8985) sent
  // Timeouts an ACK proved spurious (F-RTO: only the oldest chunk was
  // resent), and resends whose original was delivered (their ACK came
  // sooner than the resend could be acknowledged).
  uint64_t spurious_rtos = 0, spurious_retransmits = 0;
  // Receiver-driven matching: sends matched with a posted receive, how many
  // sends (these or eager ones) found neither a posted receive nor a free
  // eager slot when they were taken (waited for the peer's receive
  // descriptor or slot grant), and their total wait, ns.
  uint64_t sends_matched = 0, sends_waited_for_recv = 0, send_wait_ns = 0;
  // Eager sends (small, written into the receiver's bounce slots before it
  // posted a receive: UCCL_EAGER_BYTES); eager messages received, and those
  // of them that found no receive posted (held until one was).
  uint64_t sends_eager = 0, eager_received = 0, eager_held = 0;
  uint64_t eager_slots_free = 0;  // the peer's slots we may send into now
  // Inline sends (small, whole in a control message, with no chunk and no
  // ACK: UCCL_INLINE_BYTES) and inline messages received.
  uint64_t sends_inline = 0, inline_received = 0;
  // The peer's posted receives we heard of (counted modulo 2^32).
  uint64_t recv_descs_received = 0;
  uint64_t duplicate_chunks = 0;
  uint64_t acks_sent = 0, acks_received = 0;
  // cc=credit: times this sender, waiting for credit with nothing in
  // flight, asked the receiver to send its grants again (a lost ACK).
  uint64_t credit_probes = 0;
  uint64_t rtt_p50_ns = 0, rtt_p99_ns = 0, rtt_max_ns = 0;
  uint64_t max_inflight_bytes = 0;  // high-water mark of unacked bytes
  // Routers to the peer, from the hop limit its latest ACK arrived with
  // (0 where the NIC does not report it: the software NIC only for a
  // controller that uses hops, e.g. Swift's hop scaling).
  uint32_t hops = 0;
  double cwnd_bytes = 0, rate_bps = 0;
  std::string cc_state;
};

struct EngineStats {
  uint64_t loops = 0, idle_loops = 0;
  uint64_t idle_sleeps = 0;  // empty loops that slept (idle_sleep_ns)
  // Of those, the sleeps a datagram, a command or a peer's liveness socket
  // ended before idle_sleep_ns (the software NIC; verbs devices sleep).
  uint64_t idle_wakes = 0;
  // Connections the loops' passes visited, summed over loops: only those
  // with something to send, resend, acknowledge or flush are visited, so an
  // idle connection adds nothing.
  uint64_t conn_visits = 0;
  // Connections the timers visited: every 50 us those with chunks
  // unacknowledged (their RTO), every 1 ms all live ones (a safety net). Of
  // the latter, late_activations found work that no event had activated:
  // 0 unless the engine misses an activate() somewhere.
  uint64_t timer_visits = 0, late_activations = 0;
  // Wall time since the engine started (run_ns), and the part of it spent
  // in loops that did work or moved packets (busy_ns).
  // An engine near 100% busy is saturated; empty-loop counts do not show
  // that (a loaded engine's busy loops last far longer than empty ones).
  uint64_t busy_ns = 0, run_ns = 0;
  double busy_percent() const {
    return run_ns ? 100.0 * static_cast<double>(busy_ns) / run_ns : 0.0;
  }
  // The engine's sleep per empty loop once long idle (0: never sleeps), and
  // the idle time before it sleeps at all (0: empty loops alone decide).
  uint64_t idle_sleep_ns = 0;
  uint64_t idle_sleep_after_ns = 0;
  uint64_t commands = 0;
  // Packets that broke the protocol: malformed or unknown control messages,
  // grants and eager headers (each fails its connection), and ACKs or
  // chunks that belong to no live connection or receive (dropped).
  uint64_t protocol_errors = 0;
  FlowStats total;
};

}  // namespace uccl
