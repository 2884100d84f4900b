// The NCCL profiler plugin's knobs (UCCL_PROFILER_*), defined in knobs.cc
// (a library of their own, so that uccl_devinfo --knobs lists them).
#pragma once

#include <cstdint>
#include <string>

#include "util/knobs.h"

namespace uccl::profiler {

UCCL_DECLARE_KNOB(std::string, knob_mask);
UCCL_DECLARE_KNOB(std::string, knob_dir);
UCCL_DECLARE_KNOB(int64_t, knob_events);
UCCL_DECLARE_KNOB(int64_t, knob_slowest);

}  // namespace uccl::profiler
