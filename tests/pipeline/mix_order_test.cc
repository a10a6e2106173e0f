// MixOrder: a mixture epoch holds each source's share, draws its sources
// in a seeded shuffle (or spreads them evenly), walks each source through
// its own epoch order across mixture epochs, numbers repeats as copies, and
// stops at the first end when asked. tests/python/test_mix.py runs a
// mixture through the loader, on workers and resumed.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/epoch_order.h"

namespace prepflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MixPlan Plan(std::vector<int64_t> sizes, std::vector<double> weights, int64_t samples = 0) {
  MixPlan plan;
  plan.sizes = std::move(sizes);
  plan.weights = std::move(weights);
  plan.epoch_samples = samples;
  return plan;
}

TEST(MixOrder, EachEpochHoldsTheWeights) {
  EXPECT_THAT(MixCounts(Plan({1000, 500}, {0.7, 0.3})), ElementsAre(1050, 450));
  EXPECT_THAT(MixCounts(Plan({10, 10, 10}, {1, 1, 1}, 10)), ElementsAre(4, 3, 3));
  const MixPlan plan = Plan({50, 20}, {7, 3}, 10000);
  std::vector<uint32_t> copies;
  const std::vector<int64_t> order = MixOrder(plan, 5, 0, true, &copies);
  ASSERT_EQ(order.size(), 10000u);
  EXPECT_EQ(std::count_if(order.begin(), order.end(), [](int64_t i) { return i < 50; }), 7000);
  EXPECT_EQ(order, MixOrder(plan, 5, 0, true, &copies));  // seeded
  EXPECT_NE(order, MixOrder(plan, 5, 1, true, &copies));
  EXPECT_NE(order, MixOrder(plan, 6, 0, true, &copies));
}

TEST(MixOrder, SourcesContinueTheirOwnOrderAcrossEpochs) {
  // 7 of each source an epoch: source 1 (4 samples) and source 0 (10) run
  // through their own epochs, each a permutation, across mixture epochs.
  const MixPlan plan = Plan({10, 4}, {1, 1});
  std::vector<std::vector<int64_t>> walked(2);
  for (uint64_t e = 0; e < 20; ++e) {
    std::vector<uint32_t> copies;
    const std::vector<int64_t> order = MixOrder(plan, 3, e, true, &copies);
    ASSERT_EQ(order.size(), 14u);
    // An index's appearances in an epoch are its copies 0, 1, ...
    std::map<int64_t, uint32_t> seen;
    for (size_t p = 0; p < order.size(); ++p) EXPECT_EQ(copies[p], seen[order[p]]++);
    for (int64_t i : order) walked[i < 10 ? 0 : 1].push_back(i < 10 ? i : i - 10);
  }
  for (int s = 0; s < 2; ++s) {
    const size_t size = s == 0 ? 10 : 4;
    for (size_t k = 0; k + size <= walked[s].size(); k += size) {
      std::vector<int64_t> own(walked[s].begin() + k, walked[s].begin() + k + size);
      std::sort(own.begin(), own.end());
      std::vector<int64_t> all(size);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(own, all) << "source " << s << " own epoch " << k / size;
    }
  }
}

TEST(MixOrder, WithoutShuffleSourcesAreSpreadEvenly) {
  std::vector<uint32_t> copies;
  const std::vector<int64_t> order = MixOrder(Plan({30, 10}, {3, 1}), 1, 0, false, &copies);
  ASSERT_EQ(order.size(), 40u);
  // Source 1 once in every four samples, each source in its own order.
  for (size_t w = 0; w < order.size(); w += 4) {
    EXPECT_EQ(
        std::count_if(order.begin() + w, order.begin() + w + 4, [](int64_t i) { return i >= 30; }),
        1)
        << w;
  }
  std::vector<int64_t> first, second;
  for (int64_t i : order) (i < 30 ? first : second).push_back(i);
  EXPECT_TRUE(std::is_sorted(first.begin(), first.end()));
  EXPECT_TRUE(std::is_sorted(second.begin(), second.end()));
}

TEST(MixOrder, StopsAtTheFirstEnd) {
  MixPlan plan = Plan({100, 30}, {1, 1});
  plan.stop_at_first_end = true;
  EXPECT_THAT(MixCounts(plan), ElementsAre(30, 30));
  for (uint64_t e = 0; e < 3; ++e) {
    std::vector<uint32_t> copies;
    const std::vector<int64_t> order = MixOrder(plan, 2, e, true, &copies);
    std::set<int64_t> second;
    for (int64_t i : order) {
      if (i >= 100) second.insert(i);
    }
    EXPECT_EQ(second.size(), 30u);  // all of it, once
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), order.size());
  }
  // Rounding never lifts a source past its size.
  plan = Plan({3, 5}, {1, 2});
  plan.stop_at_first_end = true;
  const std::vector<int64_t> counts = MixCounts(plan);
  EXPECT_LE(counts[0], 3);
  EXPECT_LE(counts[1], 5);
}

TEST(MixOrder, RanksDealTheMixture) {
  const MixPlan plan = Plan({7, 5}, {1, 1});
  std::vector<uint32_t> copies;
  const std::vector<int64_t> all = MixOrder(plan, 4, 0, true, &copies);
  std::vector<int64_t> dealt;
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<int64_t> mine = all;
    std::vector<uint32_t> my_copies = copies;
    DealToRank(&mine, &my_copies, rank, 3, RankSplit::kUneven);
    ASSERT_EQ(mine.size(), my_copies.size());
    for (size_t k = 0; k < mine.size(); ++k) EXPECT_EQ(mine[k], all[rank + 3 * k]);
    dealt.insert(dealt.end(), mine.begin(), mine.end());
  }
  EXPECT_EQ(dealt.size(), all.size());
}

TEST(MixOrder, BadPlansAreRefused) {
  EXPECT_THAT(WhyNotMixable(Plan({}, {})), HasSubstr("one weight per source"));
  EXPECT_THAT(WhyNotMixable(Plan({5, 0}, {1, 1})), HasSubstr("source 1 holds no samples"));
  EXPECT_THAT(WhyNotMixable(Plan({5, 5}, {1, -1})), HasSubstr("source 1: its weight"));
  EXPECT_THAT(WhyNotMixable(Plan({1, 5}, {1e9, 1}, int64_t{1} << 30)),
              HasSubstr("would repeat each"));
  EXPECT_EQ(WhyNotMixable(Plan({5, 5}, {1, 3})), "");
}

}  // namespace
}  // namespace prepflow
