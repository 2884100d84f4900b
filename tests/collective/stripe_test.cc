// The NCCL plugin's default stripe and message cut (collective/stripe.h):
// NCCL's 1 MiB slice over K connections in the fewest datagrams, even parts.
#include "collective/stripe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace uccl::nccl {
namespace {

// Datagrams (chunks) a message of `len` bytes takes when cut over k
// connections at `stripe` (part_range(), as the plugin cuts it), each part
// in chunks of `chunk` bytes. *largest: the biggest part.
size_t datagrams(size_t len, int k, size_t stripe, size_t chunk,
                 size_t* largest) {
  size_t total = 0;
  *largest = 0;
  for (int j = 0; j < k; ++j) {
    size_t off = 0, n = 0;
    part_range(len, j, k, stripe, &off, &n);
    *largest = std::max(*largest, n);
    total += (n + chunk - 1) / chunk;
  }
  return total;
}

// On lo (65408-byte chunks) and a 1500-MTU interface's software NIC
// (65280), 8 connections: parts of two whole chunks, 17 datagrams per
// 1 MiB (the fewest: ceil(1 MiB / chunk)) against 24 for 128 KiB parts,
// each of which ended in a short chunk.
TEST(DefaultStripe, EightConnectionsCutTheSliceIntoWholeChunks) {
  for (uint32_t chunk : {65408u, 65280u}) {
    const size_t s = default_stripe_bytes(8, chunk);
    EXPECT_EQ(s, 2u * chunk);
    size_t largest = 0;
    EXPECT_EQ(datagrams(kNcclSliceBytes, 8, s, chunk, &largest), 17u)
        << "chunk " << chunk;
    EXPECT_EQ(datagrams(kNcclSliceBytes, 8, 128 * 1024, chunk, &largest), 24u)
        << "chunk " << chunk << ": the old 128 KiB stripe";
  }
}

// Across connection counts and chunk sizes (lo, a 1500-MTU interface, a
// 9000-MTU one): never more datagrams than the plain 1 MiB / K stripe,
// the fewest possible wherever the stripe is whole chunks, and no part
// more than an eighth above an even share.
TEST(DefaultStripe, FewDatagramsAndEvenParts) {
  int whole = 0;
  for (uint32_t chunk : {65408u, 65280u, 8908u, 1408u}) {
    for (int k = 1; k <= 16; ++k) {
      const size_t s = default_stripe_bytes(k, chunk);
      const size_t plain = default_stripe_bytes(k, 0);
      size_t largest = 0, plain_largest = 0;
      const size_t n = datagrams(kNcclSliceBytes, k, s, chunk, &largest);
      const size_t before =
          datagrams(kNcclSliceBytes, k, plain, chunk, &plain_largest);
      const std::string what = "k " + std::to_string(k) + " chunk " +
                               std::to_string(chunk) + " stripe " +
                               std::to_string(s);
      EXPECT_LE(n, before) << what;
      if (k > 1 && s % chunk == 0) {
        ++whole;
        EXPECT_EQ(n, (kNcclSliceBytes + chunk - 1) / chunk) << what;
      }
      const size_t even = kNcclSliceBytes / static_cast<size_t>(k);
      EXPECT_LE(largest, std::max(even + even / 8, plain_largest)) << what;
    }
  }
  EXPECT_GT(whole, 30) << "whole-chunk stripes were the exception";
}

// Where whole chunks would leave the last connection far more than the
// others (12 connections: 86 KiB shares, 64 KiB chunks), the stripe stays
// 1 MiB / K rounded up to 1 KiB; so it does with no chunk size known.
TEST(DefaultStripe, KeepsTheEvenShareWhereWholeChunksWouldNot) {
  EXPECT_EQ(default_stripe_bytes(12, 65408), 88064u);
  EXPECT_EQ(default_stripe_bytes(8, 0), 131072u);
  EXPECT_EQ(default_stripe_bytes(16, 1u << 20), 65536u);  // chunk > share
  EXPECT_EQ(default_stripe_bytes(0, 65408), default_stripe_bytes(1, 65408));
}

}  // namespace
}  // namespace uccl::nccl
