// Loss-recovery rules shared by the engine and the simulator (pure code):
// the retransmission timer (RFC 6298 with a floor), RACK's loss test and
// the tail loss probe's timeout.
#pragma once

#include <cstdint>

namespace uccl::cc {

// RFC 6298 smoothing (alpha 1/8, beta 1/4) with one change: the RTO never
// drops below 1.5 x srtt, since steady RTTs shrink rttvar until any queueing
// hiccup would fire the timer spuriously. Clamped to [min_ns, max_ns].
class RtoEstimator {
 public:
  RtoEstimator(uint64_t min_ns, uint64_t max_ns, uint64_t init_ns)
      : min_ns_(min_ns), max_ns_(max_ns), rto_ns_(init_ns) {}

  void on_rtt(uint64_t rtt_ns);
  // A timeout proved spurious (an ACK showed a packet sent before it was
  // delivered after all, `rtt_ns` after it was sent): the Eifel response
  // (RFC 4015, 2.2), srtt = max(srtt, rtt) and rttvar = max(rttvar,
  // rtt / 2), so the timer waits at least 3 x that delay next time and
  // the smoothing brings it back down as normal samples arrive.
  void on_spurious_timeout(uint64_t rtt_ns);
  // The timer after `backoff` consecutive timeouts: rto x 2^backoff, at
  // most max_ns.
  uint64_t backed_off_ns(uint32_t backoff) const;

  uint64_t srtt_ns() const { return srtt_ns_; }
  uint64_t rttvar_ns() const { return rttvar_ns_; }
  uint64_t rto_ns() const { return rto_ns_; }
  uint64_t max_ns() const { return max_ns_; }

 private:
  uint64_t min_ns_, max_ns_;
  uint64_t rto_ns_;
  uint64_t srtt_ns_ = 0, rttvar_ns_ = 0;
};

// Feeds an RtoEstimator one sample per round trip: the largest RTT seen in
// it. With many ACKs per round trip, per-ACK samples wash a delay spike out
// of rttvar within one round trip, and the timer then fires at the next
// spike (RFC 7323, appendix G; Linux likewise keeps each round trip's
// largest deviation). A host that stalls its threads now and then (a
// software transport sharing cores) so keeps a timer above its stalls.
class RttSampler {
 public:
  void add(uint64_t rtt_ns, uint64_t now_ns, RtoEstimator* est) {
    if (rtt_ns > max_ns_) max_ns_ = rtt_ns;
    if (until_ns_ != 0 && now_ns < until_ns_) return;
    est->on_rtt(max_ns_);
    max_ns_ = 0;
    until_ns_ = now_ns + est->srtt_ns();
  }

 private:
  uint64_t max_ns_ = 0;
  uint64_t until_ns_ = 0;  // end of the current round trip (0: none yet)
};

// RACK (RFC 8985) reordering window: `mult` quarters of the minimum RTT
// (RFC 8985 6.2: the multiplier grows each time a retransmission proves
// spurious), at least 20 us (host-stack jitter on the software NIC), at most
// srtt once there is one.
inline uint64_t rack_reorder_window_ns(uint64_t min_rtt_ns, uint32_t mult = 1,
                                       uint64_t srtt_ns = 0) {
  uint64_t q = min_rtt_ns / 4 * mult;
  if (srtt_ns != 0 && q > srtt_ns) q = srtt_ns;
  return q > 20000 ? q : 20000;
}

// RACK's loss test for a packet (chunk) last sent at `sent_ns`: lost once a
// packet sent after it on the same path was delivered (that one's send time
// `rack_tx_ns`, its RTT `rack_rtt_ns`) and it has been out for that RTT plus
// the reordering window. Reordering of any depth in packets and queues that
// swell RTTs then cause no spurious retransmissions.
inline bool rack_lost(uint64_t sent_ns, uint64_t rack_tx_ns,
                      uint64_t rack_rtt_ns, uint64_t reo_wnd_ns,
                      uint64_t now_ns) {
  return rack_tx_ns != 0 && sent_ns < rack_tx_ns &&
         now_ns - sent_ns >= rack_rtt_ns + reo_wnd_ns;
}

// RACK's order of transmissions (RFC 8985, 6.2, RACK_sent_after): by send
// time, and by sequence number (serial arithmetic) between packets sent at
// the same time, as a sender that stamps a whole batch with one clock
// reading (an engine loop) sends them.
inline bool rack_sent_before(uint64_t t1, uint32_t seq1, uint64_t t2,
                             uint32_t seq2) {
  return t1 < t2 || (t1 == t2 && static_cast<int32_t>(seq1 - seq2) < 0);
}

// When RACK declares a packet lost, with that order (`seq` the packet's,
// `rack_seq` that of the delivered packet behind rack_tx_ns): its send time
// plus that packet's RTT and the reordering window, or never (UINT64_MAX)
// if it was not sent before the delivered one. The caller knows a delivery
// was seen on the path.
inline uint64_t rack_lost_at_ns(uint64_t sent_ns, uint32_t seq,
                                uint64_t rack_tx_ns, uint32_t rack_seq,
                                uint64_t rack_rtt_ns, uint64_t reo_wnd_ns) {
  return rack_sent_before(sent_ns, seq, rack_tx_ns, rack_seq)
             ? sent_ns + rack_rtt_ns + reo_wnd_ns
             : ~uint64_t{0};
}

// rack_lost() with that order.
inline bool rack_lost(uint64_t sent_ns, uint32_t seq, uint64_t rack_tx_ns,
                      uint32_t rack_seq, uint64_t rack_rtt_ns,
                      uint64_t reo_wnd_ns, uint64_t now_ns) {
  return rack_tx_ns != 0 &&
         now_ns >= rack_lost_at_ns(sent_ns, seq, rack_tx_ns, rack_seq,
                                   rack_rtt_ns, reo_wnd_ns);
}

// Tail loss probe timeout (RFC 8985, 7.2): 2 x srtt, or srtt + 4 x rttvar
// when RTTs swing more than that (incast queues: probes sent at 2 x srtt
// there only add drops), plus the receiver's ACK delay (it coalesces ACKs;
// the RFC adds its delayed-ACK time when one packet is out), and never later
// than the RTO it is meant to beat. 0 while there is no RTT sample.
inline uint64_t tlp_timeout_ns(uint64_t srtt_ns, uint64_t rttvar_ns,
                               uint64_t ack_delay_ns, uint64_t rto_ns) {
  if (srtt_ns == 0) return 0;
  const uint64_t base = 2 * srtt_ns > srtt_ns + 4 * rttvar_ns
                            ? 2 * srtt_ns
                            : srtt_ns + 4 * rttvar_ns;
  const uint64_t pto = base + ack_delay_ns;
  return pto < rto_ns ? pto : rto_ns;
}

// Whether a delivery may advance RACK's clock: an ACK for a retransmitted
// packet sooner than the min RTT is for an earlier copy (RFC 8985, 6.2
// step 2); taking it would declare everything sent before the
// retransmission lost. Three quarters of the min RTT: a min RTT first
// measured in an incast includes queueing that a later resend into the
// drained queue does not see, and a resend's ACK slightly sooner than it
// is the resend's (an original's ACK after a spurious resend comes far
// sooner, right behind the resend).
inline bool rack_unambiguous(bool retransmitted, uint64_t last_tx_ns,
                             uint64_t min_rtt_ns, uint64_t now_ns) {
  return !(retransmitted && now_ns - last_tx_ns < min_rtt_ns / 4 * 3);
}

// RACK on a timeout (RFC 8985, 6.3): the oldest outstanding packet and every
// packet out for longer than an RTT plus the reordering window are lost.
inline bool rto_lost(bool oldest, uint64_t sent_ns, uint64_t rtt_ns,
                     uint64_t reo_wnd_ns, uint64_t now_ns) {
  return oldest || now_ns - sent_ns >= rtt_ns + reo_wnd_ns;
}

}  // namespace uccl::cc
