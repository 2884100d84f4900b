// Tests for the small utilities: clocks, CRC32C (vectors, every
// implementation vs portable), data patterns and the log forwarder.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "util/clock.h"
#include "util/crc32c.h"
#include "util/logging.h"
#include "util/pattern.h"

namespace uccl {
namespace {

TEST(ClockTest, ManualClockMovesOnlyWhenTold) {
  ManualClock c(100);
  EXPECT_EQ(c.now_ns(), 100u);
  EXPECT_EQ(c.now_ns(), 100u);
  c.advance_us(2);
  EXPECT_EQ(c.now_ns(), 2100u);
  c.set_ns(5000);
  EXPECT_EQ(c.now_us(), 5u);
}

TEST(ClockTest, SystemClockIsMonotonic) {
  Clock* c = SystemClock::get();
  uint64_t a = c->now_ns();
  uint64_t b = c->now_ns();
  EXPECT_LE(a, b);
  EXPECT_GT(a, 0u);
}

TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(crc32c(0, "123456789", 9), 0xE3069283u);
  uint8_t buf[32];
  std::memset(buf, 0, sizeof(buf));
  EXPECT_EQ(crc32c(0, buf, 32), 0x8A9136AAu);  // RFC 3720 B.4
  std::memset(buf, 0xff, sizeof(buf));
  EXPECT_EQ(crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(0, buf, 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c_portable(0, buf, 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(0, buf, 0), 0u);
}

TEST(Crc32cTest, HardwareMatchesPortableAtAllSizesAndAlignments) {
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> data(3 * 8192 * 2 + 1000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t len : {1ul, 7ul, 8ul, 9ul, 767ul, 768ul, 769ul, 4096ul, 24575ul,
                     24576ul, 24577ul, 50000ul, 3 * 8192 * 2ul}) {
    for (size_t align = 0; align < 8; ++align) {
      if (align + len > data.size()) continue;
      uint32_t want = crc32c_portable(0, data.data() + align, len);
      EXPECT_EQ(crc32c(0, data.data() + align, len), want)
          << "len " << len << " align " << align;
    }
  }
}

// Every implementation this CPU runs against the portable one, at the sizes
// where the folding paths' stages change (256 B entry, 256 B or 128 B loop,
// 16 B folds, 8 B and 1 B tails), every alignment, and a non-zero start.
TEST(Crc32cTest, EveryImplementationAgreesAtStageBoundaries) {
  std::mt19937_64 rng(777);
  std::vector<uint8_t> data(70000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  int checked = 0;
  for (Crc32cImpl impl :
       {Crc32cImpl::kVpclmul, Crc32cImpl::kVpclmul256, Crc32cImpl::kPclmul,
        Crc32cImpl::kSse42, Crc32cImpl::kPortable}) {
    if (!crc32c_supported(impl)) continue;
    ++checked;
    for (size_t len :
         {0ul,    15ul,   255ul,   256ul,   257ul,   264ul,   271ul,
          272ul,  280ul,  511ul,   383ul,   384ul,   385ul,   400ul,
          512ul,  513ul,  767ul,   1024ul,  4097ul,  7935ul,  7936ul,
          7937ul, 8192ul, 15872ul, 15873ul, 65535ul, 65536ul, 65537ul}) {
      for (size_t align = 0; align < 16; align += 3) {
        for (uint32_t start : {0u, 0xDEADBEEFu}) {
          const uint8_t* src = data.data() + align;
          uint32_t want = crc32c_portable(start, src, len);
          EXPECT_EQ(crc32c_with(impl, start, src, len), want)
              << crc32c_impl_name(impl) << " len " << len << " align " << align;
        }
      }
    }
  }
  EXPECT_GE(checked, 1);
  EXPECT_TRUE(crc32c_supported(crc32c_impl()));
}

// A flipped bit anywhere in a 64 KiB chunk changes the folded CRC (each of
// the 512-bit accumulators and the tail).
TEST(Crc32cTest, FoldingPathDetectsBitFlipsEverywhere) {
  std::vector<uint8_t> d(65536 + 13);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 7);
  const uint32_t clean = crc32c(0, d.data(), d.size());
  for (size_t pos : {0ul, 3ul, 64ul, 130ul, 200ul, 255ul, 30000ul, 65535ul,
                     65540ul, 65548ul}) {
    d[pos] ^= 0x01;
    EXPECT_NE(crc32c(0, d.data(), d.size()), clean) << "flip at " << pos;
    d[pos] ^= 0x01;
  }
  EXPECT_EQ(crc32c(0, d.data(), d.size()), clean);
}

// The same for every implementation this CPU runs, at positions in each
// region of the pclmul path's hybrid block (folded region, three crc32
// lanes, the next block, the tail).
TEST(Crc32cTest, EveryImplementationDetectsBitFlipsInEveryRegion) {
  std::vector<uint8_t> d(65536 + 13);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 13);
  for (Crc32cImpl impl :
       {Crc32cImpl::kVpclmul, Crc32cImpl::kVpclmul256, Crc32cImpl::kPclmul,
        Crc32cImpl::kSse42, Crc32cImpl::kPortable}) {
    if (!crc32c_supported(impl)) continue;
    const uint32_t clean = crc32c_with(impl, 0, d.data(), d.size());
    EXPECT_EQ(clean, crc32c_portable(0, d.data(), d.size()));
    for (size_t pos : {0ul, 100ul, 4095ul, 4096ul, 5375ul, 5376ul, 6656ul,
                       7935ul, 7936ul, 40000ul, 65535ul, 65548ul}) {
      for (uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
        d[pos] ^= bit;
        EXPECT_NE(crc32c_with(impl, 0, d.data(), d.size()), clean)
            << crc32c_impl_name(impl) << " flip at " << pos;
        d[pos] ^= bit;
      }
    }
  }
}

TEST(Crc32cTest, IncrementalEqualsWhole) {
  std::string s(100000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 31);
  uint32_t whole = crc32c(0, s.data(), s.size());
  uint32_t part = crc32c(0, s.data(), 33333);
  part = crc32c(part, s.data() + 33333, s.size() - 33333);
  EXPECT_EQ(whole, part);
}

TEST(Crc32cTest, DetectsSingleBitFlip) {
  std::vector<uint8_t> d(65536, 0x5a);
  uint32_t a = crc32c(0, d.data(), d.size());
  d[40000] ^= 0x10;
  EXPECT_NE(crc32c(0, d.data(), d.size()), a);
}

TEST(PatternTest, FillThenCheckAtAnyOffset) {
  std::vector<uint8_t> buf(10000);
  fill_pattern(buf.data(), buf.size(), 77, 13);
  EXPECT_EQ(find_pattern_mismatch(buf.data(), buf.size(), 77, 13), -1);
  // A sub-range checks against the same global offsets.
  EXPECT_EQ(find_pattern_mismatch(buf.data() + 100, 500, 77, 113), -1);
  EXPECT_NE(find_pattern_mismatch(buf.data(), buf.size(), 78, 13), -1);
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(buf[i], pattern_byte(77, 13 + i));
  }
}

TEST(PatternTest, ReportsFirstBadByte) {
  std::vector<uint8_t> buf(4096);
  fill_pattern(buf.data(), buf.size(), 5);
  buf[1234] ^= 1;
  buf[3000] ^= 1;
  EXPECT_EQ(find_pattern_mismatch(buf.data(), buf.size(), 5), 1234);
}

std::vector<std::string>* g_forwarded = nullptr;
void capture(int, const char*, int, const char* msg, size_t len) {
  g_forwarded->emplace_back(msg, len);
}

TEST(LoggingTest, ForwarderReceivesMessages) {
  init_logging("misc_util_test");
  std::vector<std::string> lines;
  g_forwarded = &lines;
  set_log_forwarder(capture);
  LOG(WARNING) << "forward me " << 42;
  set_log_forwarder(nullptr);
  LOG(INFO) << "not forwarded";
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "forward me 42");
  g_forwarded = nullptr;
}

}  // namespace
}  // namespace uccl
