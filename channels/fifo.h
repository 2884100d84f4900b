// The trigger FIFO's consumer side and its memory: one proxy thread pops,
// in claim order, what GPU threads push with device/fifo.h's fifo_push.
#pragma once

#include <cstdint>
#include <memory>

#include "uccl/device/fifo.h"
#include "uccl/status.h"

namespace uccl::channels {

enum class FifoPlacement {
  kHost,  // plain host memory: CPU producers (tests, the CPU stand-in)
  kGpu,   // ring mapped into GPU `gpu`, counters in its memory
};

struct FifoConfig {
  uint32_t slots = 4096;  // a power of two, 2 .. 1 << 24
  uint64_t full_timeout_ns = 5000000000ull;
  FifoPlacement placement = FifoPlacement::kHost;
  int gpu = 0;
};

class TriggerFifo {
 public:
  static Result<std::unique_ptr<TriggerFifo>> create(const FifoConfig& cfg);
  ~TriggerFifo();
  TriggerFifo(const TriggerFifo&) = delete;
  TriggerFifo& operator=(const TriggerFifo&) = delete;

  // What producers hold (by value; a kernel argument).
  const device::FifoHandle& handle() const { return h_; }

  // Consumer (one thread): the next trigger in ticket order once its
  // producer has published it (into *out); false when it is not there yet
  // (*out untouched).
  bool pop(device::Trigger* out) {
    device::Trigger* s = &h_.ring[tail_ & (h_.slots - 1)];
    // Every word of this lap's trigger, not the previous lap's: each word
    // carries the lap's phase once it has arrived (device/fifo.h, step 3).
    const uint64_t phase = device::fifo_phase(tail_, h_.slots);
    uint64_t w[4];
    for (int k = 0; k < 4; ++k) {
      w[k] = __atomic_load_n(&s->w[k], __ATOMIC_ACQUIRE);
      if ((w[k] & device::kPhaseBit) != phase) return false;
    }
    for (int k = 0; k < 4; ++k) out->w[k] = w[k] & ~device::kPhaseBit;
    ++tail_;
    __atomic_store_n(&h_.shared->tail, tail_, __ATOMIC_RELEASE);
    return true;
  }

  uint64_t popped() const { return tail_; }
  // The producers' sticky FifoError (kFifoOk while healthy).
  uint32_t error() const {
    return __atomic_load_n(&h_.shared->error, __ATOMIC_ACQUIRE);
  }
  // Slots claimed by producers so far (a GPU FIFO: a device read).
  Result<uint64_t> claimed() const;

 private:
  TriggerFifo() = default;
  FifoConfig cfg_;
  device::FifoHandle h_{};
  void* host_block_ = nullptr;  // ring + FifoShared
  uint64_t tail_ = 0;
};

}  // namespace uccl::channels
