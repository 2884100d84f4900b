// CRC32C (Castagnoli), the software NIC's per-datagram integrity check (like
// RoCE's ICRC): (V)PCLMULQDQ folding, SSE4.2 crc32 lanes or portable tables.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uccl {

// Standard CRC32C of `len` bytes, continuing from `crc` (0 to start):
// crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t len);

// Implementations. The one in use is the fastest the CPU runs, unless
// UCCL_CRC32C names another (see util/crc32c.cc).
enum class Crc32cImpl {
  kVpclmul,     // AVX-512 VPCLMULQDQ folding (buffers >= 256 B; shorter: sse42)
  kVpclmul256,  // the same with 256-bit registers (AVX2 + VPCLMULQDQ)
  kPclmul,      // 128-bit PCLMULQDQ folding interleaved with crc32 lanes
  kSse42,       // three interleaved crc32 instruction lanes
  kPortable,    // slicing-by-8 tables
};
Crc32cImpl crc32c_impl();
const char* crc32c_impl_name(Crc32cImpl impl);
bool crc32c_supported(Crc32cImpl impl);

// One implementation explicitly (tests, benchmarks); one the CPU lacks is
// replaced by the one in use.
uint32_t crc32c_with(Crc32cImpl impl, uint32_t crc, const void* data,
                     size_t len);

// Portable implementation, exposed so tests can check both paths agree.
uint32_t crc32c_portable(uint32_t crc, const void* data, size_t len);

}  // namespace uccl
