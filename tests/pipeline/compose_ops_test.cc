// random_apply, random_choice and random_order (pipeline/ops/compose_ops.h):
// what they apply, how often, from which streams, and what they refuse.
#include "pipeline/ops/compose_ops.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/synthetic.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::ExpectSpecErrors;
using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;

const std::vector<uint8_t>& Png() {
  static const std::vector<uint8_t> png = SyntheticImage(48, 32, 5, 30, SyntheticFormat::kPng);
  return png;
}

std::vector<uint8_t> Apply(const std::string& stages, int64_t index, uint64_t seed = 3) {
  const std::unique_ptr<Pipeline> p = MakePipeline("stages { decode {} } " + stages, seed);
  const testing::Output out = RunPipeline(*p, Png(), index);
  EXPECT_TRUE(out.status.ok()) << out.status;
  return out.bytes;
}

TEST(ComposeOps, RandomApplyIsItsStagesOrNothing) {
  const std::string inner =
      "stages { random_invert { p: 1 } } stages { random_vertical_flip { p: 1 } }";
  const std::vector<uint8_t> both =
      Apply("stages { random_invert { p: 1 } } stages { random_vertical_flip { p: 1 } }", 0);
  const std::vector<uint8_t> none = Apply("", 0);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Apply("stages { random_apply { p: 1 " + inner + " } }", i), both);
    EXPECT_EQ(Apply("stages { random_apply { p: 0 " + inner + " } }", i), none);
  }
  // p: 0.8 applies to about 80% (fixed numbers: the draws are seeded).
  int applied = 0;
  for (int64_t i = 0; i < 400; ++i) {
    applied += Apply("stages { random_apply { p: 0.8 " + inner + " } }", i) == both;
  }
  EXPECT_GT(applied, 290);
  EXPECT_LT(applied, 350);
}

// Two inner flips with p 0.5 each: on one shared stream they would flip
// together and cancel out; on streams of their own the image ends mirrored
// about half the time.
TEST(ComposeOps, InnerStagesDrawFromStreamsOfTheirOwn) {
  const std::string stage =
      "stages { random_apply { p: 1 stages { random_horizontal_flip {} } "
      "stages { random_horizontal_flip {} } } }";
  const std::vector<uint8_t> mirrored = Apply("stages { random_horizontal_flip { p: 1 } }", 0);
  int odd = 0;
  for (int64_t i = 0; i < 200; ++i) odd += Apply(stage, i) == mirrored;
  EXPECT_GT(odd, 70);
  EXPECT_LT(odd, 130);
  // The flip alone, outside a composition, draws from the stage's stream;
  // inside, from a substream: the same sample is mirrored by different draws.
  int differ = 0;
  for (int64_t i = 0; i < 64; ++i) {
    differ += Apply("stages { random_horizontal_flip {} }", i) !=
              Apply("stages { random_apply { p: 1 stages { random_horizontal_flip {} } } }", i);
  }
  EXPECT_GT(differ, 10);
}

TEST(ComposeOps, RandomChoicePicksByWeight) {
  const std::string stage =
      "stages { random_choice { stages { random_invert { p: 1 } } "
      "stages { random_vertical_flip { p: 1 } } p: [1, 3] } }";
  const std::vector<uint8_t> inverted = Apply("stages { random_invert { p: 1 } }", 0);
  const std::vector<uint8_t> flipped = Apply("stages { random_vertical_flip { p: 1 } }", 0);
  int first = 0;
  for (int64_t i = 0; i < 400; ++i) {
    const std::vector<uint8_t> out = Apply(stage, i);
    ASSERT_TRUE(out == inverted || out == flipped) << i;
    first += out == inverted;
  }
  EXPECT_GT(first, 70);  // a quarter: 100
  EXPECT_LT(first, 130);
}

TEST(ComposeOps, RandomOrderAppliesEachOnceInEitherOrder) {
  // Inverting and solarizing do not commute.
  const std::string a = "stages { random_invert { p: 1 } }";
  const std::string b = "stages { random_solarize { threshold: 100 p: 1 } }";
  const std::vector<uint8_t> ab = Apply(a + " " + b, 0), ba = Apply(b + " " + a, 0);
  ASSERT_NE(ab, ba);
  int in_order = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const std::vector<uint8_t> out = Apply("stages { random_order { " + a + " " + b + " } }", i);
    ASSERT_TRUE(out == ab || out == ba) << i;
    in_order += out == ab;
  }
  EXPECT_GT(in_order, 70);
  EXPECT_LT(in_order, 130);
}

TEST(ComposeOps, CompositionsNestAndStayDeterministic) {
  const std::string stage =
      "stages { random_order { stages { random_apply { p: 0.5 stages { color_jitter { "
      "brightness: [0.5, 1.5] } } } } stages { random_choice { stages { random_invert {} } "
      "stages { random_grayscale { p: 1 } } } } } }";
  int differ = 0;
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(Apply(stage, i, 9), Apply(stage, i, 9));
    differ += Apply(stage, i, 9) != Apply(stage, i, 10);
  }
  EXPECT_GT(differ, 0);  // another seed, other draws
}

TEST(ComposeOps, MoreInnerStagesThanAllowedAreRefused) {
  std::string many;
  for (int i = 0; i <= kMaxInnerStages; ++i) many += "stages { random_invert {} } ";
  EXPECT_THAT(testing::CreateAfterDecode("random_order { " + many + "}").message(),
              ::testing::HasSubstr("stages: 65 of them; at most 64 are allowed"));
}

TEST(ComposeOps, RefusalsNameTheField) {
  ExpectSpecErrors({
      {"random_apply { p: 1 }", "stages: give at least one"},
      {"random_apply { p: 1.5 stages { random_invert {} } }", "p: must be in [0, 1]"},
      {"random_apply { stages { decode {} } }", "stages[0] (decode): decode comes first"},
      {"random_apply { stages { resize { height: 8 width: 9 } } }",
       "skipping them leaves uint8 image"},
      {"random_apply { stages { color_jitter { brightness: [-1] } } }",
       "stages[0] (color_jitter): brightness"},
      {"random_choice { stages { random_invert {} } stages { random_invert {} } p: [1] }",
       "p: 1 weights for 2 stages"},
      {"random_choice { stages { random_invert {} } p: [-1] }", "p: weights must be >= 0"},
      {"random_choice { stages { random_invert {} } p: [0] }", "p: the weights sum to 0"},
      {"random_choice { stages { center_crop { size: 8 } } stages { center_crop { size: 9 } } }",
       "stages[1] gives"},
      {"random_order { stages { center_crop { size: 8 } } }",
       "in a random order each stage must keep the type"},
      {"random_apply { stages { random_apply { stages { random_apply { stages { random_apply { "
       "stages { random_apply { stages { random_invert {} } } } } } } } } } }",
       "compositions nest 5 deep; at most 4"},
  });
}

}  // namespace
}  // namespace prepflow
