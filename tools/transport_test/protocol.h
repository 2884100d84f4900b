// transport_test's own messages on its control connection and the tags that
// tie a client's connections to its session, documented here once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uccl::tt {

enum PerfType : uint32_t { kBasic = 0, kLat = 1, kTpt = 2, kBi = 3 };
inline constexpr const char* kPerfNames[] = {"basic", "lat", "tpt", "bi"};

enum ExitCode {
  kExitOk = 0,
  kExitIntegrity = 1,
  kExitTransport = 2,
  kExitUsage = 3
};

// A client session: the client connects its control connection with tag
// kControlTag (the server accepts new sessions on it), sends Params, then
// connects flow i with flow_tag(session, i), which the server accepts for
// that session only. So the connections of clients that run at the same
// time are never confused, and a server serves them concurrently.
inline constexpr uint64_t kControlTag = 0;
inline uint64_t flow_tag(uint64_t session, uint32_t flow) {
  return (session << 16) | (flow + 1);  // never kControlTag
}
inline constexpr uint64_t kSessionMask = (uint64_t{1} << 48) - 1;

// Client -> server first on the control connection; Done each way last
// (the server's carries its counts), then the client's Fin.
inline constexpr uint32_t kParamsMagic = 0x55545450;  // "UTTP"
inline constexpr uint32_t kParamsVersion = 2;         // 2: session id
inline constexpr uint32_t kDoneMagic = 0x5554444e;    // "UTDN"
inline constexpr uint32_t kFinMagic = 0x5554464e;     // "UTFN"

struct Params {
  uint32_t magic, version;
  uint32_t perftype, nflow, nmsg, nreq;
  uint64_t msize, iterations, seed;
  double duration_s;
  uint8_t flush, verify, warmup, pad[5];
  uint64_t session;  // 48 bits, non-zero (flow_tag)
};
static_assert(sizeof(Params) == 72, "Params layout");
static_assert(offsetof(Params, session) == 64, "Params layout");

struct Done {
  uint32_t magic, pad;
  uint64_t tx_bytes, tx_msgs, rx_bytes, rx_msgs, errors;
};
static_assert(sizeof(Done) == 48, "Done layout");

// Why `p` cannot run, or "" when it can (both sides check it).
std::string params_problem(const Params& p);

}  // namespace uccl::tt
