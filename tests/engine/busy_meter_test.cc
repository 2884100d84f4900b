// BusyMeter: how an engine's loop readings split its wall time into busy and
// idle, with explicit timestamps (engine/busy_meter.h).
#include "engine/busy_meter.h"

#include <gtest/gtest.h>

namespace uccl::engine {
namespace {

TEST(BusyMeterTest, IdleLoopsCountNothing) {
  BusyMeter m;
  m.start(1000);
  for (uint64_t t = 1100; t <= 2000; t += 100) m.tick(t, false);
  EXPECT_EQ(m.busy_ns(), 0u);
  EXPECT_EQ(m.run_ns(), 1000u);
}

TEST(BusyMeterTest, WorkMarksTheIntervalItRanIn) {
  BusyMeter m;
  m.start(0);
  m.tick(10, false);   // [0, 10] idle
  m.mark_busy();       // the loop after the reading at 10 did work
  m.tick(250, false);  // [10, 250] busy
  m.tick(300, false);  // [250, 300] idle: the mark does not carry over
  m.tick(420, true);   // [300, 420] busy: packets were taken just now
  m.mark_busy();
  m.tick(500, true);  // both: counted once
  EXPECT_EQ(m.busy_ns(), 240u + 120u + 80u);
  EXPECT_EQ(m.run_ns(), 500u);
}

TEST(BusyMeterTest, AClockThatStandsStillOrGoesBackAddsNothing) {
  BusyMeter m;
  m.start(5000);
  m.mark_busy();
  m.tick(5000, true);
  EXPECT_EQ(m.busy_ns(), 0u);
  m.mark_busy();
  m.tick(4000, true);  // behind (a hand-driven test clock): ignored
  EXPECT_EQ(m.busy_ns(), 0u);
  EXPECT_EQ(m.run_ns(), 0u);
  m.tick(5300, false);  // the mark from before 4000 still counts
  EXPECT_EQ(m.busy_ns(), 300u);
  EXPECT_EQ(m.run_ns(), 300u);
}

}  // namespace
}  // namespace uccl::engine
