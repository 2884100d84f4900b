// The software NIC's counters: datagrams and bytes each way, offloads, and
// every drop by its reason (SoftDevice::counters(), counters_text()).
#pragma once

#include <cstdint>

namespace uccl::transport::udp {

// Everything the software NIC counts. Receive-side drops are by reason.
struct SoftCounters {
  uint64_t tx_packets = 0, tx_bytes = 0;  // datagrams to the kernel, payload
  uint64_t rx_packets = 0, rx_bytes = 0;  // datagrams from the kernel
  // Of the kernel's receives: buffers of several datagrams (UDP GRO).
  uint64_t rx_gro_packets = 0;
  // Of rx_packets: WRITE fragments the kernel copied straight into their
  // destination (UCCL_SOFTNIC_DIRECT_RX_BYTES), skipping the staging copy.
  uint64_t rx_direct = 0;
  // Of tx_packets: sent without a payload CRC to a peer on this host that
  // takes that (UCCL_SOFTNIC_LOCAL_CRC; wire.h, "Unsummed payloads").
  uint64_t tx_unsummed = 0;
  // Of tx_unsummed: payloads the kernel took by reference (vmsplice and
  // splice, no copy; wire.h, "Spliced payloads"), and those that had to be
  // copied after all because the pages could not be taken.
  uint64_t tx_spliced = 0;
  uint64_t tx_splice_fallbacks = 0;
  // UDP GSO (tx_batch.h): messages that carried several datagrams, those
  // datagrams, and messages the kernel refused (after one, GSO is off).
  uint64_t tx_gso_sends = 0, tx_gso_segments = 0, tx_gso_refused = 0;
  uint64_t drop_malformed = 0;  // short, bad magic/opcode/lengths
  uint64_t drop_bad_version = 0;
  uint64_t drop_bad_crc = 0;     // header or payload CRC32C mismatch
  uint64_t drop_unknown_qp = 0;  // no such QPN, or not from its peer
  // UC/RC: not from the address and port the QP is connected to.
  uint64_t drop_wrong_source = 0;
  // RC: an ACK or NAK about nothing outstanding (stale, or forged).
  uint64_t drop_stale_ack = 0;
  uint64_t drop_wrong_state = 0;  // QP not ready to receive
  uint64_t drop_bad_rkey = 0;
  // UC WRITE_WITH_IMM fragments the QP's receive guard refused (for the
  // engine: copies of chunks it had accounted, which a re-keyed receive
  // window would otherwise count as drop_bad_rkey).
  uint64_t drop_refused = 0;
  uint64_t drop_out_of_bounds = 0;
  uint64_t drop_no_access = 0;        // region lacks the needed right
  uint64_t drop_no_recv = 0;          // UC/UD: no receive posted
  uint64_t drop_recv_too_small = 0;   // message longer than the receive
  uint64_t drop_out_of_sequence = 0;  // PSN gap (UC aborts the message)
  uint64_t drop_duplicate = 0;        // PSN already seen (RC)
  uint64_t drop_qkey = 0;             // UD qkey mismatch
  uint64_t drop_cq_full = 0;          // no room for the completion
  uint64_t tx_errors = 0;             // sendmsg failed (counted as loss)
  uint64_t rc_retransmits = 0;        // packets sent again (go-back-N)
  uint64_t rc_timeouts = 0;
  // RC QPs whose timer progress() ran, summed over calls: only those with
  // sends outstanding, so idle QPs add nothing.
  uint64_t rc_timer_checks = 0;
  uint64_t acks_sent = 0, naks_sent = 0, rnr_naks_sent = 0;
  uint64_t acks_received = 0;
  // ACKs held for a reply (RcAttrs::ack_delay_ns) that a request carried
  // back (kFlagAck), and those received so: no datagram of their own.
  uint64_t acks_carried = 0, acks_carried_received = 0;
  uint64_t fault_hold_overflow = 0;  // delay/reorder skipped: pool full
  // Dropped by the kernel (socket full): read from the socket (SO_MEMINFO)
  // when the counters are read, so the datagram path pays nothing for it.
  uint64_t drop_kernel_rcvbuf = 0;
};

}  // namespace uccl::transport::udp
