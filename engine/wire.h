// Engine wire formats, documented here once: the TCP bootstrap messages, the
// receive descriptors (clear-to-send) and eager-slot grants on the RC control
// QP, the eager message header, and the ACK / credit packets on the UD
// control QP. Little-endian, fixed layouts.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/imm.h"
#include "transport/nic.h"

namespace uccl::engine {

// ------------------------------------------------------------ bootstrap
// Over the TCP connection that connect()/accept() open, in this order:
//   1. both sides send BootHello and check the peer's (magic, version,
//      QP mode); paths = min of both.
//   2. both send BootQps (+ `paths` QpInfo after it).
//   3. both connect their QPs and send a 1-byte kBootReady.
// The TCP connection then stays open as the liveness channel: EOF or an
// error on it fails the connection's requests (peer died or closed).
constexpr uint32_t kBootMagic = 0x55434342;  // "UCCB"
constexpr uint16_t kBootVersion = 4;  // 3: batched control messages, 4: inline
constexpr uint8_t kBootReady = 0xA5;
// Sent on the TCP connection when a side closes gracefully: the peer fails
// its pending requests quietly instead of reporting a crashed peer.
constexpr uint8_t kBootBye = 0xB7;

struct BootHello {
  uint32_t magic;
  uint16_t version;
  uint16_t size;         // sizeof(BootHello), checked
  uint64_t nonce;        // random per endpoint
  uint32_t paths;        // QPs per connection this side wants
  uint32_t chunk_bytes;  // informational
  uint8_t rc_mode;       // 1 RC data QPs, 0 UC
  uint8_t pad[7];
  uint64_t tag;  // connector's choice; the acceptor hands the connection to
                 // whoever accepts this tag (several listeners share a port)
};
static_assert(sizeof(BootHello) == 40, "BootHello layout");
static_assert(offsetof(BootHello, tag) == 32, "BootHello layout");

struct BootQps {
  uint32_t magic;
  uint32_t flow_id;                // put this in data immediates and ACKs to us
  uint32_t engine;                 // our engine index (selects our rkeys)
  uint32_t num_qps;                // data QPs that follow (== agreed paths)
  transport::PortAddress ud_addr;  // our engine's UD control QP
  uint32_t ud_qpn;
  uint32_t ud_qkey;
  transport::QpInfo ctrl_qp;  // RC control QP (descriptors)
  // followed by num_qps transport::QpInfo
};
static_assert(sizeof(BootQps) == 16 + 24 + 8 + 40, "BootQps layout");

// ----------------------------------------------- control QP messages (RC)
// SENDs on the connection's RC control QP; reliable and in order. One SEND
// carries the messages an engine loop produced for the connection, back to
// back, each ctrl_record_bytes() long, at most kCtrlBatchBytes in all (the
// receiver's buffer size; 256 off the software NIC, as verbs devices
// inline no more). Both sides run one protocol
// version (the handshake checks it), so a malformed message or an unknown
// type fails the connection (PROTOCOL_ERROR, counted).
enum class CtrlType : uint32_t {
  kRecvDesc = 1,  // receiver posted a (grouped) receive: send into it
  kReadReq = 2,   // send [addr, addr+len) of my region into your slot
  kAckReq = 3,    // the sender's RTO fired: send it an ACK now (n = 0). The
                  // chunks it resends may be dropped by the NIC (their receive
                  // already completed), so they cannot elicit one themselves.
  kPullReq = 4,   // cc=credit: the sender will resend read_len bytes it
                  // declared lost; the receiver adds them to the flow's
                  // demand so its pull pacer grants credit for them (n = 0).
  kEagerGrant = 5,  // bufs[i] = a free eager bounce slot of the receiver:
                    // addr, size (header + payload bytes), rkey (a window
                    // for this use only), tag = slot index (< kEagerSlots).
  kInline = 6,      // a whole small message for buffer `n` of the receive in
                    // `slot` (a descriptor the sender holds): read_len payload
                    // bytes follow the 32-byte header, padded to 8 ("Inline
                    // messages" below).
};

struct RecvBuf {
  uint64_t addr;
  uint64_t size;  // maximum bytes
  uint32_t rkey;  // window for this receive only (late duplicates miss)
  int32_t tag;
};
static_assert(sizeof(RecvBuf) == 24, "RecvBuf layout");

struct CtrlMsg {
  uint32_t type;  // CtrlType
  uint32_t slot;  // receiver slot (< kMaxRequestsPerFlow)
  uint32_t n;     // buffers (1..kMaxRecvsPerRequest)
  // kReadReq: advertised region id on the message's receiver. kRecvDesc:
  // eager-slot grants in bufs[n..n+region) (as kEagerGrant's entries,
  // applied after the descriptor); n + region <= kMaxRecvsPerRequest.
  uint32_t region;
  // kReadReq: source on the sender side of this message's receiver.
  uint64_t read_addr;
  uint64_t read_len;
  RecvBuf bufs[kMaxRecvsPerRequest];
};
static_assert(sizeof(CtrlMsg) == 32 + 24 * kMaxRecvsPerRequest,
              "CtrlMsg layout");

// ----------------------------------------------- inline messages
// A send of at most kMaxInlineBytes (and of the peer's eager size, which
// says its receive buffers are host memory the engine may copy into) that
// finds its receive's descriptor, on a connection with no earlier message
// outstanding, travels whole in the control SEND (kInline) instead of as a
// chunk: one datagram, together with the loop's other control messages,
// and no engine ACK, as the control QP is reliable. It completes when that
// SEND does (the NIC's acknowledgement). While one is outstanding, later
// sends do not go eager: an eager message takes the oldest free receive
// the receiver sees, which must not be one an inline message on the other
// QP has not claimed yet. Off the software NIC none is sent.
constexpr uint32_t kCtrlBatchBytes = 1024;  // receive buffer of a SEND
constexpr uint32_t kCtrlHeaderBytes = 32;   // offsetof(CtrlMsg, bufs)
constexpr uint32_t kMaxInlineBytes = kCtrlBatchBytes - kCtrlHeaderBytes;
static_assert(offsetof(CtrlMsg, bufs) == kCtrlHeaderBytes, "CtrlMsg layout");
static_assert(sizeof(CtrlMsg) <= kCtrlBatchBytes, "a SEND holds a message");

// Entries of bufs[] a control message carries (its length on the wire is
// offsetof(CtrlMsg, bufs) + 24 x this). 64-bit: a peer's n + region must
// not wrap past the kMaxRecvsPerRequest check. An inline message has none.
inline uint64_t ctrl_entries(const CtrlMsg& m) {
  if (m.type == static_cast<uint32_t>(CtrlType::kInline)) return 0;
  return uint64_t{m.n} +
         (m.type == static_cast<uint32_t>(CtrlType::kRecvDesc) ? m.region : 0);
}

// A control message's bytes on the wire (64-bit, from a peer's fields).
inline uint64_t ctrl_record_bytes(const CtrlMsg& m) {
  if (m.type == static_cast<uint32_t>(CtrlType::kInline)) {
    return kCtrlHeaderBytes + (m.read_len + 7) / 8 * 8;
  }
  return kCtrlHeaderBytes + ctrl_entries(m) * sizeof(RecvBuf);
}

// The next message of a control SEND, `have` bytes at `p`: copies it into
// *m (entries it does not carry zeroed; an inline message's payload stays
// at p + kCtrlHeaderBytes) and returns the bytes it takes, or 0 when it is
// cut short or claims more entries or payload than a message holds.
inline uint32_t parse_ctrl_msg(const uint8_t* p, uint32_t have, CtrlMsg* m) {
  std::memset(m, 0, sizeof(*m));
  if (have < offsetof(CtrlMsg, bufs)) return 0;
  std::memcpy(m, p, std::min<uint32_t>(have, sizeof(*m)));
  const bool is_inline = m->type == static_cast<uint32_t>(CtrlType::kInline);
  const uint64_t entries = ctrl_entries(*m);
  const uint64_t need = is_inline && m->read_len > kMaxInlineBytes
                            ? ~0ull
                            : ctrl_record_bytes(*m);
  if (is_inline) {  // its payload is no entries: keep them zero
    std::memset(m->bufs, 0, sizeof(m->bufs));
  }
  if (entries > kMaxRecvsPerRequest || have < need) {
    std::memset(m, 0, sizeof(*m));
    return 0;
  }
  if (need < sizeof(*m)) {  // bytes past it belong to the next message
    std::memset(reinterpret_cast<uint8_t*>(m) + need, 0, sizeof(*m) - need);
  }
  return static_cast<uint32_t>(need);
}

// Why a parsed control message cannot be taken whatever the connection's
// state (a receiving engine fails the connection with it), or nullptr.
inline const char* ctrl_msg_problem(const CtrlMsg& m) {
  const auto t = static_cast<CtrlType>(m.type);
  if (t == CtrlType::kAckReq || t == CtrlType::kPullReq) return nullptr;
  if (t == CtrlType::kInline) {
    return m.n >= kMaxRecvsPerRequest || m.slot >= Imm::kSlots ||
                   m.read_len > kMaxInlineBytes
               ? "malformed inline message"
               : nullptr;
  }
  if (t != CtrlType::kRecvDesc && t != CtrlType::kEagerGrant &&
      t != CtrlType::kReadReq) {
    return "unknown control message type";
  }
  if (m.n < 1 || m.n > kMaxRecvsPerRequest || m.slot >= Imm::kSlots) {
    return "malformed control message";
  }
  return nullptr;
}

// ----------------------------------------------- eager messages
// A send of at most the peer's eager payload size, taken when no receive
// descriptor matches it yet, is written at once as one chunk (imm: eager,
// slot = bounce slot) into a bounce slot the receiver granted (in the spare
// entries of the next receive descriptor it sends, or kEagerGrant for the
// rest). The chunk is EagerHdr then the payload, so byte_len =
// sizeof(EagerHdr) + len.
//
// Both sides match in the same order without further messages. Per tag,
// the k-th send takes the k-th buffer of that tag in receive-posting order:
//  - receiver: an eager message (handled in CSN order, i.e. send order)
//    takes the oldest posted receive with a buffer of its tag that no
//    earlier message took; with none, it is held in its slot and the next
//    receive posted with that tag takes it (held messages in CSN order);
//  - sender: an eager send "owes" a buffer; each arriving descriptor first
//    pays the owed sends (oldest first, the first free buffer of each one's
//    tag), then matches waiting sends as before.
// An eager send completes once its chunk is acknowledged and its buffer
// paid (so a truncation is reported on both sides, as for other sends).
// The receiver copies the payload out, rebinds the slot's window (late
// duplicates of the old use miss) and grants the slot again.
constexpr uint32_t kEagerMagic = 0x55434345;  // "UCCE"

struct EagerHdr {
  uint32_t magic;
  int32_t tag;
  uint32_t len;  // payload bytes after this header
  uint32_t pad;
};
static_assert(sizeof(EagerHdr) == 16, "EagerHdr layout");
static_assert(offsetof(EagerHdr, len) == 8, "EagerHdr layout");

// An eager chunk of `chunk_len` bytes in a slot of `slot_bytes` is well
// formed: its header, read from the slot, has the magic and the length of
// the payload that follows it.
inline bool eager_chunk_ok(const EagerHdr& h, uint32_t chunk_len,
                           uint32_t slot_bytes) {
  return chunk_len >= sizeof(EagerHdr) && chunk_len <= slot_bytes &&
         h.magic == kEagerMagic && h.len == chunk_len - sizeof(EagerHdr);
}

// ----------------------------------------------- UD control packets
// One UD QP per engine carries ACKs (and credit grants) for all its flows.
// Coalescing (receiver): an ACK goes out when a message completes (one per
// connection per engine loop, for every message completed in it), when a
// chunk arrives out of order (so holes are seen at once), after every
// ack_every chunks, or when ack_delay_us passed since the first unacked
// chunk. A lost ACK is covered by the next (cumulative + SACK) or the RTO.
constexpr uint32_t kAckMagic = 0x55434341;  // "UCCA"
constexpr int kSackWords = 4;               // 256 chunks beyond cum_ack

struct AckPacket {
  uint32_t magic;
  uint32_t flow_id;           // the sender's flow id (from its BootQps)
  uint32_t cum_ack;           // every CSN below this arrived (extended CSN)
  uint32_t trigger_csn;       // the chunk whose arrival sent this ACK
  uint64_t sack[kSackWords];  // bit i: cum_ack + 1 + i arrived
  uint64_t rx_delay_ns;       // trigger chunk's arrival -> this ACK (endpoint)
  uint64_t credit_bytes;      // cc=credit: credit granted on this flow so far
                              // (cumulative, so a lost ACK loses no credit)
  uint32_t nonce_lo;          // low bits of the connection's nonce
  // Of rx_delay_ns, the part no queue here caused: how long the receiver's
  // engine was idle (asleep, or yielded its core) when the trigger chunk
  // arrived, the time it took to come back; and from when the engine took
  // the chunk to this ACK (its handling, the ACK held for more chunks).
  // What is left, the chunk's wait for a busy engine, is Swift's endpoint
  // (remote queuing) delay. Saturates; 0 from peers that predate it (the
  // field was padding); older peers report the idle part alone.
  uint32_t not_queued_ns;
};
static_assert(sizeof(AckPacket) == 16 + 8 * kSackWords + 24,
              "AckPacket layout");

// The UD QP hears anyone, so an ACK counts only when it names a live
// connection with that connection's nonce and comes from the connection's
// peer UD QP (`peer_qpn`) and, where the NIC reports the source (the GRH;
// transport/nic.h, WorkCompletion::with_grh), from the peer's address
// `peer`: its GID and, on the software NIC (a UDP port in the address), its
// port, which the GRH's flow label carries. `grh`: the receive buffer.
inline bool ud_source_is(const transport::WorkCompletion& w, const uint8_t* grh,
                         uint32_t peer_qpn,
                         const transport::PortAddress* peer) {
  if (w.src_qp != peer_qpn) return false;
  if (!w.with_grh || peer == nullptr) return true;
  if (std::memcmp(grh + 8, peer->gid, 16) != 0) return false;
  return peer->udp_port == 0 || ((grh[2] << 8) | grh[3]) == peer->udp_port;
}

}  // namespace uccl::engine
