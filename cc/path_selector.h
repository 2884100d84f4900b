// Multipath path choice by power of two choices on a per-path RTT
// scoreboard (EWMA): sample two paths at random, use the faster one.
#pragma once

#include <cstdint>
#include <vector>

namespace uccl::cc {

class PathSelector {
 public:
  // `n` paths, seeded so choices are reproducible; `ewma` weight of a new
  // RTT sample.
  PathSelector(uint32_t n, uint64_t seed, double ewma = 0.125);

  uint32_t choose();
  void on_rtt(uint32_t path, uint64_t rtt_ns);
  uint64_t srtt_ns(uint32_t path) const {
    return static_cast<uint64_t>(srtt_[path]);
  }
  uint32_t size() const { return static_cast<uint32_t>(srtt_.size()); }

 private:
  uint64_t next_random();

  std::vector<double> srtt_;  // 0 until the first sample: tried first
  double ewma_;
  uint64_t rng_;
};

}  // namespace uccl::cc
