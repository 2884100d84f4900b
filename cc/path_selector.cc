// Power-of-two-choices path selection over an EWMA RTT scoreboard.
#include "cc/path_selector.h"

#include "util/random.h"

namespace uccl::cc {

PathSelector::PathSelector(uint32_t n, uint64_t seed, double ewma)
    : srtt_(n ? n : 1, 0.0), ewma_(ewma), rng_(seed * 2 + 1) {}

uint64_t PathSelector::next_random() { return splitmix64(&rng_); }

uint32_t PathSelector::choose() {
  const uint32_t n = size();
  if (n == 1) return 0;
  uint32_t a = next_random() % n;
  uint32_t b = next_random() % (n - 1);
  if (b >= a) ++b;  // two distinct paths
  return srtt_[b] < srtt_[a] ? b : a;
}

void PathSelector::on_rtt(uint32_t path, uint64_t rtt_ns) {
  if (path >= srtt_.size()) return;
  double& s = srtt_[path];
  s = s == 0 ? static_cast<double>(rtt_ns) : (1 - ewma_) * s + ewma_ * rtt_ns;
}

}  // namespace uccl::cc
