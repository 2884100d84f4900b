// The software NIC's wire format: one 64-byte header in front of every UDP
// datagram's payload. This is the one place that documents it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uccl::transport::udp {

// Every datagram is [WireHeader][payload_len bytes]. Multi-byte fields are
// little-endian (x86 and Arm servers; a big-endian port must byte-swap).
//
// Messages (one work request) are cut into fragments of at most the path MTU
// (payload bytes). Each fragment carries the whole message's metadata so the
// receiver can validate and place it on its own:
//   WRITE*    remote_addr/rkey of the message, msg_len, frag_offset: the
//             fragment lands at remote_addr + frag_offset. WRITE_IMM with
//             kFlagTagged: aux = the sender's guard tag (SendWr::guard_tag).
//   SEND*     frag_offset into the receive buffer's scatter list.
//   READ_REQ  remote_addr/rkey/msg_len of the read, frag_offset = first byte
//             still wanted (a resumed read asks for the rest only).
//   READ_RESP psn = the READ_REQ's psn, frag_offset/payload of the data.
//   ACK/NAK   psn = highest in-order PSN received (cumulative), aux =
//             AckSyndrome, aux2 = PSN the syndrome is about.
// PSNs count packets per QP direction (32-bit, wrapping; compared with
// serial-number arithmetic). UC/RC receivers expect them in order.
//
// Integrity: hdr_crc is CRC32C over the 64 header bytes with hdr_crc and
// payload_crc set to zero; payload_crc is CRC32C over the payload. The
// receiver checks hdr_crc before using any field, validates QPN, rkey,
// bounds and access rights before writing a byte, and checks payload_crc as
// it places the payload. A fragment that fails payload_crc never completes
// its message (the bytes of an incomplete message are undefined, as on a
// real NIC); one that fails hdr_crc is dropped before anything is written.
//
// Direct placement (UCCL_SOFTNIC_DIRECT_RX_BYTES): the receiver may let the
// kernel copy a large WRITE fragment straight to remote_addr + frag_offset
// and check payload_crc there, after rkey, bounds and rights passed on the
// header alone. It does so only where no intact copy of those bytes can be
// there yet: on a UC QP for a PSN beyond every PSN it has seen, on an RC QP
// for the expected PSN, and never for kFlagRetransmit. A corrupted fragment
// then spoils only bytes of a message that has not completed, which a later
// copy rewrites: an RC resend of the same PSN, or a resend the sender marks
// with kFlagRetransmit (verified before it is placed).
//
// Unsummed payloads (UCCL_SOFTNIC_LOCAL_CRC): a datagram between two QPs of
// one host never leaves the kernel; it goes through loopback from memory to
// memory, which is why the kernel leaves out UDP checksums there. A
// connected QP whose peer is on its host (the route to it is loopback) and
// that takes such payloads says so when it connects (QpInfo flags,
// kQpInfoTakesUnsummed); its peer, likewise local, then sends payloads with
// kFlagUnsummed and payload_crc 0, skipping the pass over the bytes that the
// sum costs, and the receiver places them without the check. hdr_crc is
// always there. A receiver drops an unsummed payload (as a bad CRC) on a QP
// that did not offer, or whose peer is not on its host. A QP that injects
// receive faults does not offer, and a sender that injects transmit faults
// sums every payload, so injected corruption is still caught.
//
// Spliced payloads (UCCL_SOFTNIC_SPLICE): where a payload goes unsummed, the
// sender does not read it at all, so it need not copy it either. A WRITE
// fragment of at least kSpliceMinPayload bytes whose WR is marked
// SendWr::payload_stable leaves as the header, sent corked (MSG_MORE, with a
// UDP_SEGMENT of the whole datagram so that the kernel leaves the checksum
// to loopback), then the payload's pages, vmspliced into a pipe and spliced
// into the socket. The datagram on the wire is the same; loopback queues it
// at the receiving socket holding the sender's pages, and the receiver's
// one copy reads them there, whenever it gets to them. So the payload must
// not change until the peer has acknowledged it, nor be placed after that.
// Only first transmissions are spliced (every resend, the engine's or RC's,
// is copied), and the receiving socket is one FIFO, so the peer has read or
// dropped a spliced copy before it can ACK that chunk from any copy. As a
// second guard (loopback queues per CPU, and an unpinned sender could
// migrate between a copy and its resend), the engine marks only two-sided
// chunks, whose receive window the peer invalidates before it ACKs the
// last chunk. The kernel takes at most 16 pages of payload with the header
// (MAX_SKB_FRAGS 17), so with splicing on the payload MTU is at most 15
// pages (61440 B with 4 KiB pages: 16 pages at any alignment), and a
// fragment over 16 pages is copied.
//
// Segmentation offload (UCCL_SOFTNIC_GSO, UCCL_SOFTNIC_GRO): a sender may
// hand the kernel a run of datagrams as one UDP GSO message and a receiver
// may take several as one GRO buffer (transport/udp/tx_batch.h). Neither
// changes the wire: each datagram is the one above, with its own UDP
// header, header CRC and length; a receiver splits a GRO buffer at the
// segment size the kernel reports and judges each datagram alone.

constexpr uint32_t kWireMagic = 0x55434C31;  // "UCL1"
constexpr uint8_t kWireVersion = 1;

enum class WireOp : uint8_t {
  kWrite = 1,
  kWriteImm = 2,
  kSend = 3,
  kSendImm = 4,
  kReadReq = 5,
  kReadResp = 6,
  kAck = 7,
};
constexpr uint8_t kMaxWireOp = 7;

enum WireFlags : uint8_t {
  kFlagFirst = 1u << 0,   // first fragment of a message
  kFlagLast = 1u << 1,    // last fragment of a message
  kFlagAckReq = 1u << 2,  // RC: responder should ACK now
  // The receiver may hold these bytes intact already (SendWr::retransmit):
  // verify before placing (no direct placement). Receivers that predate the
  // flag ignore it, as they verify every fragment first.
  kFlagRetransmit = 1u << 3,
  // payload_crc was not computed (is 0): see "Unsummed payloads".
  kFlagUnsummed = 1u << 4,
  // RC request: it also carries the responder's cumulative ACK for the
  // other direction, aux2 = the PSN acknowledged (RcAttrs::ack_delay_ns:
  // the ACK a reply takes back instead of a datagram of its own). Only
  // QPs configured to hold ACKs send it.
  kFlagAck = 1u << 5,
  // WRITE_WITH_IMM: aux carries the sender's guard tag (SendWr::guard_tag),
  // which the receiving QP's guard is shown with the immediate (RxGuard).
  kFlagTagged = 1u << 6,
};

enum class AckSyndrome : uint32_t {
  kAck = 0,
  kNakSequence = 1,      // aux2 = the PSN expected instead
  kNakRnr = 2,           // no receive posted for the message at aux2
  kNakRemoteAccess = 3,  // bad rkey / bounds / rights for aux2
  kNakInvalid = 4,       // cannot execute aux2 (e.g. receive too small)
};

struct WireHeader {
  uint32_t magic;        // kWireMagic
  uint8_t version;       // kWireVersion
  uint8_t opcode;        // WireOp
  uint8_t flags;         // WireFlags
  uint8_t qp_type;       // sender's QpType (must match the receiver's QP)
  uint32_t dst_qpn;      // destination QP in the receiving device context
  uint32_t src_qpn;      // sending QP
  uint32_t psn;          // packet sequence number
  uint32_t msg_len;      // bytes in the whole message
  uint32_t frag_offset;  // byte offset of this payload within the message
  uint32_t payload_len;  // bytes following this header
  uint64_t remote_addr;  // WRITE/READ target of the message start
  uint32_t rkey;         // WRITE/READ key
  uint32_t imm_data;     // *_IMM immediate
  uint32_t aux;          // ACK: syndrome; UD: qkey; tagged WRITE_IMM: tag
  uint32_t aux2;         // ACK: PSN of the syndrome; UD: sender's UDP port
  uint32_t hdr_crc;      // see above
  uint32_t payload_crc;  // see above
};

static_assert(sizeof(WireHeader) == 64, "wire header is 64 bytes");
static_assert(offsetof(WireHeader, dst_qpn) == 8, "layout");
static_assert(offsetof(WireHeader, psn) == 16, "layout");
static_assert(offsetof(WireHeader, remote_addr) == 32, "layout");
static_assert(offsetof(WireHeader, rkey) == 40, "layout");
static_assert(offsetof(WireHeader, aux) == 48, "layout");
static_assert(offsetof(WireHeader, hdr_crc) == 56, "layout");
static_assert(offsetof(WireHeader, payload_crc) == 60, "layout");

// Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP).
constexpr uint32_t kMaxDatagram = 65507;
constexpr uint32_t kMaxFragmentPayload = kMaxDatagram - sizeof(WireHeader);
// Spliced payloads: the smallest one worth two more system calls than a copy
// (the header's sendmsg, then vmsplice and splice), and the most pages one
// may span.
constexpr uint32_t kSpliceMinPayload = 16384;
constexpr uint32_t kSpliceMaxPages = 16;

// Serial-number comparisons on 32-bit PSNs.
inline bool psn_lt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}
inline bool psn_le(uint32_t a, uint32_t b) { return a == b || psn_lt(a, b); }

}  // namespace uccl::transport::udp
