// CRC32C (Castagnoli), the software NIC's per-datagram integrity check (like
// RoCE's ICRC). SSE4.2 with three interleaved lanes where available.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uccl {

// Standard CRC32C of `len` bytes, continuing from `crc` (0 to start):
// crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t len);

// Copies `len` bytes from `src` to `dst` (non-overlapping) and returns the
// CRC32C of them, continuing from `crc`, in one pass over the data.
uint32_t crc32c_copy(uint32_t crc, void* dst, const void* src, size_t len);

// True when the SSE4.2 path is in use (for benchmarks' reports).
bool crc32c_hardware();

// Portable implementation, exposed so tests can check both paths agree.
uint32_t crc32c_portable(uint32_t crc, const void* data, size_t len);

}  // namespace uccl
