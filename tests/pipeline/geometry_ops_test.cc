// The geometry kernels against values NumPy and Pillow give (computed with
// Debian's python3-numpy and python3-pil), the geometry ops' validation, limits
// and draws. tests/python/test_parity.py holds every op to torchvision on
// whole images.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "pipeline/ops/image/geometry.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<int> PadAxis(int before, int n, int after, PadMode mode) {
  std::vector<int> out;
  for (int i = 0; i < before + n + after; ++i) out.push_back(PadIndex(i, before, n, mode));
  return out;
}

TEST(GeometryKernels, PadIndexIsNumpysPad) {
  // np.pad(np.arange(3), (7, 5), mode) for each mode; -1 is the constant.
  EXPECT_THAT(PadAxis(7, 3, 5, PadMode::kReflect),
              ElementsAreArray({1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1}));
  EXPECT_THAT(PadAxis(7, 3, 5, PadMode::kSymmetric),
              ElementsAreArray({0, 0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0, 1}));
  EXPECT_THAT(PadAxis(2, 3, 1, PadMode::kEdge), ElementsAreArray({0, 0, 0, 1, 2, 2}));
  EXPECT_THAT(PadAxis(2, 3, 1, PadMode::kConstant), ElementsAreArray({-1, -1, 0, 1, 2, -1}));
  // One pixel reflects onto itself.
  EXPECT_THAT(PadAxis(2, 1, 2, PadMode::kReflect), ElementsAreArray({0, 0, 0, 0, 0}));
}

TEST(GeometryKernels, RotationPlansFollowPillowsShortcuts) {
  EXPECT_EQ(PlanRotation(0, 4, 3, false).kind, RotationPlan::kCopy);
  EXPECT_EQ(PlanRotation(-360, 4, 3, false).kind, RotationPlan::kCopy);  // Python's %
  EXPECT_EQ(PlanRotation(180, 4, 3, false).kind, RotationPlan::kRotate180);
  // 90 degrees transposes a square image, or any image with expand...
  EXPECT_EQ(PlanRotation(90, 3, 3, false).kind, RotationPlan::kRotate90);
  const RotationPlan expanded = PlanRotation(-90, 4, 3, true);
  EXPECT_EQ(expanded.kind, RotationPlan::kRotate270);
  EXPECT_EQ(expanded.out_w, 3);
  EXPECT_EQ(expanded.out_h, 4);
  // ...but resamples a non-square one kept at its size.
  EXPECT_EQ(PlanRotation(90, 4, 3, false).kind, RotationPlan::kAffine);
  // A center turns the shortcuts off.
  const std::pair<double, double> center{1, 1};
  EXPECT_EQ(PlanRotation(180, 4, 3, false, &center).kind, RotationPlan::kAffine);
  // Image.new('RGB', (40, 30)).rotate(30, expand=True).size is (50, 46).
  const RotationPlan grown = PlanRotation(30, 40, 30, true);
  EXPECT_EQ(grown.out_w, 50);
  EXPECT_EQ(grown.out_h, 46);
}

TEST(GeometryKernels, TransposesMoveEveryPixel) {
  // A 3x2 image (w 3, h 2) with distinct pixels, rotated counter-clockwise.
  std::vector<uint8_t> in(6 * 3, 0);
  for (int i = 0; i < 6; ++i) in[3 * i] = static_cast<uint8_t>(i);
  std::vector<uint8_t> out(in.size());
  Rotate(PlanRotation(90, 3, 2, true), in.data(), 2, 3, out.data(), Resample::kNearest, {});
  // np.rot90([[0, 1, 2], [3, 4, 5]]) is [[2, 5], [1, 4], [0, 3]].
  std::vector<int> got;
  for (size_t i = 0; i < out.size(); i += 3) got.push_back(out[i]);
  EXPECT_THAT(got, ElementsAreArray({2, 5, 1, 4, 0, 3}));
}

TEST(GeometryKernels, AffineFillsWhatItDoesNotCover) {
  // Scaling by 2 about the origin covers the top-left quarter of the output
  // with the input's top-left quarter; translated away, only the fill is left.
  std::vector<uint8_t> in(4 * 4 * 3, 50), out(in.size());
  const std::array<uint8_t, 3> fill = {1, 2, 3};
  AffineTransform(in.data(), 4, 4, out.data(), 4, 4, {1, 0, 100, 0, 1, 0}, Resample::kNearest,
                  fill);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], fill[i % 3]) << i;
  for (Resample r : {Resample::kNearest, Resample::kBilinear, Resample::kBicubic}) {
    AffineTransform(in.data(), 4, 4, out.data(), 4, 4, {1, 0, 0, 0, 1, 0}, r, fill);
    EXPECT_EQ(out, in) << static_cast<int>(r);  // the identity, on any filter
  }
}

TEST(GeometryKernels, PerspectiveCoefficientsMapEndpointsToStartpoints) {
  // Every corner moved by (+2, +1): the map back is a translation by (-2, -1).
  const std::array<std::array<int, 2>, 4> start = {{{0, 0}, {9, 0}, {9, 7}, {0, 7}}};
  std::array<std::array<int, 2>, 4> end = start;
  for (auto& p : end) p = {p[0] + 2, p[1] + 1};
  PerspectiveCoeffs c;
  ASSERT_TRUE(PerspectiveCoefficients(start, end, &c));
  const PerspectiveCoeffs want = {1, 0, -2, 0, 1, -1, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(c[i], want[i], 1e-6) << i;
  // A true perspective: each endpoint lands on its startpoint (float32 rounding).
  end = {{{1, 2}, {8, 0}, {7, 6}, {2, 7}}};
  ASSERT_TRUE(PerspectiveCoefficients(start, end, &c));
  for (int k = 0; k < 4; ++k) {
    const double x = end[k][0], y = end[k][1];
    const double d = c[6] * x + c[7] * y + 1;
    EXPECT_NEAR((c[0] * x + c[1] * y + c[2]) / d, start[k][0], 1e-4) << k;
    EXPECT_NEAR((c[3] * x + c[4] * y + c[5]) / d, start[k][1], 1e-4) << k;
  }
  // Collinear corners (a one-pixel-wide image): no map, and no NaN.
  const std::array<std::array<int, 2>, 4> line = {{{0, 0}, {0, 0}, {0, 7}, {0, 7}}};
  EXPECT_FALSE(PerspectiveCoefficients(line, line, &c));
}

TEST(GeometryKernels, PerspectiveIdentityCopiesAndHostileMapsGiveTheFill) {
  std::vector<uint8_t> in(5 * 6 * 3), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(7 * i);
  const std::array<uint8_t, 3> fill = {9, 9, 9};
  for (Resample r : {Resample::kNearest, Resample::kBilinear, Resample::kBicubic}) {
    PerspectiveTransform(in.data(), 5, 6, out.data(), {1, 0, 0, 0, 1, 0, 0, 0}, r, fill);
    EXPECT_EQ(out, in) << static_cast<int>(r);
    const double kNan = std::nan("");
    // A zero denominator on the line x + y = 2, NaN, and coordinates past any int.
    for (const PerspectiveCoeffs& c : {PerspectiveCoeffs{1, 0, 0, 0, 1, 0, -0.5, -0.5},
                                       PerspectiveCoeffs{kNan, 0, 0, 0, 1, 0, 0, 0},
                                       PerspectiveCoeffs{1e20, 0, 0, 0, 1, 0, 0, 0}}) {
      PerspectiveTransform(in.data(), 5, 6, out.data(), c, r, fill);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(out[i] == 9 || std::count(in.begin(), in.end(), out[i]) > 0 ||
                    r != Resample::kNearest)
            << i;
      }
    }
  }
}

TEST(GeometryKernels, PillowResizeKeepsFlatImagesAndCopiesAtTheSameSize) {
  // Pillow's weights sum to 1 in fixed point: a flat image stays flat at any
  // size, both filters, up and down, from a crop (rows wider than it).
  std::vector<uint8_t> in(9 * 11 * 3);
  for (size_t i = 0; i < in.size(); ++i) in[i] = i % 3 == 0 ? 200 : i % 3 == 1 ? 17 : 255;
  for (Resample r : {Resample::kBilinear, Resample::kBicubic}) {
    for (auto [h, w] : {std::pair{3, 4}, std::pair{9, 5}, std::pair{30, 2}, std::pair{1, 1}}) {
      std::vector<uint8_t> out(static_cast<size_t>(h) * w * 3);
      PillowResize(in.data() + 3 * 2, 7, 8, 11 * 3, out.data(), h, w, r);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], in[i % 3]) << static_cast<int>(r) << " " << h << "x" << w << " " << i;
      }
    }
    std::vector<uint8_t> varied(in.size()), copy(in.size());
    for (size_t i = 0; i < varied.size(); ++i) varied[i] = static_cast<uint8_t>(i * 37);
    PillowResize(varied.data(), 9, 11, 11 * 3, copy.data(), 9, 11, r);
    EXPECT_EQ(copy, varied);
  }
}

TEST(GeometryOps, BadParametersNameTheField) {
  testing::ExpectSpecErrors({
      {"pad {}", "padding: one value, two ([left/right, top/bottom]) or four"},
      {"pad { padding: [1, 2, 3] }", "got 3"},
      {"pad { padding: -1 }", "padding: each side must be 0 to 65536, got -1"},
      {"pad { padding: 70000 }", "padding: each side must be 0 to 65536, got 70000"},
      {"pad { padding: 1 fill: 256 }", "fill: must be 0 to 255, got 256"},
      {"pad { padding: 1 fill: [1, 2] }", "fill: one value (gray) or three (R, G, B), got 2"},
      {"random_crop {}", "size: set a positive size, or height and width"},
      {"random_crop { size: 8 height: 4 }", "size: set a positive size, or height and width"},
      {"random_crop { size: 8 padding: [1, 2, 3] }", "padding: one value"},
      {"random_rotation {}", "degrees: one finite value d >= 0"},
      {"random_rotation { degrees: -5 }", "degrees: one finite value d >= 0"},
      {"random_rotation { degrees: [10, 5] }", "got [10, 5]"},
      {"random_rotation { degrees: nan }", "degrees: one finite value"},
      {"random_rotation { degrees: [0, inf] }", "degrees: one finite value"},
      {"random_rotation { degrees: 5 center: [1] }", "center: two finite values [x, y]"},
      {"random_rotation { degrees: 5 center: [1, nan] }", "center: two finite values"},
      {"random_rotation { degrees: 5 interpolation: INTERPOLATION_LANCZOS }",
       "interpolation: INTERPOLATION_LANCZOS resamples only in resize and random_resized_crop"},
      {"random_affine { degrees: 5 translate: [0.5, 1.5] }", "translate: two values [a, b]"},
      {"random_affine { degrees: 5 scale: [0, 1] }", "scale: two values [min, max], 0 < min"},
      {"random_affine { degrees: 5 scale: [1] }", "scale: two values"},
      {"random_affine { degrees: 5 scale: [1e-300, 1] }", "positive and finite as float32"},
      {"random_affine { degrees: 5 shear: [1, 2, 3] }", "shear: one finite value d >= 0"},
      {"random_affine { degrees: 5 shear: [1, 2, 4, 3] }", "got [4, 3]"},
      {"random_affine { degrees: 5 interpolation: INTERPOLATION_NEAREST fill: -1 }", "fill:"},
      {"random_perspective { distortion_scale: 1.5 }", "distortion_scale: must be in [0, 1]"},
      {"random_perspective { distortion_scale: nan }", "distortion_scale: must be in [0, 1]"},
      {"random_perspective { p: -1 }", "p: must be in [0, 1], got -1"},
      {"random_perspective { fill: [1, 2] }", "fill: one value (gray) or three"},
  });
}

TEST(GeometryKernels, HostileMatricesGiveTheFill) {
  // Coordinates past any int (a shear near 90 degrees, a far centre) or NaN:
  // Pillow's casts would overflow; here every such pixel is the fill.
  std::vector<uint8_t> in(6 * 5 * 3, 50), out(in.size());
  const std::array<uint8_t, 3> fill = {9, 9, 9};
  const double kHuge = 1e20, kNan = std::nan("");
  for (const AffineMatrix& m :
       {AffineMatrix{kHuge, 0, 0, 0, 1, 0}, AffineMatrix{1, kHuge, -kHuge, kHuge, 1, 0},
        AffineMatrix{kNan, 0, 0, 0, 1, 0}, AffineMatrix{1, 0, kNan, 0, 1, kNan},
        AffineMatrix{-kHuge, 0.5, 0, 0.5, -kHuge, 0}}) {
    for (Resample r : {Resample::kNearest, Resample::kBilinear, Resample::kBicubic}) {
      AffineTransform(in.data(), 5, 6, out.data(), 5, 6, m, r, fill);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(out[i] == 9 || out[i] == 50) << i;  // never garbage
      }
    }
  }
  auto p = MakePipeline(
      "stages { decode {} } stages { random_affine { degrees: 0 shear: [89.99999999, "
      "89.99999999] } } stages { random_rotation { degrees: 10 center: [1e300, -1e300] } }");
  auto result = RunPipeline(*p, testing::SolidPng(7, 5, 3, 8, 1, 2, 3));
  EXPECT_TRUE(result.status.ok()) << result.status;
}

TEST(GeometryOps, OutputsOverMaxPixelsAreRefusedBeforeAllocating) {
  const std::vector<uint8_t> png = testing::SolidPng(4, 4, 3, 8, 1, 2, 3);
  DecodeOptions decode;
  decode.max_pixels = 10'000;
  // A fixed output size over the limit is refused when the pipeline is built
  // (Pipeline::Create); sizes that depend on the image, when it runs.
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "stages { decode {} } stages { random_crop { size: 5000 pad_if_needed: true } }", &spec));
  PipelineOptions options;
  options.decode = decode;
  EXPECT_THAT(Pipeline::Create(spec, options).status().message(), HasSubstr("--max-pixels"));
  for (const char* stage :
       {"pad { padding: 60000 }",
        "random_rotation { degrees: [30, 30] expand: true } } stages { pad { padding: 48 }"}) {
    auto p = MakePipeline(absl::StrCat("stages { decode {} } stages { ", stage, " }"), 0, decode);
    auto out = RunPipeline(*p, png);
    EXPECT_EQ(out.status.code(), absl::StatusCode::kResourceExhausted) << stage;
    EXPECT_THAT(out.status.message(), HasSubstr("--max-pixels")) << stage;
  }
}

TEST(RandomCrop, ATooSmallImageIsAnErrorUnlessPadded) {
  const std::vector<uint8_t> png = testing::SolidPng(4, 3, 3, 8, 1, 2, 3);
  auto strict = MakePipeline("stages { decode {} } stages { random_crop { size: 5 } }");
  auto out = RunPipeline(*strict, png);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status.message(),
              HasSubstr("the image is 4x3 after padding, smaller than the 5x5 crop"));
  auto padded = MakePipeline(
      "stages { decode {} } stages { random_crop { size: 5 pad_if_needed: true fill: 9 } }");
  auto ok = RunPipeline(*padded, png);
  ASSERT_TRUE(ok.status.ok()) << ok.status;
  EXPECT_EQ(ok.bytes.size(), 5u * 5 * 3);
}

TEST(RandomCrop, DrawsEveryPositionUniformly) {
  // A 6x1 strip whose red channel is x, cropped to 4x1: left is uniform on
  // {0, 1, 2}; 3000 draws give about 1000 each (sd 26).
  cv::Mat strip(1, 6, CV_8UC3);
  for (int x = 0; x < 6; ++x) strip.at<cv::Vec3b>(0, x) = cv::Vec3b(0, 0, x);
  std::vector<uint8_t> png;
  ASSERT_TRUE(cv::imencode(".png", strip, png));
  auto p = MakePipeline("stages { decode {} } stages { random_crop { height: 1 width: 4 } }",
                        /*seed=*/2);
  int counts[3] = {};
  for (int64_t i = 0; i < 3000; ++i) {
    const int left = RunPipeline(*p, png, i).bytes[0];
    ASSERT_LE(left, 2);
    ++counts[left];
  }
  for (int c : counts) {
    EXPECT_GT(c, 1000 - 4 * 26);
    EXPECT_LT(c, 1000 + 4 * 26);
  }
}

TEST(RandomRotation, DrawsTheAngleUniformly) {
  // A 60x6 strip rotated by an angle uniform in [0, 360), with expand: its
  // bounding box (60|cos| + 6|sin| by 60|sin| + 6|cos|) is wider than tall
  // exactly when the angle is within 45 degrees of 0 or 180, half the
  // circle; of 1000 draws the wide and the tall ones differ by about 0
  // (sd 32). Many distinct sizes show many distinct angles.
  auto p = MakePipeline(
      "stages { decode {} } stages { random_rotation { degrees: [0, 360] expand: true } }",
      /*seed=*/8);
  const std::vector<uint8_t> png = testing::SolidPng(60, 6, 3, 8, 200, 200, 200);
  std::set<std::pair<int64_t, int64_t>> sizes;
  int wide = 0, tall = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    auto out = RunPipeline(*p, png, i);
    ASSERT_TRUE(out.status.ok()) << out.status;
    sizes.insert({out.shape[0], out.shape[1]});
    wide += out.shape[1] > out.shape[0];
    tall += out.shape[1] < out.shape[0];
  }
  EXPECT_GT(sizes.size(), 50u);
  EXPECT_GT(wide + tall, 950);
  EXPECT_LT(std::abs(wide - tall), 4 * 32);
}

// v2's RandomZoomOut: with p 1, a 20 x 10 gray image lands whole on a
// canvas r times its size (r in [2, 3]) at some offset, the rest the fill;
// canvases and offsets vary per sample; p 0 leaves the image alone.
TEST(RandomZoomOut, PlacesTheImageWholeOnAFilledCanvas) {
  const std::vector<uint8_t> png = testing::SolidPng(20, 10, 3, 8, 200, 200, 200);
  auto p = MakePipeline(
      "stages { decode {} } stages { random_zoom_out { fill: [1, 2, 3] side_min: 2 "
      "side_max: 3 p: 1 } }",
      7);
  std::set<std::vector<int64_t>> canvases;
  for (int64_t i = 0; i < 50; ++i) {
    const testing::Output out = RunPipeline(*p, png, i);
    ASSERT_TRUE(out.status.ok()) << out.status;
    const int64_t h = out.shape[0], w = out.shape[1];
    ASSERT_GE(w, 40);
    ASSERT_LE(w, 60);
    ASSERT_NEAR(static_cast<double>(h), w / 2.0, 1.0) << "one factor for both sides";
    int64_t image = 0, fill = 0;
    for (size_t k = 0; k < out.bytes.size(); k += 3) {
      const bool gray = out.bytes[k] == 200 && out.bytes[k + 1] == 200 && out.bytes[k + 2] == 200;
      const bool filled = out.bytes[k] == 1 && out.bytes[k + 1] == 2 && out.bytes[k + 2] == 3;
      ASSERT_TRUE(gray || filled);
      image += gray;
      fill += filled;
    }
    EXPECT_EQ(image, 200) << "the whole image, once";
    EXPECT_EQ(image + fill, h * w);
    canvases.insert({h, w});
  }
  EXPECT_GT(canvases.size(), 5u);
  auto never = MakePipeline("stages { decode {} } stages { random_zoom_out { p: 0 } }");
  EXPECT_EQ(RunPipeline(*never, png).shape, (Shape{10, 20, 3}));
  testing::ExpectSpecErrors({
      {"random_zoom_out { side_min: 0.5 }", "need 1 <= side_min <= side_max <= 100"},
      {"random_zoom_out { side_min: 3 side_max: 2 }", "need 1 <= side_min"},
      {"random_zoom_out { side_max: 1000 }", "side_max <= 100, got 1, 1000"},
      {"random_zoom_out { p: 2 }", "p: must be in [0, 1]"},
      {"random_zoom_out { fill: [1, 2] }", "fill"},
  });
}

// A w x h PNG whose pixel (x, y) is RGB (x, y, 7): a crop shows where it came from.
std::vector<uint8_t> CoordinatePng(int w, int h) {
  cv::Mat bgr(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) bgr.at<cv::Vec3b>(y, x) = cv::Vec3b(7, y, x);
  }
  std::vector<uint8_t> png;
  EXPECT_TRUE(cv::imencode(".png", bgr, png));
  return png;
}

// torchvision's five_crop and ten_crop, written out: crop k's pixel (i, j)
// is the source's (x, y).
TEST(MultiCrop, CropsAreTorchvisionsInItsOrder) {
  const int w = 7, h = 5, cw = 4, ch = 3;
  // Corners, then the centre at int(round((7 - 4) / 2)) = 2 (half to even)
  // and int(round((5 - 3) / 2)) = 1.
  const int left[5] = {0, 3, 0, 3, 2}, top[5] = {0, 0, 2, 2, 1};
  for (const char* flip : {"", "vertical_flip: true"}) {
    for (const char* op : {"five_crop", "ten_crop"}) {
      const bool ten = std::string(op) == "ten_crop", vertical = *flip != 0;
      if (!ten && vertical) continue;
      auto p = MakePipeline(absl::StrCat("stages { decode {} } stages { ", op,
                                         " { height: 3 width: 4 ", flip, " } }"));
      auto out = RunPipeline(*p, CoordinatePng(w, h));
      ASSERT_TRUE(out.status.ok()) << out.status;
      const int n = ten ? 10 : 5;
      ASSERT_THAT(out.shape, ElementsAreArray({n, ch, cw, 3}));
      for (int k = 0; k < n; ++k) {
        for (int i = 0; i < ch; ++i) {
          for (int j = 0; j < cw; ++j) {
            int x = left[k % 5] + j, y = top[k % 5] + i;
            if (k >= 5 && vertical) y = h - 1 - y;  // a crop of the mirrored image
            if (k >= 5 && !vertical) x = w - 1 - x;
            const uint8_t* px = &out.bytes[((static_cast<size_t>(k) * ch + i) * cw + j) * 3];
            ASSERT_EQ(px[0], x) << op << flip << " crop " << k << " at " << i << "," << j;
            ASSERT_EQ(px[1], y) << op << flip << " crop " << k << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(MultiCrop, OpsAfterTheCropsTakeEachWithOneDraw) {
  auto p = MakePipeline(
      "stages { decode {} } stages { ten_crop { size: 2 } } "
      "stages { normalize { mean: [0, 0, 0] std: [1, 1, 1] } }");
  auto out = RunPipeline(*p, CoordinatePng(3, 3));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(out.shape, ElementsAreArray({10, 3, 2, 2}));
  // Crop 1 (top-right) as CHW: red is x (1, 2 in each row), over 255.
  const float* t = reinterpret_cast<const float*>(out.bytes.data()) + 12;
  EXPECT_THAT(std::vector<float>(t, t + 4),
              ElementsAreArray({1 / 255.f, 2 / 255.f, 1 / 255.f, 2 / 255.f}));
  // An image op takes the stack crop by crop (pipeline/ops/per_frame.h):
  // flipped, crop 1's red reads 2, 1.
  auto flipped = MakePipeline(
      "stages { decode {} } stages { five_crop { size: 2 } } "
      "stages { random_horizontal_flip { p: 1 } }");
  out = RunPipeline(*flipped, CoordinatePng(3, 3));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_THAT(out.shape, ElementsAreArray({5, 2, 2, 3}));
  EXPECT_EQ(out.bytes[12 + 0], 2);
  EXPECT_EQ(out.bytes[12 + 3], 1);
  // A stack of each crop is refused.
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "stages { decode {} } stages { five_crop { size: 2 } } stages { five_crop { size: 1 } }",
      &spec));
  EXPECT_THAT(Pipeline::Create(spec, PipelineOptions()).status().message(),
              HasSubstr("expects one image but gets a stack of them, uint8 image [5, 2, 2, 3]"));
}

TEST(MultiCrop, AnImageSmallerThanTheCropIsAnError) {
  auto p = MakePipeline("stages { decode {} } stages { five_crop { height: 4 width: 2 } }");
  auto out = RunPipeline(*p, CoordinatePng(3, 3));
  EXPECT_EQ(out.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status.message(),
              HasSubstr("five_crop: the 2x4 crop is bigger than the 3x3 image"));
  testing::ExpectSpecErrors({
      {"ten_crop {}", "output size 0x0 must be positive"},
      {"five_crop { size: 3 width: 2 }", "set either size or height and width"},
  });
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "stages { decode {} } stages { center_crop { size: 8 } } stages { ten_crop { size: 9 } }",
      &spec));
  EXPECT_THAT(Pipeline::Create(spec, PipelineOptions()).status().message(),
              HasSubstr("ten_crop: the 9x9 crop is bigger than the 8x8 image"));
}

}  // namespace
}  // namespace prepflow
