// DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257): a window cut in
// proportion to the fraction of ECN-marked bytes, estimated once per RTT.
#pragma once

#include <cstdint>
#include <string>

#include "cc/cc.h"

namespace uccl::cc {

struct DctcpParams {
  double g = 1.0 / 16;    // EWMA weight of each window's marked fraction
  double init_cwnd = 10;  // packets (RFC 6928's initial window)
  double min_cwnd = 1;    // packets
  double max_cwnd = 1e6;  // packets
  double init_alpha = 1;  // RFC 8257 section 3.3: start conservative
};

// The switch marks packets above a step threshold K (ccsim `ecn_kb`). The
// sender keeps alpha, the EWMA of the marked fraction per observation window
// (one RTT: RFC 8257 uses a sequence number; with no sequence numbers in
// CcSample a window ends when a smoothed RTT has passed). The first marked
// ACK of a window cuts cwnd by alpha/2, at most once per window; otherwise
// slow start below ssthresh, then one packet per RTT. Losses halve the
// window (fast retransmit) or reset it to min_cwnd (timeout), as TCP.
class Dctcp final : public CongestionControl {
 public:
  Dctcp(const DctcpParams& p, uint32_t mss_bytes);
  static Result<DctcpParams> params_from(const CcParams& c);

  const char* name() const override { return "dctcp"; }
  void on_ack(const CcSample& s) override;
  void on_loss(uint64_t now_ns, bool timeout) override;
  double cwnd_bytes() const override { return cwnd_ * mss_; }
  double rate_bps() const override { return 0; }
  std::string state() const override;

  double alpha() const { return alpha_; }
  double cwnd_pkts() const { return cwnd_; }
  bool in_slow_start() const { return cwnd_ < ssthresh_; }

 private:
  void end_window(uint64_t now_ns);

  DctcpParams p_;
  uint32_t mss_;
  double cwnd_, ssthresh_ = 1e300;
  double alpha_;
  uint64_t srtt_ns_ = 0;
  uint64_t window_start_ns_ = 0;
  bool window_open_ = false;
  double acked_ = 0, marked_ = 0;  // bytes in the current window
  bool cut_this_window_ = false;
  uint64_t last_loss_cut_ns_ = 0;
  bool loss_cut_ever_ = false;
};

}  // namespace uccl::cc
