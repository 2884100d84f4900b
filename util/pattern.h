// Deterministic data patterns for end-to-end integrity checks: every byte is
// a function of (seed, offset), so a receiver can verify without a copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uccl {

// The pattern byte at `offset` of a buffer filled with `seed`.
inline uint8_t pattern_byte(uint64_t seed, uint64_t offset) {
  uint64_t x = (offset >> 3) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (offset & 7)));
}

// Fills buf[0, len) with the pattern of `seed` starting at `base_offset`.
void fill_pattern(void* buf, size_t len, uint64_t seed,
                  uint64_t base_offset = 0);

// Offset of the first byte that differs from the pattern, or -1 if none.
int64_t find_pattern_mismatch(const void* buf, size_t len, uint64_t seed,
                              uint64_t base_offset = 0);

}  // namespace uccl
