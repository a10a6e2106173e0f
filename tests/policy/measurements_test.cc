// SmoothedRatio: windows, smoothing, and following a change.
#include "policy/measurements.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace prepflow::policy {
namespace {

TEST(SmoothedRatio, FoldsOnlyFullWindows) {
  SmoothedRatio r(/*min_step=*/10);
  EXPECT_FALSE(r.known());
  EXPECT_EQ(r.value_or(7), 7);
  EXPECT_FALSE(r.Update(50, 5));  // half a window: not yet
  EXPECT_FALSE(r.known());
  EXPECT_TRUE(r.Update(100, 10));  // the first window is taken as it is
  EXPECT_DOUBLE_EQ(r.value(), 10);
  EXPECT_FALSE(r.Update(200, 19));
  EXPECT_TRUE(r.Update(400, 30));  // window ratio (400-100)/(30-10) = 15
  EXPECT_DOUBLE_EQ(r.value(), 12.5);
  EXPECT_FALSE(r.Update(400, 30));  // nothing new
}

TEST(SmoothedRatio, AShorterFirstWindow) {
  SmoothedRatio r(/*min_step=*/10, /*weight=*/0.5, /*first_step=*/2);
  EXPECT_TRUE(r.Update(6, 2));
  EXPECT_DOUBLE_EQ(r.value(), 3);
  EXPECT_FALSE(r.Update(12, 4));  // later windows are full size
  EXPECT_TRUE(r.Update(16, 12));  // (16-6)/(12-2) = 1
  EXPECT_DOUBLE_EQ(r.value(), 2);
}

TEST(SmoothedRatio, FollowsAStepChangeWithinAFewWindows) {
  SmoothedRatio r(1, 0.5);
  double num = 0, den = 0;
  for (int i = 0; i < 10; ++i) r.Update(num += 2, den += 1);
  EXPECT_DOUBLE_EQ(r.value(), 2);
  for (int i = 0; i < 5; ++i) r.Update(num += 4, den += 1);
  EXPECT_NEAR(r.value(), 4 - 2.0 / 32, 1e-12);  // within 2% after five windows
}

// Per-sample costs that differ from sample to sample: OverLast is a mean of
// the samples seen (about the latter half of them, at most `memory`),
// however the windows cut them; past that it follows a change over about
// `memory` samples.
TEST(SmoothedRatio, OverLastWeighsSamplesNotWindows) {
  // The same 600 samples (costs 1, 1, 4, 1, 1, 4, ...: mean 2) in windows
  // of 3 and in windows of 150.
  auto feed = [](SmoothedRatio& r, int window) {
    double num = 0;
    for (int i = 1; i <= 600; ++i) {
      num += i % 3 == 0 ? 4 : 1;
      if (i % window == 0) r.Update(num, i);
    }
  };
  SmoothedRatio small = SmoothedRatio::OverLast(1024, 1, 1);
  SmoothedRatio large = SmoothedRatio::OverLast(1024, 1, 1);
  feed(small, 3);
  feed(large, 150);
  EXPECT_DOUBLE_EQ(small.value(), 2);
  EXPECT_DOUBLE_EQ(large.value(), 2);
  // Windows weighed alike (the default) make a short window count as much
  // as a long one: 500 samples at 1, then 100 at 10. By samples, the latter
  // half (300: 200 at 1, 100 at 10) gives 4.
  SmoothedRatio by_samples = SmoothedRatio::OverLast(1024, 1, 1), by_windows(1, 0.5);
  for (SmoothedRatio* r : {&by_samples, &by_windows}) {
    r->Update(500, 500);
    r->Update(1500, 600);
  }
  EXPECT_DOUBLE_EQ(by_samples.value(), 4);
  EXPECT_DOUBLE_EQ(by_windows.value(), 5.5);
  // A run's first samples are forgotten as it goes on: 100 at 2 (a cold
  // start), then 1900 at 1, in windows of 30 -- the plain mean is 1.05.
  SmoothedRatio start = SmoothedRatio::OverLast(1024, 30, 16);
  start.Update(200, 100);
  for (int i = 1; i <= 1900 / 30; ++i) start.Update(200 + 30 * i, 100 + 30 * i);
  EXPECT_LT(start.value(), 1.015);
  // Past `memory`, a step from 2 to 4 is followed: about 63% of the way after
  // `memory` more samples, in windows of 32.
  SmoothedRatio r = SmoothedRatio::OverLast(1024, 32, 16);
  double num = 0, den = 0;
  for (int i = 0; i < 100; ++i) r.Update(num += 64, den += 32);
  EXPECT_DOUBLE_EQ(r.value(), 2);
  for (int i = 0; i < 32; ++i) r.Update(num += 128, den += 32);
  EXPECT_NEAR(r.value(), 2 + 2 * (1 - std::exp(-1.0)), 0.02);
}

TEST(PlausibleCpuPerByte, KeepsOnlyWhatAWorkerCouldSpend) {
  EXPECT_EQ(PlausibleCpuPerByte(2e-9), 2e-9);
  EXPECT_EQ(PlausibleCpuPerByte(1e-6), 1e-6);
  for (double bad : {0.0, -1e-9, 2e-6, 1e300, std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    EXPECT_EQ(PlausibleCpuPerByte(bad), 0) << bad;
  }
}

TEST(RelativeChange, IsSymmetricAndBounded) {
  EXPECT_DOUBLE_EQ(RelativeChange(10, 8), 0.2);
  EXPECT_DOUBLE_EQ(RelativeChange(8, 10), 0.2);
  EXPECT_DOUBLE_EQ(RelativeChange(0, 0), 0);
  EXPECT_DOUBLE_EQ(RelativeChange(0, 5), 1);
}

// Chunks evenly spaced are the link's rate; one long gap (a receiver that
// stalled) or shrinking gaps are not steady; two chunks cannot say.
TEST(ProbeTimer, TimesTheBytesAfterTheFirstChunkAndJudgesTheGaps) {
  auto timed = [](const std::vector<int64_t>& gaps_ms) {
    ProbeTimer t;
    int64_t now = 5'000'000'000;
    const int count = static_cast<int>(gaps_ms.size()) + 1;
    t.Arrived(now, 1e5, count);
    for (int64_t gap : gaps_ms) {
      EXPECT_FALSE(t.done());
      t.Arrived(now += gap * 1'000'000, 1e5, count);
    }
    EXPECT_TRUE(t.done());
    return t;
  };
  EXPECT_DOUBLE_EQ(timed({10, 10, 10}).rate(), 1e7);
  EXPECT_TRUE(timed({10, 12, 9}).steady());
  EXPECT_FALSE(timed({2, 50, 2}).steady());
  EXPECT_FALSE(timed({40, 20, 10}).steady());
  EXPECT_FALSE(timed({10}).steady());
  EXPECT_DOUBLE_EQ(timed({10}).rate(), 1e7);
  ProbeTimer none;
  none.Arrived(1, 1e5, 1);  // one chunk is no probe
  EXPECT_FALSE(none.done());
  EXPECT_EQ(none.rate(), 0);
}

}  // namespace
}  // namespace prepflow::policy
