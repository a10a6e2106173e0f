// The automatic augmentation policies: their magnitude tables (values NumPy
// gives for torch.linspace's scalar formula in float32, written here), the
// distribution of their draws, and the ops' validation.
// tests/python/test_parity.py checks that every image a policy op makes is
// what torchvision's _apply_op gives for one of the policy's draws.
#include "pipeline/ops/image/augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

TEST(Augment, LinspaceIsTorchsScalarFormulaInFloat32) {
  EXPECT_EQ(Linspace(0, 0.99f, 31, 7), 0x1.d91688p-3f);
  EXPECT_EQ(Linspace(0, 0.99f, 31, 20), 0x1.51eb86p-1f);
  EXPECT_EQ(Linspace(0, 32, 31, 13), 0x1.bbbbbep+3f);
  EXPECT_EQ(Linspace(255, 0, 31, 16), 119.0f);
  EXPECT_EQ(Linspace(0, static_cast<float>(150.0 / 331.0 * 224), 31, 9), 0x1.e74032p+4f);
  EXPECT_EQ(Linspace(0, 0.3f, 10, 0), 0.0f);
  EXPECT_EQ(Linspace(0, 0.3f, 10, 9), 0.3f);  // both ends exact
}

TEST(Augment, TrivialAugmentWideDrawsOpsBinsAndSignsUniformly) {
  // 14000 draws: each of the 14 ops about 1000 times (sd 30); the signed
  // ones negative about half the time; bins spread over all 31.
  std::map<std::string, int> ops;
  int signed_draws = 0, negative = 0;
  std::map<double, int> rotations;
  for (int64_t i = 0; i < 14000; ++i) {
    SampleRng rng(3, 0, i, 0);
    const AugmentStep step = DrawTrivialAugmentWide(rng, 31);
    ++ops[AugmentOpName(step.op)];
    if (step.op == AugmentOp::kRotate) ++rotations[std::abs(step.magnitude)];
    if (step.op >= AugmentOp::kShearX && step.op <= AugmentOp::kSharpness) {
      ++signed_draws;
      negative += step.magnitude < 0;
    }
  }
  EXPECT_EQ(ops.size(), 14u);
  EXPECT_EQ(ops.count("Invert"), 0u);
  for (const auto& [name, n] : ops) {
    EXPECT_GT(n, 1000 - 4 * 30) << name;
    EXPECT_LT(n, 1000 + 4 * 30) << name;
  }
  EXPECT_NEAR(negative, signed_draws / 2.0, 4 * std::sqrt(signed_draws / 4.0));
  EXPECT_EQ(rotations.size(), 31u);  // every bin of linspace(0, 135, 31)
  EXPECT_EQ(rotations.rbegin()->first, 135.0);
}

TEST(Augment, RandAugmentUsesItsBinAndTheImageSize) {
  std::map<AugmentOp, std::set<double>> magnitudes;
  for (int64_t i = 0; i < 2000; ++i) {
    SampleRng rng(5, 0, i, 0);
    const AugmentSteps steps = DrawRandAugment(rng, 2, 30, 31, 100, 200);
    ASSERT_EQ(steps.size(), 2u);
    for (const AugmentStep& s : steps) magnitudes[s.op].insert(std::abs(s.magnitude));
  }
  EXPECT_EQ(magnitudes.size(), 14u);
  // The last bin is the range's end: 150/331 of the width for TranslateX.
  EXPECT_EQ(*magnitudes[AugmentOp::kTranslateX].begin(), static_cast<float>(150.0 / 331.0 * 200));
  EXPECT_EQ(*magnitudes[AugmentOp::kTranslateY].begin(), static_cast<float>(150.0 / 331.0 * 100));
  EXPECT_EQ(*magnitudes[AugmentOp::kPosterize].begin(), 4);  // 8 - round(30 / 7.5)
  EXPECT_EQ(*magnitudes[AugmentOp::kSolarize].begin(), 0);
  EXPECT_EQ(magnitudes[AugmentOp::kRotate].size(), 1u);
}

TEST(Augment, AutoAugmentTakesEachStepWithItsProbability) {
  // The expected count of each op over N draws is N / 25 times the sum of
  // the probabilities with which the ImageNet sub-policies use it; Equalize
  // (in 14 sub-policy steps) is the most common.
  const std::map<std::string, double> expected_per_draw = {
      {"Equalize", (0.8 + 0.6 + 0.4 + 0.4 + 0.6 + 1.0 + 0.6 + 0.6 + 0.0 + 0.8 + 1.0 + 1.0 + 0.6 +
                    0.4 + 1.0 + 0.8 + 0.6) /
                       25},
      {"Invert", (0.6 + 0.6 + 0.6) / 25},
      {"ShearX", 0.6 / 25},
  };
  const int n = 25000;
  std::map<std::string, int> counts;
  for (int64_t i = 0; i < n; ++i) {
    SampleRng rng(9, 0, i, 0);
    for (const AugmentStep& s : DrawAutoAugment(rng, AutoAugmentPolicy::kImageNet, 64, 64)) {
      ++counts[AugmentOpName(s.op)];
    }
  }
  for (const auto& [name, per_draw] : expected_per_draw) {
    const double mean = n * per_draw;
    EXPECT_NEAR(counts[name], mean, 4 * std::sqrt(mean) + 1) << name;
  }
  EXPECT_EQ(counts.count("Brightness"), 0u);  // not in the ImageNet policy
}

TEST(Augment, AugMixDrawsChainsOpsAndWeightsAsAugMixDoes) {
  // 3000 draws of the default AugMix on a 90 x 60 image.
  std::map<std::string, int> ops;
  std::map<size_t, int> depths;
  std::set<double> translations, posterize_bits;
  double original_weight_sum = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    SampleRng rng(7, 0, i, 0);
    const AugMixDraw d = DrawAugMix(rng, AugMixParams{}, 60, 90);
    ASSERT_EQ(d.chains.size(), 3u);
    ASSERT_EQ(d.chain_weights.size(), 3u);
    float total = d.original_weight;
    for (float w : d.chain_weights) {
      EXPECT_GE(w, 0);
      total += w;
    }
    EXPECT_NEAR(total, 1.0f, 1e-6);  // a Beta split, then a Dirichlet of the second part
    original_weight_sum += d.original_weight;
    for (const AugmentSteps& chain : d.chains) {
      ++depths[chain.size()];
      for (const AugmentStep& s : chain) {
        ++ops[AugmentOpName(s.op)];
        if (s.op == AugmentOp::kTranslateX) translations.insert(std::abs(s.magnitude));
        if (s.op == AugmentOp::kPosterize) posterize_bits.insert(s.magnitude);
      }
    }
  }
  // Beta(1, 1) is uniform: m[0] averages 1/2 (sd of the mean 0.0053).
  EXPECT_NEAR(original_weight_sum / 3000, 0.5, 0.03);
  // Depths 1, 2, 3 uniformly over 9000 chains (each 3000, sd 45).
  ASSERT_EQ(depths.size(), 3u);
  for (const auto& [depth, n] : depths) {
    EXPECT_NEAR(n, 3000, 4 * 45) << depth;
  }
  // 13 ops (no Identity, no Invert), each about 18000 / 13 = 1385 times.
  EXPECT_EQ(ops.size(), 13u);
  EXPECT_EQ(ops.count("Identity") + ops.count("Invert"), 0u);
  for (const auto& [name, n] : ops) {
    EXPECT_NEAR(n, 18000 / 13.0, 4 * 36) << name;
  }
  // Severity 3: bins 0 to 2 of linspace(0, width / 3, 10) and of 4 - round.
  EXPECT_EQ(translations, (std::set<double>{0.0, Linspace(0, 30, 10, 1), Linspace(0, 30, 10, 2)}));
  EXPECT_EQ(posterize_bits, (std::set<double>{4, 3}));  // 4 - round(0, 0.44, 0.89)
}

TEST(Augment, AugMixWithoutAllOpsAndAFixedDepth) {
  std::set<std::string> ops;
  for (int64_t i = 0; i < 500; ++i) {
    SampleRng rng(8, 0, i, 0);
    AugMixParams p;
    p.mixture_width = 2;
    p.chain_depth = 4;
    p.all_ops = false;
    p.severity = 10;
    const AugMixDraw d = DrawAugMix(rng, p, 32, 32);
    ASSERT_EQ(d.chains.size(), 2u);
    for (const AugmentSteps& chain : d.chains) {
      ASSERT_EQ(chain.size(), 4u);
      for (const AugmentStep& s : chain) {
        ops.insert(AugmentOpName(s.op));
        if (s.op == AugmentOp::kPosterize) {
          EXPECT_GE(s.magnitude, 0);  // 0 bits at bin 9
        }
      }
    }
  }
  EXPECT_EQ(ops, (std::set<std::string>{"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
                                        "Posterize", "Solarize", "AutoContrast", "Equalize"}));
}

TEST(Augment, AugMixMixesInFloat32AndTruncates) {
  // One pixel, two chains with known results: Solarize(0) inverts, Posterize(0)
  // zeroes. The expected values are torch's arithmetic written out: m0 * x,
  // then += w * chain, each product and sum rounded to float32, then
  // truncated.
  const uint8_t in[3] = {200, 10, 255};
  AugMixDraw d;
  d.original_weight = 0.3f;
  d.chain_weights = {0.45f, 0.25f};
  d.chains = {{AugmentStep{AugmentOp::kSolarize, 0.0}}, {AugmentStep{AugmentOp::kPosterize, 0.0}}};
  uint8_t out[3], scratch[3];
  float mix[3];
  ApplyAugMix(d, in, out, scratch, mix, 1, 1, Resample::kNearest, {0, 0, 0});
  for (int c = 0; c < 3; ++c) {
    float expect = 0.3f * static_cast<float>(in[c]);
    const float solarized = 0.45f * static_cast<float>(255 - in[c]);
    expect = expect + solarized;
    expect = expect + 0.25f * 0.0f;
    EXPECT_EQ(out[c], static_cast<uint8_t>(expect)) << c;
  }
  EXPECT_EQ(out[0], 84);  // 0.3 * 200 + 0.45 * 55 = 84.75: truncated, not rounded to 85
}
TEST(AugmentOps, BadParametersNameTheField) {
  testing::ExpectSpecErrors({
      {"trivial_augment_wide { num_magnitude_bins: 1 }", "num_magnitude_bins: must be 2 to 1024"},
      {"rand_augment { num_magnitude_bins: 5000 }", "num_magnitude_bins: must be 2 to 1024"},
      {"rand_augment { magnitude: 31 }", "magnitude: must be 0 to num_magnitude_bins - 1 (30)"},
      {"rand_augment { magnitude: -1 }", "magnitude: must be 0 to"},
      {"rand_augment { num_ops: 65 }", "num_ops: must be 0 to 64, got 65"},
      {"auto_augment { fill: [1, 2] }", "fill: one value (gray) or three"},
      {"trivial_augment_wide { fill: 300 }", "fill: must be 0 to 255, got 300"},
      {"aug_mix { severity: 0 }", "severity: must be 1 to 10, got 0"},
      {"aug_mix { severity: 11 }", "severity: must be 1 to 10, got 11"},
      {"aug_mix { mixture_width: 0 }", "mixture_width: must be 1 to 16, got 0"},
      {"aug_mix { mixture_width: 1000000 }", "mixture_width: must be 1 to 16"},
      {"aug_mix { chain_depth: 17 }", "chain_depth: must be at most 16"},
      {"aug_mix { alpha: 0 }", "alpha: must be above 0 and at most 1000, got 0"},
      {"aug_mix { alpha: nan }", "alpha: must be above 0"},
      {"aug_mix { fill: [1, 2] }", "fill: one value (gray) or three"},
  });
  EXPECT_TRUE(testing::CreateAfterDecode("rand_augment { num_ops: 0 }").ok());
}

TEST(AugmentOps, ZeroOpsOrIdentityLeaveTheImage) {
  const std::vector<uint8_t> png = testing::Jpeg(40, 30, 3);
  auto plain = testing::MakePipeline("stages { decode {} }");
  auto none = testing::MakePipeline("stages { decode {} } stages { rand_augment { num_ops: 0 } }");
  EXPECT_EQ(testing::RunPipeline(*none, png, 4).bytes, testing::RunPipeline(*plain, png, 4).bytes);
}

// Chi-square of `counts` against equal counts.
double ChiSquare(const std::vector<int>& counts) {
  double total = 0, chi2 = 0;
  for (const int c : counts) total += c;
  const double expected = total / static_cast<double>(counts.size());
  for (const int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

// Where a draw lands, not only how much it changes: a 2x2 erasure on an 8x8
// tensor starts at every row and column 0..6 equally often. An erasure that
// never reached the last row or column passed every test, which checked
// values and area only. Chi-square, 6 degrees of freedom, 0.999 quantile.
TEST(RandomErasing, EveryPositionIsEquallyLikely) {
  auto p = testing::MakePipeline(
      "stages { decode {} } stages { normalize {} } stages { random_erasing { p: 1 "
      "scale_min: 0.0625 scale_max: 0.0625 ratio_min: 1 ratio_max: 1 value: 1000 } }");
  const std::vector<uint8_t> jpeg = testing::Jpeg(8, 8, 2);
  std::vector<int> tops(7), lefts(7);
  for (int64_t i = 0; i < 7000; ++i) {
    const testing::Output out = testing::RunPipeline(*p, jpeg, i);
    ASSERT_EQ(out.bytes.size(), 3u * 8 * 8 * sizeof(float));
    const auto* t = reinterpret_cast<const float*>(out.bytes.data());
    int top = 8, left = 8, erased = 0;
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        if (t[y * 8 + x] != 1000) continue;
        ++erased;
        top = std::min(top, y);
        left = std::min(left, x);
      }
    }
    ASSERT_EQ(erased, 4) << "sample " << i;
    ++tops[top];
    ++lefts[left];
  }
  EXPECT_LT(ChiSquare(tops), 22.46) << "rows";
  EXPECT_LT(ChiSquare(lefts), 22.46) << "columns";
}

// A 3x3 crop of a 10x10 picture whose pixels name their coordinates starts
// at every row and column 0..7 equally often (7 degrees of freedom).
TEST(RandomCrop, EveryPositionIsEquallyLikely) {
  std::string ppm = "P6\n10 10\n255\n";
  for (int y = 0; y < 10; ++y) {
    for (int x = 0; x < 10; ++x) ppm += {static_cast<char>(x), static_cast<char>(y), '\0'};
  }
  const std::vector<uint8_t> bytes(ppm.begin(), ppm.end());
  auto p = testing::MakePipeline("stages { decode {} } stages { random_crop { size: 3 } }");
  std::vector<int> tops(8), lefts(8);
  for (int64_t i = 0; i < 8000; ++i) {
    const testing::Output out = testing::RunPipeline(*p, bytes, i);
    ASSERT_EQ(out.bytes.size(), 27u);
    ++lefts[out.bytes[0]];
    ++tops[out.bytes[1]];
  }
  EXPECT_LT(ChiSquare(tops), 24.32) << "rows";
  EXPECT_LT(ChiSquare(lefts), 24.32) << "columns";
}

TEST(RandomErasing, BadParametersNameTheField) {
  const struct {
    const char* stage;
    const char* message;
  } cases[] = {
      {"random_erasing { p: 2 }", "p: must be in [0, 1], got 2"},
      {"random_erasing { scale_min: 0.5 scale_max: 0.1 }", "scale_min, scale_max: need 0 <="},
      {"random_erasing { scale_max: 1.5 }", "scale_min, scale_max"},
      {"random_erasing { ratio_min: 0 }", "ratio_min, ratio_max: need 0 < ratio_min"},
      {"random_erasing { ratio_max: inf }", "ratio_min, ratio_max"},
      {"random_erasing { value: nan }", "value: one finite value or one per channel"},
      {"random_erasing { value: 1e300 }", "value: one finite value or one per channel"},
      {"random_erasing { value: [1, 2] }", "value: 2 values for 3 channels"},
      {"random_erasing {}", "expects a float32 CHW tensor (put it after normalize)"},
  };
  for (const auto& c : cases) {
    std::string stage = c.stage;
    // All but the last follow a normalize, as the op needs.
    if (&c != &cases[std::size(cases) - 1]) {
      stage = absl::StrCat("center_crop { size: 8 } } stages { normalize {} } stages { ", stage);
    }
    EXPECT_THAT(testing::CreateAfterDecode(stage).message(), HasSubstr(c.message)) << c.stage;
  }
}

TEST(RandomErasing, ErasesOneRectangleWithTheValueOrNoise) {
  const std::vector<uint8_t> png = testing::Jpeg(64, 48, 7);
  const char* base =
      "stages { decode {} } stages { center_crop { size: 32 } } stages { normalize {} }";
  auto plain = testing::MakePipeline(base);
  auto fixed = testing::MakePipeline(
      absl::StrCat(base, " stages { random_erasing { p: 1 value: [7, 8, 9] } }"));
  auto noisy = testing::MakePipeline(
      absl::StrCat(base, " stages { random_erasing { p: 1 random_value: true } }"));
  auto never = testing::MakePipeline(absl::StrCat(base, " stages { random_erasing { p: 0 } }"));
  double sum = 0, sum_sq = 0;
  size_t noise_values = 0;
  for (int64_t i = 0; i < 50; ++i) {
    const std::vector<uint8_t> before = testing::RunPipeline(*plain, png, i).bytes;
    EXPECT_EQ(testing::RunPipeline(*never, png, i).bytes, before);
    std::vector<float> a(before.size() / 4), f(a.size()), n(a.size());
    std::memcpy(a.data(), before.data(), before.size());
    std::memcpy(f.data(), testing::RunPipeline(*fixed, png, i).bytes.data(), before.size());
    std::memcpy(n.data(), testing::RunPipeline(*noisy, png, i).bytes.data(), before.size());
    for (size_t k = 0; k < a.size(); ++k) {
      const float want = 7.0f + static_cast<float>(k / (32 * 32));  // the channel's value
      ASSERT_TRUE(f[k] == a[k] || f[k] == want) << k;
      if (n[k] != a[k]) {
        ASSERT_TRUE(std::isfinite(n[k]));
        sum += n[k], sum_sq += n[k] * n[k], ++noise_values;
      }
    }
  }
  // Standard normal noise: mean 0 and variance 1, within 5 standard errors.
  ASSERT_GT(noise_values, 10000u);
  const double mean = sum / noise_values, var = sum_sq / noise_values - mean * mean;
  EXPECT_NEAR(mean, 0, 5 / std::sqrt(noise_values));
  EXPECT_NEAR(var, 1, 5 * std::sqrt(2.0 / noise_values));
}

}  // namespace
}  // namespace prepflow
