// Receiver-driven credit: the sender's credit balance and the receiver's
// pull pacer (token bucket at line rate, round-robin over flows).
#include "cc/credit.h"

#include <algorithm>
#include <cstdio>

namespace uccl::cc {

Result<CreditParams> CreditSender::params_from(const CcParams& c) {
  CreditParams p;
  p.base_rtt_us = c.get("base_rtt_us", p.base_rtt_us);
  p.spec_bytes = c.get("spec_bytes", p.spec_bytes);
  p.grant_bytes = c.get("grant_bytes", p.grant_bytes);
  p.bucket_us = c.get("bucket_us", p.bucket_us);
  p.rate_frac = c.get("rate_frac", p.rate_frac);
  if (p.base_rtt_us <= 0 || p.spec_bytes < 0 || p.grant_bytes < 1 ||
      p.bucket_us < 0 || !(p.rate_frac > 0 && p.rate_frac <= 1)) {
    return InvalidArgument(
        "credit: need base_rtt_us>0, spec_bytes>=0, grant_bytes>=1, "
        "bucket_us>=0, 0<rate_frac<=1");
  }
  return p;
}

namespace {
double spec_of(const CreditParams& p, double line_rate_bps) {
  return p.spec_bytes > 0 ? p.spec_bytes
                          : line_rate_bps / 8 * p.base_rtt_us * 1e-6;
}
}  // namespace

CreditSender::CreditSender(const CreditParams& p, double line_rate_bps)
    : credit_(spec_of(p, line_rate_bps)) {}

void CreditSender::on_send(uint64_t, uint32_t bytes) { credit_ -= bytes; }

bool CreditSender::can_send(uint64_t, uint32_t bytes) const {
  return credit_ >= static_cast<double>(bytes);
}

std::string CreditSender::state() const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "credit_bytes=%.0f", credit_);
  return buf;
}

PullPacer::PullPacer(const CreditParams& p, double line_rate_bps,
                     uint32_t max_flows, uint64_t now_ns)
    : rate_bytes_per_ns_(line_rate_bps * p.rate_frac / 8e9),
      grant_bytes_(p.grant_bytes),
      bucket_(
          std::max(2 * p.grant_bytes, line_rate_bps / 8 * p.bucket_us * 1e-6)),
      spec_(spec_of(p, line_rate_bps)),
      tokens_(p.grant_bytes),
      last_ns_(now_ns),
      demand_(max_flows, 0),
      spec_left_(max_flows, 0),
      in_active_(max_flows, 0) {
  active_.reserve(max_flows);
}

void PullPacer::add_demand(uint32_t flow, uint64_t bytes, bool new_flow) {
  if (flow >= demand_.size()) return;
  if (new_flow) spec_left_[flow] = static_cast<uint64_t>(spec_);
  uint64_t absorbed = std::min(spec_left_[flow], bytes);
  spec_left_[flow] -= absorbed;
  bytes -= absorbed;
  if (bytes == 0) return;
  demand_[flow] += bytes;
  if (!in_active_[flow]) {
    in_active_[flow] = 1;
    active_.push_back(flow);
  }
}

void PullPacer::remove_flow(uint32_t flow) {
  if (flow >= demand_.size()) return;
  demand_[flow] = 0;
  spec_left_[flow] = 0;
  if (in_active_[flow]) {
    in_active_[flow] = 0;
    active_.erase(std::find(active_.begin(), active_.end(), flow));
    if (rr_ >= active_.size()) rr_ = 0;
  }
}

void PullPacer::charge_unscheduled(uint64_t bytes) {
  tokens_ -= static_cast<double>(bytes);
}

int PullPacer::poll(uint64_t now_ns, Grant* out, int max) {
  if (now_ns > last_ns_) {
    tokens_ =
        std::min(bucket_, tokens_ + (now_ns - last_ns_) * rate_bytes_per_ns_);
    last_ns_ = now_ns;
  }
  int n = 0;
  while (n < max && !active_.empty()) {
    if (rr_ >= active_.size()) rr_ = 0;
    uint32_t flow = active_[rr_];
    uint64_t d = demand_[flow];
    if (d == 0) {
      in_active_[flow] = 0;
      active_.erase(active_.begin() + rr_);
      continue;
    }
    double g = std::min<double>(grant_bytes_, d);
    if (tokens_ < g) break;  // the bucket refills at line rate
    tokens_ -= g;
    demand_[flow] -= static_cast<uint64_t>(g);
    total_granted_ += static_cast<uint64_t>(g);
    out[n++] = {flow, static_cast<uint32_t>(g)};
    ++rr_;
  }
  return n;
}

double PullPacer::payload_rate_bps(double line_rate_bps,
                                   uint32_t packet_payload,
                                   uint32_t packet_overhead) {
  if (packet_payload == 0) return line_rate_bps;
  return line_rate_bps * packet_payload /
         (static_cast<double>(packet_payload) + packet_overhead);
}

}  // namespace uccl::cc
