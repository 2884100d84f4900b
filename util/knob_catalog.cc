// The name of every UCCL_* knob of every layer, so that any binary (one that
// links only some layers) can tell a real knob from a typo.
// tests/util/knob_catalog_test.cc keeps it equal to the UCCL_KNOB definitions.
#include "util/knobs.h"

namespace uccl {

const std::vector<std::string>& knob_catalog() {
  static const std::vector<std::string> kNames = {
      // util/
      "UCCL_CRC32C",
      // transport/ (software NIC, faults, verbs)
      "UCCL_FAULT_RX", "UCCL_FAULT_SEED", "UCCL_FAULT_TX", "UCCL_IB_GID_INDEX",
      "UCCL_SOFTNIC_DIRECT_RX_BYTES", "UCCL_SOFTNIC_GRO", "UCCL_SOFTNIC_GSO",
      "UCCL_SOFTNIC_LOCAL_CRC", "UCCL_SOFTNIC_MTU", "UCCL_SOFTNIC_PRIORITY_RX",
      "UCCL_SOFTNIC_RATE_GBPS", "UCCL_SOFTNIC_RC_MIN_TIMEOUT_US",
      "UCCL_SOFTNIC_RC_WINDOW", "UCCL_SOFTNIC_RX_BUDGET",
      "UCCL_SOFTNIC_SOCKBUF_KB", "UCCL_SOFTNIC_SPEED_MBPS",
      "UCCL_SOFTNIC_SPLICE", "UCCL_SOFTNIC_TX_BUDGET",
      // engine/ (Endpoint and engines)
      "UCCL_ACK_DELAY_US", "UCCL_ACK_EVERY", "UCCL_BOOTSTRAP_TIMEOUT_MS",
      "UCCL_CC", "UCCL_CC_PARAMS", "UCCL_CC_PER_PATH", "UCCL_CC_SHARED_FLOOR",
      "UCCL_CHUNK_KB", "UCCL_CORE_LOCK_DIR", "UCCL_CTRL_ACK_DELAY_US",
      "UCCL_DEVICE", "UCCL_DUP_ACK_THRESHOLD", "UCCL_EAGER_BYTES",
      "UCCL_ENGINES", "UCCL_ENGINE_CORES", "UCCL_ENGINE_DRIVES_NIC",
      "UCCL_ENGINE_WINDOW_KB", "UCCL_IDLE_SLEEP_AFTER_MS", "UCCL_IDLE_SLEEP_US",
      "UCCL_IDLE_SPIN_LOOPS", "UCCL_IDLE_YIELD_LOOPS", "UCCL_INLINE_BYTES",
      "UCCL_LINK_GBPS", "UCCL_MAX_RETRIES", "UCCL_NIC_QUEUE", "UCCL_PATH_QUEUE",
      "UCCL_PATHS", "UCCL_RC_MODE", "UCCL_RTO_MAX_US", "UCCL_RTO_MIN_US",
      "UCCL_STATS_INTERVAL_S", "UCCL_TLP", "UCCL_TRACE_FILE",
      // p2p/ (transfer engine)
      "UCCL_CUDART",
      // channels/ (GPU-initiated transfers)
      "UCCL_CHANNEL_BUFFERS", "UCCL_CHANNEL_FIFO_SLOTS",
      "UCCL_CHANNEL_PIECE_KB", "UCCL_CHANNEL_PROXY_CORE",
      "UCCL_CHANNEL_SIGNAL_ON_LANDING", "UCCL_CHANNEL_TIMEOUT_MS",
      "UCCL_CHANNEL_WRITE_MIN_KB",
      // collective/ (NCCL plugin and tuner)
      "UCCL_NCCL_CONNS", "UCCL_NCCL_DEVICES", "UCCL_NCCL_ENGINES",
      "UCCL_NCCL_FLUSH", "UCCL_NCCL_GPU_DIRECT", "UCCL_NCCL_LL_MAX_KB",
      "UCCL_NCCL_MAX_BYTES", "UCCL_NCCL_MAX_RECVS", "UCCL_NCCL_PARTS",
      "UCCL_NCCL_SPEED_MBPS", "UCCL_NCCL_SPREAD", "UCCL_NCCL_STEER_MAIN",
      "UCCL_NCCL_STEER_THREADS", "UCCL_NCCL_STRIPE_KB",
      "UCCL_NCCL_TREE_MAX_BYTES", "UCCL_NCCL_TUNER",
      // profiler/ (NCCL profiler plugin)
      "UCCL_PROFILER_DIR", "UCCL_PROFILER_EVENTS", "UCCL_PROFILER_MASK",
      "UCCL_PROFILER_SLOWEST"};
  return kNames;
}

}  // namespace uccl
