// CRC32C implementations: a slicing-by-8 portable version and an SSE4.2
// version that runs three independent lanes and merges them with a
// table-driven "append N zero bytes" operator (GF(2) arithmetic mod P).
#include "util/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace uccl {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct PortableTables {
  uint32_t t[8][256];
  PortableTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) {
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
      }
    }
  }
};

const PortableTables& portable_tables() {
  static const PortableTables tables;
  return tables;
}

// Raw (unconditioned) register update, portable.
uint32_t raw_update_portable(uint32_t c, const uint8_t* p, size_t n) {
  const auto& t = portable_tables().t;
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
    --n;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
        t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^
        t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return c;
}

// a(x) * b(x) mod P(x), reflected bit order (bit 31 is x^0).
uint32_t mult_mod_p(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31;
  uint32_t p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8 * n) mod P: the operator that appends n zero bytes to a raw register.
uint32_t x_pow_8n_mod_p(size_t n) {
  uint32_t result = 1u << 31;    // x^0
  uint32_t square = 1u << 23;    // x^8
  while (n) {
    if (n & 1) result = mult_mod_p(square, result);
    square = mult_mod_p(square, square);
    n >>= 1;
  }
  return result;
}

// Multiplication by a fixed operator, as four byte-indexed tables.
struct ShiftTable {
  uint32_t t[4][256];
  explicit ShiftTable(size_t zero_bytes) {
    uint32_t op = x_pow_8n_mod_p(zero_bytes);
    for (int j = 0; j < 4; ++j) {
      for (uint32_t i = 0; i < 256; ++i) t[j][i] = mult_mod_p(op, i << (8 * j));
    }
  }
  uint32_t apply(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^
           t[3][c >> 24];
  }
};

constexpr size_t kLongLane = 8192;  // bytes per lane, long blocks
constexpr size_t kShortLane = 256;  // bytes per lane, short blocks

#if defined(__x86_64__)
bool detect_sse42() { return __builtin_cpu_supports("sse4.2"); }

const ShiftTable& long_shift() {
  static const ShiftTable t(kLongLane);
  return t;
}
const ShiftTable& short_shift() {
  static const ShiftTable t(kShortLane);
  return t;
}

template <bool kCopy>
__attribute__((target("sse4.2"))) inline uint64_t lane_word(const uint8_t* s,
                                                             uint8_t* d) {
  uint64_t w;
  std::memcpy(&w, s, 8);
  if (kCopy) std::memcpy(d, &w, 8);
  return w;
}

// Three lanes of `lane` bytes each, interleaved so the crc32 instructions'
// latency overlaps, then merged: c = shift(shift(c0) ^ c1) ^ c2.
template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t three_lanes(uint32_t c,
                                                        const uint8_t*& s,
                                                        uint8_t*& d, size_t lane,
                                                        const ShiftTable& shift) {
  uint64_t c0 = c, c1 = 0, c2 = 0;
  const uint8_t* s1 = s + lane;
  const uint8_t* s2 = s + 2 * lane;
  uint8_t* d1 = kCopy ? d + lane : nullptr;
  uint8_t* d2 = kCopy ? d + 2 * lane : nullptr;
  for (size_t i = 0; i < lane; i += 8) {
    c0 = _mm_crc32_u64(c0, lane_word<kCopy>(s + i, kCopy ? d + i : nullptr));
    c1 = _mm_crc32_u64(c1, lane_word<kCopy>(s1 + i, kCopy ? d1 + i : nullptr));
    c2 = _mm_crc32_u64(c2, lane_word<kCopy>(s2 + i, kCopy ? d2 + i : nullptr));
  }
  uint32_t r = shift.apply(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
  r = shift.apply(r) ^ static_cast<uint32_t>(c2);
  s += 3 * lane;
  if (kCopy) d += 3 * lane;
  return r;
}

template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t raw_update_hw(uint32_t c,
                                                          uint8_t* d,
                                                          const uint8_t* s,
                                                          size_t n) {
  uint64_t c64 = c;
  while (n >= 3 * kLongLane) {
    c64 = three_lanes<kCopy>(static_cast<uint32_t>(c64), s, d, kLongLane,
                             long_shift());
    n -= 3 * kLongLane;
  }
  while (n >= 3 * kShortLane) {
    c64 = three_lanes<kCopy>(static_cast<uint32_t>(c64), s, d, kShortLane,
                             short_shift());
    n -= 3 * kShortLane;
  }
  while (n >= 8) {
    c64 = _mm_crc32_u64(c64, lane_word<kCopy>(s, d));
    s += 8;
    if (kCopy) d += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n--) {
    uint8_t b = *s++;
    if (kCopy) *d++ = b;
    c32 = _mm_crc32_u8(c32, b);
  }
  return c32;
}
#else
bool detect_sse42() { return false; }
#endif

const bool g_hw = detect_sse42();

}  // namespace

bool crc32c_hardware() { return g_hw; }

uint32_t crc32c_portable(uint32_t crc, const void* data, size_t len) {
  return ~raw_update_portable(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
#if defined(__x86_64__)
  if (g_hw) {
    return ~raw_update_hw<false>(~crc, nullptr,
                                 static_cast<const uint8_t*>(data), len);
  }
#endif
  return crc32c_portable(crc, data, len);
}

uint32_t crc32c_copy(uint32_t crc, void* dst, const void* src, size_t len) {
#if defined(__x86_64__)
  if (g_hw) {
    return ~raw_update_hw<true>(~crc, static_cast<uint8_t*>(dst),
                                static_cast<const uint8_t*>(src), len);
  }
#endif
  std::memcpy(dst, src, len);
  return crc32c_portable(crc, dst, len);
}

}  // namespace uccl
