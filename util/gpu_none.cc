// CUDA helpers for builds without CUDA: report that no GPU is usable.
#include "util/gpu.h"

namespace uccl {
namespace {
Status no_cuda() { return NotSupported("UCCL was built without CUDA"); }
}  // namespace

bool gpu_support_compiled() { return false; }
int gpu_count() { return 0; }
bool is_gpu_pointer(const void*) { return false; }
Result<void*> gpu_alloc(int, size_t) { return no_cuda(); }
Status gpu_free(void*) { return no_cuda(); }
Result<void*> gpu_alloc_mapped(int, size_t) { return no_cuda(); }
Status gpu_free_mapped(void*) { return no_cuda(); }
Status gpu_memcpy(void*, const void*, size_t) { return no_cuda(); }
Status gpu_fill_pattern(void*, size_t, uint64_t) { return no_cuda(); }
Result<int64_t> gpu_find_pattern_mismatch(const void*, size_t, uint64_t) {
  return no_cuda();
}

}  // namespace uccl
