// Engine internals shared by the engine_*.cc files (loop, connections,
// receive, eager, control, send, stats): sizes, work-request ids, Conn.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace uccl::engine {

constexpr uint32_t kCqDepth = 65536;
constexpr uint32_t kDataSrqDepth = 8192;  // zero-length receives
constexpr uint32_t kRecvBatch = 32;
constexpr uint32_t kCtrlBufs = 1024;  // control-message receive buffers
constexpr uint32_t kCtrlBufBytes = kCtrlBatchBytes;  // wire.h
// A control SEND's bytes off the software NIC (verbs devices inline no
// more; the null NIC carries no more).
constexpr uint32_t kCtrlBatchBytesSmall = 256;
static_assert(sizeof(CtrlMsg) <= kCtrlBatchBytesSmall,
              "a small control SEND fits a message");
constexpr uint32_t kUdBufs = 1024;
constexpr uint32_t kUdBufBytes = 256;
static_assert(transport::kGrhBytes + sizeof(AckPacket) <= kUdBufBytes,
              "UD buffers fit GRH + ACK");
constexpr uint32_t kUdSendDepth = 4096;
constexpr uint32_t kUdQkey = 0x55434351;
constexpr uint32_t kDataSendDepth = 1024;
constexpr uint32_t kCtrlSendDepth = 512;
constexpr uint32_t kSignalEvery = 64;  // unsignaled WRs between signals
// Data WRs are all signaled: the engine keeps at most path_queue chunks per
// path and nic_queue per engine inside the NIC (like TCP Small Queues), so it
// must learn when each leaves. Queueing then happens in the engine, where CC
// and loss detection see it, not in NIC send queues (where a chunk's timers
// would run while it has not left the host).
constexpr uint32_t kDataSignalEvery = 1;
constexpr int kPollBatch = 64;
constexpr uint64_t kTimerIntervalNs = 50000;  // RTO / ACK-delay scan
// TCP liveness check, and the timers' pass over every live connection.
constexpr uint64_t kLivenessIntervalNs = 1000000;
constexpr uint32_t kChunksPerTransmit = 32;  // per connection per loop

// Work-request ids: kind(2) | conn(10) | path(8) | batch(8) | csn(32).
// `batch` on a signaled WR counts the WRs its completion retires. A resent
// chunk (kResend) carries its message's counter where others carry the CSN:
// the message is not complete until the resend has left the NIC.
enum class WrKind : uint64_t { kData = 0, kCtrl = 1, kAck = 2, kResend = 3 };

inline uint64_t make_wr_id(WrKind kind, uint32_t conn, uint32_t path,
                           uint32_t batch, uint32_t csn) {
  return (static_cast<uint64_t>(kind) << 62) |
         (static_cast<uint64_t>(conn & 0x3ff) << 48) |
         (static_cast<uint64_t>(path & 0xff) << 40) |
         (static_cast<uint64_t>(batch & 0xff) << 32) | csn;
}
inline WrKind wr_kind(uint64_t id) { return static_cast<WrKind>(id >> 62); }
inline uint32_t wr_conn(uint64_t id) { return (id >> 48) & 0x3ff; }
inline uint32_t wr_path(uint64_t id) { return (id >> 40) & 0xff; }
inline uint32_t wr_batch(uint64_t id) { return (id >> 32) & 0xff; }
inline uint32_t wr_csn(uint64_t id) { return static_cast<uint32_t>(id); }
static_assert(kSignalEvery <= 0xff, "batch fits its field");
static_assert(Imm::kMaxFlows <= 1024, "conn fits its field");
static_assert(kMaxPaths <= 256, "path fits its field");

struct UcclRDMAEngine::Conn {
  uint32_t index = 0;
  bool established = false;
  bool failed = false;
  bool active = false;    // in the engine's active_ list
  bool inflight = false;  // in inflight_: chunks out, unacknowledged
  Status fail_status;
  ConnRecord* rec = nullptr;
  std::vector<std::unique_ptr<transport::QueuePair>> qps;  // data paths
  std::vector<uint32_t> qp_unsignaled;   // WRs since the last signaled one
  std::vector<uint32_t> qp_outstanding;  // WRs not yet retired
  std::unique_ptr<transport::QueuePair> ctrl;  // RC: receive descriptors
  uint32_t ctrl_unsignaled = 0;
  // Control SENDs posted (the low 32 bits ride in a signaled one's wr_id,
  // so its completion names the inline messages it completes).
  uint32_t ctrl_posted = 0;
  // Control messages of this loop, sent together by flush_ctrl();
  // ctrl_signal: they include an inline message (its send completes with
  // the SEND, which is then signaled).
  uint8_t ctrl_out[kCtrlBufBytes];
  uint32_t ctrl_out_len = 0;
  bool ctrl_signal = false;
  std::unique_ptr<transport::AddressHandle> peer_ah;  // peer engine's UD QP
  uint32_t peer_ud_qpn = 0, peer_ud_qkey = 0;
  uint32_t peer_flow = 0, peer_engine = 0;
  uint32_t nonce_lo = 0;
  int tcp_fd = -1;
  TxFlow tx;
  RxFlow rx;
};

// The controller of path `path`: its own, or the flow's one for all.
inline PathCc& cc_for(TxFlow& tx, uint32_t path) {
  return tx.ccs.size() == 1 ? tx.ccs[0] : tx.ccs[path];
}

}  // namespace uccl::engine
