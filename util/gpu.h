// Optional CUDA helpers (device count, pointer kind, on-GPU pattern fill and
// check). Built from gpu.cu with CUDA, else from gpu_none.cc (NotSupported).
#pragma once

#include <cstddef>
#include <cstdint>

#include "uccl/status.h"

namespace uccl {

// True when this build has CUDA support compiled in.
bool gpu_support_compiled();
// Visible CUDA devices; 0 without CUDA, without a driver or without a GPU.
int gpu_count();
// True when `p` is CUDA device (not host or managed) memory.
bool is_gpu_pointer(const void* p);

Result<void*> gpu_alloc(int device, size_t len);
Status gpu_free(void* p);
// Page-locked host memory that GPU `device` reaches at the same address.
Result<void*> gpu_alloc_mapped(int device, size_t len);
Status gpu_free_mapped(void* p);
Status gpu_memcpy(void* dst, const void* src, size_t len);  // any direction

// util/pattern.h's pattern, produced and checked on the GPU.
Status gpu_fill_pattern(void* dptr, size_t len, uint64_t seed);
// Offset of the first mismatch, or -1 when the buffer matches.
Result<int64_t> gpu_find_pattern_mismatch(const void* dptr, size_t len,
                                          uint64_t seed);

}  // namespace uccl
