// Batching by length: every sample once per epoch, each batch within its
// budget, little padding, the same batches for the same arguments, and as
// many batches on every rank as rank_split says.
#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/rng.h"

namespace prepflow {
namespace {

using ::testing::ElementsAre;

using Batches = std::vector<std::vector<int64_t>>;

// Lengths from 1 to 20 s, drawn.
std::vector<double> Lengths(int64_t n) {
  std::vector<double> s;
  SampleRng rng(7, 0, 0, 0);
  for (int64_t i = 0; i < n; ++i) s.push_back(1 + 19 * rng.Uniform());
  return s;
}

double Padded(const std::vector<int64_t>& batch, const std::vector<double>& s) {
  double longest = 0;
  for (int64_t i : batch) longest = std::max(longest, s[i]);
  return longest * static_cast<double>(batch.size());
}

TEST(BatchByLength, EverySampleOnceEachBatchWithinBudgetLittlePadding) {
  const int64_t n = 5000;
  const std::vector<double> s = Lengths(n);
  const LengthBatching by{100.0, 32, 1000};
  const Batches batches = BatchByLength(EpochOrder(n, 3, 1, true, 0, 1), s, by, 3, 1, true);
  std::vector<int64_t> seen;
  double padded = 0, total = 0;
  for (const auto& b : batches) {
    ASSERT_FALSE(b.empty());
    EXPECT_LE(static_cast<int64_t>(b.size()), by.max_samples);
    EXPECT_TRUE(Padded(b, s) <= by.max_seconds || b.size() == 1);
    padded += Padded(b, s);
    for (int64_t i : b) {
      seen.push_back(i);
      total += s[i];
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
  // Sorted windows of 1000: padding is a few percent. Unsorted batches of
  // as many samples, in the epoch's order, pad these lengths by over half.
  EXPECT_LT(padded / total, 1.05);
  const std::vector<int64_t> order = EpochOrder(n, 3, 1, true, 0, 1);
  double unsorted = 0;
  size_t start = 0;
  for (const auto& b : batches) {
    unsorted +=
        Padded(std::vector<int64_t>(order.begin() + start, order.begin() + start + b.size()), s);
    start += b.size();
  }
  EXPECT_GT(unsorted / total, 1.5);
}

TEST(BatchByLength, TheSameArgumentsGiveTheSameBatches) {
  const std::vector<double> s = Lengths(300);
  const LengthBatching by{60.0, 8, 50};
  const auto order = EpochOrder(300, 9, 2, true, 0, 1);
  EXPECT_EQ(BatchByLength(order, s, by, 9, 2, true), BatchByLength(order, s, by, 9, 2, true));
  // Another epoch shuffles the batches (and the windows) anew.
  EXPECT_NE(BatchByLength(order, s, by, 9, 2, true),
            BatchByLength(EpochOrder(300, 9, 3, true, 0, 1), s, by, 9, 3, true));
}

TEST(BatchByLength, AWindowIsCutInOrderOfLengthAndALongSampleStandsAlone) {
  const std::vector<double> s = {3, 1, 50, 2, 2, 1};
  const LengthBatching by{6.0, 3, 100};
  // Sorted: 1 (1), 5 (1), 3 (2), 4 (2), 0 (3), 2 (50); 3 x 2 s fit, 2 x 3 s
  // would not with them; 50 s is over any budget, alone.
  EXPECT_EQ(BatchByLength({0, 1, 2, 3, 4, 5}, s, by, 0, 0, false),
            (Batches{{1, 5, 3}, {4, 0}, {2}}));
  // Windows of two: each sorted and cut on its own.
  EXPECT_EQ(BatchByLength({0, 1, 2, 3, 4, 5}, s, {6.0, 3, 2}, 0, 0, false),
            (Batches{{1, 0}, {3}, {2}, {5, 4}}));
}

TEST(RankBatches, RanksRunAsManyBatchesAsTheSplitSays) {
  const Batches b = {{0}, {1, 2}, {3}, {4, 5, 6}, {7}};
  EXPECT_EQ(RankBatches(b, 0, 1, RankSplit::kPad), b);
  // Pad: the first batches again, to 6.
  EXPECT_EQ(RankBatches(b, 0, 2, RankSplit::kPad), (Batches{{0}, {3}, {7}}));
  EXPECT_EQ(RankBatches(b, 1, 2, RankSplit::kPad), (Batches{{1, 2}, {4, 5, 6}, {0}}));
  // Drop: the last, to 4.
  EXPECT_EQ(RankBatches(b, 1, 2, RankSplit::kDrop), (Batches{{1, 2}, {4, 5, 6}}));
  EXPECT_EQ(RankBatches(b, 0, 2, RankSplit::kDrop).size(), 2u);
  // Uneven: every batch once.
  EXPECT_EQ(RankBatches(b, 0, 2, RankSplit::kUneven).size(), 3u);
  EXPECT_EQ(RankBatches(b, 1, 2, RankSplit::kUneven).size(), 2u);
  EXPECT_TRUE(RankBatches({}, 1, 2, RankSplit::kPad).empty());
}

}  // namespace
}  // namespace prepflow
