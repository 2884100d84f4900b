// Seeded pseudo-random numbers for reproducible decisions (fault injection,
// path choice, simulator workloads): SplitMix64 (Steele et al., 2014).
#pragma once

#include <cstdint>

namespace uccl {

// SplitMix64's output function of state `z` (a stateless 64-bit mixer).
inline uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The next number of the sequence in `*state`.
inline uint64_t splitmix64(uint64_t* state) {
  const uint64_t r = mix64(*state);
  *state += 0x9E3779B97F4A7C15ull;
  return r;
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform01(uint64_t* state) {
  return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
}

}  // namespace uccl
