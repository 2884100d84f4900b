// CRC32C implementations: a slicing-by-8 portable version, an SSE4.2 version
// that runs three crc32 lanes merged with a table-driven "append N zero bytes"
// operator (GF(2) arithmetic mod P), and a VPCLMULQDQ folding version.
#include "util/crc32c.h"

#include <cstring>
#include <string>

#include "util/knobs.h"

#if defined(__x86_64__)
#include <immintrin.h>
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
  uint32_t result = 1u << 31;  // x^0
  uint32_t square = 1u << 23;  // x^8
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

inline uint64_t load64(const uint8_t* s) {
  uint64_t w;
  std::memcpy(&w, s, 8);
  return w;
}

// Three lanes of `lane` bytes each, interleaved so the crc32 instructions'
// latency overlaps, then merged: c = shift(shift(c0) ^ c1) ^ c2.
__attribute__((target("sse4.2"))) uint32_t three_lanes(
    uint32_t c, const uint8_t*& s, size_t lane, const ShiftTable& shift) {
  uint64_t c0 = c, c1 = 0, c2 = 0;
  const uint8_t* s1 = s + lane;
  const uint8_t* s2 = s + 2 * lane;
  for (size_t i = 0; i < lane; i += 8) {
    c0 = _mm_crc32_u64(c0, load64(s + i));
    c1 = _mm_crc32_u64(c1, load64(s1 + i));
    c2 = _mm_crc32_u64(c2, load64(s2 + i));
  }
  uint32_t r =
      shift.apply(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
  r = shift.apply(r) ^ static_cast<uint32_t>(c2);
  s += 3 * lane;
  return r;
}

__attribute__((target("sse4.2"))) uint32_t raw_update_hw(uint32_t c,
                                                         const uint8_t* s,
                                                         size_t n) {
  uint64_t c64 = c;
  while (n >= 3 * kLongLane) {
    c64 = three_lanes(static_cast<uint32_t>(c64), s, kLongLane, long_shift());
    n -= 3 * kLongLane;
  }
  while (n >= 3 * kShortLane) {
    c64 = three_lanes(static_cast<uint32_t>(c64), s, kShortLane, short_shift());
    n -= 3 * kShortLane;
  }
  while (n >= 8) {
    c64 = _mm_crc32_u64(c64, load64(s));
    s += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n--) c32 = _mm_crc32_u8(c32, *s++);
  return c32;
}
// ---------------------------------------------------------------------------
// Carry-less-multiply folding (Intel, "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ", 2009), four 512-bit accumulators.
//
// Representation: 16 message bytes loaded little-endian form a 128-bit value
// whose bit i is the coefficient of x^(127-i) (bit-reflected, as the CRC
// itself). Its low quadword holds the higher-degree half H, its high quadword
// the lower half L, so the block is H*x^64 + L. Moving it D bits forward
// (towards the message end) multiplies it by x^D; mod P that is
//   H * (x^(D+64) mod P) + L * (x^D mod P),
// two carry-less products that are XORed into the block D bits later. A
// carry-less product of two reflected values comes out one degree high (bit
// i+j stands for x^(126-i-j), read as x^(127-i-j)), so each constant is
// stored divided by x: as (x^(n-8) mod P) * x^7, congruent to x^(n-1), of
// degree < 39 (products of degree < 103 fit the 128-bit lane), with bit
// (63-d) the coefficient of x^d.
// After the folds one 128-bit value R remains, equivalent mod P to everything
// before it; the crc32 instruction over R's 16 bytes (from 0) gives R*x^32
// mod P, the raw CRC of the prefix, and then carries on over the tail.
// ---------------------------------------------------------------------------

// (x^(n-8) mod P) * x^7 in the representation above, for n a multiple of 8:
// the reflected 32-bit value has x^d at bit 31-d; times x^7 that is bit
// 56-d, a shift by 25.
uint64_t fold_constant(size_t n_bits) {
  return static_cast<uint64_t>(x_pow_8n_mod_p(n_bits / 8 - 1)) << 25;
}

// The pair that folds a 128-bit lane D bits forward: low quadword multiplies
// H (x^(D+64)), high quadword multiplies L (x^D).
struct FoldPair {
  uint64_t lo, hi;
};
FoldPair fold_pair(size_t d_bits) {
  return {fold_constant(d_bits + 64), fold_constant(d_bits)};
}

struct ClmulConstants {
  FoldPair by[17];  // by[k]: fold k * 128 bits forward, k = 1..16
  ClmulConstants() {
    for (size_t k = 1; k <= 16; ++k) by[k] = fold_pair(128 * k);
  }
};

const ClmulConstants& clmul_constants() {
  static const ClmulConstants c;
  return c;
}

// Helpers shared by both widths need only what both have; each path adds
// its own (an AVX-512 function may inline an AVX2 one, not the reverse).
#define UCCL_CLMUL_TARGET \
  __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))
#define UCCL_CLMUL128_TARGET __attribute__((target("pclmul,sse4.2")))
#define UCCL_CLMUL256_TARGET \
  __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.2")))

UCCL_CLMUL_TARGET inline __m512i fold512(__m512i acc, __m512i k) {
  return _mm512_xor_si512(_mm512_clmulepi64_epi128(acc, k, 0x00),
                          _mm512_clmulepi64_epi128(acc, k, 0x11));
}

UCCL_CLMUL128_TARGET inline __m128i fold128(__m128i acc, __m128i k) {
  return _mm_xor_si128(_mm_clmulepi64_si128(acc, k, 0x00),
                       _mm_clmulepi64_si128(acc, k, 0x11));
}

UCCL_CLMUL_TARGET inline __m512i broadcast_pair(const FoldPair& p) {
  const auto lo = static_cast<int64_t>(p.lo), hi = static_cast<int64_t>(p.hi);
  return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

// Lane `kLane` of a zmm (the masked form: GCC 12 warns on the plain one).
template <int kLane>
UCCL_CLMUL_TARGET inline __m128i lane128(__m512i x) {
  return _mm512_maskz_extracti32x4_epi32(0xF, x, kLane);
}

UCCL_CLMUL128_TARGET inline __m128i pair128(const FoldPair& p) {
  return _mm_set_epi64x(static_cast<int64_t>(p.hi), static_cast<int64_t>(p.lo));
}

UCCL_CLMUL_TARGET inline __m512i load512(const uint8_t* s) {
  return _mm512_loadu_si512(s);
}

// Shared end of both folding paths: fold the remaining 16-byte blocks into
// R, turn R into the raw CRC with the crc32 instruction, then the tail.
UCCL_CLMUL128_TARGET inline uint32_t clmul_finish(__m128i r, const uint8_t* s,
                                                  size_t n) {
  const __m128i k1 = pair128(clmul_constants().by[1]);
  while (n >= 16) {
    r = _mm_xor_si128(fold128(r, k1),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    s += 16;
    n -= 16;
  }
  uint64_t c64 = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(r)));
  c64 = _mm_crc32_u64(c64, static_cast<uint64_t>(_mm_extract_epi64(r, 1)));
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n >= 8) {
    c32 = static_cast<uint32_t>(_mm_crc32_u64(c32, load64(s)));
    s += 8;
    n -= 8;
  }
  while (n--) c32 = _mm_crc32_u8(c32, *s++);
  return c32;
}

constexpr size_t kClmulMin = 256;  // shorter buffers take the crc32 path

// Raw register update over n >= kClmulMin bytes.
UCCL_CLMUL_TARGET uint32_t raw_update_clmul(uint32_t c, const uint8_t* s,
                                            size_t n) {
  const ClmulConstants& kc = clmul_constants();
  // The initial register is XORed into the first four message bytes.
  __m512i x0 = _mm512_xor_si512(
      load512(s),
      _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  __m512i x1 = load512(s + 64);
  __m512i x2 = load512(s + 128);
  __m512i x3 = load512(s + 192);
  s += 256;
  n -= 256;
  const __m512i k16 = broadcast_pair(kc.by[16]);  // 256 bytes forward
  while (n >= 256) {
    x0 = _mm512_xor_si512(fold512(x0, k16), load512(s));
    x1 = _mm512_xor_si512(fold512(x1, k16), load512(s + 64));
    x2 = _mm512_xor_si512(fold512(x2, k16), load512(s + 128));
    x3 = _mm512_xor_si512(fold512(x3, k16), load512(s + 192));
    s += 256;
    n -= 256;
  }
  // Four accumulators into one (x0 is 192 bytes before x3), then its four
  // lanes into one 128-bit value.
  __m512i x = _mm512_xor_si512(fold512(x0, broadcast_pair(kc.by[12])),
                               fold512(x1, broadcast_pair(kc.by[8])));
  x = _mm512_xor_si512(x, fold512(x2, broadcast_pair(kc.by[4])));
  x = _mm512_xor_si512(x, x3);
  __m128i r = _mm_xor_si128(fold128(lane128<0>(x), pair128(kc.by[3])),
                            fold128(lane128<1>(x), pair128(kc.by[2])));
  r = _mm_xor_si128(r, fold128(lane128<2>(x), pair128(kc.by[1])));
  r = _mm_xor_si128(r, lane128<3>(x));
  return clmul_finish(r, s, n);
}

// The same with eight 256-bit accumulators (AVX2 + VPCLMULQDQ, for CPUs
// without AVX-512 such as AMD Zen 3): 256 bytes per loop, eight chains so
// the carry-less multiplies' latency overlaps as with the 512-bit path.
UCCL_CLMUL256_TARGET inline __m256i fold256(__m256i acc, __m256i k) {
  return _mm256_xor_si256(_mm256_clmulepi64_epi128(acc, k, 0x00),
                          _mm256_clmulepi64_epi128(acc, k, 0x11));
}

UCCL_CLMUL256_TARGET inline __m256i pair256(const FoldPair& p) {
  const auto lo = static_cast<int64_t>(p.lo), hi = static_cast<int64_t>(p.hi);
  return _mm256_set_epi64x(hi, lo, hi, lo);
}

UCCL_CLMUL256_TARGET inline __m256i load256(const uint8_t* s) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
}

// Raw register update over n >= kClmulMin bytes.
UCCL_CLMUL256_TARGET uint32_t raw_update_clmul256(uint32_t c, const uint8_t* s,
                                                  size_t n) {
  const ClmulConstants& kc = clmul_constants();
  __m256i x[8];
  // Fully unrolled, so the accumulators stay in registers.
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) x[i] = load256(s + 32 * i);
  x[0] = _mm256_xor_si256(
      x[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(c))));
  s += 256;
  n -= 256;
  const __m256i k16 = pair256(kc.by[16]);  // 256 bytes forward
  while (n >= 256) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      x[i] = _mm256_xor_si256(fold256(x[i], k16), load256(s + 32 * i));
    }
    s += 256;
    n -= 256;
  }
  // Accumulator i is 32 * (7 - i) bytes before the last; then two lanes.
  __m256i y = x[7];
#pragma GCC unroll 8
  for (int i = 0; i < 7; ++i) {
    y = _mm256_xor_si256(y, fold256(x[i], pair256(kc.by[2 * (7 - i)])));
  }
  __m128i r =
      _mm_xor_si128(fold128(_mm256_castsi256_si128(y), pair128(kc.by[1])),
                    _mm256_extracti128_si256(y, 1));
  return clmul_finish(r, s, n);
}

// The same with eight 128-bit accumulators and plain PCLMULQDQ (CPUs with
// neither AVX-512 nor VPCLMULQDQ: Skylake/Cascade Lake, AMD Zen 1/2): 128
// bytes per loop.
UCCL_CLMUL128_TARGET inline __m128i load128(const uint8_t* s) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
}

// Eight accumulators over the first 128 bytes (the register XORed into the
// first four), one 128-byte fold step, and their merge into one value
// (accumulator i is 16 * (7 - i) bytes before the last).
UCCL_CLMUL128_TARGET inline void load8(__m128i* x, const uint8_t* s,
                                       uint32_t c) {
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) x[i] = load128(s + 16 * i);
  x[0] = _mm_xor_si128(x[0], _mm_cvtsi32_si128(static_cast<int>(c)));
}

UCCL_CLMUL128_TARGET inline void fold8(__m128i* x, const uint8_t* s,
                                       __m128i k8) {
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm_xor_si128(fold128(x[i], k8), load128(s + 16 * i));
  }
}

UCCL_CLMUL128_TARGET inline __m128i merge8(const __m128i* x) {
  const ClmulConstants& kc = clmul_constants();
  __m128i r = x[7];
#pragma GCC unroll 8
  for (int i = 0; i < 7; ++i) {
    r = _mm_xor_si128(r, fold128(x[i], pair128(kc.by[7 - i])));
  }
  return r;
}

// Raw register update over n >= kClmulMin bytes.
UCCL_CLMUL128_TARGET uint32_t raw_update_clmul128(uint32_t c, const uint8_t* s,
                                                  size_t n) {
  __m128i x[8];
  load8(x, s, c);
  s += 128;
  n -= 128;
  const __m128i k8 = pair128(clmul_constants().by[8]);  // 128 bytes forward
  while (n >= 128) {
    fold8(x, s, k8);
    s += 128;
    n -= 128;
  }
  return clmul_finish(merge8(x), s, n);
}

// PCLMULQDQ and the crc32 instruction run on different execution ports
// (Intel), so one loop that feeds both nearly doubles what either does
// alone. A hybrid block is region A (4096 bytes, folded as above, from the
// running CRC) then region B (three 1280-byte crc32 lanes, from 0); each
// loop takes 128 bytes of A and 40 of each lane (16 carry-less multiplies,
// 15 crc32s). Then raw(c, A || B) = shift_3840(raw(c, A)) ^ raw(0, B), and
// raw(0, B) = shift_1280(shift_1280(l0) ^ l1) ^ l2.
constexpr size_t kHybridA = 4096;
constexpr size_t kHybridLane = 1280;
constexpr size_t kHybridBlock = kHybridA + 3 * kHybridLane;  // 7936 bytes

const ShiftTable& hybrid_lane_shift() {
  static const ShiftTable t(kHybridLane);
  return t;
}
const ShiftTable& hybrid_b_shift() {
  static const ShiftTable t(3 * kHybridLane);
  return t;
}

UCCL_CLMUL128_TARGET uint32_t hybrid_block(uint32_t c, const uint8_t* s) {
  __m128i x[8];
  load8(x, s, c);
  const __m128i k8 = pair128(clmul_constants().by[8]);
  const uint8_t* a = s + 128;
  const uint8_t* l0 = s + kHybridA;
  const uint8_t* l1 = l0 + kHybridLane;
  const uint8_t* l2 = l1 + kHybridLane;
  uint64_t c0 = 0, c1 = 0, c2 = 0;
  constexpr size_t kSteps = kHybridA / 128;  // 32, as kHybridLane / 40
  static_assert(kHybridLane == kSteps * 40, "lanes keep pace with A");
  for (size_t step = 0; step < kSteps; ++step) {
    if (step + 1 < kSteps) {
      fold8(x, a, k8);
      a += 128;
    }
#pragma GCC unroll 5
    for (int j = 0; j < 5; ++j) {
      c0 = _mm_crc32_u64(c0, load64(l0 + 8 * j));
      c1 = _mm_crc32_u64(c1, load64(l1 + 8 * j));
      c2 = _mm_crc32_u64(c2, load64(l2 + 8 * j));
    }
    l0 += 40;
    l1 += 40;
    l2 += 40;
  }
  const uint32_t crc_a = clmul_finish(merge8(x), a, 0);
  const ShiftTable& ls = hybrid_lane_shift();
  uint32_t crc_b =
      ls.apply(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
  crc_b = ls.apply(crc_b) ^ static_cast<uint32_t>(c2);
  return hybrid_b_shift().apply(crc_a) ^ crc_b;
}

// Raw register update over n >= kClmulMin bytes: hybrid blocks, then the
// rest by 128-bit folding (or the crc32 instruction when short).
UCCL_CLMUL128_TARGET uint32_t raw_update_pclmul(uint32_t c, const uint8_t* s,
                                                size_t n) {
  while (n >= kHybridBlock) {
    c = hybrid_block(c, s);
    s += kHybridBlock;
    n -= kHybridBlock;
  }
  if (n >= kClmulMin) return raw_update_clmul128(c, s, n);
  return raw_update_hw(c, s, n);
}

bool detect_pclmul() {
  return __builtin_cpu_supports("pclmul") && detect_sse42();
}

bool detect_vpclmul256() {
  return __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("vpclmulqdq") &&
         __builtin_cpu_supports("pclmul") && detect_sse42();
}

bool detect_vpclmul() {
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("vpclmulqdq") &&
         __builtin_cpu_supports("pclmul") && detect_sse42();
}
#else
bool detect_sse42() { return false; }
bool detect_vpclmul() { return false; }
bool detect_vpclmul256() { return false; }
bool detect_pclmul() { return false; }
#endif

// UCCL_CRC32C: which implementation computes every datagram's CRC. All give
// the same CRC (peers may differ); the choice is for A/B benchmarks.
constexpr const char* kCrc32cChoices[] = {
    "auto", "vpclmul", "vpclmul256", "pclmul", "sse42", "portable", nullptr};
UCCL_KNOB(std::string, knob_crc32c, "UCCL_CRC32C", "auto",
          "CRC32C implementation: auto (fastest the CPU runs), vpclmul "
          "(AVX-512 VPCLMULQDQ folding), vpclmul256 (the same on AVX2), "
          "pclmul (128-bit PCLMULQDQ folding interleaved with crc32 lanes, "
          "for CPUs without VPCLMULQDQ), sse42 (three crc32 lanes) or "
          "portable (slicing-by-8); one the CPU lacks falls back to auto",
          kCrc32cChoices);

Crc32cImpl choose_impl() {
  const std::string& want = knob_crc32c().get();
  if (want == "vpclmul" && detect_vpclmul()) return Crc32cImpl::kVpclmul;
  if (want == "vpclmul256" && detect_vpclmul256()) {
    return Crc32cImpl::kVpclmul256;
  }
  if (want == "pclmul" && detect_pclmul()) return Crc32cImpl::kPclmul;
  if (want == "sse42" && detect_sse42()) return Crc32cImpl::kSse42;
  if (want == "portable") return Crc32cImpl::kPortable;
  if (detect_vpclmul()) return Crc32cImpl::kVpclmul;
  if (detect_vpclmul256()) return Crc32cImpl::kVpclmul256;
  if (detect_pclmul()) return Crc32cImpl::kPclmul;
  if (detect_sse42()) return Crc32cImpl::kSse42;
  return Crc32cImpl::kPortable;
}

const Crc32cImpl g_impl = choose_impl();

// Raw register update with one implementation.
uint32_t raw_update(Crc32cImpl impl, uint32_t c, const uint8_t* s, size_t n) {
#if defined(__x86_64__)
  if (impl == Crc32cImpl::kVpclmul && n >= kClmulMin) {
    return raw_update_clmul(c, s, n);
  }
  if (impl == Crc32cImpl::kVpclmul256 && n >= kClmulMin) {
    return raw_update_clmul256(c, s, n);
  }
  if (impl == Crc32cImpl::kPclmul && n >= kClmulMin) {
    return raw_update_pclmul(c, s, n);
  }
  if (impl != Crc32cImpl::kPortable) return raw_update_hw(c, s, n);
#endif
  (void)impl;
  return raw_update_portable(c, s, n);
}

}  // namespace

Crc32cImpl crc32c_impl() { return g_impl; }

bool crc32c_supported(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::kVpclmul:
      return detect_vpclmul();
    case Crc32cImpl::kVpclmul256:
      return detect_vpclmul256();
    case Crc32cImpl::kPclmul:
      return detect_pclmul();
    case Crc32cImpl::kSse42:
      return detect_sse42();
    case Crc32cImpl::kPortable:
      return true;
  }
  return false;
}

const char* crc32c_impl_name(Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::kVpclmul:
      return "vpclmul";
    case Crc32cImpl::kVpclmul256:
      return "vpclmul256";
    case Crc32cImpl::kPclmul:
      return "pclmul";
    case Crc32cImpl::kSse42:
      return "sse4.2";
    case Crc32cImpl::kPortable:
      return "portable";
  }
  return "?";
}

uint32_t crc32c_with(Crc32cImpl impl, uint32_t crc, const void* data,
                     size_t len) {
  if (!crc32c_supported(impl)) impl = g_impl;
  return ~raw_update(impl, ~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t crc32c_portable(uint32_t crc, const void* data, size_t len) {
  return ~raw_update_portable(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
  return ~raw_update(g_impl, ~crc, static_cast<const uint8_t*>(data), len);
}

}  // namespace uccl
