// CongestionControl defaults (window check, pacing from the rate) and the
// factory that builds a controller from its name and parameters.
#include "cc/cc.h"

#include <cstdio>

#include "cc/credit.h"
#include "cc/dcqcn.h"
#include "cc/dctcp.h"
#include "cc/hpcc.h"
#include "cc/swift.h"
#include "cc/timely.h"

namespace uccl::cc {

uint64_t CongestionControl::pacing_gap_ns(uint32_t bytes) const {
  double r = rate_bps();
  if (r <= 0) return 0;
  return static_cast<uint64_t>(bytes * 8.0 * 1e9 / r);
}

bool CongestionControl::can_send(uint64_t inflight, uint32_t bytes) const {
  // One packet may always be in flight, so a window below one packet paces
  // instead of stalling.
  return inflight == 0 || static_cast<double>(inflight) + bytes <= cwnd_bytes();
}

std::string CongestionControl::state() const {
  char buf[96];
  double w = cwnd_bytes();
  if (w >= kUnlimited) {
    std::snprintf(buf, sizeof(buf), "cwnd=inf rate_gbps=%.3f",
                  rate_bps() / 1e9);
  } else {
    std::snprintf(buf, sizeof(buf), "cwnd=%.0f rate_gbps=%.3f", w,
                  rate_bps() / 1e9);
  }
  return buf;
}

const char* cc_names() {
  return "none, timely, timely_patched, swift, credit, dctcp, dcqcn, hpcc";
}

Result<std::unique_ptr<CongestionControl>> make_cc(const std::string& name,
                                                   const CcParams& params,
                                                   uint32_t mss_bytes,
                                                   double line_rate_bps) {
  if (mss_bytes == 0 || line_rate_bps <= 0) {
    return InvalidArgument("make_cc: mss and line rate must be positive");
  }
  std::unique_ptr<CongestionControl> cc;
  if (name == "none") {
    cc = std::make_unique<NoCc>();
  } else if (name == "timely" || name == "timely_patched") {
    UCCL_ASSIGN_OR_RETURN(TimelyParams p, Timely::params_from(params));
    cc = std::make_unique<Timely>(p, name == "timely_patched", line_rate_bps,
                                  mss_bytes);
  } else if (name == "swift") {
    UCCL_ASSIGN_OR_RETURN(SwiftParams p, Swift::params_from(params));
    cc = std::make_unique<Swift>(p, mss_bytes, line_rate_bps);
  } else if (name == "credit") {
    UCCL_ASSIGN_OR_RETURN(CreditParams p, CreditSender::params_from(params));
    cc = std::make_unique<CreditSender>(p, line_rate_bps);
  } else if (name == "dctcp") {
    UCCL_ASSIGN_OR_RETURN(DctcpParams p, Dctcp::params_from(params));
    cc = std::make_unique<Dctcp>(p, mss_bytes);
  } else if (name == "dcqcn") {
    UCCL_ASSIGN_OR_RETURN(DcqcnParams p, Dcqcn::params_from(params));
    cc = std::make_unique<Dcqcn>(p, line_rate_bps, mss_bytes);
  } else if (name == "hpcc") {
    UCCL_ASSIGN_OR_RETURN(HpccParams p, Hpcc::params_from(params));
    cc = std::make_unique<Hpcc>(p, line_rate_bps, mss_bytes);
  } else {
    return InvalidArgument("unknown congestion control '" + name +
                           "' (have: " + cc_names() + ")");
  }
  UCCL_RETURN_IF_ERROR(params.check_all_used(name));
  return cc;
}

}  // namespace uccl::cc
