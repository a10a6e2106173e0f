// The decoder: region/scaled decoding against full decoding, odd but valid
// inputs, and bad inputs that must be reported, never crash.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "opencv2/core.hpp"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "pipeline/core/image_decode.h"
#include "pipeline/core/rng.h"
#include "pipeline/data/synthetic.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;
using ::testing::HasSubstr;

struct Decoded {
  absl::Status status;
  cv::Mat rgb;
  ImageView view;
};

Decoded DecodeBytes(const std::vector<uint8_t>& bytes, const DecodeHint* hint = nullptr,
                    DecodeOptions options = DecodeOptions()) {
  ImageDecoder decoder;
  Buffer buf;
  DecodedImage image;
  auto plan = [&](int, int) { return *hint; };
  const DecodePlanner planner(plan);
  Decoded d;
  d.status =
      decoder.Decode(bytes.data(), bytes.size(), options, hint ? &planner : nullptr, &buf, &image);
  if (d.status.ok()) {
    d.rgb = cv::Mat(image.height, image.width, CV_8UC3, image.data).clone();
    d.view = image.view;
  }
  return d;
}

double MeanAbsDiff(const cv::Mat& a, const cv::Mat& b) {
  cv::Mat diff;
  cv::absdiff(a, b, diff);
  const cv::Scalar m = cv::mean(diff);
  return (m[0] + m[1] + m[2]) / 3;
}

TEST(Decode, FullImageMatchesOpenCV) {
  const std::vector<uint8_t> jpeg = testing::Jpeg(320, 240, 4);
  Decoded d = DecodeBytes(jpeg);
  ASSERT_TRUE(d.status.ok()) << d.status;
  ASSERT_EQ(d.rgb.size(), cv::Size(320, 240));
  cv::Mat bgr = cv::imdecode(jpeg, cv::IMREAD_COLOR), rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  // Same libjpeg-turbo, same ISLOW IDCT and upsampling: identical pixels.
  EXPECT_EQ(cv::norm(d.rgb, rgb, cv::NORM_INF), 0);
}

TEST(Decode, RegionAtFullScaleIsExactlyTheFullDecodeRegion) {
  const std::vector<uint8_t> jpeg = testing::Jpeg(640, 480, 5);
  Decoded full = DecodeBytes(jpeg);
  ASSERT_TRUE(full.status.ok());
  const DecodeHint hint{123, 77, 301, 250, 301, 250, false};
  Decoded roi = DecodeBytes(jpeg, &hint);
  ASSERT_TRUE(roi.status.ok()) << roi.status;
  EXPECT_EQ(roi.view.scale_denom, 1);
  EXPECT_LE(roi.view.x0, 123);  // widened left to an iMCU boundary
  EXPECT_EQ(roi.view.y0, 77);
  ASSERT_GE(roi.view.x0 + roi.rgb.cols, 123 + 301);
  ASSERT_EQ(roi.rgb.rows, 250);
  const cv::Mat expected = full.rgb(cv::Rect(123, 77, 301, 250));
  EXPECT_EQ(cv::norm(roi.rgb(cv::Rect(123 - roi.view.x0, 0, 301, 250)), expected, cv::NORM_INF), 0);
  EXPECT_LT(roi.rgb.total(), full.rgb.total());
}

TEST(Decode, PicksTheLargestDctScaleThatKeepsTheTargetSize) {
  const std::vector<uint8_t> jpeg = testing::Jpeg(1600, 1200, 6);
  const DecodeHint whole{0, 0, 1600, 1200, 224, 224, false};
  EXPECT_EQ(DecodeBytes(jpeg, &whole).view.scale_denom, 4);  // 1200/4 = 300 >= 224 > 150
  const DecodeHint small{0, 0, 1600, 1200, 100, 100, false};
  EXPECT_EQ(DecodeBytes(jpeg, &small).view.scale_denom, 8);
  const DecodeHint tight{0, 0, 500, 500, 224, 224, false};
  Decoded d = DecodeBytes(jpeg, &tight);
  EXPECT_EQ(d.view.scale_denom, 2);
  EXPECT_GE(d.rgb.rows, 224);
  const DecodeHint none{0, 0, 300, 300, 224, 224, false};
  EXPECT_EQ(DecodeBytes(jpeg, &none).view.scale_denom, 1);
}

// The tolerance of the fast path: region + DCT-scaled decode, then the crop
// resize, against full decode + crop + resize of the same crop.
// Exact (the default fidelity): decoding only the crop's region gives the
// bytes of a full decode, then the crop and Pillow's filter.
TEST(Decode, ExactRegionDecodeEqualsFullDecodeThenResize) {
  const std::string pipeline = R"pb(stages { decode {} }
                                    stages { random_resized_crop { size: 224 } })pb";
  DecodeOptions whole;
  whole.use_roi = false;
  auto region_p = MakePipeline(pipeline, 11);
  auto whole_p = MakePipeline(pipeline, 11, whole);
  for (int i = 0; i < 12; ++i) {
    const std::vector<uint8_t> jpeg = testing::Jpeg(1200 + 16 * i, 900 + 8 * i, 100 + i, 92);
    auto a = RunPipeline(*region_p, jpeg, i);
    auto b = RunPipeline(*whole_p, jpeg, i);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    EXPECT_EQ(RunPipeline(*region_p, jpeg, i, 0, 1).view.scale_denom, 1);
    EXPECT_EQ(a.bytes, b.bytes) << "image " << i;
  }
}

TEST(Decode, ScaledRegionDecodeIsCloseToFullDecodeThenResize) {
  const std::string pipeline =
      R"pb(stages { decode {} }
           stages { random_resized_crop { size: 224 fidelity: FIDELITY_FAST } })pb";
  DecodeOptions slow;
  slow.use_roi = false;
  slow.use_dct_scaling = false;
  auto fast_p = MakePipeline(pipeline, 11);
  auto slow_p = MakePipeline(pipeline, 11, slow);
  double worst = 0, total = 0;
  int scaled = 0;
  for (int i = 0; i < 24; ++i) {
    const std::vector<uint8_t> jpeg = testing::Jpeg(1200 + 16 * i, 900 + 8 * i, 100 + i, 92);
    auto a = RunPipeline(*fast_p, jpeg, i);
    auto b = RunPipeline(*slow_p, jpeg, i);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    scaled += RunPipeline(*fast_p, jpeg, i, 0, 1).view.scale_denom > 1;
    const double mad = MeanAbsDiff(cv::Mat(224, 224, CV_8UC3, a.bytes.data()),
                                   cv::Mat(224, 224, CV_8UC3, b.bytes.data()));
    worst = std::max(worst, mad);
    total += mad;
  }
  EXPECT_GT(scaled, 12);  // the test exercises DCT scaling, not just ROI
  // Stated tolerance: mean absolute difference per channel value at most 4
  // (of 255) on any image, and at most 2.5 on average. DCT-domain scaling is an
  // area filter; OpenCV's bilinear kernel is not, so they differ slightly at
  // edges and in fine texture.
  EXPECT_LT(worst, 4.0);
  EXPECT_LT(total / 24, 2.5);
}

TEST(Decode, GrayscaleBecomesThreeEqualChannels) {
  const std::vector<uint8_t> gray = SyntheticImage(64, 48, 3, 0, SyntheticFormat::kGrayJpeg);
  Decoded d = DecodeBytes(gray);
  ASSERT_TRUE(d.status.ok()) << d.status;
  ASSERT_EQ(d.rgb.channels(), 3);
  std::vector<cv::Mat> ch;
  cv::split(d.rgb, ch);
  EXPECT_EQ(cv::norm(ch[0], ch[1], cv::NORM_INF), 0);
  EXPECT_EQ(cv::norm(ch[1], ch[2], cv::NORM_INF), 0);
}

TEST(Decode, CmykConvertsLikePillow) {
  // Stored inverted (Adobe): c=255-C etc. Pure "C=0 M=0 Y=0 K=0" ink is white.
  Decoded white = DecodeBytes(testing::CmykJpeg(16, 16, 255, 255, 255, 255));
  ASSERT_TRUE(white.status.ok()) << white.status;
  EXPECT_NEAR(white.rgb.at<cv::Vec3b>(8, 8)[0], 255, 2);
  // Stored c=255 (no cyan), m=0 (full magenta), y=255, k=255 (no black):
  // R = 255*255/255, G = 0, B = 255.
  Decoded magenta = DecodeBytes(testing::CmykJpeg(16, 16, 255, 0, 255, 255));
  ASSERT_TRUE(magenta.status.ok());
  const cv::Vec3b px = magenta.rgb.at<cv::Vec3b>(8, 8);
  EXPECT_NEAR(px[0], 255, 3);
  EXPECT_NEAR(px[1], 0, 3);
  EXPECT_NEAR(px[2], 255, 3);
}

TEST(Decode, ProgressivePngRgba16BitAndBmpDecode) {
  const std::vector<uint8_t> prog =
      SyntheticImage(300, 200, 2, 90, SyntheticFormat::kProgressiveJpeg);
  Decoded p = DecodeBytes(prog);
  ASSERT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.rgb.size(), cv::Size(300, 200));
  const DecodeHint hint{50, 60, 100, 90, 100, 90, false};
  Decoded pr = DecodeBytes(prog, &hint);
  ASSERT_TRUE(pr.status.ok()) << pr.status;
  EXPECT_EQ(cv::norm(pr.rgb(cv::Rect(50 - pr.view.x0, 0, 100, 90)),
                     p.rgb(cv::Rect(50, 60, 100, 90)), cv::NORM_INF),
            0);

  Decoded rgba = DecodeBytes(testing::SolidPng(5, 4, 4, 8, 10, 20, 30));
  ASSERT_TRUE(rgba.status.ok()) << rgba.status;
  EXPECT_EQ(rgba.rgb.at<cv::Vec3b>(0, 0), cv::Vec3b(10, 20, 30));
  Decoded deep = DecodeBytes(testing::SolidPng(5, 4, 3, 16, 10, 20, 30));
  ASSERT_TRUE(deep.status.ok()) << deep.status;
  EXPECT_EQ(deep.rgb.at<cv::Vec3b>(3, 4), cv::Vec3b(10, 20, 30));
  Decoded gray = DecodeBytes(testing::SolidPng(5, 4, 1, 8, 77, 0, 0));
  ASSERT_TRUE(gray.status.ok());
  EXPECT_EQ(gray.rgb.at<cv::Vec3b>(1, 1), cv::Vec3b(77, 77, 77));

  cv::Mat bmp_img(3, 7, CV_8UC3, cv::Scalar(30, 20, 10));  // BGR
  std::vector<uint8_t> bmp;
  cv::imencode(".bmp", bmp_img, bmp);
  Decoded b = DecodeBytes(bmp);
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_EQ(b.rgb.at<cv::Vec3b>(2, 6), cv::Vec3b(10, 20, 30));
}

TEST(Decode, TinyAndExtremeAspectImagesGoThroughImagenetTrain) {
  auto spec = LoadPipelineSpec("imagenet-train");
  ASSERT_TRUE(spec.ok());
  auto p = Pipeline::Create(*spec, PipelineOptions());
  ASSERT_TRUE(p.ok());
  for (auto [w, h] : {std::pair{1, 1}, {4000, 3}, {3, 4000}, {2, 9}}) {
    for (int64_t i = 0; i < 4; ++i) {
      auto out = RunPipeline(**p, testing::Jpeg(w, h, 7), i);
      ASSERT_TRUE(out.status.ok()) << w << "x" << h << ": " << out.status;
      EXPECT_EQ(out.shape, (Shape{3, 224, 224}));
    }
  }
}

TEST(Decode, TruncatedJpegIsAnError) {
  std::vector<uint8_t> jpeg = testing::Jpeg(200, 150, 8);
  jpeg.resize(jpeg.size() * 6 / 10);
  Decoded d = DecodeBytes(jpeg);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(d.status.message(), HasSubstr("truncated JPEG"));
  // Also when the region wanted lies entirely before the cut.
  const DecodeHint top{0, 0, 50, 20, 50, 20, false};
  EXPECT_EQ(DecodeBytes(jpeg, &top).status.code(), absl::StatusCode::kDataLoss);
}

TEST(Decode, CorruptEntropyDataIsAnError) {
  std::vector<uint8_t> jpeg = testing::Jpeg(256, 256, 9);
  // Overwrite the middle of the scan with a stray marker and garbage; the
  // end-of-image marker stays, so only the decoder can notice.
  const size_t mid = jpeg.size() / 2;
  for (size_t i = 0; i < 64; ++i) jpeg[mid + i] = static_cast<uint8_t>(i * 37);
  jpeg[mid] = 0xFF;
  jpeg[mid + 1] = 0xD0 + 5;  // out-of-sequence restart marker
  Decoded d = DecodeBytes(jpeg);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDataLoss) << d.status;
  EXPECT_THAT(d.status.message(), HasSubstr("corrupt JPEG"));
}

// An image whose pixels differ everywhere (so a swapped channel or row
// shows), encoded by OpenCV as `ext` with `params`.
std::vector<uint8_t> Encoded(const std::string& ext, int w, int h, std::vector<int> params = {}) {
  cv::Mat bgr(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      bgr.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<uint8_t>(x * 7 + y),
                                          static_cast<uint8_t>(y * 5), static_cast<uint8_t>(x ^ y));
    }
  }
  std::vector<uint8_t> out;
  EXPECT_TRUE(cv::imencode(ext, bgr, out, params)) << ext;
  return out;
}

// Every format an ImageFolder indexes decodes: PPM, PGM, TIFF and WebP
// (lossless here), to the same RGB pixels as the PNG of the same image.
TEST(Decode, PpmPgmTiffAndWebpDecodeLikePng) {
  const Decoded png = DecodeBytes(Encoded(".png", 37, 23));
  ASSERT_TRUE(png.status.ok()) << png.status;
  for (const auto& [ext, params] : std::vector<std::pair<std::string, std::vector<int>>>{
           {".ppm", {}},
           {".ppm", {cv::IMWRITE_PXM_BINARY, 0}},  // ASCII P3
           {".tiff", {}},
           {".webp", {cv::IMWRITE_WEBP_QUALITY, 101}}}) {  // > 100: lossless
    const Decoded d = DecodeBytes(Encoded(ext, 37, 23, params));
    ASSERT_TRUE(d.status.ok()) << ext << ": " << d.status;
    EXPECT_EQ(cv::norm(d.rgb, png.rgb, cv::NORM_INF), 0) << ext;
  }
  // A graymap: three equal channels.
  cv::Mat gray(5, 6, CV_8UC1, cv::Scalar(99));
  std::vector<uint8_t> pgm;
  ASSERT_TRUE(cv::imencode(".pgm", gray, pgm));
  const Decoded g = DecodeBytes(pgm);
  ASSERT_TRUE(g.status.ok()) << g.status;
  EXPECT_EQ(g.rgb.at<cv::Vec3b>(4, 5), cv::Vec3b(99, 99, 99));
  // Lossy WebP: its size, and colours near the original's.
  const Decoded lossy = DecodeBytes(Encoded(".webp", 37, 23, {cv::IMWRITE_WEBP_QUALITY, 90}));
  ASSERT_TRUE(lossy.status.ok()) << lossy.status;
  EXPECT_EQ(lossy.rgb.size(), cv::Size(37, 23));
}

// Each header's size is checked against max_pixels before OpenCV allocates
// anything; headers that lie or are cut short are DataLoss, never a crash.
TEST(Decode, PpmTiffAndWebpHeadersAreCheckedBeforeDecoding) {
  DecodeOptions options;
  options.max_pixels = 100;
  for (const std::string ext : {".ppm", ".tiff", ".webp"}) {
    const Decoded d = DecodeBytes(Encoded(ext, 37, 23), nullptr, options);
    EXPECT_EQ(d.status.code(), absl::StatusCode::kResourceExhausted) << ext << d.status;
    EXPECT_THAT(d.status.message(), HasSubstr("37x23")) << ext;
  }
  // A PPM header claiming 60000 x 60000 with 12 bytes of pixels.
  const std::string huge = "P6\n# a comment\n60000 60000\n255\n0123456789ab";
  const Decoded h = DecodeBytes(std::vector<uint8_t>(huge.begin(), huge.end()));
  EXPECT_EQ(h.status.code(), absl::StatusCode::kResourceExhausted) << h.status;
  EXPECT_THAT(h.status.message(), HasSubstr("60000x60000"));
  for (const std::string bad : {"P6\n", "P6 12", "P6 x 3\n255\n", "P6 99999999999 2 255 "}) {
    EXPECT_EQ(DecodeBytes(std::vector<uint8_t>(bad.begin(), bad.end())).status.code(),
              absl::StatusCode::kDataLoss)
        << bad;
  }
  // A TIFF whose directory lies past the end, and one cut in its directory.
  std::vector<uint8_t> tiff = Encoded(".tiff", 37, 23);
  std::vector<uint8_t> far = tiff;
  far[4] = far[5] = far[6] = 0x7F;
  EXPECT_EQ(DecodeBytes(far).status.code(), absl::StatusCode::kDataLoss);
  const uint32_t ifd =
      tiff[4] | tiff[5] << 8 | tiff[6] << 16 | static_cast<uint32_t>(tiff[7]) << 24;
  tiff.resize(std::min<size_t>(tiff.size(), ifd + 6));
  EXPECT_EQ(DecodeBytes(tiff).status.code(), absl::StatusCode::kDataLoss);
  // WebP: cut short, and a chunk it does not know.
  std::vector<uint8_t> webp = Encoded(".webp", 37, 23);
  EXPECT_EQ(DecodeBytes({webp.begin(), webp.begin() + 20}).status.code(),
            absl::StatusCode::kDataLoss);
  webp[12] = 'X';
  EXPECT_THAT(DecodeBytes(webp).status.message(), HasSubstr("WebP without a VP8"));
  // Truncated pixel data after a good header: the format is named.
  std::vector<uint8_t> ppm = Encoded(".ppm", 37, 23);
  ppm.resize(ppm.size() / 2);
  const Decoded cut = DecodeBytes(ppm);
  EXPECT_EQ(cut.status.code(), absl::StatusCode::kDataLoss);
}

TEST(Decode, GarbageEmptyAndBadHeadersAreErrors) {
  EXPECT_THAT(DecodeBytes({}).status.message(), HasSubstr("empty file"));
  Decoded junk = DecodeBytes({'<', 'h', 't', 'm', 'l', '>', 1, 2, 3});
  EXPECT_EQ(junk.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(junk.status.message(), HasSubstr("not a supported image"));
  EXPECT_THAT(junk.status.message(), HasSubstr("3c 68 74 6d"));
  // A JPEG signature followed by nonsense.
  Decoded bad = DecodeBytes({0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x02, 0xFF, 0xD9});
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kDataLoss) << bad.status;
  std::vector<uint8_t> png = testing::SolidPng(40, 40, 3, 8, 1, 2, 3);
  png.resize(png.size() / 2);
  EXPECT_EQ(DecodeBytes(png).status.code(), absl::StatusCode::kDataLoss);
}

// Patches the SOF0 frame size of a baseline JPEG.
std::vector<uint8_t> WithFrameSize(std::vector<uint8_t> jpeg, int w, int h) {
  for (size_t i = 2; i + 8 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC2)) {
      jpeg[i + 5] = static_cast<uint8_t>(h >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(h);
      jpeg[i + 7] = static_cast<uint8_t>(w >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(w);
      return jpeg;
    }
  }
  ADD_FAILURE() << "no SOF marker";
  return jpeg;
}

TEST(Decode, HeaderOverMaxPixelsIsRefusedBeforeDecoding) {
  const std::vector<uint8_t> huge = WithFrameSize(testing::Jpeg(64, 64, 1), 60000, 60000);
  DecodeOptions options;
  options.max_pixels = 64'000'000;
  Decoded d = DecodeBytes(huge, nullptr, options);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(d.status.message(), HasSubstr("60000x60000"));
  EXPECT_THAT(d.status.message(), HasSubstr("--max-pixels"));
  options.max_pixels = 1000;
  EXPECT_EQ(DecodeBytes(testing::Jpeg(64, 64, 1), nullptr, options).status.code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DecodeBytes(testing::SolidPng(64, 64, 3, 8, 0, 0, 0), nullptr, options).status.code(),
            absl::StatusCode::kResourceExhausted);
}

// A progressive JPEG of 192 scans costs a pass over the image per scan; past
// the limit it is refused (with the flag named) rather than decoded, and the
// same decoder then decodes ordinary files, progressive ones included.
TEST(Decode, ProgressiveJpegsWithTooManyScansAreRefused) {
  const std::vector<uint8_t> bomb = testing::ManyScanJpeg(96, 64);
  DecodeOptions options;
  ASSERT_EQ(options.max_jpeg_scans, 100);
  ImageDecoder decoder;
  Buffer buf;
  DecodedImage image;
  absl::Status s = decoder.Decode(bomb.data(), bomb.size(), options, nullptr, &buf, &image);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("more than 100 scans (--max-jpeg-scans)"));
  const std::vector<uint8_t> progressive =
      SyntheticImage(96, 64, 3, 40, SyntheticFormat::kProgressiveJpeg);
  EXPECT_TRUE(
      decoder.Decode(progressive.data(), progressive.size(), options, nullptr, &buf, &image).ok());
  options.max_jpeg_scans = 200;
  s = decoder.Decode(bomb.data(), bomb.size(), options, nullptr, &buf, &image);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(image.width, 96);
}

// A PNG header claiming 4294967295 x 4294967295: the pixel count overflows
// int64, which the check once multiplied (tests/fuzz/regressions/decode).
TEST(Decode, AHeaderWhoseAreaOverflowsIsRefused) {
  std::vector<uint8_t> png = testing::SolidPng(8, 8, 3, 8, 0, 0, 0);
  for (int i = 16; i < 24; ++i) png[i] = 0xff;  // IHDR width and height
  Decoded d = DecodeBytes(png, nullptr, DecodeOptions());
  EXPECT_EQ(d.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(d.status.message(), HasSubstr("4294967295x4294967295"));
}

// A job cannot make a process allocate more than --max-pixels allows in any
// stage: a fixed output over it is refused when the pipeline is built, and a
// resize of a thin image that would exceed it fails that sample
// (tests/fuzz/regressions/job).
TEST(Decode, StageOutputsAreHeldToMaxPixels) {
  PipelineOptions small;
  small.decode.max_pixels = 100 * 100;
  proto::PipelineSpec crop;
  crop.add_stages()->mutable_decode();
  crop.add_stages()->mutable_random_resized_crop()->set_size(15000);
  auto p = Pipeline::Create(crop, small);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("stage 1 (random_resized_crop)"));
  EXPECT_THAT(p.status().message(), HasSubstr("--max-pixels"));

  proto::PipelineSpec resize;
  resize.add_stages()->mutable_decode();
  resize.add_stages()->mutable_resize()->set_shorter_side(90);
  auto thin = Pipeline::Create(resize, small);
  ASSERT_TRUE(thin.ok()) << thin.status();
  // 200x2 px: within the limit, but its shorter side to 90 is 9000x90.
  const testing::Output out = RunPipeline(**thin, testing::Jpeg(200, 2, 1));
  EXPECT_EQ(out.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(out.status.message(), HasSubstr("--max-pixels"));
}

// Deterministic mutations of real encoder output through the whole preset:
// every result is a decoded tensor or a clean error, never a crash or hang.
TEST(Decode, MutatedInputsGiveAnImageOrACleanError) {
  auto spec = LoadPipelineSpec("imagenet-train");
  ASSERT_TRUE(spec.ok());
  auto p = Pipeline::Create(*spec, PipelineOptions());
  ASSERT_TRUE(p.ok());
  const std::vector<std::vector<uint8_t>> seeds = {
      testing::Jpeg(320, 240, 1),
      SyntheticImage(200, 300, 2, 5, SyntheticFormat::kProgressiveJpeg),
      SyntheticImage(64, 64, 3, 5, SyntheticFormat::kGrayJpeg),
      testing::SolidPng(50, 40, 4, 8, 1, 2, 3),
      Encoded(".ppm", 40, 30),
      Encoded(".tiff", 40, 30),
      Encoded(".webp", 40, 30),
      Encoded(".webp", 40, 30, {cv::IMWRITE_WEBP_QUALITY, 101})};
  SampleRng rng(123, 0, 0, 0);
  int ok = 0, errors = 0;
  for (int trial = 0; trial < 1200; ++trial) {
    std::vector<uint8_t> bytes = seeds[trial % seeds.size()];
    switch (trial % 3) {
      case 0:  // flip a few bits anywhere, headers included
        for (int k = 0; k < 1 + trial % 4; ++k) {
          bytes[rng.UniformInt(0, static_cast<int64_t>(bytes.size()) - 1)] ^=
              static_cast<uint8_t>(1u << rng.UniformInt(0, 7));
        }
        break;
      case 1:  // truncate
        bytes.resize(
            static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(bytes.size()) - 1)));
        break;
      case 2: {  // overwrite a run with random bytes
        const int64_t at = rng.UniformInt(0, static_cast<int64_t>(bytes.size()) - 1);
        for (int64_t i = at; i < std::min<int64_t>(at + 16, bytes.size()); ++i) {
          bytes[i] = static_cast<uint8_t>(rng.NextU32());
        }
        break;
      }
    }
    auto out = RunPipeline(**p, bytes, trial);
    if (out.status.ok()) {
      ++ok;
      ASSERT_EQ(out.shape, (Shape{3, 224, 224}));
    } else {
      ++errors;
      const absl::StatusCode code = out.status.code();
      ASSERT_TRUE(code == absl::StatusCode::kDataLoss ||
                  code == absl::StatusCode::kResourceExhausted)
          << out.status;
    }
  }
  EXPECT_GT(errors, 100);  // the mutations do break files...
  EXPECT_GT(ok, 10);       // ...and some survive (bit flips in pixel data)
}

TEST(Decode, OneDecoderSurvivesErrorsAndKeepsWorking) {
  ImageDecoder decoder;
  Buffer buf;
  DecodedImage image;
  const std::vector<uint8_t> good = testing::Jpeg(100, 80, 2);
  std::vector<uint8_t> truncated = good;
  truncated.resize(good.size() - 40);
  std::vector<uint8_t> corrupt = good;
  for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 32; ++i) corrupt[i] = 0xFF;
  for (int round = 0; round < 3; ++round) {
    EXPECT_FALSE(
        decoder.Decode(truncated.data(), truncated.size(), {}, nullptr, &buf, &image).ok());
    EXPECT_FALSE(decoder.Decode(corrupt.data(), corrupt.size(), {}, nullptr, &buf, &image).ok());
    ASSERT_TRUE(decoder.Decode(good.data(), good.size(), {}, nullptr, &buf, &image).ok());
    EXPECT_EQ(image.width, 100);
  }
}

}  // namespace
}  // namespace prepflow
