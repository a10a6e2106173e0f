// The video ops in pipelines: decode_video's clip sampling, the image ops
// applied to a clip frame by frame with one draw (pipeline/ops/per_frame.h),
// uniform_temporal_subsample's indices as torch's, and the same bytes at
// every cut. Clips are made here by the ffmpeg tool.
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/ops/video/video_family.h"
#include "tests/testing/ffmpeg_test.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::ExpectEveryCutSame;
using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using VideoOpsTest = testing::FfmpegTest;

// The indices torch 1.13 gives (torch.linspace(0, T - 1, n).long()), where
// float32 rounding puts them off the exact ones.
TEST(UniformTemporalIndices, AreTorchsEvenWhereFloatRoundingIsUneven) {
  EXPECT_THAT(UniformTemporalIndices(64, 16),
              ElementsAre(0, 4, 8, 12, 16, 21, 25, 29, 33, 37, 42, 46, 50, 54, 58, 63));
  EXPECT_THAT(UniformTemporalIndices(3, 15),
              ElementsAre(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2));
  EXPECT_THAT(UniformTemporalIndices(6, 16),
              ElementsAre(0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4, 4, 5));
  EXPECT_THAT(UniformTemporalIndices(4, 43),
              ElementsAreArray({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3}));
  EXPECT_THAT(UniformTemporalIndices(10, 1), ElementsAre(0));
}

// A still scene (every frame the same MJPEG picture): frames cropped,
// flipped and jittered with one draw per clip stay equal to each other,
// while clips of other samples draw other crops.
TEST_F(VideoOpsTest, ImageOpsTakeAClipWithOneDrawForAllItsFrames) {
  const std::vector<uint8_t> still = Make(
      "-f lavfi -i testsrc2=size=128x96:rate=1 -frames:v 1 -f image2pipe -c:v png - | ffmpeg "
      "-loglevel error -y -loop 1 -f image2pipe -i - -t 2 -r 10 -c:v mjpeg -q:v 2",
      "still.avi");
  auto p = MakePipeline(
      "stages { decode_video { frames: 6 stride: 3 } } "
      "stages { random_resized_crop { size: 48 } } stages { random_horizontal_flip {} } "
      "stages { color_jitter { brightness: 0.4 hue: 0.1 } } stages { normalize {} }",
      5);
  std::set<std::vector<uint8_t>> firsts;
  for (int64_t index = 0; index < 6; ++index) {
    auto out = RunPipeline(*p, still, index);
    ASSERT_TRUE(out.status.ok()) << out.status;
    ASSERT_THAT(out.shape, ElementsAre(6, 3, 48, 48));
    const size_t frame = out.bytes.size() / 6;
    const std::vector<uint8_t> first(out.bytes.begin(), out.bytes.begin() + frame);
    for (int t = 1; t < 6; ++t) {
      EXPECT_TRUE(std::equal(first.begin(), first.end(), out.bytes.begin() + frame * t))
          << "sample " << index << " frame " << t;
    }
    firsts.insert(first);
  }
  EXPECT_GT(firsts.size(), 3u);  // other samples, other draws
}

TEST_F(VideoOpsTest, EveryCutGivesTheSameClip) {
  const std::vector<uint8_t> mp4 =
      Make("-f lavfi -i testsrc2=size=176x144:rate=25 -t 3 -c:v libx264 -g 10", "clip.mp4");
  auto p = MakePipeline(
      "stages { decode_video { frames: 16 stride: 2 } } "
      "stages { uniform_temporal_subsample { frames: 8 } } "
      "stages { resize { shorter_side: 64 } } stages { random_crop { size: 56 } } "
      "stages { random_horizontal_flip {} } stages { normalize {} } "
      "stages { uniform_temporal_subsample { frames: 4 } }",
      11);
  ExpectEveryCutSame(*p, mp4, {4, 3, 56, 56});
}

TEST_F(VideoOpsTest, SamplersPlaceTheClip) {
  // A frame's brightness tells which it is: frame k of 50 has luma 16 + 4k.
  const std::vector<uint8_t> ramp = MakeRamp();
  auto frame = [](const testing::Output& out, int i) {
    return RampFrames(out.bytes.data(), out.bytes.size(), out.shape[0])[i];
  };
  // Four frames 0.2 s apart span 0.64 s of the 2 s: centred, the first is
  // at (2 - 0.04 - 0.6) / 2 = 0.68 s (frame 17).
  auto center =
      MakePipeline("stages { decode_video { frames: 4 fps: 5 sampler: SAMPLER_CENTER } }");
  auto out = RunPipeline(*center, ramp);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(frame(out, 0), 17);
  EXPECT_EQ(frame(out, 3), 32);
  auto start = MakePipeline(
      "stages { decode_video { frames: 2 stride: 10 sampler: SAMPLER_START start: 1.2 } }");
  out = RunPipeline(*start, ramp);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(frame(out, 0), 30);
  EXPECT_EQ(frame(out, 1), 40);
  // Random starts fall where the whole clip fits, and differ by sample.
  auto random = MakePipeline("stages { decode_video { frames: 3 stride: 20 } }", 3);
  std::set<int> starts;
  for (int64_t index = 0; index < 12; ++index) {
    out = RunPipeline(*random, ramp, index);
    ASSERT_TRUE(out.status.ok()) << out.status;
    const int first = frame(out, 0);
    EXPECT_LE(first, 9);  // 50 frames, a clip spans 41
    EXPECT_EQ(frame(out, 1), first + 20);
    EXPECT_EQ(frame(out, 2), first + 40);
    starts.insert(first);
  }
  EXPECT_GT(starts.size(), 4u);
}

// The ramp of SamplersPlaceTheClip: frame k of 50 has luma 16 + 4k.
class TemporalOpsTest : public VideoOpsTest {
 protected:
  void SetUp() override {
    VideoOpsTest::SetUp();
    if (IsSkipped()) return;
    ramp_ = MakeRamp();
  }

  static std::vector<int> Frames(const testing::Output& out) {
    return RampFrames(out.bytes.data(), out.bytes.size(), out.shape[0]);
  }

  std::vector<uint8_t> ramp_;
};

TEST_F(TemporalOpsTest, RandomTemporalCropKeepsConsecutiveFramesFromARandomStart) {
  // Frames 5 to 24, then 6 consecutive ones of them.
  auto p = MakePipeline(
      "stages { decode_video { frames: 20 sampler: SAMPLER_START start: 0.21 } } "
      "stages { random_temporal_crop { frames: 6 } }",
      9);
  std::set<int> firsts;
  for (int64_t index = 0; index < 12; ++index) {
    auto out = RunPipeline(*p, ramp_, index);
    ASSERT_TRUE(out.status.ok()) << out.status;
    const std::vector<int> f = Frames(out);
    ASSERT_EQ(f.size(), 6u);
    EXPECT_GE(f[0], 5);
    EXPECT_LE(f[5], 24);
    for (int t = 1; t < 6; ++t) EXPECT_EQ(f[t], f[0] + t);
    firsts.insert(f[0]);
  }
  EXPECT_GT(firsts.size(), 4u);
  auto longer = MakePipeline(
      "stages { decode_video { frames: 4 } } stages { random_temporal_crop { frames: 5 } }");
  EXPECT_THAT(RunPipeline(*longer, ramp_).status.message(),
              HasSubstr("random_temporal_crop: a clip of 4 frames is shorter than frames: 5"));
}

TEST_F(TemporalOpsTest, NormalizePutsAClipsChannelsFirst) {
  const char* decode = "stages { decode_video { frames: 5 sampler: SAMPLER_CENTER } } ";
  auto nchw = MakePipeline(absl::StrCat(decode, "stages { normalize {} }"));
  auto cnhw = MakePipeline(absl::StrCat(decode, "stages { normalize { layout: LAYOUT_CNHW } }"));
  auto a = RunPipeline(*nchw, ramp_);
  auto b = RunPipeline(*cnhw, ramp_);
  ASSERT_TRUE(a.status.ok() && b.status.ok()) << b.status;
  EXPECT_THAT(a.shape, ElementsAre(5, 3, 32, 32));
  EXPECT_THAT(b.shape, ElementsAre(3, 5, 32, 32));
  ASSERT_EQ(a.bytes.size(), b.bytes.size());
  const size_t plane = 32 * 32 * sizeof(float);
  for (int t = 0; t < 5; ++t) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_TRUE(std::equal(a.bytes.begin() + (t * 3 + c) * plane,
                             a.bytes.begin() + (t * 3 + c + 1) * plane,
                             b.bytes.begin() + (c * 5 + t) * plane))
          << "frame " << t << " channel " << c;
    }
  }
  auto every = MakePipeline(
      "stages { decode_video { frames: 8 } } stages { random_temporal_crop { frames: 4 } } "
      "stages { random_crop { size: 24 } } stages { normalize { layout: LAYOUT_CNHW } }",
      4);
  ExpectEveryCutSame(*every, ramp_, {3, 4, 24, 24});
}

// Caches and materialized data keep values up to the first stage that
// draws: a clip placed by its window draws nothing.
TEST(VideoCaching, OnlyARandomClipDraws) {
  const char* after =
      " } } stages { resize { shorter_side: 64 } } stages { random_crop { size: 56 } }";
  for (const auto& [decode, boundary] : std::vector<std::pair<std::string, int>>{
           {"sampler: SAMPLER_CENTER", 2},
           {"sampler: SAMPLER_UNIFORM stride: 2 max_stride: 2", 2},
           {"sampler: SAMPLER_START start: 1", 2},
           {"sampler: SAMPLER_RANDOM", 0},
           {"sampler: SAMPLER_CENTER max_stride: 3", 0}}) {
    auto p = MakePipeline(absl::StrCat("stages { decode_video { ", decode, after));
    EXPECT_EQ(p->CacheBoundary(), boundary) << decode;
  }
}

TEST_F(VideoOpsTest, SpecsAndLimitsAreNamed) {
  struct Bad {
    const char* stage;
    const char* field;
  };
  for (const Bad& bad :
       {Bad{"decode_video { frames: 0 }", "frames:"}, Bad{"decode_video { stride: 0 }", "stride:"},
        Bad{"decode_video { fps: 10 stride: 2 }", "fps:"},
        Bad{"decode_video { start: 3 }", "start:"},
        Bad{"decode_video { stride: 3 max_stride: 2 }", "max_stride:"},
        Bad{"decode_video { fps: 5 max_stride: 2 }", "max_stride:"},
        Bad{"decode_video {} } stages { random_temporal_crop { frames: 0 }", "frames:"},
        Bad{"decode_video {} } stages { uniform_temporal_subsample { frames: 0 }", "frames:"}}) {
    proto::PipelineSpec spec;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        absl::StrCat("stages { ", bad.stage, " }"), &spec));
    auto p = Pipeline::Create(spec, PipelineOptions());
    ASSERT_FALSE(p.ok()) << bad.stage;
    EXPECT_THAT(p.status().message(), HasSubstr(bad.field)) << bad.stage;
  }
  EXPECT_THAT(testing::CreateAfterDecode("uniform_temporal_subsample { frames: 4 }").message(),
              HasSubstr("expects a clip"));
  const std::vector<uint8_t> mp4 =
      Make("-f lavfi -i testsrc2=size=64x48:rate=25 -t 3 -c:v libx264 -g 75", "long.mp4");
  DecodeOptions decode;
  decode.max_video_seconds = 2;
  auto p = MakePipeline("stages { decode_video { frames: 2 } }", 0, decode);
  EXPECT_THAT(RunPipeline(*p, mp4).status.message(), HasSubstr("--max-video-seconds"));
  decode = DecodeOptions();
  decode.max_video_frames = 30;
  p = MakePipeline("stages { decode_video { frames: 2 sampler: SAMPLER_START start: 2.5 } }", 0,
                   decode);
  EXPECT_THAT(RunPipeline(*p, mp4).status.message(), HasSubstr("--max-video-frames"));
}

}  // namespace
}  // namespace prepflow
