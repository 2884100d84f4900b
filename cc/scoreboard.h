// A sender's loss-recovery state for one flow, shared by the engine and the
// simulator: SACK scoreboard, RACK, F-RTO, tail loss probe and RTO (pure).
//
// The scoreboard keeps, per packet (an engine chunk, a simulator packet),
// when it was sent, on which path, whether it is acknowledged, in the pipe
// or queued for resending, and per flow the cumulative point, RACK's clock
// per path, the RTO estimator and the timers' episode state. Time is always
// passed in; it never reads a clock, allocates after construction, or does
// I/O, so the engine (engine/engine_tx.cc, one per connection) and the
// simulator (cc/sim/sim.cc, one per flow) run the same recovery, and tests
// drive it packet by packet (tests/cc/scoreboard_test.cc).
//
// How a sender uses it:
//   send:   send_new() for a new packet, resent() for one taken from
//           urgent() or next_resend(); congestion control and pacing stay
//           the caller's (inflight() and path_inflight() are the pipe).
//   ACK:    ack_cumulative() and ack_selective() for what it covers (the
//           callback sees each newly acknowledged packet), take_rtt_sample()
//           for the packet that triggered it, then finish_ack(), which
//           resolves F-RTO and runs RACK once enough duplicate ACKs came.
//   timer:  on_timer() no later than next_timer_ns(): RACK for holes that
//           ACKs stopped reporting, then the tail loss probe or the RTO.
#pragma once

#include <cstdint>
#include <vector>

#include "cc/recovery.h"

namespace uccl::cc {

struct ScoreboardConfig {
  uint32_t capacity = 1024;  // packets outstanding at most, a power of two
  uint32_t paths = 1;        // RACK keeps a clock per path (in-order paths)
  uint64_t rto_min_ns = 1000000;
  uint64_t rto_max_ns = 100000000;
  uint64_t rto_init_ns = 5000000;
  uint32_t max_retries = 12;  // consecutive timeouts before giving up
  uint32_t dup_ack_threshold = 3;
  bool tail_loss_probe = true;
  uint64_t ack_delay_ns = 0;  // the receiver's ACK coalescing delay (TLP)
  uint32_t first_seq = 0;     // the first packet's sequence number
};

// One packet's record, valid while it is outstanding.
struct SegRec {
  uint64_t first_tx_ns = 0;
  uint64_t last_tx_ns = 0;
  uint32_t len = 0;
  uint16_t path = 0;
  uint8_t retx = 0;  // resends so far
  bool acked = false;
  bool sacked = false;  // acknowledged beyond the cumulative point
  bool queued = false;  // declared lost, waiting to be resent
  bool rtt_sampled = false;
  // Counted in the pipe (RFC 6675): a packet declared lost leaves it until
  // it is sent again, so resends obey the window like new data.
  bool in_pipe = false;
};

struct RecoveryCounters {
  uint64_t fast_retx = 0;  // declared lost by RACK after duplicate ACKs
  uint64_t rto_retx = 0;   // declared lost by a timeout
  uint64_t tlp_retx = 0;   // tail loss probes
  uint64_t rtos = 0;
  uint64_t spurious_rtos = 0;  // timeouts that F-RTO proved spurious
  // Resends the original of which was delivered (their ACK came back
  // sooner than the resend could have brought one).
  uint64_t spurious_retx = 0;
  uint64_t nack_retx = 0;  // declared lost by the receiver (trimmed)
};

// What one ACK did, filled by ack_cumulative()/ack_selective() and read by
// finish_ack() (and the caller's congestion control).
struct AckOutcome {
  uint32_t newly_bytes = 0;
  uint32_t newly_packets = 0;
  bool advanced = false;  // the cumulative point moved
  bool any_sack = false;  // it acknowledged something beyond that point
  // Evidence about our own resends: a packet sent before a pending F-RTO
  // timeout and never resent was delivered (the longest such delay), the
  // F-RTO resend itself came back, and resends whose originals came back.
  uint64_t frto_delivered_ns = 0;
  bool frto_probe_delivered = false;
  uint32_t spurious = 0;
};

// What a congestion controller should hear about.
struct LossReport {
  uint32_t fast_lost = 0;  // declared lost by RACK: on_loss(now, false)
  bool timeout = false;    // a real timeout: on_loss(now, true)
};

// What the timer did besides losses.
enum class TimerAction : uint8_t {
  kNone,
  kProbe,    // a tail loss probe is queued (urgent): ask for an ACK
  kTimeout,  // a timeout; its resend is queued (urgent): ask for an ACK
  kFail,     // max_retries timeouts without progress: the flow is dead
};

struct TimerOutcome {
  LossReport losses;
  TimerAction action = TimerAction::kNone;
};

class Scoreboard {
 public:
  explicit Scoreboard(const ScoreboardConfig& cfg);

  // Sequence space (32-bit serial arithmetic).
  uint32_t snd_una() const { return snd_una_; }
  uint32_t snd_nxt() const { return snd_nxt_; }
  uint32_t outstanding() const { return snd_nxt_ - snd_una_; }
  bool has_unacked() const { return snd_una_ != snd_nxt_; }
  bool full() const { return outstanding() >= cfg_.capacity; }
  const SegRec& seg(uint32_t seq) const { return segs_[seq & mask_]; }
  // Whether `seq` was sent and is not below the cumulative point.
  bool outstanding_seq(uint32_t seq) const {
    return !before(seq, snd_una_) && before(seq, snd_nxt_);
  }
  static bool before(uint32_t a, uint32_t b) {
    return static_cast<int32_t>(a - b) < 0;
  }

  // Sending. send_new() records packet snd_nxt() (the caller checked
  // !full()) and returns its sequence number; resent() records a resend of
  // a packet taken from urgent() or next_resend().
  uint32_t send_new(uint16_t path, uint32_t len, uint64_t now);
  void resent(uint32_t seq, uint16_t path, uint64_t now);
  // The resend that goes now, past window and pacing (the RTO's resend of
  // the oldest packet, or a tail loss probe: one packet each, as TCP's
  // loss window); false when none is due.
  bool urgent(uint32_t* seq);
  // The oldest packet declared lost and not resent yet; stale entries
  // (acknowledged meanwhile, or resent as urgent) are dropped on the way.
  bool next_resend(uint32_t* seq);
  bool resend_pending() const { return retx_head_ != retx_tail_; }
  bool urgent_pending() const { return urgent_; }
  uint64_t lost_bytes() const { return lost_bytes_; }
  // Bytes declared lost since the last call (cc=credit: the receiver is
  // asked to grant them again).
  uint64_t take_lost_bytes() {
    const uint64_t b = lost_bytes_;
    lost_bytes_ = 0;
    return b;
  }

  // The pipe: bytes sent and neither acknowledged nor declared lost.
  uint64_t inflight() const { return inflight_; }
  uint64_t path_inflight(uint32_t path) const { return path_inflight_[path]; }

  // ACKs. `on_acked(seq, const SegRec&)` runs once per newly acknowledged
  // packet. ack_cumulative() takes every packet below `cum` (ignored
  // unless it moves forward within what was sent); ack_selective() one
  // packet at or beyond the cumulative point.
  template <class OnAcked>
  void ack_cumulative(uint32_t cum, uint64_t now, AckOutcome* o,
                      OnAcked&& on_acked) {
    if (!before(snd_una_, cum) || before(snd_nxt_, cum)) return;
    o->advanced = true;
    for (uint32_t s = snd_una_; s != cum; ++s) {
      if (mark_acked(s, now, o)) on_acked(s, seg(s));
    }
    snd_una_ = cum;
    dupacks_ = 0;
    rto_backoff_ = 0;
    tlp_sent_ = false;
    last_progress_ns_ = now;
  }
  template <class OnAcked>
  void ack_selective(uint32_t seq, uint64_t now, AckOutcome* o,
                     OnAcked&& on_acked) {
    if (!before(seq, snd_nxt_)) return;
    o->any_sack = true;
    if (before(seq, snd_una_)) return;
    segs_[seq & mask_].sacked = true;
    if (mark_acked(seq, now, o)) on_acked(seq, seg(seq));
  }
  // An in-order delivery confirmation (RC: the NIC's completion): `seq` is
  // acknowledged and the cumulative point moves over what is.
  template <class OnAcked>
  void ack_delivered(uint32_t seq, uint64_t now, OnAcked&& on_acked) {
    if (!outstanding_seq(seq)) return;
    AckOutcome o;
    if (mark_acked(seq, now, &o)) on_acked(seq, seg(seq));
    while (snd_una_ != snd_nxt_ && seg(snd_una_).acked) ++snd_una_;
  }
  // The round-trip time of `seq`'s first transmission, if it was sent once
  // and not sampled yet (Karn), else 0. Feeds min RTT and the RTO.
  uint64_t take_rtt_sample(uint32_t seq, uint64_t now);
  // Ends an ACK: duplicate ACK counting, the F-RTO verdict, RACK's
  // reordering window, and RACK's loss detection once the duplicate ACK
  // threshold is met.
  LossReport finish_ack(const AckOutcome& o, uint64_t now);
  // The receiver got `seq`'s header without its payload (a switch trimmed
  // it, NDP/EQDS): the transmission sent at `sent_ns` is lost for certain,
  // with no reordering to wait out. False when that transmission is not
  // the latest (an older copy's NACK), or `seq` is acknowledged or
  // already waiting to be resent.
  bool nack(uint32_t seq, uint64_t sent_ns);

  // Timers: RACK for holes ACKs stopped reporting, then the tail loss
  // probe or the RTO. Call at next_timer_ns() (or more often).
  TimerOutcome on_timer(uint64_t now);
  // The earliest time on_timer() may act: RACK's reordering timer for a
  // hole, the probe or the RTO (UINT64_MAX: nothing out).
  uint64_t next_timer_ns() const;
  // The flow failed: everything outstanding counts as acknowledged and
  // leaves the pipe; nothing is resent and no timer acts.
  void abandon();
  // Progress restarts the RTO's clock (the engine calls it while nothing
  // is out, so a later first packet is not timed from a stale point).
  void note_idle(uint64_t now) { last_progress_ns_ = now; }

  const RtoEstimator& rto() const { return rto_; }
  uint64_t min_rtt_ns() const { return min_rtt_ns_; }
  uint32_t rto_backoff() const { return rto_backoff_; }
  uint32_t dupacks() const { return dupacks_; }
  uint32_t reorder_mult() const { return reo_wnd_mult_; }
  uint64_t last_ack_ns() const { return last_ack_ns_; }
  bool frto_pending() const { return frto_; }
  const RecoveryCounters& counters() const { return counters_; }
  // RACK's reordering window now (cc/recovery.h).
  uint64_t reorder_window_ns() const {
    return rack_reorder_window_ns(min_rtt_ns_, reo_wnd_mult_, rto_.srtt_ns());
  }

 private:
  bool mark_acked(uint32_t seq, uint64_t now, AckOutcome* o);
  void leave_pipe(SegRec& s);
  void enter_pipe(SegRec& s, uint16_t path, uint64_t now);
  // Declares `seq` lost: it leaves the pipe and waits to be resent.
  bool declare_lost(uint32_t seq);
  uint32_t detect_losses(uint64_t now);
  uint64_t rack_lost_at(uint32_t seq, const SegRec& r,
                        uint64_t reo_wnd_ns) const;
  // The send time of the newest delivery on any path (false: none yet).
  bool newest_delivery(uint64_t* t) const;
  static bool past_rack_horizon(const SegRec& r, uint64_t newest_ns);
  void timeout(uint64_t now, TimerOutcome* out);
  void timeout_recovery(uint64_t now);
  bool probe_tail(uint64_t now, uint64_t rto_ns);
  uint64_t tlp_deadline_ns(uint64_t rto_ns) const;
  uint64_t rack_deadline_ns() const;

  ScoreboardConfig cfg_;
  uint32_t mask_;
  std::vector<SegRec> segs_;
  std::vector<uint32_t> retx_;  // resend queue, capacity entries
  uint32_t retx_head_ = 0, retx_tail_ = 0;
  uint32_t snd_una_ = 0, snd_nxt_ = 0;
  uint64_t inflight_ = 0;
  std::vector<uint64_t> path_inflight_;
  uint64_t lost_bytes_ = 0;
  // RACK (RFC 8985) per path: send time, sequence and RTT of the most
  // recently sent packet delivered on each path. An in-order path makes a
  // later delivery evidence of loss; other paths' deliveries are not.
  std::vector<uint64_t> rack_tx_ns_, rack_rtt_ns_;
  std::vector<uint32_t> rack_seq_;
  std::vector<uint8_t> rack_valid_;  // a delivery was seen on the path
  uint64_t min_rtt_ns_ = 0;
  RtoEstimator rto_;
  RttSampler rto_samples_;  // feeds rto_ a round trip's largest RTT
  uint32_t rto_backoff_ = 0;
  uint32_t dupacks_ = 0;
  uint64_t last_progress_ns_ = 0;
  uint64_t last_ack_ns_ = 0;
  // The resend that goes past window and pacing (urgent()).
  bool urgent_ = false;
  uint32_t urgent_seq_ = 0;
  bool tlp_sent_ = false;  // a probe is out (until progress or a timeout)
  // F-RTO (RFC 5682): a first timeout resends only the oldest packet and
  // waits for the next ACK. One that shows a packet sent before the
  // timeout (never resent) delivered proves it spurious (the peer or its
  // host was slow): backoff and the RTO estimate are corrected (Eifel)
  // and nothing else is resent. Otherwise the loss is real.
  bool frto_ = false;
  uint64_t frto_ns_ = 0;
  uint32_t frto_seq_ = 0;
  // RACK's reordering window multiplier (RFC 8985 6.2): +1 per spurious
  // resend, back to 1 after 16 loss recoveries without one.
  uint32_t reo_wnd_mult_ = 1;
  uint32_t reo_wnd_persist_ = 0;
  RecoveryCounters counters_;
};

}  // namespace uccl::cc
