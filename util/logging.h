// Logging set-up over glog, and the one place that documents VLOG levels.
// LOG(INFO) is for control events only; anything per message/chunk is VLOG.
#pragma once

#include <glog/logging.h>

#include <cstddef>

namespace uccl {

// VLOG levels used across UCCL (enable with GLOG_v=N or --v=N):
//   1  lifecycle: devices opened, QPs/flows created/connected/failed, knobs
//   2  per request: messages posted, matched, completed; bootstrap steps
//   3  per chunk: chunk sent, acked, retransmitted (fast / RTO), CC decisions
//   4  per packet: software NIC datagrams, fault injection decisions
enum VlogLevel : int {
  kVlogLifecycle = 1,
  kVlogRequest = 2,
  kVlogChunk = 3,
  kVlogPacket = 4,
};

// Initialises glog once per process (idempotent, thread-safe). Logs go to
// stderr unless GLOG_log_dir is set. Safe to call from libraries.
void init_logging(const char* program_name);

// Routes every glog message to `fn` (e.g. NCCL's logger in the net plugin)
// instead of stderr. severity is glog's (0 INFO .. 3 FATAL). Pass nullptr to
// restore stderr logging.
using LogForwarder = void (*)(int severity, const char* file, int line,
                              const char* message, size_t length);
void set_log_forwarder(LogForwarder fn);

}  // namespace uccl
