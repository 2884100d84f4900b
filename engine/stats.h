// Engine statistics helpers: a fixed-size log-linear latency histogram
// (percentiles without allocation) used for per-flow RTTs.
#pragma once

#include <cstdint>

namespace uccl::engine {

// Buckets: 16 per power of two from 1 ns up to 2^40 ns (~18 minutes).
class Histogram {
 public:
  void add(uint64_t v) {
    ++counts_[bucket(v)];
    ++n_;
    if (v > max_) max_ = v;
  }
  uint64_t count() const { return n_; }
  uint64_t max() const { return max_; }
  // Value at quantile q in [0, 1] (upper edge of its bucket), 0 if empty.
  uint64_t quantile(double q) const {
    if (n_ == 0) return 0;
    uint64_t target = static_cast<uint64_t>(q * (n_ - 1)) + 1;
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= target) {
        uint64_t edge = upper(b);
        return edge < max_ ? edge : max_;
      }
    }
    return max_;
  }
  void reset() { *this = Histogram(); }

 private:
  static constexpr int kSub = 16;
  static constexpr int kBuckets = 41 * kSub;
  static int bucket(uint64_t v) {
    if (v < kSub) return static_cast<int>(v);
    int e = 63 - __builtin_clzll(v);  // v in [2^e, 2^(e+1))
    int sub = static_cast<int>((v >> (e - 4)) & (kSub - 1));
    int b = (e - 3) * kSub + sub;
    return b < kBuckets ? b : kBuckets - 1;
  }
  static uint64_t upper(int b) {
    if (b < kSub) return static_cast<uint64_t>(b);
    int e = b / kSub + 3;
    uint64_t sub = static_cast<uint64_t>(b % kSub);
    return ((kSub + sub + 1) << (e - 4)) - 1;
  }
  uint64_t counts_[kBuckets] = {};
  uint64_t n_ = 0;
  uint64_t max_ = 0;
};

}  // namespace uccl::engine
