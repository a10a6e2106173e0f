// Batches of fixed and of variable-length values: a ragged batch pads each
// value with zeros to the longest it holds and records the lengths, keeping
// the order of the samples that did not fail.
#include "pipeline/core/batch.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A float tensor [rows, frames] whose element (r, f) is 100 r + f + 1.
struct Value {
  Value(int64_t rows, int64_t frames) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t f = 0; f < frames; ++f) floats.push_back(static_cast<float>(100 * r + f + 1));
    }
    sample.kind = ValueKind::kTensor;
    sample.shape = {rows, frames};
    sample.data = reinterpret_cast<uint8_t*>(floats.data());
    sample.size = floats.size() * sizeof(float);
  }
  std::vector<float> floats;
  Sample sample;
};

ValueType Features(int64_t rows) { return {ValueKind::kTensor, {rows, -1}}; }

TEST(Batch, RaggedValuesArePaddedToTheLongestWithTheirLengths) {
  Batch batch(Features(2), 4);
  ASSERT_TRUE(batch.ragged());
  const std::vector<int64_t> indices = {10, 11, 12, 13};
  batch.Reset(0, 0, indices);
  const Value a(2, 3), c(2, 5), d(2, 0);
  ASSERT_TRUE(batch.Keep(0, a.sample).ok());
  ASSERT_TRUE(batch.Keep(2, c.sample).ok());
  ASSERT_TRUE(batch.Keep(3, d.sample).ok());
  batch.FinishOk(0, 1, 0);
  batch.FinishError(1, {11, "b.flac", absl::DataLossError("truncated")});
  batch.FinishOk(2, 2, 0);
  EXPECT_TRUE(batch.FinishOk(3, 3, 0));
  const std::vector<SampleError> errors = batch.Compact();
  ASSERT_TRUE(batch.Pad().ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].index, 11);
  EXPECT_THAT(batch.indices(), ElementsAre(10, 12, 13));
  EXPECT_THAT(batch.lengths(), ElementsAre(3, 5, 0));
  EXPECT_THAT(batch.shape(), ElementsAre(3, 2, 5));
  EXPECT_EQ(batch.padding_bytes(), (2 * 2 + 0 + 2 * 5) * sizeof(float));
  ASSERT_EQ(batch.bytes(), 3 * 2 * 5 * sizeof(float));
  const float* f = batch.floats();
  EXPECT_THAT(std::vector<float>(f, f + 10), ElementsAre(1, 2, 3, 0, 0, 101, 102, 103, 0, 0));
  EXPECT_THAT(std::vector<float>(f + 10, f + 20),
              ElementsAre(1, 2, 3, 4, 5, 101, 102, 103, 104, 105));
  EXPECT_THAT(std::vector<float>(f + 20, f + 30), ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
}

TEST(Batch, ARaggedBatchReusedPadsItsNewValuesAlone) {
  Batch batch(Features(1), 2);
  const std::vector<int64_t> indices = {0, 1};
  batch.Reset(0, 0, indices);
  const Value long_one(1, 6), short_one(1, 2);
  ASSERT_TRUE(batch.Keep(0, long_one.sample).ok());
  ASSERT_TRUE(batch.Keep(1, long_one.sample).ok());
  batch.FinishOk(0, 0, 0);
  batch.FinishOk(1, 0, 0);
  batch.Compact();
  ASSERT_TRUE(batch.Pad().ok());
  batch.Reset(0, 1, indices);
  ASSERT_TRUE(batch.Keep(0, short_one.sample).ok());
  ASSERT_TRUE(batch.Keep(1, short_one.sample).ok());
  batch.FinishOk(0, 0, 0);
  batch.FinishOk(1, 0, 0);
  batch.Compact();
  ASSERT_TRUE(batch.Pad().ok());
  EXPECT_THAT(batch.shape(), ElementsAre(2, 1, 2));
  EXPECT_THAT(std::vector<float>(batch.floats(), batch.floats() + 4), ElementsAre(1, 2, 1, 2));
}

// A batch short of a failed sample takes the next batch's first good ones,
// which move down in theirs: both keep the epoch's order, values, labels and
// positions, fixed or ragged.
TEST(Batch, TakeFrontMovesTheNextBatchsFirstSamples) {
  for (const ValueType& type : {Features(1), ValueType{ValueKind::kTensor, {1, 3}}}) {
    Batch first(type, 3), next(type, 3);
    const std::vector<int64_t> a = {10, 11, 12}, b = {13, 14, 15};
    first.Reset(0, 0, a, {}, 1, /*first_position=*/30);
    next.Reset(0, 1, b, {}, 1, /*first_position=*/33);
    for (int i = 0; i < 3; ++i) {
      const Value v(1, 3);
      Value mine = v;
      for (float& f : mine.floats) f += 10 * (10 + i);
      mine.sample.data = reinterpret_cast<uint8_t*>(mine.floats.data());
      ASSERT_TRUE(first.Keep(i, mine.sample).ok());
      for (float& f : mine.floats) f += 30;
      ASSERT_TRUE(next.Keep(i, mine.sample).ok());
      next.FinishOk(i, 13 + i, 0);
    }
    first.FinishOk(0, 10, 0);
    first.FinishError(1, {11, "b.jpg", absl::DataLossError("bad")});
    first.FinishOk(2, 12, 0);
    ASSERT_EQ(first.Compact().size(), 1u);
    EXPECT_TRUE(first.Compact().empty());  // once
    next.Compact();
    first.TakeFront(&next, 1);
    EXPECT_THAT(first.indices(), ElementsAre(10, 12, 13));
    EXPECT_THAT(first.labels(), ElementsAre(10, 12, 13));
    EXPECT_EQ(first.end_position(), 34);
    EXPECT_THAT(next.indices(), ElementsAre(14, 15));
    EXPECT_EQ(next.end_position(), 36);
    ASSERT_TRUE(first.Pad().ok());
    ASSERT_TRUE(next.Pad().ok());
    ASSERT_THAT(first.shape(), ElementsAre(3, 1, 3));
    // Value (1, 3) is 1, 2, 3; slot i of batch 10 + k adds 10 (10 + k + i).
    EXPECT_THAT(std::vector<float>(first.floats(), first.floats() + 9),
                ElementsAre(101, 102, 103, 121, 122, 123, 131, 132, 133));
    EXPECT_THAT(std::vector<float>(next.floats(), next.floats() + 6),
                ElementsAre(141, 142, 143, 151, 152, 153));
  }
}

TEST(Batch, KeepRefusesAValueOfAnotherShape) {
  Batch ragged(Features(2), 1);
  const std::vector<int64_t> one = {0};
  ragged.Reset(0, 0, one);
  const Value three_rows(3, 4);
  EXPECT_THAT(ragged.Keep(0, three_rows.sample).message(), HasSubstr("is not a value of"));
  Value lying(2, 4);
  lying.sample.size = 4;  // fewer bytes than its shape says
  EXPECT_THAT(ragged.Keep(0, lying.sample).message(), HasSubstr("is not a value of"));

  Batch fixed({ValueKind::kTensor, {2, 4}}, 1);
  fixed.Reset(0, 0, one);
  EXPECT_FALSE(fixed.ragged());
  const Value fits(2, 4), too_long(2, 5);
  EXPECT_TRUE(fixed.Keep(0, fits.sample).ok());
  EXPECT_EQ(std::memcmp(fixed.slot(0), fits.floats.data(), fixed.sample_bytes()), 0);
  EXPECT_THAT(fixed.Keep(0, too_long.sample).message(),
              HasSubstr("40 bytes where the batch holds 32"));
}

TEST(Batch, ValuesThatVaryInTheirFirstDimensionArePaddedAlongIt) {
  // Kaldi features: [frames, bins].
  Batch batch({ValueKind::kTensor, {-1, 2}}, 2);
  const std::vector<int64_t> indices = {0, 1};
  batch.Reset(0, 0, indices);
  const Value three(3, 2), one(1, 2);
  ASSERT_TRUE(batch.Keep(0, three.sample).ok());
  ASSERT_TRUE(batch.Keep(1, one.sample).ok());
  batch.FinishOk(0, 0, 0);
  batch.FinishOk(1, 0, 0);
  batch.Compact();
  ASSERT_TRUE(batch.Pad().ok());
  EXPECT_THAT(batch.shape(), ElementsAre(2, 3, 2));
  EXPECT_THAT(batch.lengths(), ElementsAre(3, 1));
  EXPECT_THAT(std::vector<float>(batch.floats(), batch.floats() + 12),
              ElementsAre(1, 2, 101, 102, 201, 202, 1, 2, 0, 0, 0, 0));
}

// Padding one long value into a batch can ask for more memory than there
// is: the batch says so (the loader stops with it) instead of throwing.
TEST(Batch, APaddedBatchTooLargeToHaveIsAnError) {
  HostAllocator small;  // refuses anything over 1 MiB
  small.allocate = [](size_t n) -> void* {
    return n > (size_t{1} << 20) ? nullptr : std::aligned_alloc(64, (n + 63) / 64 * 64);
  };
  small.free = [](void* p) { std::free(p); };
  Batch batch(Features(1), 4, small);
  const std::vector<int64_t> indices = {0, 1, 2, 3};
  batch.Reset(0, 0, indices);
  const Value long_one(1, 100000), short_one(1, 10);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(batch.Keep(i, i == 2 ? long_one.sample : short_one.sample).ok());
    batch.FinishOk(i, 0, 0);
  }
  batch.Compact();
  const absl::Status s = batch.Pad();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("padded to the longest (100000) needs 1600000 bytes"));
}

TEST(Batch, OnlyOneDimensionThatVariesCanBePadded) {
  EXPECT_EQ(WhyNotBatchable({ValueKind::kImage, {224, 224, 3}}), "");
  EXPECT_EQ(WhyNotBatchable(Features(80)), "");
  ValueType audio{ValueKind::kAudio, {1, -1}};
  EXPECT_THAT(WhyNotBatchable(audio), HasSubstr("resample to one rate"));
  audio.sample_rate = 16000;
  EXPECT_EQ(WhyNotBatchable(audio), "");
  EXPECT_THAT(WhyNotBatchable({ValueKind::kAudio, {-1, -1}, 16000}),
              HasSubstr("varies in more than one dimension"));
  EXPECT_THAT(WhyNotBatchable({ValueKind::kImage, {-1, -1, 3}}), HasSubstr("no fixed shape"));
  EXPECT_THAT(WhyNotBatchable({ValueKind::kTensor, {3, -1, -1}}),
              HasSubstr("varies in more than one dimension"));
  EXPECT_EQ(WhyNotBatchable({ValueKind::kTensor, {-1, 80}}), "");
  EXPECT_EQ(VaryingDim({ValueKind::kTensor, {-1, 80}}), 0);
  EXPECT_EQ(VaryingDim({ValueKind::kTensor, {1, 80, -1}}), 2);
}

// The Loader's guard between epochs with sample caches: a batch of epoch 1
// waits only while one of its own samples is unfinished in a batch of
// epoch 0, not for every batch in flight to complete.
TEST(Batch, ASampleLoadsInANewEpochOnlyOnceItsLastRunFinished) {
  const ValueType type{ValueKind::kTensor, {1, 3}};
  Batch last(type, 3), current(type, 2);
  last.Reset(/*epoch=*/0, 7, std::vector<int64_t>{4, 5, 6});
  current.Reset(/*epoch=*/1, 0, std::vector<int64_t>{8, 9});
  const std::deque<Batch*> in_flight = {&last, &current};
  const std::vector<int64_t> with_5 = {1, 5}, without = {1, 2};

  EXPECT_TRUE(LoadingInEarlierEpoch(in_flight, 1, with_5));
  EXPECT_FALSE(LoadingInEarlierEpoch(in_flight, 1, without));
  // Epoch 0's own batches, and samples of this epoch's, hold nothing back.
  EXPECT_FALSE(LoadingInEarlierEpoch(in_flight, 0, with_5));
  EXPECT_FALSE(LoadingInEarlierEpoch(in_flight, 1, std::vector<int64_t>{8}));

  last.FinishOk(1, 0, 0);  // sample 5
  EXPECT_TRUE(last.finished(1));
  EXPECT_FALSE(last.finished(0));
  EXPECT_FALSE(LoadingInEarlierEpoch(in_flight, 1, with_5));
  EXPECT_TRUE(LoadingInEarlierEpoch(in_flight, 1, std::vector<int64_t>{6}));
  last.FinishError(2, SampleError{6, "6.jpg", absl::DataLossError("bad")});
  EXPECT_FALSE(LoadingInEarlierEpoch(in_flight, 1, std::vector<int64_t>{6}));

  // A batch reused for the next epoch starts with every slot unfinished.
  last.FinishOk(0, 0, 0);
  ASSERT_TRUE(last.complete());
  last.Reset(/*epoch=*/1, 1, std::vector<int64_t>{4, 5});
  EXPECT_FALSE(last.finished(0));
  EXPECT_TRUE(LoadingInEarlierEpoch(in_flight, 2, std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace prepflow
