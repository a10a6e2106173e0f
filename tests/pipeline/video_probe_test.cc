// ProbeVideo on clips the ffmpeg tool makes here (H.264 in MP4 with an AAC
// track, VP9 in WebM): what the headers declare, and the refusals of
// hostile or broken input.
#include "pipeline/ops/video/video_probe.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/ffmpeg_test.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

class VideoProbeTest : public testing::FfmpegTest {
 protected:
  std::vector<uint8_t> Mp4WithAudio() {
    return Make(
        "-f lavfi -i testsrc2=size=320x240:rate=25 -f lavfi -i sine=frequency=440 -t 2 "
        "-c:v libx264 -pix_fmt yuv420p -c:a aac",
        "clip.mp4");
  }
};

TEST_F(VideoProbeTest, AnMp4SaysItsCodecSizeRateDurationAndFrames) {
  const std::vector<uint8_t> mp4 = Mp4WithAudio();
  absl::StatusOr<VideoInfo> v = ProbeVideo(mp4.data(), mp4.size());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->container, HasSubstr("mp4"));
  EXPECT_EQ(v->codec, "h264");
  EXPECT_EQ(v->width, 320);
  EXPECT_EQ(v->height, 240);
  EXPECT_DOUBLE_EQ(v->fps, 25);
  EXPECT_NEAR(v->seconds, 2, 0.05);
  EXPECT_EQ(v->frames, 50);
  EXPECT_EQ(v->streams, 2);
  EXPECT_TRUE(v->has_audio);
}

TEST_F(VideoProbeTest, AWebmSaysItsCodecSizeRateAndDuration) {
  const std::vector<uint8_t> webm =
      Make("-f lavfi -i testsrc2=size=160x120:rate=10 -t 1 -c:v libvpx-vp9 -b:v 200k", "clip.webm");
  absl::StatusOr<VideoInfo> v = ProbeVideo(webm.data(), webm.size());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(v->container, HasSubstr("webm"));
  EXPECT_EQ(v->codec, "vp9");
  EXPECT_EQ(v->width, 160);
  EXPECT_EQ(v->height, 120);
  EXPECT_DOUBLE_EQ(v->fps, 10);
  EXPECT_NEAR(v->seconds, 1, 0.05);
  EXPECT_FALSE(v->has_audio);
}

TEST_F(VideoProbeTest, BrokenInputIsRefused) {
  const std::vector<uint8_t> garbage(5000, 0x5a);
  EXPECT_EQ(ProbeVideo(garbage.data(), garbage.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProbeVideo(nullptr, 0).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<uint8_t> mp4 = Mp4WithAudio();
  for (size_t cut : {size_t{16}, size_t{200}, mp4.size() / 2}) {
    absl::StatusOr<VideoInfo> v = ProbeVideo(mp4.data(), cut);
    // ffmpeg writes the index (moov) last: a cut file has none.
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << cut;
  }
  // Sound alone is no video.
  const std::vector<uint8_t> audio =
      Make("-f lavfi -i sine=frequency=440 -t 1 -c:a aac", "sound.mp4");
  EXPECT_THAT(ProbeVideo(audio.data(), audio.size()).status().message(), HasSubstr("has no video"));
}

TEST_F(VideoProbeTest, LimitsAreNamed) {
  const std::vector<uint8_t> mp4 = Mp4WithAudio();
  VideoLimits small_frames;
  small_frames.max_pixels = 320 * 239;
  EXPECT_THAT(ProbeVideo(mp4.data(), mp4.size(), small_frames).status().message(),
              HasSubstr("320x240 frames are over the limit of 76480 pixels (--max-pixels)"));
  VideoLimits short_videos;
  short_videos.max_seconds = 1.5;
  absl::StatusOr<VideoInfo> v = ProbeVideo(mp4.data(), mp4.size(), short_videos);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(v.status().message(), HasSubstr("over the limit of 1.5 s"));
  VideoLimits one_stream;
  one_stream.max_streams = 1;
  EXPECT_THAT(ProbeVideo(mp4.data(), mp4.size(), one_stream).status().message(),
              HasSubstr("holds 2 streams, over the limit of 1"));
}

// A container naming streams by the dozen: refused before any is read.
TEST_F(VideoProbeTest, HundredsOfStreamsAreRefused) {
  std::string maps;
  for (int i = 0; i < 40; ++i) maps += " -map 1:a";
  const std::vector<uint8_t> many =
      Make("-f lavfi -i testsrc2=size=64x64:rate=5 -f lavfi -i sine -t 1 -map 0:v -map 1:a" + maps +
               " -c:v libx264 -c:a aac",
           "many.mkv");
  absl::StatusOr<VideoInfo> v = ProbeVideo(many.data(), many.size());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(v.status().message(), HasSubstr("over the limit of 16"));
}

}  // namespace
}  // namespace prepflow
