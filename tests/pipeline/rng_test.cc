#include "pipeline/core/rng.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "pipeline/core/epoch_order.h"

namespace prepflow {
namespace {

// Known-answer vectors for Philox4x32-10 from the Random123 distribution
// (kat_vectors).
TEST(Philox4x32, MatchesReferenceVectors) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(SampleRng, SameKeySameStream) {
  SampleRng a(7, 3, 1234, 2), b(7, 3, 1234, 2);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.NextU32(), b.NextU32());
}

TEST(SampleRng, EveryKeyPartChangesTheStream) {
  auto first = [](SampleRng r) { return r.NextU64(); };
  const uint64_t base = first(SampleRng(7, 3, 1234, 2));
  EXPECT_NE(base, first(SampleRng(8, 3, 1234, 2)));
  EXPECT_NE(base, first(SampleRng(7, 4, 1234, 2)));
  EXPECT_NE(base, first(SampleRng(7, 3, 1235, 2)));
  EXPECT_NE(base, first(SampleRng(7, 3, 1234, 3)));
  EXPECT_NE(base, first(SampleRng(7, 3, 1234 + (uint64_t{1} << 32), 2)));
}

TEST(SampleRng, UniformIsInRangeAndUnbiased) {
  SampleRng rng(1, 0, 0, 0);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
}

TEST(SampleRng, UniformIntCoversRangeEvenly) {
  SampleRng rng(2, 0, 0, 0);
  std::vector<int> counts(7);
  const int n = 70000;
  for (int i = 0; i < n; ++i) {
    const int64_t v = rng.UniformInt(-3, 3);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 3);
    ++counts[v + 3];
  }
  // Chi-square with 6 degrees of freedom; 22.46 is the 0.999 quantile. The
  // seed is fixed, so this is deterministic, not flaky.
  double chi2 = 0;
  for (int c : counts) chi2 += (c - n / 7.0) * (c - n / 7.0) / (n / 7.0);
  EXPECT_LT(chi2, 22.46);
  EXPECT_EQ(rng.UniformInt(5, 5), 5);
}

TEST(EpochOrder, IsASeededPermutation) {
  const std::vector<int64_t> a = EpochOrder(1000, 42, 0, true, 0, 1);
  const std::vector<int64_t> b = EpochOrder(1000, 42, 0, true, 0, 1);
  const std::vector<int64_t> c = EpochOrder(1000, 42, 1, true, 0, 1);
  const std::vector<int64_t> d = EpochOrder(1000, 43, 0, true, 0, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 1000u);
  EXPECT_EQ(*std::min_element(a.begin(), a.end()), 0);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 999);
  const std::vector<int64_t> plain = EpochOrder(5, 42, 0, false, 0, 1);
  EXPECT_EQ(plain, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(EpochOrder, PaddedAndDroppedRanksAreEven) {
  for (int world : {2, 3, 7}) {
    for (int64_t n : {0, 1, 10, 1001}) {
      std::vector<int> padded(n), dropped(n);
      for (int rank = 0; rank < world; ++rank) {
        const std::vector<int64_t> pad = EpochOrder(n, 5, 2, true, rank, world, RankSplit::kPad);
        const std::vector<int64_t> drop = EpochOrder(n, 5, 2, true, rank, world, RankSplit::kDrop);
        EXPECT_EQ(static_cast<int64_t>(pad.size()), (n + world - 1) / world);
        EXPECT_EQ(static_cast<int64_t>(drop.size()), n / world);
        EXPECT_EQ(static_cast<int64_t>(pad.size()), RankSamples(n, rank, world, RankSplit::kPad));
        EXPECT_EQ(static_cast<int64_t>(drop.size()), RankSamples(n, rank, world, RankSplit::kDrop));
        for (int64_t i : pad) ++padded[i];
        for (int64_t i : drop) ++dropped[i];
      }
      int64_t repeats = 0, left_out = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_GE(padded[i], 1) << "n=" << n << " world=" << world;
        repeats += padded[i] - 1;
        ASSERT_LE(dropped[i], 1);
        left_out += dropped[i] == 0;
      }
      EXPECT_EQ(repeats, n == 0 ? 0 : (n + world - 1) / world * world - n);
      EXPECT_EQ(left_out, n % world);
    }
  }
}

TEST(EpochOrder, RanksCoverEverySampleExactlyOnce) {
  for (int world : {1, 2, 3, 7}) {
    for (int64_t n : {0, 1, 10, 1001}) {
      std::vector<int> seen(n);
      size_t smallest = SIZE_MAX, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const std::vector<int64_t> mine = EpochOrder(n, 5, 2, true, rank, world);
        smallest = std::min(smallest, mine.size());
        largest = std::max(largest, mine.size());
        for (int64_t i : mine) ++seen[i];
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " world=" << world;
      EXPECT_LE(largest - smallest, 1u);
    }
  }
}

// Every order of 3 samples equally often over 6,000 epochs, and every sample
// at every place of 10 equally often over 5,000: a shuffle that draws
// UniformInt(0, i - 1) (Sattolo's, only cyclic orders: 2 samples always
// swapped) passed every checksum test, which ignore order. Chi-square at the
// 0.999 quantile; the seeds are fixed, so this is deterministic.
TEST(EpochOrder, ShuffleIsUniform) {
  std::map<std::vector<int64_t>, int> orders;
  for (uint64_t epoch = 0; epoch < 6000; ++epoch) ++orders[EpochOrder(3, 9, epoch, true, 0, 1)];
  ASSERT_EQ(orders.size(), 6u);
  double chi2 = 0;
  for (const auto& [order, count] : orders) chi2 += (count - 1000.0) * (count - 1000.0) / 1000;
  EXPECT_LT(chi2, 20.52);  // 5 degrees of freedom
  std::set<std::vector<int64_t>> pairs;
  for (uint64_t epoch = 0; epoch < 64; ++epoch) pairs.insert(EpochOrder(2, 9, epoch, true, 0, 1));
  EXPECT_EQ(pairs.size(), 2u) << "two samples always in one order";

  int places[10][10] = {};
  for (uint64_t epoch = 0; epoch < 5000; ++epoch) {
    const std::vector<int64_t> order = EpochOrder(10, 11, epoch, true, 0, 1);
    for (int k = 0; k < 10; ++k) ++places[order[k]][k];
  }
  chi2 = 0;
  for (const auto& row : places) {
    for (const int count : row) chi2 += (count - 500.0) * (count - 500.0) / 500;
  }
  EXPECT_LT(chi2, 126.3);  // 81 degrees of freedom
}

// The orders themselves, pinned: a change to the shuffle, the epoch
// generator or the rank split changes every run's order, which no checksum
// sees.
TEST(EpochOrder, Golden) {
  EXPECT_EQ(EpochOrder(12, 42, 3, true, 0, 1),
            (std::vector<int64_t>{8, 6, 2, 1, 5, 10, 7, 4, 11, 3, 9, 0}));
  EXPECT_EQ(EpochOrder(10, 42, 0, true, 1, 3, RankSplit::kPad), (std::vector<int64_t>{9, 1, 6, 5}));
  std::vector<int64_t> order = {0, 1, 2, 3, 4};
  std::vector<uint32_t> copies;
  EchoOrder(&order, &copies, 2, 4, 42, 1);
  EXPECT_EQ(order, (std::vector<int64_t>{3, 0, 0, 2, 1, 3, 2, 1, 4, 4}));
  EXPECT_EQ(copies, (std::vector<uint32_t>{0, 1, 0, 0, 0, 1, 1, 1, 1, 0}));
}

}  // namespace
}  // namespace prepflow
