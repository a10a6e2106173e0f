// The colour kernels against values Pillow gives (computed with Debian's
// python3-pil and written here), the colour ops' validation, and their draws.
// tests/python/test_parity.py holds every op to torchvision on whole images.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "pipeline/ops/image/color.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using Pixels = std::vector<uint8_t>;

// A row of gray pixels.
Pixels Gray(std::initializer_list<uint8_t> values) {
  Pixels out;
  for (uint8_t v : values) out.insert(out.end(), {v, v, v});
  return out;
}

TEST(ColorKernels, BlendsTruncateInFloat32AsPillow) {
  const Pixels in = Gray({50, 150});
  Pixels out(in.size());
  // ImageEnhance.Brightness(im).enhance(1.3): 65, 195; 2: 100, 255 (clipped).
  AdjustBrightness(in.data(), out.data(), 2, 1.3);
  EXPECT_EQ(out, Gray({65, 195}));
  AdjustBrightness(in.data(), out.data(), 2, 2);
  EXPECT_EQ(out, Gray({100, 255}));
  // Contrast around the rounded mean luma (100): 2 gives 0, 200; 0.3 gives 85, 115.
  AdjustContrast(in.data(), out.data(), 2, 2);
  EXPECT_EQ(out, Gray({0, 200}));
  AdjustContrast(in.data(), out.data(), 2, 0.3);
  EXPECT_EQ(out, Gray({85, 115}));
  // ImageEnhance.Color((0, 128, 255)).enhance(0.5) is (52, 116, 179).
  const Pixels blue = {0, 128, 255};
  AdjustSaturation(blue.data(), out.data(), 1, 0.5);
  EXPECT_THAT(Pixels(out.begin(), out.begin() + 3), ElementsAreArray({52, 116, 179}));
}

TEST(ColorKernels, HueGoesThroughPillowsEightBitHsv) {
  // torchvision's adjust_hue on PIL, including Pillow's rounding (red turned
  // half way round is (0, 255, 252), not cyan) and negative factors.
  const struct {
    Pixels in;
    double factor;
    Pixels want;
  } cases[] = {{{255, 0, 0}, 0.5, {0, 255, 252}},   {{10, 200, 90}, 0.5, {200, 10, 126}},
               {{255, 0, 0}, -0.25, {138, 0, 255}}, {{10, 200, 90}, -0.25, {200, 184, 10}},
               {{255, 0, 0}, 0.1, {255, 150, 0}},   {{10, 200, 90}, 0.1, {10, 200, 198}}};
  for (const auto& c : cases) {
    Pixels out(3);
    AdjustHue(c.in.data(), out.data(), 1, c.factor);
    EXPECT_EQ(out, c.want) << c.factor;
  }
}

TEST(ColorKernels, ImageOpsTables) {
  const Pixels in = Gray({50, 100, 150});
  Pixels out(in.size());
  Autocontrast(in.data(), out.data(), 3);
  EXPECT_EQ(out, Gray({0, 127, 255}));
  Equalize(in.data(), out.data(), 3);
  EXPECT_EQ(out, Gray({50, 100, 150}));  // (3 - 1) / 255 = 0: Pillow leaves it
  Posterize(in.data(), out.data(), 3, 3);
  EXPECT_EQ(out, Gray({32, 96, 128}));
  Posterize(in.data(), out.data(), 3, 0);
  EXPECT_EQ(out, Gray({0, 0, 0}));
  Posterize(in.data(), out.data(), 3, 8);
  EXPECT_EQ(out, in);
  Solarize(in.data(), out.data(), 3, 100);
  EXPECT_EQ(out, Gray({50, 155, 105}));
}

TEST(ColorKernels, EqualizeClipsTablesAboveEightBits) {
  // 509 pixels below the top level and one at it: step (510 - 1) / 255 = 1,
  // so Pillow's table runs past 255 and is clipped when applied.
  Pixels in;
  for (int i = 0; i < 509; ++i) in.insert(in.end(), {0, 0, 0});
  in.insert(in.end(), {1, 1, 1});
  Pixels out(in.size());
  Equalize(in.data(), out.data(), 510);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out.back(), 255);
}

TEST(ColorKernels, SharpnessFiltersInsideTheBorderOnly) {
  // 3x3 with a bright centre: SMOOTH gives the centre (8 * 10 + 5 * 200) / 13
  // + 0.5 = 83.57 -> 83; factor 0 is the smoothed image, the border unchanged.
  Pixels in = Gray({10, 10, 10, 10, 200, 10, 10, 10, 10});
  Pixels out(in.size());
  AdjustSharpness(in.data(), out.data(), 3, 3, 0);
  EXPECT_EQ(out, Gray({10, 10, 10, 10, 83, 10, 10, 10, 10}));
  AdjustSharpness(in.data(), out.data(), 3, 3, 2);  // 83 + 2 (200 - 83) = 317 -> 255
  EXPECT_EQ(out[12], 255);
  // Under 3 pixels in a direction Pillow does not filter at all.
  AdjustSharpness(in.data(), out.data(), 1, 3, 0);
  EXPECT_EQ(Pixels(out.begin(), out.begin() + 9), Pixels(in.begin(), in.begin() + 9));
}

TEST(ColorKernels, GaussianBlurKeepsFlatImagesAndFoldsWideKernels) {
  Buffer scratch;
  for (auto [h, w] : {std::pair{1, 1}, std::pair{2, 5}, std::pair{9, 4}}) {
    Pixels in(static_cast<size_t>(h) * w * 3, 77), out(in.size());
    GaussianBlur(in.data(), out.data(), h, w, kMaxGaussianKernel, 3, 40.0, 0.5, &scratch);
    EXPECT_EQ(out, in) << h << "x" << w;
  }
  // A kernel of 1 is the identity whatever sigma is.
  Pixels in = Gray({0, 255, 3, 250}), out(in.size());
  GaussianBlur(in.data(), out.data(), 1, 4, 1, 1, 5.0, 5.0, &scratch);
  EXPECT_EQ(out, in);
  // A symmetric kernel on a step: the two middle values move towards each
  // other by the same amount.
  GaussianBlur(in.data(), out.data(), 1, 4, 3, 1, 1.0, 1.0, &scratch);
  EXPECT_LT(out[3], 255);
  EXPECT_GT(out[6], 3);
}

TEST(ColorOps, BadParametersNameTheField) {
  testing::ExpectSpecErrors({
      {"color_jitter { hue: 0.7 }", "hue: a single value must be in [0, 0.5], got 0.7"},
      {"color_jitter { hue: [-0.6, 0.1] }", "hue: need -0.5 <= min <= max <= 0.5"},
      {"color_jitter { brightness: -1 }", "brightness: a single value must be in [0, inf]"},
      {"color_jitter { contrast: [2, 1] }", "contrast: need 0 <= min <= max <= inf"},
      {"color_jitter { saturation: nan }", "saturation: a single value must be"},
      {"color_jitter { brightness: [1, 2, 3] }", "brightness: one value (an amount) or two"},
      {"gaussian_blur {}", "kernel_size: one value (square) or two ([kx, ky]), got 0"},
      {"gaussian_blur { kernel_size: 4 }", "kernel_size: must be odd and in [1, 255], got 4"},
      {"gaussian_blur { kernel_size: [3, 257] }", "kernel_size: must be odd and in [1, 255]"},
      {"gaussian_blur { kernel_size: -3 }", "kernel_size: must be odd and in [1, 255]"},
      {"gaussian_blur { kernel_size: 3 sigma: 0 }", "sigma: need 0 < min <= max"},
      {"gaussian_blur { kernel_size: 3 sigma: [2, 1] }", "sigma: need 0 < min <= max"},
      {"gaussian_blur { kernel_size: 3 sigma: [1, inf] }", "sigma: need 0 < min <= max"},
      // Hostile magnitudes: past float32's range they would blend with
      // infinity or divide by zero.
      {"gaussian_blur { kernel_size: 3 sigma: 1e-300 }", "positive and finite as float32"},
      {"color_jitter { brightness: 1e300 }", "brightness: [0, 1e+300] is beyond float32's range"},
      {"color_jitter { contrast: [0, 1e39] }", "beyond float32's range"},
      {"random_adjust_sharpness { sharpness_factor: 1e300 }", "sharpness_factor: must be finite"},
      {"random_posterize {}", "bits: required"},
      {"random_posterize { bits: 9 }", "bits: must be in [0, 8], got 9"},
      {"random_solarize { p: 1 }", "threshold: required"},
      {"random_solarize { threshold: nan }", "threshold: must be in [0, 255]"},
      {"random_adjust_sharpness {}", "sharpness_factor: required"},
      {"random_adjust_sharpness { sharpness_factor: -1 }", "sharpness_factor: must be finite"},
      {"random_autocontrast { p: 2 }", "p: must be in [0, 1], got 2"},
      {"random_equalize { p: -inf }", "p: must be in [0, 1]"},
      {"random_channel_permutation { p: 1.5 }", "p: must be in [0, 1], got 1.5"},
  });
}

TEST(ColorJitter, AppliesItsAdjustmentsInAUniformlyRandomOrder) {
  // Brightness 2 and contrast 0 on gray 50 and 150 (mean luma 100): brightness
  // first gives 100 and 255 and then their mean, 178; contrast first gives
  // 100 and then 200. Over 2000 samples brightness comes first about half the
  // time (binomial, sd 22); the draws are deterministic, so this cannot flake.
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages {
                               color_jitter {
                                 brightness: [ 2, 2 ]
                                 contrast: [ 0, 0 ]
                               }
                             })pb",
                        /*seed=*/11);
  cv::Mat image(1, 2, CV_8UC3, cv::Scalar::all(50));
  image.at<cv::Vec3b>(0, 1) = cv::Vec3b(150, 150, 150);
  std::vector<uint8_t> png;
  ASSERT_TRUE(cv::imencode(".png", image, png));
  int brightness_first = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const std::vector<uint8_t> out = RunPipeline(*p, png, i).bytes;
    ASSERT_TRUE(out[0] == 178 || out[0] == 200) << int{out[0]};
    brightness_first += out[0] == 178;
  }
  EXPECT_GT(brightness_first, 1000 - 4 * 23);
  EXPECT_LT(brightness_first, 1000 + 4 * 23);
}

TEST(ColorJitter, DrawsEachFactorUniformlyFromItsRange) {
  // Brightness in [0.5, 1.5] on gray 100: the output is trunc(100 f), so f is
  // read back to within 1/100. Uniform: mean 1, and every tenth of the range
  // holds about a tenth of 2000 draws (sd 13.4).
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { color_jitter { brightness: 0.5 } })pb",
                        /*seed=*/4);
  const std::vector<uint8_t> png = testing::SolidPng(1, 1, 3, 8, 100, 100, 100);
  int bins[10] = {};
  double sum = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    const int v = RunPipeline(*p, png, i).bytes[0];
    ASSERT_GE(v, 50);
    ASSERT_LT(v, 150);
    sum += (v + 0.5) / 100;
    ++bins[(v - 50) / 10];
  }
  EXPECT_NEAR(sum / 2000, 1.0, 0.03);
  for (int b = 0; b < 10; ++b) {
    EXPECT_GT(bins[b], 200 - 4 * 14) << b;
    EXPECT_LT(bins[b], 200 + 4 * 14) << b;
  }
}

TEST(ColorJitter, EmptyOrCentredRangesLeaveTheImageAlone) {
  const std::vector<uint8_t> png = testing::Jpeg(40, 30, 3);
  auto plain = MakePipeline("stages { decode {} }");
  for (const char* stage : {"color_jitter {}", "color_jitter { brightness: 0 hue: 0 }",
                            "color_jitter { contrast: [1, 1] hue: [0, 0] }"}) {
    auto p = MakePipeline(absl::StrCat("stages { decode {} } stages { ", stage, " }"));
    EXPECT_EQ(RunPipeline(*p, png, 5).bytes, RunPipeline(*plain, png, 5).bytes) << stage;
  }
}

// v2's RandomChannelPermutation: on a pixel (10, 20, 30) each of the six
// orders comes out about a sixth of the time (2400 samples: 400 each, sd
// 18); with p 0.25 three quarters of samples are left alone.
TEST(RandomChannelPermutation, DrawsEachOfTheSixOrdersEvenly) {
  const std::vector<uint8_t> png = testing::SolidPng(1, 1, 3, 8, 10, 20, 30);
  auto p = MakePipeline("stages { decode {} } stages { random_channel_permutation {} }", 9);
  std::map<std::vector<uint8_t>, int> seen;
  for (int64_t i = 0; i < 2400; ++i) ++seen[RunPipeline(*p, png, i).bytes];
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& [pixel, count] : seen) {
    std::vector<uint8_t> sorted = pixel;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<uint8_t>{10, 20, 30}));
    EXPECT_GT(count, 400 - 4 * 18);
    EXPECT_LT(count, 400 + 4 * 18);
  }
  auto rare =
      MakePipeline("stages { decode {} } stages { random_channel_permutation { p: 0.25 } }", 9);
  int same = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    same += RunPipeline(*rare, png, i).bytes == std::vector<uint8_t>{10, 20, 30};
  }
  // Left alone: 1500 expected, plus a sixth of the permuted keep the order.
  EXPECT_GT(same, 1500 + 500 / 6 - 4 * 20);
  EXPECT_LT(same, 1500 + 500 / 6 + 4 * 20);
}

}  // namespace
}  // namespace prepflow
