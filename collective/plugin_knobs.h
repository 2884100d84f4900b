// The NCCL plugin's and tuner's knobs (UCCL_NCCL_*), defined in
// plugin_knobs.cc; the plugin reads them once, at init.
#pragma once

#include <cstdint>
#include <string>

#include "util/knobs.h"

namespace uccl::nccl {

UCCL_DECLARE_KNOB(std::string, knob_devices);
UCCL_DECLARE_KNOB(int64_t, knob_engines);
UCCL_DECLARE_KNOB(int64_t, knob_conns);
UCCL_DECLARE_KNOB(int64_t, knob_max_recvs);
UCCL_DECLARE_KNOB(int64_t, knob_stripe_kb);
UCCL_DECLARE_KNOB(int64_t, knob_speed_mbps);
UCCL_DECLARE_KNOB(std::string, knob_parts);
UCCL_DECLARE_KNOB(bool, knob_spread);
UCCL_DECLARE_KNOB(bool, knob_steer);
UCCL_DECLARE_KNOB(bool, knob_steer_main);
UCCL_DECLARE_KNOB(bool, knob_gpu_direct);
UCCL_DECLARE_KNOB(std::string, knob_flush);
UCCL_DECLARE_KNOB(int64_t, knob_max_bytes);
UCCL_DECLARE_KNOB(bool, knob_tuner);
UCCL_DECLARE_KNOB(int64_t, knob_ll_max_kb);
UCCL_DECLARE_KNOB(int64_t, knob_tree_max_bytes);

}  // namespace uccl::nccl
