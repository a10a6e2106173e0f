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
