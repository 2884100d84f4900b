// The null NIC ("null"): verbs objects that move no payload, so what remains
// of a transfer's CPU time is the engine's own (tools/engine_bench).
#pragma once

#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/nic.h"
#include "transport/soft/soft_pd.h"

namespace uccl::transport::nullnic {

// ---------------------------------------------------------------------------
// What it does (and does not):
//  * Devices exist only inside one process: QPs connect to QPs of other null
//    devices of the same process, found by the port id in PortAddress::
//    udp_port (loopback GID). Bootstrap over TCP works as usual.
//  * WRITE and READ move no bytes. WRITE_WITH_IMM delivers its immediate:
//    the responder checks rkey, bounds and REMOTE_WRITE (a miss is dropped
//    and counted, as a UC responder does; RC gets no NAK either), consumes a
//    receive and raises kRecvWriteImm with the WR's length. READs complete at
//    once without checking the remote key.
//  * SEND / SEND_WITH_IMM carry up to kMaxSendBytes (copied at post time)
//    into the peer's receive buffers; UD receives start with a zeroed GRH.
//  * Nothing is lost: a full peer queue refuses the post with
//    ResourceExhausted (retry later). Without a posted receive, UC and UD
//    drop (counted); RC holds the message until one is posted (RNR), in order.
//  * Send completions are raised at post time. RC to a device that is gone
//    completes with kRetryExceeded.
//  * No fault injection, no rate limit; link speed reported as 10 Tb/s.
// Threading as for every backend: one thread drives a device; the only
// cross-thread structure is each device's bounded lock-free inbound queue.
// Not listed by list_devices() (NCCL must never pick it).
// ---------------------------------------------------------------------------

constexpr uint32_t kMaxSendBytes = 256;    // SEND payload limit
constexpr uint32_t kInboundDepth = 16384;  // packets queued per device
constexpr uint64_t kLinkSpeedMbps = 10000000;

enum class PktOp : uint8_t { kWriteImm = 1, kSend = 2, kSendImm = 3 };

// One message on the in-process "wire".
struct Packet {
  uint32_t dst_qpn;
  uint32_t src_qpn;
  uint16_t src_port;  // sender's device port id
  PktOp op;
  QpType src_type;
  uint32_t imm;
  uint32_t len;  // message length (WRITE_WITH_IMM: the WR's bytes)
  uint32_t rkey;
  uint32_t qkey;
  uint64_t remote_addr;
  uint8_t payload[kMaxSendBytes];  // SEND only
};
static_assert(sizeof(Packet) == 40 + kMaxSendBytes, "Packet layout");

// A device's receive side, shared with the QPs and AHs that send to it so a
// device that closes cannot leave a sender with a dangling pointer.
struct Port {
  explicit Port(uint16_t port_id) : id(port_id), queue(kInboundDepth) {}
  const uint16_t id;
  std::atomic<bool> open{true};
  boost::lockfree::queue<Packet, boost::lockfree::fixed_sized<true>> queue;
};

struct NullCounters {
  std::atomic<uint64_t> tx_packets{0}, rx_packets{0};
  std::atomic<uint64_t> tx_queue_full{0};  // posts refused: peer queue full
  std::atomic<uint64_t> tx_peer_gone{0};
  std::atomic<uint64_t> drop_unknown_qp{0}, drop_wrong_state{0};
  std::atomic<uint64_t> drop_bad_rkey{0}, drop_out_of_bounds{0};
  std::atomic<uint64_t> drop_no_access{0}, drop_no_recv{0};
  std::atomic<uint64_t> drop_recv_too_small{0}, drop_qkey{0};
  std::atomic<uint64_t> drop_cq_full{0};
  std::atomic<uint64_t> rnr_held{0};  // RC messages that waited for a recv
};

class NullDevice;

class NullAh final : public AddressHandle {
 public:
  NullAh(const PortAddress& a, std::shared_ptr<Port> port)
      : port_(std::move(port)) {
    addr_ = a;
  }
  Port* port() const { return port_.get(); }

 private:
  std::shared_ptr<Port> port_;
};

class NullQp final : public QueuePair {
 public:
  NullQp(NullDevice* dev, const QpConfig& cfg, uint32_t qpn);
  ~NullQp() override;
  QpInfo local_info() const override;
  QpState state() const override { return state_; }
  Status connect(const QpInfo& remote) override;
  Status activate() override;
  Status set_error() override;
  Status post_send(const SendWr* wr, const SendWr** bad_wr) override;
  Status post_recv(const RecvWr* wr, const RecvWr** bad_wr) override;

 private:
  friend class NullDevice;
  Status post_one(const SendWr& wr);
  Result<uint64_t> check_send(const SendWr& wr, bool is_send) const;
  Status deliver(const SendWr& wr, Port* dest, uint64_t len, bool is_send,
                 WcStatus* status);
  soft::RecvRing& recvs();

  NullDevice* dev_;
  QpConfig cfg_;
  QpState state_ = QpState::kReset;
  std::unique_ptr<soft::RecvRing> rq_;  // when no SRQ
  std::shared_ptr<Port> peer_;          // UC / RC
  uint16_t peer_port_id_ = 0;
  uint32_t peer_qpn_ = 0;
};

class NullDevice final : public Device {
 public:
  static Result<std::unique_ptr<NullDevice>> open(const std::string& name,
                                                  const DeviceOptions& opts);
  ~NullDevice() override;

  const DeviceInfo& info() const override { return info_; }
  PortAddress port_address() const override;
  Result<std::unique_ptr<ProtectionDomain>> alloc_pd() override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(uint32_t cqe) override;
  Result<std::unique_ptr<SharedReceiveQueue>> create_srq(
      ProtectionDomain* pd, uint32_t max_wr, uint32_t max_sge) override;
  Result<std::unique_ptr<QueuePair>> create_qp(const QpConfig& cfg) override;
  Result<std::unique_ptr<AddressHandle>> create_ah(
      ProtectionDomain* pd, const PortAddress& dest) override;
  // Delivers queued inbound messages (held RC messages first).
  uint32_t progress() override;
  std::string counters_text() const override;
  uint64_t drops() const override;

 private:
  friend class NullQp;
  NullDevice() = default;
  // False when the message must wait for a receive (RC only).
  bool deliver(const Packet& p);
  void remove_qp(uint32_t qpn) { qps_.erase(qpn); }

  DeviceInfo info_;
  Clock* clock_ = nullptr;
  std::shared_ptr<Port> port_;
  std::unordered_map<uint32_t, NullQp*> qps_;
  uint32_t next_qpn_ = 0x100;
  // RC messages waiting for a receive, in arrival order (bounded ring).
  std::vector<Packet> held_;
  uint32_t held_head_ = 0, held_tail_ = 0;
  NullCounters c_;
};

// Finds the port of the null device with this id in this process.
std::shared_ptr<Port> find_port(uint16_t id);

}  // namespace uccl::transport::nullnic
