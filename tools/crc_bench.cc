// crc_bench: the software NIC's per-datagram CRC32C work, per implementation
// (UCCL_CRC32C), against a plain memcpy of the same bytes in the same run.
// Two figures per implementation: the CRC of a hot datagram-sized buffer,
// and "verify then place" (CRC of a hot staging buffer, then a memcpy into
// a cold destination ring), which is the receiving NIC's work per datagram.
// The baseline row is the memcpy alone. Exit code 2 on bad flags.
#include <gflags/gflags.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/crc32c.h"

DEFINE_uint64(size, 65536, "Bytes per datagram.");
DEFINE_uint64(ring_mb, 64, "Cold destination ring, MiB (larger than caches).");
DEFINE_double(duration_s, 0.5, "Seconds per measurement.");

namespace {

using Clock = std::chrono::steady_clock;

// Runs `fn(i)` for about `duration_s`; returns GB/s over `bytes` per call.
template <typename Fn>
double rate_gbps(size_t bytes, Fn fn) {
  const auto end =
      Clock::now() + std::chrono::duration<double>(FLAGS_duration_s);
  uint64_t calls = 0;
  const auto t0 = Clock::now();
  do {
    for (int k = 0; k < 64; ++k) fn(calls++);
  } while (Clock::now() < end);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return calls * static_cast<double>(bytes) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("crc_bench [--size=B] [--duration_s=S]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_size == 0 || FLAGS_duration_s <= 0 ||
      FLAGS_ring_mb * (1ull << 20) < FLAGS_size) {
    std::fprintf(stderr,
                 "crc_bench: --size and --duration_s must be positive and "
                 "--ring_mb hold one datagram\n");
    return 2;
  }
  const size_t size = FLAGS_size;
  const size_t slots = FLAGS_ring_mb * (1ull << 20) / size;
  std::vector<uint8_t> src(size), ring(slots * size);
  for (size_t i = 0; i < size; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::memset(ring.data(), 1, ring.size());  // fault the pages in
  volatile uint32_t sink = 0;

  const double copy = rate_gbps(size, [&](uint64_t i) {
    std::memcpy(ring.data() + (i % slots) * size, src.data(), size);
  });
  std::printf("crc_bench: %zu B datagrams, %zu MiB cold ring, in use: %s\n",
              size, static_cast<size_t>(FLAGS_ring_mb),
              uccl::crc32c_impl_name(uccl::crc32c_impl()));
  std::printf(
      "| implementation | crc GB/s (hot) | crc then memcpy GB/s | "
      "vs memcpy alone |\n|---|---:|---:|---:|\n");
  std::printf("| memcpy alone (baseline) | | %.1f | 1.00 |\n", copy);
  for (uccl::Crc32cImpl impl :
       {uccl::Crc32cImpl::kVpclmul, uccl::Crc32cImpl::kVpclmul256,
        uccl::Crc32cImpl::kPclmul, uccl::Crc32cImpl::kSse42,
        uccl::Crc32cImpl::kPortable}) {
    if (!uccl::crc32c_supported(impl)) {
      std::printf("| %s | not on this CPU | | |\n",
                  uccl::crc32c_impl_name(impl));
      continue;
    }
    const double hot = rate_gbps(size, [&](uint64_t) {
      sink = sink + uccl::crc32c_with(impl, 0, src.data(), size);
    });
    const double place = rate_gbps(size, [&](uint64_t i) {
      sink = sink + uccl::crc32c_with(impl, 0, src.data(), size);
      std::memcpy(ring.data() + (i % slots) * size, src.data(), size);
    });
    std::printf("| %s | %.1f | %.1f | %.2f |\n", uccl::crc32c_impl_name(impl),
                hot, place, place / copy);
  }
  return 0;
}
