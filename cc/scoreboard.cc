// The loss-recovery scoreboard (cc/scoreboard.h): acknowledgements, RACK,
// F-RTO, tail loss probes and timeouts over a ring of packet records.
#include "cc/scoreboard.h"

#include <algorithm>
#include <limits>

namespace uccl::cc {

Scoreboard::Scoreboard(const ScoreboardConfig& cfg)
    : cfg_(cfg),
      mask_(cfg.capacity - 1),
      segs_(cfg.capacity),
      retx_(cfg.capacity),
      snd_una_(cfg.first_seq),
      snd_nxt_(cfg.first_seq),
      path_inflight_(std::max<uint32_t>(cfg.paths, 1), 0),
      rack_tx_ns_(std::max<uint32_t>(cfg.paths, 1), 0),
      rack_rtt_ns_(std::max<uint32_t>(cfg.paths, 1), 0),
      rack_seq_(std::max<uint32_t>(cfg.paths, 1), 0),
      rack_valid_(std::max<uint32_t>(cfg.paths, 1), 0),
      rto_(cfg.rto_min_ns, cfg.rto_max_ns, cfg.rto_init_ns) {}

void Scoreboard::enter_pipe(SegRec& s, uint16_t path, uint64_t now) {
  s.path = path;
  s.last_tx_ns = now;
  s.in_pipe = true;
  s.queued = false;
  inflight_ += s.len;
  path_inflight_[path] += s.len;
}

void Scoreboard::leave_pipe(SegRec& s) {
  if (!s.in_pipe) return;
  s.in_pipe = false;
  path_inflight_[s.path] -= std::min<uint64_t>(path_inflight_[s.path], s.len);
  inflight_ -= std::min<uint64_t>(inflight_, s.len);
}

void Scoreboard::abandon() {
  for (uint32_t s = snd_una_; s != snd_nxt_; ++s) {
    SegRec& r = segs_[s & mask_];
    r.acked = true;
    leave_pipe(r);
  }
  snd_una_ = snd_nxt_;
  retx_head_ = retx_tail_;
  urgent_ = false;
  lost_bytes_ = 0;
}

uint32_t Scoreboard::send_new(uint16_t path, uint32_t len, uint64_t now) {
  const uint32_t seq = snd_nxt_++;
  SegRec& s = segs_[seq & mask_];
  s = SegRec{};
  s.len = len;
  s.first_tx_ns = now;
  enter_pipe(s, path, now);
  return seq;
}

void Scoreboard::resent(uint32_t seq, uint16_t path, uint64_t now) {
  SegRec& s = segs_[seq & mask_];
  if (s.retx < 255) ++s.retx;
  if (urgent_ && seq == urgent_seq_) urgent_ = false;
  if (retx_head_ != retx_tail_ && retx_[retx_head_ & mask_] == seq) {
    ++retx_head_;
  }
  enter_pipe(s, path, now);
}

bool Scoreboard::urgent(uint32_t* seq) {
  if (!urgent_) return false;
  const SegRec& s = seg(urgent_seq_);
  if (!outstanding_seq(urgent_seq_) || s.acked || !s.queued) {
    urgent_ = false;
    return false;
  }
  *seq = urgent_seq_;
  return true;
}

bool Scoreboard::next_resend(uint32_t* seq) {
  while (retx_head_ != retx_tail_) {
    const uint32_t s = retx_[retx_head_ & mask_];
    const SegRec& r = seg(s);
    if (outstanding_seq(s) && !r.acked && r.queued) {
      *seq = s;
      return true;
    }
    ++retx_head_;  // acknowledged meanwhile, or resent already (urgent)
  }
  return false;
}

bool Scoreboard::declare_lost(uint32_t seq) {
  SegRec& s = segs_[seq & mask_];
  if (s.queued || retx_tail_ - retx_head_ >= cfg_.capacity) return false;
  s.queued = true;
  retx_[retx_tail_++ & mask_] = seq;
  leave_pipe(s);
  lost_bytes_ += s.len;
  return true;
}

bool Scoreboard::nack(uint32_t seq, uint64_t sent_ns) {
  if (!outstanding_seq(seq)) return false;
  const SegRec& s = segs_[seq & mask_];
  if (s.acked || s.queued || s.last_tx_ns != sent_ns) return false;
  if (!declare_lost(seq)) return false;
  ++counters_.nack_retx;
  return true;
}

bool Scoreboard::mark_acked(uint32_t seq, uint64_t now, AckOutcome* o) {
  SegRec& s = segs_[seq & mask_];
  if (s.acked) return false;
  o->newly_bytes += s.len;
  ++o->newly_packets;
  // F-RTO's evidence. The resend of the timed-out packet was delivered, or
  // its original: which one, timing cannot tell (the resend's RTT may be
  // below a min RTT measured under queueing), so it proves nothing
  // spurious. A packet sent before the timeout and never resent proves
  // its original was delivered: the timeout was spurious.
  if (frto_ && seq == frto_seq_ && s.retx > 0) {
    o->frto_probe_delivered = true;
  } else if (frto_ && s.retx == 0 && s.first_tx_ns < frto_ns_) {
    o->frto_delivered_ns = std::max(o->frto_delivered_ns, now - s.first_tx_ns);
  } else if (s.retx > 0 &&
             !rack_unambiguous(true, s.last_tx_ns, min_rtt_ns_, now)) {
    ++o->spurious;  // acknowledged sooner than its resend could have been
  }
  // RACK's clock advances only on unambiguous deliveries: an ACK for a
  // resent packet sooner than the min RTT is for an earlier copy (RFC 8985,
  // 6.2 step 2); taking it would declare everything sent on this path
  // before the resend lost.
  if (rack_unambiguous(s.retx > 0, s.last_tx_ns, min_rtt_ns_, now) &&
      now > s.last_tx_ns &&
      (!rack_valid_[s.path] ||
       !rack_sent_before(s.last_tx_ns, seq, rack_tx_ns_[s.path],
                         rack_seq_[s.path]))) {
    rack_valid_[s.path] = 1;
    rack_tx_ns_[s.path] = s.last_tx_ns;
    rack_seq_[s.path] = seq;
    rack_rtt_ns_[s.path] = now - s.last_tx_ns;
  }
  s.acked = true;
  leave_pipe(s);
  return true;
}

uint64_t Scoreboard::take_rtt_sample(uint32_t seq, uint64_t now) {
  if (!before(seq, snd_nxt_) || before(seq, snd_nxt_ - cfg_.capacity)) {
    return 0;
  }
  SegRec& s = segs_[seq & mask_];
  if (s.retx != 0 || s.rtt_sampled || now <= s.first_tx_ns) {
    return 0;
  }
  s.rtt_sampled = true;
  const uint64_t rtt = now - s.first_tx_ns;
  if (min_rtt_ns_ == 0 || rtt < min_rtt_ns_) min_rtt_ns_ = rtt;
  rto_samples_.add(rtt, now, &rto_);
  return rtt;
}

LossReport Scoreboard::finish_ack(const AckOutcome& o, uint64_t now) {
  LossReport r;
  if (!o.advanced && o.any_sack && has_unacked()) ++dupacks_;
  // A pending F-RTO timeout is resolved: spurious (an original sent before
  // it was delivered: undo the backoff, Eifel response) or real (the ACK
  // covered the resend and nothing sent before the timeout: recovery as
  // after any timeout; the resend, sent last, was delivered, so RACK finds
  // what else was lost rather than declaring everything queued behind it
  // lost, as RACK on RTO would).
  if (frto_ && o.frto_delivered_ns > 0) {
    frto_ = false;
    ++counters_.spurious_rtos;
    rto_backoff_ = 0;
    rto_.on_spurious_timeout(o.frto_delivered_ns);
  } else if (o.frto_probe_delivered) {
    frto_ = false;
    r.timeout = true;
    // Taken as the resend's delivery (RACK itself may have set it aside as
    // possibly the original's, sooner than a min RTT measured under load).
    const SegRec& p = seg(frto_seq_);
    if (now > p.last_tx_ns) {
      rack_valid_[p.path] = 1;
      rack_tx_ns_[p.path] = p.last_tx_ns;
      rack_seq_[p.path] = frto_seq_;
      rack_rtt_ns_[p.path] = now - p.last_tx_ns;
    }
    detect_losses(now);
  }
  if (o.spurious > 0) {
    counters_.spurious_retx += o.spurious;
    reo_wnd_mult_ = std::min<uint32_t>(reo_wnd_mult_ + 1, 64);
    reo_wnd_persist_ = 16;
  }
  last_ack_ns_ = now;
  // Fast retransmit once the duplicate-ACK threshold is met; which holes
  // are lost is decided by time (RACK), since sprayed paths reorder.
  if (o.any_sack && dupacks_ >= cfg_.dup_ack_threshold) {
    r.fast_lost = detect_losses(now);
  }
  return r;
}

bool Scoreboard::newest_delivery(uint64_t* t) const {
  bool any = false;
  *t = 0;
  for (size_t p = 0; p < rack_tx_ns_.size(); ++p) {
    if (!rack_valid_[p]) continue;
    any = true;
    *t = std::max(*t, rack_tx_ns_[p]);
  }
  return any;
}

// RACK looks at every packet sent before a delivered one, whatever its
// sequence number (a delivered resend makes packets above it lost too). A
// first transmission sent after the newest delivery ends the scan: every
// later sequence number was first sent later still, or resent later.
bool Scoreboard::past_rack_horizon(const SegRec& r, uint64_t newest_ns) {
  return r.retx == 0 && r.last_tx_ns > newest_ns;
}

// When RACK declares `seq` lost (cc/recovery.h), by the newest delivery on
// its path; never without one.
uint64_t Scoreboard::rack_lost_at(uint32_t seq, const SegRec& r,
                                  uint64_t reo_wnd_ns) const {
  if (!rack_valid_[r.path]) return std::numeric_limits<uint64_t>::max();
  return rack_lost_at_ns(r.last_tx_ns, seq, rack_tx_ns_[r.path],
                         rack_seq_[r.path], rack_rtt_ns_[r.path], reo_wnd_ns);
}

uint32_t Scoreboard::detect_losses(uint64_t now) {
  // RACK (RFC 8985): a hole is lost when a packet sent after it on its
  // path was delivered and it has been out for that packet's RTT plus the
  // reordering window, so reordering of any depth, and queues that swell
  // RTTs, cause no spurious resends.
  uint64_t newest;
  if (!newest_delivery(&newest)) return 0;
  const uint64_t reo_wnd = reorder_window_ns();
  uint32_t lost = 0;
  for (uint32_t s = snd_una_; s != snd_nxt_; ++s) {
    const SegRec& r = seg(s);
    if (past_rack_horizon(r, newest)) break;
    if (r.acked || r.queued || now < rack_lost_at(s, r, reo_wnd)) continue;
    if (!declare_lost(s)) continue;
    ++counters_.fast_retx;
    ++lost;
  }
  // 16 recoveries without a spurious resend: the window goes back down.
  if (lost > 0 && reo_wnd_persist_ > 0 && --reo_wnd_persist_ == 0) {
    reo_wnd_mult_ = 1;
  }
  return lost;
}

TimerOutcome Scoreboard::on_timer(uint64_t now) {
  TimerOutcome out;
  if (!has_unacked()) {
    last_progress_ns_ = now;
    return out;
  }
  // ACKs stopped but SACKs showed holes: recover them without a timeout.
  out.losses.fast_lost = detect_losses(now);
  const uint64_t rto = rto_.backed_off_ns(rto_backoff_);
  // The oldest unacknowledged packet has been out for an RTO (counted from
  // its last transmission and from the last timeout), whatever other paths
  // do.
  const uint64_t sent = std::max(seg(snd_una_).last_tx_ns, last_progress_ns_);
  if (now - sent < rto) {
    if (probe_tail(now, rto)) out.action = TimerAction::kProbe;
    return out;
  }
  if (rto_backoff_ >= cfg_.max_retries) {
    out.action = TimerAction::kFail;
    return out;
  }
  timeout(now, &out);
  return out;
}

void Scoreboard::timeout(uint64_t now, TimerOutcome* out) {
  ++counters_.rtos;
  if (rto_backoff_ == 0) {
    // F-RTO: a first timeout resends only the oldest packet; the next ACK
    // says whether it was spurious (finish_ack). The controllers hear of
    // it then, if it was not.
    frto_ = true;
    frto_ns_ = now;
    frto_seq_ = snd_una_;
    if (!seg(snd_una_).acked && declare_lost(snd_una_)) ++counters_.rto_retx;
  } else {
    timeout_recovery(now);
    out->losses.timeout = true;
  }
  urgent_ = seg(snd_una_).queued;
  urgent_seq_ = snd_una_;
  dupacks_ = 0;
  tlp_sent_ = false;
  ++rto_backoff_;
  last_progress_ns_ = now;
  out->action = TimerAction::kTimeout;
}

// A timeout that is a real loss (a second one in a row): RACK on RTO (RFC
// 8985, 6.3), the oldest packet and every packet out for longer than an
// RTT plus the reordering window are lost (resending only the oldest
// recovers a lost window one RTO per packet); they left the pipe, so the
// window paces their resending.
void Scoreboard::timeout_recovery(uint64_t now) {
  frto_ = false;
  const uint64_t reo_wnd = reorder_window_ns();
  for (uint32_t s = snd_una_; s != snd_nxt_; ++s) {
    const SegRec& r = seg(s);
    if (r.acked || r.queued) continue;
    const uint64_t rtt = std::max(rto_.srtt_ns(), rack_rtt_ns_[r.path]);
    if (rto_lost(s == snd_una_, r.last_tx_ns, rtt, reo_wnd, now) &&
        declare_lost(s)) {
      ++counters_.rto_retx;
    }
  }
}

uint64_t Scoreboard::tlp_deadline_ns(uint64_t rto_ns) const {
  const uint64_t pto = tlp_timeout_ns(rto_.srtt_ns(), rto_.rttvar_ns(),
                                      cfg_.ack_delay_ns, rto_ns);
  if (pto == 0) return 0;
  return std::max(last_ack_ns_, seg(snd_nxt_ - 1).last_tx_ns) + pto;
}

// Tail loss probe (RFC 8985, 7): once nothing was sent or acknowledged for
// the probe timeout, resend the newest unacknowledged packet at once, past
// window and pacing as Linux sends its probe. A lost tail has no later
// packet whose delivery RACK could use, so without the probe only the RTO
// repairs it; the probe's ACK lets RACK repair it and any earlier holes.
// One probe per episode (until the cumulative point moves or a timeout).
bool Scoreboard::probe_tail(uint64_t now, uint64_t rto_ns) {
  if (!cfg_.tail_loss_probe || tlp_sent_ || rto_backoff_ > 0 ||
      resend_pending()) {
    return false;  // probed already, backing off, or recovery is under way
  }
  const uint64_t deadline = tlp_deadline_ns(rto_ns);
  if (deadline == 0 || now < deadline) return false;
  for (uint32_t s = snd_nxt_ - 1;; --s) {
    const SegRec& r = seg(s);
    if (!r.acked && !r.queued && declare_lost(s)) {
      urgent_ = true;
      urgent_seq_ = s;
      ++counters_.tlp_retx;
      break;
    }
    if (s == snd_una_) break;
  }
  tlp_sent_ = true;
  return true;
}

// When RACK will declare the first hole lost, if no ACK comes first (RFC
// 8985's reordering timer): a hole sent before a delivered packet on its
// path is lost once out for that packet's RTT plus the reordering window.
uint64_t Scoreboard::rack_deadline_ns() const {
  uint64_t t = std::numeric_limits<uint64_t>::max();
  uint64_t newest;
  if (!newest_delivery(&newest)) return t;
  const uint64_t reo_wnd = reorder_window_ns();
  for (uint32_t s = snd_una_; s != snd_nxt_; ++s) {
    const SegRec& r = seg(s);
    if (past_rack_horizon(r, newest)) break;
    if (r.acked || r.queued) continue;
    t = std::min(t, rack_lost_at(s, r, reo_wnd));
  }
  return t;
}

uint64_t Scoreboard::next_timer_ns() const {
  if (!has_unacked()) return std::numeric_limits<uint64_t>::max();
  const uint64_t rto = rto_.backed_off_ns(rto_backoff_);
  uint64_t t = std::max(seg(snd_una_).last_tx_ns, last_progress_ns_) + rto;
  if (cfg_.tail_loss_probe && !tlp_sent_ && rto_backoff_ == 0 &&
      !resend_pending()) {
    const uint64_t d = tlp_deadline_ns(rto);
    if (d != 0) t = std::min(t, d);
  }
  return std::min(t, rack_deadline_ns());
}

}  // namespace uccl::cc
