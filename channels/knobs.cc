// The channels layer's UCCL_* knobs, in a library of their own so that
// uccl_devinfo lists them without linking the p2p engine.
#include "util/knobs.h"

namespace uccl::channels {

UCCL_KNOB(int64_t, knob_channel_timeout_ms, "UCCL_CHANNEL_TIMEOUT_MS", 5000,
          "GPU channels: how long a kernel's push waits for room in a full "
          "FIFO, and wait()/flush() for their condition, before returning "
          "an error, ms.",
          1, 3600000);
UCCL_KNOB(int64_t, knob_channel_fifo_slots, "UCCL_CHANNEL_FIFO_SLOTS", 4096,
          "GPU channels: triggers the proxy's FIFO holds (a power of two).", 2,
          1 << 24);
UCCL_KNOB(int64_t, knob_channel_piece_kb, "UCCL_CHANNEL_PIECE_KB", 1024,
          "GPU channels: largest message a put travels in, KiB (a larger "
          "put goes in pieces).",
          4, 1 << 20);
UCCL_KNOB(int64_t, knob_channel_buffers, "UCCL_CHANNEL_BUFFERS", 8,
          "GPU channels: page-locked send and receive buffers per channel, "
          "each.",
          1, 64);
UCCL_KNOB(int64_t, knob_channel_write_min_kb, "UCCL_CHANNEL_WRITE_MIN_KB", 128,
          "GPU channels: a put of at least this many KiB from host memory "
          "into the peer's host memory goes as a one-sided write, copied "
          "at neither end (its signal follows the write's landing, or its "
          "acknowledgement: UCCL_CHANNEL_SIGNAL_ON_LANDING); "
          "0: every put goes as messages.",
          0, 1 << 20);
UCCL_KNOB(bool, knob_channel_signal_on_landing,
          "UCCL_CHANNEL_SIGNAL_ON_LANDING", true,
          "GPU channels, where landed writes are final (the software NIC): "
          "a signal behind one-sided writes leaves at once and the peer "
          "raises it once the writes have landed; 0: it waits for the "
          "writes' acknowledgements.");
UCCL_KNOB(int64_t, knob_channel_proxy_core, "UCCL_CHANNEL_PROXY_CORE", -1,
          "GPU channels: core the proxy thread is pinned to; -1: unpinned.", -1,
          4095);

}  // namespace uccl::channels
