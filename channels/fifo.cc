// TriggerFifo's memory: the ring and the consumer's shared words in host
// memory the producers reach, the producers' counters beside them.
#include "channels/fifo.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "util/gpu.h"

namespace uccl::channels {
namespace {

size_t shared_offset(uint32_t slots) {
  return static_cast<size_t>(slots) * sizeof(device::Trigger);
}

size_t host_block_bytes(uint32_t slots) {
  return shared_offset(slots) + sizeof(device::FifoShared);
}

}  // namespace

Result<std::unique_ptr<TriggerFifo>> TriggerFifo::create(
    const FifoConfig& cfg) {
  if (cfg.slots < 2 || cfg.slots > (1u << 24) ||
      (cfg.slots & (cfg.slots - 1)) != 0) {
    return InvalidArgument("fifo: slots must be a power of two in 2.." +
                           std::to_string(1u << 24) + ", not " +
                           std::to_string(cfg.slots));
  }
  std::unique_ptr<TriggerFifo> f(new TriggerFifo);
  f->cfg_ = cfg;
  const size_t bytes = host_block_bytes(cfg.slots);
  void* state = nullptr;
  if (cfg.placement == FifoPlacement::kGpu) {
    UCCL_ASSIGN_OR_RETURN(f->host_block_, gpu_alloc_mapped(cfg.gpu, bytes));
    std::memset(f->host_block_, 0, bytes);
    UCCL_ASSIGN_OR_RETURN(state, gpu_alloc(cfg.gpu, sizeof(device::FifoState)));
    const device::FifoState zero{};
    Status st = gpu_memcpy(state, &zero, sizeof(zero));
    if (!st.ok()) {
      (void)gpu_free(state);
      return st;
    }
  } else {
    f->host_block_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    state = std::aligned_alloc(64, sizeof(device::FifoState));
    if (f->host_block_ == nullptr || state == nullptr) {
      std::free(state);
      return ResourceExhausted("fifo: out of memory");
    }
    std::memset(f->host_block_, 0, bytes);
    new (state) device::FifoState{};
  }
  auto* base = static_cast<uint8_t*>(f->host_block_);
  f->h_.ring = reinterpret_cast<device::Trigger*>(base);
  f->h_.shared =
      reinterpret_cast<device::FifoShared*>(base + shared_offset(cfg.slots));
  f->h_.state = static_cast<device::FifoState*>(state);
  f->h_.slots = cfg.slots;
  f->h_.full_timeout_ns = cfg.full_timeout_ns;
  return f;
}

TriggerFifo::~TriggerFifo() {
  if (cfg_.placement == FifoPlacement::kGpu) {
    if (h_.state != nullptr) (void)gpu_free(h_.state);
    if (host_block_ != nullptr) (void)gpu_free_mapped(host_block_);
  } else {
    std::free(h_.state);
    std::free(host_block_);
  }
}

Result<uint64_t> TriggerFifo::claimed() const {
  if (cfg_.placement == FifoPlacement::kHost) {
    return static_cast<uint64_t>(
        __atomic_load_n(&h_.state->head, __ATOMIC_RELAXED));
  }
  unsigned long long head = 0;
  UCCL_RETURN_IF_ERROR(gpu_memcpy(&head, &h_.state->head, sizeof(head)));
  return static_cast<uint64_t>(head);
}

}  // namespace uccl::channels
