// Each op against hand-computed expectations, and spec validation.
#include <cmath>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "pipeline/core/op.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/image/image_family.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;
using ::testing::HasSubstr;

// A lossless image (PNG) with pixel (x, y) = (x, y, (x + y) % 256) in RGB.
std::vector<uint8_t> CoordinatePng(int w, int h) {
  cv::Mat bgr(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x)
      bgr.at<cv::Vec3b>(y, x) = cv::Vec3b((x + y) % 256, y % 256, x % 256);
  }
  std::vector<uint8_t> png;
  cv::imencode(".png", bgr, png);
  return png;
}

absl::Status CreateStatus(const std::string& text) {
  proto::PipelineSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec));
  return Pipeline::Create(spec, PipelineOptions()).status();
}

// torchvision: ToTensor divides by 255 in float32, Normalize subtracts and
// divides by float32 mean and std. Bit-for-bit the same here.
float TorchvisionValue(int v, double mean, double std) {
  volatile float x = static_cast<float>(v) / 255.0f;  // volatile: one rounding per op
  volatile float centred = x - static_cast<float>(mean);
  return centred / static_cast<float>(std);
}

TEST(Normalize, MatchesTorchvisionBitForBit) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { normalize {} })pb");
  auto out = RunPipeline(*p, testing::SolidPng(2, 1, 3, 8, 0, 128, 255));
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.shape, (Shape{3, 1, 2}));
  const float* f = reinterpret_cast<const float*>(out.bytes.data());
  EXPECT_EQ(f[0], TorchvisionValue(0, 0.485, 0.229));
  EXPECT_EQ(f[2], TorchvisionValue(128, 0.456, 0.224));
  EXPECT_EQ(f[4], TorchvisionValue(255, 0.406, 0.225));
  EXPECT_EQ(f[1], f[0]);
}

TEST(Normalize, KernelIsExactForEveryValueAndLength) {
  // Every byte value in every channel, and lengths that leave vector tails.
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  for (size_t pixels : {size_t{1}, size_t{7}, size_t{256}, size_t{1001}}) {
    std::vector<uint8_t> in(pixels * 3);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + i / 3);
    std::vector<float> out(pixels * 3);
    NormalizeHwcToChw(in.data(), pixels, mean, std, out.data());
    for (size_t i = 0; i < pixels; ++i) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(out[c * pixels + i], TorchvisionValue(in[3 * i + c], mean[c], std[c]))
            << "pixel " << i << " channel " << c;
      }
    }
  }
}

TEST(Normalize, CustomMeanStd) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages {
                               normalize {
                                 mean: [ 0, 0, 0 ]
                                 std: [ 1, 1, 1 ]
                               }
                             })pb");
  auto out = RunPipeline(*p, testing::SolidPng(1, 1, 3, 8, 51, 102, 255));
  ASSERT_TRUE(out.status.ok());
  const float* f = reinterpret_cast<const float*>(out.bytes.data());
  EXPECT_FLOAT_EQ(f[0], 0.2f);
  EXPECT_FLOAT_EQ(f[1], 0.4f);
  EXPECT_FLOAT_EQ(f[2], 1.0f);
}

TEST(CenterCrop, UsesTorchvisionOffsetsWithHalfToEvenRounding) {
  // (5 - 2) / 2 = 1.5 rounds to 2 (Python round), (6 - 2) / 2 = 2.
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { center_crop { height: 2 width: 2 } })pb");
  auto out = RunPipeline(*p, CoordinatePng(5, 6));
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.shape, (Shape{2, 2, 3}));
  EXPECT_EQ(out.bytes[0], 2);  // R = x of the top-left pixel
  EXPECT_EQ(out.bytes[1], 2);  // G = y
  auto p2 = MakePipeline(R"pb(stages { decode {} }
                              stages { center_crop { size: 2 } })pb");
  auto out2 = RunPipeline(*p2, CoordinatePng(7, 5));  // (7-2)/2 = 2.5 -> 2; (5-2)/2 = 1.5 -> 2
  ASSERT_TRUE(out2.status.ok());
  EXPECT_EQ(out2.bytes[0], 2);
  EXPECT_EQ(out2.bytes[1], 2);
}

TEST(CenterCrop, PadsWithZerosWhenLargerThanImage) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { center_crop { size: 4 } })pb");
  auto out = RunPipeline(*p, testing::SolidPng(2, 2, 3, 8, 200, 200, 200));
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.shape, (Shape{4, 4, 3}));
  auto at = [&](int y, int x) { return out.bytes[(y * 4 + x) * 3]; };
  EXPECT_EQ(at(0, 0), 0);
  EXPECT_EQ(at(1, 1), 200);
  EXPECT_EQ(at(2, 2), 200);
  EXPECT_EQ(at(3, 3), 0);
}

TEST(CenterCrop, CropOfDecodedRegionEqualsCropOfFullImage) {
  const std::vector<uint8_t> jpeg = testing::Jpeg(333, 251, 9);
  auto roi = MakePipeline(R"pb(stages { decode {} }
                               stages { center_crop { size: 100 } })pb");
  DecodeOptions full;
  full.use_roi = false;
  auto whole = MakePipeline(R"pb(stages { decode {} }
                                 stages { center_crop { size: 100 } })pb",
                            0, full);
  auto a = RunPipeline(*roi, jpeg);
  auto b = RunPipeline(*whole, jpeg);
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(a.bytes, b.bytes);
}

TEST(Resize, ShorterSideFollowsTorchvisionSizeRule) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { resize { shorter_side: 100 } })pb");
  auto out = RunPipeline(*p, testing::SolidPng(333, 200, 3, 8, 1, 2, 3));
  ASSERT_TRUE(out.status.ok());
  EXPECT_EQ(out.shape, (Shape{100, 166, 3}));  // int(100 * 333 / 200) = 166
  auto portrait = RunPipeline(*p, testing::SolidPng(200, 333, 3, 8, 1, 2, 3));
  EXPECT_EQ(portrait.shape, (Shape{166, 100, 3}));
  // A solid image stays solid whatever the scale.
  EXPECT_EQ(out.bytes[0], 1);
  EXPECT_EQ(out.bytes[out.bytes.size() - 1], 3);
}

TEST(Resize, FixedSizeAndLargeShrinkStaysExact) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { resize { height: 10 width: 20 } })pb");
  auto out = RunPipeline(*p, testing::SolidPng(1000, 700, 3, 8, 10, 20, 30));
  ASSERT_TRUE(out.status.ok());
  ASSERT_EQ(out.shape, (Shape{10, 20, 3}));
  for (size_t i = 0; i < out.bytes.size(); i += 3) {
    ASSERT_EQ(out.bytes[i], 10);
    ASSERT_EQ(out.bytes[i + 1], 20);
    ASSERT_EQ(out.bytes[i + 2], 30);
  }
}

// v2's multi-scale resizes: each draw gives the size its rule says, and
// the bytes resize gives at that size (the exact fidelity).
TEST(RandomResize, EachModeDrawsItsSizesAndResizesAsResize) {
  const std::vector<uint8_t> jpeg = testing::Jpeg(40, 30, 3);
  // RandomResize: the shorter side uniform in [20, 25).
  auto range = MakePipeline(
      "stages { decode {} } stages { random_resize { min_size: 20 "
      "max_size: 25 interpolation: INTERPOLATION_BICUBIC } }",
      5);
  std::set<int64_t> shorter;
  for (int64_t i = 0; i < 200; ++i) {
    const testing::Output out = RunPipeline(*range, jpeg, i);
    ASSERT_TRUE(out.status.ok()) << out.status;
    const int64_t s = out.shape[0];
    shorter.insert(s);
    auto same = MakePipeline(
        absl::StrCat("stages { decode {} } stages { resize { shorter_side: ", s,
                     " interpolation: INTERPOLATION_BICUBIC fidelity: FIDELITY_EXACT } }"));
    const testing::Output want = RunPipeline(*same, jpeg);
    ASSERT_EQ(out.shape, want.shape);
    ASSERT_EQ(out.bytes, want.bytes) << s;
  }
  EXPECT_EQ(shorter, (std::set<int64_t>{20, 21, 22, 23, 24}));
  // RandomShortestSize: 20 gives r = 2/3 (26 x 20); 60 gives r = 2, held to
  // 50/40 by max_size (50 x 37).
  auto sizes = MakePipeline(
      "stages { decode {} } stages { random_resize { sizes: [20, 60] max_size: 50 } }", 5);
  std::set<Shape> shapes;
  for (int64_t i = 0; i < 50; ++i) shapes.insert(RunPipeline(*sizes, jpeg, i).shape);
  EXPECT_EQ(shapes, (std::set<Shape>{{20, 26, 3}, {37, 50, 3}}));
  // ScaleJitter: fitted into 100 x 100 (r = 2.5), scaled by 0.5: 50 x 37.
  auto jitter = MakePipeline(
      "stages { decode {} } stages { random_resize { target_height: 100 target_width: 100 "
      "scale_min: 0.5 scale_max: 0.5 } }");
  EXPECT_EQ(RunPipeline(*jitter, jpeg).shape, (Shape{37, 50, 3}));
  testing::ExpectSpecErrors({
      {"random_resize {}", "set one of min_size (RandomResize), sizes"},
      {"random_resize { min_size: 20 sizes: 3 }", "set one of min_size"},
      {"random_resize { min_size: 20 max_size: 20 }", "need 0 < min_size < max_size"},
      {"random_resize { sizes: [3, -1] }", "sizes: must be positive, got -1"},
      {"random_resize { target_height: 10 }", "need positive targets"},
      {"random_resize { target_height: 10 target_width: 10 scale_min: 2 scale_max: 1 }",
       "0 < scale_min <= scale_max"},
  });
}

TEST(RandomHorizontalFlip, FlipsWithProbabilityP) {
  const std::vector<uint8_t> png = CoordinatePng(4, 1);
  auto always = MakePipeline(R"pb(stages { decode {} }
                                  stages { random_horizontal_flip { p: 1 } })pb");
  auto never = MakePipeline(R"pb(stages { decode {} }
                                 stages { random_horizontal_flip { p: 0 } })pb");
  auto flipped = RunPipeline(*always, png);
  auto same = RunPipeline(*never, png);
  ASSERT_TRUE(flipped.status.ok() && same.status.ok());
  EXPECT_EQ(flipped.bytes[0], 3);  // x of the rightmost pixel
  EXPECT_EQ(same.bytes[0], 0);

  auto half = MakePipeline(R"pb(stages { decode {} }
                                stages { random_horizontal_flip {} })pb");
  int flips = 0;
  for (int i = 0; i < 400; ++i) flips += RunPipeline(*half, png, i).bytes[0] == 3;
  EXPECT_GT(flips, 150);  // binomial(400, 0.5): 150..250 is over 5 sigma
  EXPECT_LT(flips, 250);
}

class RandomResizedCropTest : public ::testing::Test {
 protected:
  // The crop rectangle chosen for sample i, read back from the decoded view.
  static ImageView Crop(const Pipeline& p, const std::vector<uint8_t>& bytes, int64_t i) {
    auto out = RunPipeline(p, bytes, i, 0, /*end=*/1);
    EXPECT_TRUE(out.status.ok());
    EXPECT_TRUE(out.view.has_crop);
    return out.view;
  }
};

TEST_F(RandomResizedCropTest, DrawsWithinBoundsScaleAndRatio) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_resized_crop { size: 32 } })pb");
  const std::vector<uint8_t> png = testing::SolidPng(400, 300, 3, 8, 9, 9, 9);
  double area_sum = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const ImageView v = Crop(*p, png, i);
    ASSERT_GE(v.crop_x, 0);
    ASSERT_GE(v.crop_y, 0);
    ASSERT_LE(v.crop_x + v.crop_width, 400);
    ASSERT_LE(v.crop_y + v.crop_height, 300);
    const double area = static_cast<double>(v.crop_width) * v.crop_height / (400.0 * 300.0);
    const double ratio = static_cast<double>(v.crop_width) / v.crop_height;
    // Rounding w and h to integers moves area and ratio by a little.
    ASSERT_GE(area, 0.08 * 0.97);
    ASSERT_LE(area, 1.0);
    ASSERT_GE(ratio, 0.75 * 0.97);
    ASSERT_LE(ratio, 4.0 / 3.0 * 1.03);
    area_sum += area;
  }
  // Scale is uniform on [0.08, 1] before rejection; large draws are rejected
  // more often on a 4:3 image, so the accepted mean sits a little below 0.54.
  EXPECT_GT(area_sum / n, 0.40);
  EXPECT_LT(area_sum / n, 0.56);
}

TEST_F(RandomResizedCropTest, FallsBackToCentralCropOnExtremeAspect) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_resized_crop { size: 8 } })pb");
  const std::vector<uint8_t> png = testing::SolidPng(1000, 10, 3, 8, 9, 9, 9);
  const ImageView v = Crop(*p, png, 0);
  // in_ratio 100 > 4/3: h = 10, w = round(10 * 4/3) = 13, centred.
  EXPECT_EQ(v.crop_height, 10);
  EXPECT_EQ(v.crop_width, 13);
  EXPECT_EQ(v.crop_x, (1000 - 13) / 2);
  auto full = RunPipeline(*p, png);
  ASSERT_TRUE(full.status.ok());
  EXPECT_EQ(full.shape, (Shape{8, 8, 3}));
}

TEST_F(RandomResizedCropTest, SameSampleSameCropDifferentSamplesDiffer) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_resized_crop { size: 16 } })pb",
                        3);
  const std::vector<uint8_t> png = testing::SolidPng(300, 200, 3, 8, 9, 9, 9);
  const ImageView a = Crop(*p, png, 5), b = Crop(*p, png, 5), c = Crop(*p, png, 6);
  EXPECT_EQ(std::tie(a.crop_x, a.crop_y, a.crop_width, a.crop_height),
            std::tie(b.crop_x, b.crop_y, b.crop_width, b.crop_height));
  EXPECT_NE(std::tie(a.crop_x, a.crop_y, a.crop_width, a.crop_height),
            std::tie(c.crop_x, c.crop_y, c.crop_width, c.crop_height));
}

TEST(PipelineSpec, InvalidParametersNameStageAndField) {
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { random_resized_crop { size: 224 scale_min: 1.5 } })pb")
                  .message(),
              HasSubstr("stage 1 (random_resized_crop): scale_min"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { normalize { mean: [ 1, 2 ] } })pb")
                  .message(),
              HasSubstr("stage 1 (normalize): mean: needs 3 values"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { normalize { std: [ 1, 0, 1 ] } })pb")
                  .message(),
              HasSubstr("std: channel 1 must be positive"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { center_crop {} })pb")
                  .message(),
              HasSubstr("stage 1 (center_crop): output size"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { random_horizontal_flip { p: 2 } })pb")
                  .message(),
              HasSubstr("p: must be in [0, 1]"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { resize { shorter_side: 5 width: 3 } })pb")
                  .message(),
              HasSubstr("either shorter_side or height and width"));
  // An enum value no filter has (a client on a newer proto, or a crafted job).
  proto::Stage resize;
  resize.mutable_resize()->set_shorter_side(5);
  resize.mutable_resize()->set_interpolation(static_cast<proto::Interpolation>(9));
  EXPECT_THAT(BuiltinOps().Create(resize).status().message(),
              HasSubstr("interpolation: 9 is not supported"));
  resize.mutable_resize()->set_interpolation(proto::INTERPOLATION_BILINEAR);
  resize.mutable_resize()->set_fidelity(static_cast<proto::Fidelity>(7));
  EXPECT_THAT(BuiltinOps().Create(resize).status().message(),
              HasSubstr("fidelity: 7 is not supported"));
  proto::Stage crop;
  crop.mutable_random_resized_crop()->set_size(8);
  crop.mutable_random_resized_crop()->set_scale_min(0.5);
  crop.mutable_random_resized_crop()->set_scale_max(1);
  crop.mutable_random_resized_crop()->set_ratio_min(1);
  crop.mutable_random_resized_crop()->set_ratio_max(1);
  crop.mutable_random_resized_crop()->set_fidelity(static_cast<proto::Fidelity>(-1));
  EXPECT_THAT(BuiltinOps().Create(crop).status().message(),
              HasSubstr("fidelity: -1 is not supported"));
  for (const auto& [stage, message] : std::vector<std::pair<std::string, std::string>>{
           {"resize { shorter_side: 100 max_size: 100 }",
            "max_size: must be greater than shorter_side (100), got 100"},
           {"resize { shorter_side: 100 max_size: -5 }", "max_size: must be greater"},
           {"resize { height: 8 width: 8 max_size: 10 }", "max_size: only with shorter_side"}}) {
    EXPECT_THAT(CreateStatus("stages { decode {} } stages { " + stage + " }").message(),
                HasSubstr(message))
        << stage;
  }
}

TEST(PipelineSpec, TypeFlowIsChecked) {
  const absl::Status s = CreateStatus(R"pb(stages { normalize {} })pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("stage 0 (normalize): expects an image"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { decode {} })pb")
                  .message(),
              HasSubstr("stage 1 (decode): expects encoded bytes"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { normalize {} }
                                stages { random_horizontal_flip {} })pb")
                  .message(),
              HasSubstr("stage 2 (random_horizontal_flip): expects an image"));
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { normalize {} }
                                stages { resize { shorter_side: 3 } })pb")
                  .message(),
              HasSubstr("but gets float32 tensor [3, ?, ?]"));
  EXPECT_THAT(CreateStatus("").message(), HasSubstr("has no stages"));
  EXPECT_THAT(CreateStatus(R"pb(stages {})pb").message(), HasSubstr("stage 0 (unset): no op set"));
}

TEST(PipelineSpec, PresetsAreValidAndTyped) {
  for (const std::string& name : PresetPipelineNames()) {
    auto spec = LoadPipelineSpec(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto p = Pipeline::Create(*spec, PipelineOptions());
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->name(), name);
    EXPECT_EQ((*p)->output_type().kind, ValueKind::kTensor);
    EXPECT_EQ((*p)->output_type().shape, (Shape{3, 224, 224}));
  }
}

TEST(PipelineSpec, TextFileErrorsHaveLineAndColumn) {
  testing::TempDir dir;
  const std::string path = dir.Join("bad.pbtxt");
  std::ofstream(path) << "name: \"x\"\nstages { decode {} }\nstages { no_such_op {} }\n";
  auto spec = LoadPipelineSpec(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr(path + ":3:"));
  EXPECT_THAT(spec.status().message(), HasSubstr("no_such_op"));

  auto missing = LoadPipelineSpec(dir.Join("nope.pbtxt"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("neither a preset"));

  const std::string good = dir.Join("good.pbtxt");
  std::ofstream(good) << "stages { decode {} }\nstages { resize { height: 8 width: 8 } }\n";
  auto ok = LoadPipelineSpec(good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->stages_size(), 2);
}

TEST(PipelineSpec, TextItselfIsAPipeline) {
  auto spec = LoadPipelineSpec("stages { decode {} } stages { center_crop { size: 8 } }");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->stages_size(), 2);
  auto bad = LoadPipelineSpec("stages { decode {} }\nstages { colour_jitter {} }");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("pipeline text:2:"));
  EXPECT_THAT(bad.status().message(), HasSubstr("color_jitter"));  // the ops are listed
}

TEST(RandomVerticalFlip, MirrorsTopToBottomWithProbabilityOne) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_vertical_flip { p: 1 } })pb");
  auto out = RunPipeline(*p, CoordinatePng(4, 3));
  ASSERT_TRUE(out.status.ok()) << out.status;
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 4; ++x) {
      EXPECT_EQ(out.bytes[(y * 4 + x) * 3 + 0], x);      // R = x
      EXPECT_EQ(out.bytes[(y * 4 + x) * 3 + 1], 2 - y);  // G = the mirrored row
    }
  }
  auto never = MakePipeline(R"pb(stages { decode {} }
                                 stages { random_vertical_flip { p: 0 } })pb");
  EXPECT_EQ(RunPipeline(*never, CoordinatePng(4, 3)).bytes[1], 0);  // row 0 stays
}

TEST(RandomGrayscale, IsPillowsLumaInEveryChannel) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_grayscale { p: 1 } })pb");
  auto out = RunPipeline(*p, testing::SolidPng(2, 1, 3, 8, 0, 128, 255));
  ASSERT_TRUE(out.status.ok()) << out.status;
  // Image.new('RGB', (1, 1), (0, 128, 255)).convert('L') is 104.
  EXPECT_EQ(out.bytes, std::vector<uint8_t>(6, 104));
}

TEST(RandomInvert, InvertsEveryValue) {
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_invert { p: 1 } })pb");
  auto out = RunPipeline(*p, testing::SolidPng(1, 1, 3, 8, 0, 128, 255));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.bytes, (std::vector<uint8_t>{255, 127, 0}));
}

TEST(RandomImageOps, ProbabilityIsValidatedAndDrawnPerSample) {
  EXPECT_THAT(CreateStatus(R"pb(stages { decode {} }
                                stages { random_invert { p: 1.5 } })pb")
                  .message(),
              HasSubstr("stage 1 (random_invert): p: must be in [0, 1], got 1.5"));
  // Hostile values: NaN compares false with everything, so it must be refused
  // by the check's form, not let through to draw against.
  for (const char* p : {"nan", "-inf", "inf", "-0.1"}) {
    EXPECT_THAT(CreateStatus(
                    absl::StrCat("stages { decode {} } stages { random_grayscale { p: ", p, " } }"))
                    .message(),
                HasSubstr("p: must be in [0, 1]"))
        << p;
  }
  // p = 0.3 over 2000 samples: the count of inverted ones is binomial
  // (mean 600, sd 20.5); the draws are deterministic, so this cannot flake.
  auto p = MakePipeline(R"pb(stages { decode {} }
                             stages { random_invert { p: 0.3 } })pb",
                        /*seed=*/5);
  const std::vector<uint8_t> png = testing::SolidPng(1, 1, 3, 8, 10, 10, 10);
  int inverted = 0;
  for (int64_t i = 0; i < 2000; ++i) inverted += RunPipeline(*p, png, i).bytes[0] == 245;
  EXPECT_GT(inverted, 600 - 4 * 21);
  EXPECT_LT(inverted, 600 + 4 * 21);
}

}  // namespace
}  // namespace prepflow
