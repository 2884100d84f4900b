// Pattern fill/check, word at a time: the 64-bit word for offsets [8k, 8k+8)
// is one mix of (seed, k), so both loops run at memory speed.
#include "util/pattern.h"

#include <cstring>

namespace uccl {
namespace {

inline uint64_t pattern_word(uint64_t seed, uint64_t word_index) {
  uint64_t x = word_index * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

}  // namespace

void fill_pattern(void* buf, size_t len, uint64_t seed, uint64_t base_offset) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t i = 0;
  while (i < len && ((base_offset + i) & 7)) {
    p[i] = pattern_byte(seed, base_offset + i);
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w = pattern_word(seed, (base_offset + i) >> 3);
    std::memcpy(p + i, &w, 8);  // little-endian: byte j is w >> 8j
  }
  for (; i < len; ++i) p[i] = pattern_byte(seed, base_offset + i);
}

int64_t find_pattern_mismatch(const void* buf, size_t len, uint64_t seed,
                              uint64_t base_offset) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t i = 0;
  while (i < len && ((base_offset + i) & 7)) {
    if (p[i] != pattern_byte(seed, base_offset + i)) return i;
    ++i;
  }
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != pattern_word(seed, (base_offset + i) >> 3)) {
      for (size_t j = i; j < i + 8; ++j) {
        if (p[j] != pattern_byte(seed, base_offset + j)) {
          return static_cast<int64_t>(j);
        }
      }
    }
  }
  for (; i < len; ++i) {
    if (p[i] != pattern_byte(seed, base_offset + i)) return i;
  }
  return -1;
}

}  // namespace uccl
