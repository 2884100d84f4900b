// The p2p layer's UCCL_* knobs, in a library of their own so that
// uccl_devinfo lists them without linking the engine twice.
#include "util/knobs.h"

#include <string>

namespace uccl::p2p {

UCCL_KNOB(std::string, knob_cudart, "UCCL_CUDART", "",
          "CUDA runtime library the p2p engine loads for GPU memory (empty: "
          "libcudart.so, then .so.13, .so.12).");

}  // namespace uccl::p2p
