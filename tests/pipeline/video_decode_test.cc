// VideoReader::DecodeClip on clips the ffmpeg tool makes here: the frames
// shown at the clip's times equal what ffmpeg itself decodes and converts
// to RGB24 (the reference PyAV matches, tests/python/test_video.py), across
// codecs, seeks past B-frames, variable frame rates and the end; and the
// limits and broken streams a hostile file brings.
#include "pipeline/ops/video/video_decode.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/ffmpeg_test.h"

namespace prepflow {
namespace {

using ::prepflow::testing::ReadFile;
using ::testing::HasSubstr;

class VideoDecodeTest : public testing::FfmpegTest {
 protected:
  void Run(const std::string& command) {
    ASSERT_EQ(std::system((command + " > /dev/null 2>&1").c_str()), 0) << command;
  }

  // Every frame of `name` as ffmpeg decodes it, RGB24, in presentation order.
  std::vector<uint8_t> Reference(const std::string& name) {
    Run(absl::StrCat("ffmpeg -nostdin -loglevel error -y -i '", dir_.Join(name),
                     "' -fps_mode passthrough -f rawvideo -pix_fmt rgb24 '", dir_.Join("ref.rgb"),
                     "'"));
    return ReadFile(dir_.Join("ref.rgb"));
  }

  // The presentation times of `name`'s frames from its first, as ffprobe
  // reads them.
  std::vector<double> Times(const std::string& name) {
    const std::string command = absl::StrCat(
        "ffprobe -loglevel error -select_streams v:0 -show_entries frame=pts_time -of csv=p=0 '",
        dir_.Join(name), "' > '", dir_.Join("times.txt"), "' 2> /dev/null");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    const std::vector<uint8_t> text = ReadFile(dir_.Join("times.txt"));
    std::vector<double> times;
    for (absl::string_view line :
         absl::StrSplit(std::string(text.begin(), text.end()), '\n', absl::SkipEmpty())) {
      double t = 0;
      EXPECT_TRUE(absl::SimpleAtod(line.substr(0, line.find(',')), &t)) << line;
      times.push_back(t);
    }
    for (double& t : times) t -= times.empty() ? 0 : times.front();
    return times;
  }

  // The frame of `times` shown at t: the last at or before it.
  static int ShownAt(const std::vector<double>& times, double t) {
    int k = 0;
    while (k + 1 < static_cast<int>(times.size()) && times[k + 1] <= t + 1e-6) ++k;
    return k;
  }

  // Decodes `clip` from `bytes`; checks frame i is reference frame want[i].
  void ExpectFrames(const std::vector<uint8_t>& bytes, const std::vector<uint8_t>& reference,
                    const ClipTimes& clip, const std::vector<int>& want,
                    const VideoLimits& limits = {}) {
    auto reader = VideoReader::Open(bytes.data(), bytes.size(), limits);
    ASSERT_TRUE(reader.ok()) << reader.status();
    const size_t frame = (*reader)->frame_bytes();
    std::vector<uint8_t> out(frame * clip.frames);
    std::vector<double> shown;
    ASSERT_TRUE((*reader)->DecodeClip(clip, out.data(), &shown).ok());
    ASSERT_EQ(shown.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_LE(frame * (want[i] + 1), reference.size());
      EXPECT_TRUE(std::equal(out.begin() + frame * i, out.begin() + frame * (i + 1),
                             reference.begin() + frame * want[i]))
          << "clip frame " << i << " should be frame " << want[i];
    }
  }
};

// 2 s at 25 fps, a keyframe every 12 frames and two B-frames between
// references (their pts after their dts).
constexpr char kH264[] =
    "-f lavfi -i testsrc2=size=160x120:rate=25 -t 2 -c:v libx264 -g 12 -bf 2 -pix_fmt yuv420p";

TEST_F(VideoDecodeTest, AClipIsTheFramesShownAtItsTimes) {
  const std::vector<uint8_t> mp4 = Make(kH264, "clip.mp4");
  const std::vector<uint8_t> reference = Reference("clip.mp4");
  // 0.5 s falls between frames 12 (0.48 s) and 13: frame 12 is showing.
  ExpectFrames(mp4, reference, {0.5, 0.08, 8}, {12, 14, 16, 18, 20, 22, 24, 26});
  // From a keyframe exactly (24, at 0.96 s), and from the start.
  ExpectFrames(mp4, reference, {0.96, 0.04, 4}, {24, 25, 26, 27});
  ExpectFrames(mp4, reference, {0, 0.4, 5}, {0, 10, 20, 30, 40});
  // Sampled faster than the video: frames repeat.
  ExpectFrames(mp4, reference, {1.0, 0.02, 4}, {25, 25, 26, 26});
  auto reader = VideoReader::Open(mp4.data(), mp4.size(), {});
  ASSERT_TRUE(reader.ok());
  std::vector<uint8_t> out((*reader)->frame_bytes() * 3);
  std::vector<double> shown;
  ASSERT_TRUE((*reader)->DecodeClip({0.5, 0.08, 3}, out.data(), &shown).ok());
  EXPECT_THAT(shown, ::testing::ElementsAre(::testing::DoubleNear(0.48, 1e-9),
                                            ::testing::DoubleNear(0.56, 1e-9),
                                            ::testing::DoubleNear(0.64, 1e-9)));
}

TEST_F(VideoDecodeTest, ClipsOneReaderDecodesInTurnAreEachRight) {
  const std::vector<uint8_t> mp4 = Make(kH264, "clip.mp4");
  const std::vector<uint8_t> reference = Reference("clip.mp4");
  auto reader = VideoReader::Open(mp4.data(), mp4.size(), {});
  ASSERT_TRUE(reader.ok());
  const size_t frame = (*reader)->frame_bytes();
  std::vector<uint8_t> out(frame * 2);
  for (int start : {40, 3, 30, 0}) {  // forward and back
    ASSERT_TRUE((*reader)->DecodeClip({start / 25.0, 0.2, 2}, out.data()).ok());
    for (int i = 0; i < 2; ++i) {
      const int want = start + 5 * i;
      EXPECT_TRUE(std::equal(out.begin() + frame * i, out.begin() + frame * (i + 1),
                             reference.begin() + frame * want))
          << start << " " << i;
    }
  }
}

TEST_F(VideoDecodeTest, PastTheEndTheLastFrameShows) {
  const std::vector<uint8_t> mp4 = Make(kH264, "clip.mp4");
  ExpectFrames(mp4, Reference("clip.mp4"), {1.88, 0.04, 5}, {47, 48, 49, 49, 49});
}

TEST_F(VideoDecodeTest, WebmVp9AndAviMjpegDecodeAsFfmpegDoes) {
  const std::vector<uint8_t> webm = Make(
      "-f lavfi -i testsrc2=size=96x64:rate=10 -t 2 -c:v libvpx-vp9 -b:v 300k -g 7", "clip.webm");
  ExpectFrames(webm, Reference("clip.webm"), {0.75, 0.3, 4}, {7, 10, 13, 16});
  const std::vector<uint8_t> avi =
      Make("-f lavfi -i testsrc2=size=98x62:rate=15 -t 1 -c:v mjpeg -q:v 3", "clip.avi");
  ExpectFrames(avi, Reference("clip.avi"), {0.2, 1 / 15.0, 3}, {3, 4, 5});
}

// A full-range clip (MJPEG's yuvj420p) and then a limited-range one of the
// same size on the same thread: each in its own colours (libswscale's cached
// context would keep the first's range for the second).
TEST_F(VideoDecodeTest, AFullRangeClipLeavesTheNextClipsColoursAlone) {
  const std::string size = "-f lavfi -i testsrc2=size=96x64:rate=10 -t 1 ";
  const std::vector<uint8_t> avi = Make(size + "-c:v mjpeg -q:v 3", "full.avi");
  const std::vector<uint8_t> mp4 = Make(size + "-c:v libx264 -pix_fmt yuv420p", "limited.mp4");
  const std::vector<uint8_t> avi_reference = Reference("full.avi");
  const std::vector<uint8_t> mp4_reference = Reference("limited.mp4");
  for (int round = 0; round < 2; ++round) {
    ExpectFrames(avi, avi_reference, {0.3, 0.1, 2}, {3, 4});
    ExpectFrames(mp4, mp4_reference, {0.3, 0.1, 2}, {3, 4});
  }
}

// Frames at uneven times (a half-second gap after frame 10): a clip reads
// them by timestamp, not by count.
TEST_F(VideoDecodeTest, VariableFrameRatesAreReadByTimestamp) {
  const std::vector<uint8_t> mkv = Make(
      "-f lavfi -i testsrc2=size=64x48:rate=25:duration=1 -vf setpts='PTS+gt(N\\,10)*0.5/TB' "
      "-fps_mode vfr -c:v libx264 -bf 0",
      "vfr.mkv");
  const std::vector<double> times = Times("vfr.mkv");
  ASSERT_GT(times.size(), 14u);
  ASSERT_GT(times[11] - times[10], 0.4);  // the gap
  // Through the gap frame 10 shows; then the frames at their own times.
  const ClipTimes clip{times[10], 0.2, 4};
  std::vector<int> want;
  for (int i = 0; i < clip.frames; ++i) want.push_back(ShownAt(times, clip.start + clip.step * i));
  EXPECT_EQ(want[1], 10);
  EXPECT_GT(want[3], 11);
  ExpectFrames(mkv, Reference("vfr.mkv"), clip, want);
}

// A tiny file may decode to very many frames: a clip decodes from the
// keyframe before it, and no more than --max-video-frames.
TEST_F(VideoDecodeTest, FramesDecodedAreBoundedFromTheKeyframeBefore) {
  const std::vector<uint8_t> sparse =
      Make("-f lavfi -i testsrc2=size=64x48:rate=25 -t 2 -c:v libx264 -g 50", "sparse.mp4");
  const std::vector<uint8_t> dense =
      Make("-f lavfi -i testsrc2=size=64x48:rate=25 -t 2 -c:v libx264 -g 5", "dense.mp4");
  VideoLimits limits;
  limits.max_frames = 20;
  std::vector<uint8_t> out(64 * 48 * 3);
  auto slow = VideoReader::Open(sparse.data(), sparse.size(), limits);
  ASSERT_TRUE(slow.ok());
  absl::Status s = (*slow)->DecodeClip({1.8, 0, 1}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("more than 20 frames decoded (--max-video-frames)"));
  auto fast = VideoReader::Open(dense.data(), dense.size(), limits);
  ASSERT_TRUE(fast.ok());
  EXPECT_TRUE((*fast)->DecodeClip({1.8, 0, 1}, out.data()).ok());
  // A clip of more frames than the limit is refused before decoding.
  std::vector<uint8_t> many(64 * 48 * 3 * 21);
  EXPECT_THAT((*fast)->DecodeClip({0, 0.04, 21}, many.data()).message(),
              HasSubstr("a clip of 21 frames is over the limit of 20"));
  EXPECT_EQ((*fast)->DecodeClip({-1, 0.04, 2}, many.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// Frames no time of the clip shows, and that no other frame refers to
// (x264's non-reference B-frames), are not decoded: a clip spanning 2 s of a
// stream with one keyframe decodes well under its 50 frames, the same bytes.
TEST_F(VideoDecodeTest, FramesNoTimeShowsAreSkippedWhereNothingRefersToThem) {
  const std::vector<uint8_t> mp4 =
      Make("-f lavfi -i testsrc2=size=64x48:rate=25 -t 2 -c:v libx264 -g 250 -bf 3", "b.mp4");
  const std::vector<uint8_t> reference = Reference("b.mp4");
  VideoLimits limits;
  limits.max_frames = 36;
  ExpectFrames(mp4, reference, {0, 0.5, 4}, {0, 12, 25, 37}, limits);
  ExpectFrames(mp4, reference, {0.04, 0.04, 3}, {1, 2, 3}, limits);
}

// A stream damaged after its header: the clip decodes or fails as DataLoss,
// never anything worse (ASan and the fuzz target watch the rest).
TEST_F(VideoDecodeTest, DamagedStreamsFailTheClipOrDecode) {
  std::vector<uint8_t> mp4 = Make(std::string(kH264) + " -movflags +faststart", "clip.mp4");
  std::vector<uint8_t> out(160 * 120 * 3 * 4);
  for (size_t keep : {mp4.size() / 3, mp4.size() / 2, mp4.size() - 100}) {
    auto reader = VideoReader::Open(mp4.data(), keep, {});
    if (!reader.ok()) continue;
    const absl::Status s = (*reader)->DecodeClip({1.0, 0.25, 4}, out.data());
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kDataLoss) << s;
  }
  for (size_t i = mp4.size() / 4; i < mp4.size(); i += 97) mp4[i] ^= 0x5a;
  auto reader = VideoReader::Open(mp4.data(), mp4.size(), {});
  if (reader.ok()) {
    const absl::Status s = (*reader)->DecodeClip({0.3, 0.4, 4}, out.data());
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kDataLoss) << s;
  }
}

}  // namespace
}  // namespace prepflow
