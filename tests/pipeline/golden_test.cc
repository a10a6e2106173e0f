// Golden outputs: what fixed (seed, epoch, index) inputs must give, pinned as
// numbers. Every other checksum test compares the implementation with itself
// (placements, thread counts, formats), so it cannot see a change that moves
// every placement alike: the stage index dropped from the random key, a
// preset's parameter edited, a draw taken in another order. These can.
//
// The inputs are generated (PNG, so the decoded pixels do not depend on a
// JPEG encoder); the outputs depend on no library's arithmetic: resizing is
// Pillow's filter in prepflow's own code (fidelity exact, the default). A change that moves these
// numbers on purpose (a new op semantics, a new RNG layout) must say so in its commit and re-pin
// them from what the failing test shows it got.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/rng.h"
#include "pipeline/data/synthetic.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;

TEST(Golden, SampleStreams) {
  std::string got;
  for (uint32_t stage : {1u, 2u}) {
    SampleRng rng(7, 1, 5, stage);
    for (int i = 0; i < 2; ++i) absl::StrAppendFormat(&got, "%016x ", rng.NextU64());
  }
  EXPECT_EQ(got, "4b2837baf4335877 b527dce9854d8ad7 c67985617e8d56c8 e24da63ce31044b0 ");
}

// The region random_resized_crop (stage 1 of imagenet-train) draws for a
// 500 x 375 image, as the decoder reads it from that stage.
TEST(Golden, ImagenetTrainCropBoxes) {
  PipelineOptions options;
  options.seed = 7;
  auto p = Pipeline::Create(*LoadPipelineSpec("imagenet-train"), options);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<uint8_t> png = SyntheticImage(500, 375, 3, 40, SyntheticFormat::kPng);
  std::string got;
  for (int64_t index : {0, 1, 2, 3}) {
    const testing::Output out = RunPipeline(**p, png, index, /*epoch=*/1, /*end=*/1);
    ASSERT_TRUE(out.status.ok()) << out.status;
    ASSERT_TRUE(out.view.has_crop);
    absl::StrAppendFormat(&got, "%d,%d,%dx%d ", out.view.crop_x, out.view.crop_y,
                          out.view.crop_width, out.view.crop_height);
  }
  EXPECT_EQ(got, "57,11,411x354 182,111,245x262 42,10,393x324 102,19,338x302 ");
}

// Which of samples 0..31 random_horizontal_flip (stage 1) mirrors, epoch 2.
TEST(Golden, Flips) {
  const std::unique_ptr<Pipeline> p = MakePipeline(
      "name: 'flip' stages { decode {} } stages { random_horizontal_flip {} }", /*seed=*/7);
  // An image that is not its own mirror: a flipped one differs from the decode.
  const std::vector<uint8_t> png = SyntheticImage(16, 8, 1, 0, SyntheticFormat::kPng);
  const testing::Output plain = RunPipeline(*p, png, 0, 2, /*end=*/1);
  ASSERT_TRUE(plain.status.ok());
  std::string got;
  for (int64_t index = 0; index < 32; ++index) {
    const testing::Output out = RunPipeline(*p, png, index, /*epoch=*/2);
    ASSERT_TRUE(out.status.ok()) << out.status;
    got += out.bytes == plain.bytes ? '0' : '1';
  }
  EXPECT_EQ(got, "00111100011110101111001001001010");
}

// Each preset over 8 generated images (the checksum `prepflow run` prints):
// any change to a preset's parameters or to an op's arithmetic moves it.
TEST(Golden, PresetChecksums) {
  std::string got;
  for (const char* preset : {"imagenet-train", "imagenet-eval"}) {
    PipelineOptions options;
    options.seed = 7;
    auto p = Pipeline::Create(*LoadPipelineSpec(preset), options);
    ASSERT_TRUE(p.ok()) << p.status();
    Checksum sum;
    for (int64_t index = 0; index < 8; ++index) {
      const std::vector<uint8_t> png = SyntheticImage(
          160 + 40 * static_cast<int>(index), 300 - 20 * static_cast<int>(index),
          static_cast<uint64_t>(index), 20 * static_cast<int>(index), SyntheticFormat::kPng);
      const testing::Output out = RunPipeline(**p, png, index, /*epoch=*/3);
      ASSERT_TRUE(out.status.ok()) << out.status;
      sum.Add(SampleHash(index, index % 3, out.bytes.data(), out.bytes.size()));
    }
    absl::StrAppend(&got, preset, "=", ChecksumHex(sum.value()), " ");
  }
  EXPECT_EQ(got, "imagenet-train=bd0d77cb24523cb8 imagenet-eval=b771cc067d56e731 ");
}

}  // namespace
}  // namespace prepflow
