// The NCCL profiler plugin's knobs (UCCL_PROFILER_*), read once per process
// into ProfilerConfig (profiler/comm.h).
#include "profiler/knobs.h"

namespace uccl::profiler {

UCCL_KNOB(std::string, knob_mask, "UCCL_PROFILER_MASK", "all",
          "NCCL profiler plugin: the events to record: all, a number (NCCL's "
          "activation mask bits), or names joined by commas: group, coll, "
          "p2p, proxyop, proxystep, proxyctrl, kernelch, net, groupapi, "
          "collapi, p2papi, kernellaunch.");
UCCL_KNOB(std::string, knob_dir, "UCCL_PROFILER_DIR", "uccl-profile",
          "NCCL profiler plugin: directory for each rank's trace "
          "(<host>-<pid>-<comm>-r<rank>.trace.json, Chrome/Perfetto) and "
          "summary (.summary.txt), written when NCCL finalizes the "
          "communicator; created if missing.");
UCCL_KNOB(int64_t, knob_events, "UCCL_PROFILER_EVENTS", int64_t{1} << 18,
          "NCCL profiler plugin: events kept per communicator (about 250 "
          "bytes each, mapped at init, touched as used). Once full, later "
          "events are dropped and counted: the trace covers the run's "
          "start.",
          1, int64_t{1} << 26);
UCCL_KNOB(int64_t, knob_slowest, "UCCL_PROFILER_SLOWEST", 5,
          "NCCL profiler plugin: slowest proxy steps named per collective "
          "in the summary.",
          0, 1000);

}  // namespace uccl::profiler
