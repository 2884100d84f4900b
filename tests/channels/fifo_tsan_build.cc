// Compiled (not run) by the test channels_fifo_builds_under_tsan: the FIFO's
// CPU producer path must build with -fsanitize=thread -O2 -Werror.
//
// GCC refuses a standalone atomic fence under TSan (-Wtsan), and the FIFO
// header is included by every channel test: a fence on the CPU path broke
// the whole `make tsan-test` build. Both publish orders are instantiated
// here, inlined as the tests inline them.
#include "uccl/device/fifo.h"

int64_t push_both_orders(const uccl::device::FifoHandle& f,
                         const uccl::device::Trigger& t) {
  const int64_t a = uccl::device::fifo_push(f, t);
  const int64_t b =
      uccl::device::fifo_push(f, t, uccl::device::Publish::kRelaxed);
  return a + b;
}
