// Video datasets: CSV and JSON Lines manifests of videos with labels and
// start/end times (each line refused with its file and line where it is
// malformed), --clips-per-video (each video N samples, clip k of N), and
// decode_video sampling within each sample's window, end to end from the
// dataset's index to the clip's frames. Clips are made here by the ffmpeg tool.
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"
#include "tests/testing/ffmpeg_test.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::MakePipeline;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class VideoDataTest : public testing::FfmpegTest {
 protected:
  void SetUp() override {
    FfmpegTest::SetUp();
    if (IsSkipped()) return;
    MakeRamp();
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.Join(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& path, int clips = 0) {
    proto::DatasetSpec spec;
    spec.set_path(path);
    spec.set_clips_per_video(clips);
    return OpenDataset(spec);
  }

  // The frames (by brightness) of sample i's clip through `pipeline`.
  static std::vector<int> Frames(const Dataset& ds, const Pipeline& pipeline, int64_t i,
                                 absl::Status* status = nullptr) {
    Workspace ws;
    Sample s;
    ds.Describe(i, s);
    size_t size = 0;
    absl::Status st = ReadRecord(ds, pipeline.fields(), ws, s, &size);
    if (st.ok()) st = pipeline.Run(0, pipeline.num_stages(), s, ws);
    if (status != nullptr) *status = st;
    if (!st.ok()) return {};
    return RampFrames(s.data, s.size, s.shape[0]);
  }
};

TEST_F(VideoDataTest, ACsvManifestListsVideosWithLabelsAndWindows) {
  const std::string csv = Write("train.csv",
                                "\xEF\xBB\xBFpath,label,start,end\r\n"
                                "ramp.mkv,\"jumping, high\",0.41,1.61\r\n"
                                "ramp.mkv,abseiling,,\r\n");
  auto ds = Open(csv);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 2);
  EXPECT_THAT((*ds)->classes(), ElementsAre("abseiling", "jumping, high"));
  EXPECT_EQ((*ds)->label(0), 1);
  EXPECT_EQ((*ds)->label(1), 0);
  EXPECT_EQ((*ds)->window(0).start, 0.41);
  EXPECT_EQ((*ds)->window(0).end, 1.61);
  EXPECT_EQ((*ds)->window(1).start, 0);
  EXPECT_LT((*ds)->window(1).end, 0);
  // Centred in its window: from 0.41 s to the last start whose four frames
  // 0.08 s apart are shown by 1.61 s (1.33 s), the middle is 0.87 s.
  auto center =
      MakePipeline("stages { decode_video { frames: 4 stride: 2 sampler: SAMPLER_CENTER } }");
  EXPECT_THAT(Frames(**ds, *center, 0), ElementsAre(21, 23, 25, 27));
  // The whole video: (2 - 0.04 - 0.24) / 2 = 0.86 s.
  EXPECT_THAT(Frames(**ds, *center, 1), ElementsAre(21, 23, 25, 27));
  auto start = MakePipeline(
      "stages { decode_video { frames: 2 stride: 5 sampler: SAMPLER_START start: 0.21 } }");
  EXPECT_THAT(Frames(**ds, *start, 0), ElementsAre(15, 20));
  EXPECT_THAT(Frames(**ds, *start, 1), ElementsAre(5, 10));
  // Random clips stay inside the window.
  auto random = MakePipeline("stages { decode_video { frames: 4 stride: 2 } }", 7);
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    const std::vector<int> frames = Frames(**ds, *random, 0);
    ASSERT_EQ(frames.size(), 4u);
    EXPECT_GE(frames[0], 10);
    EXPECT_LE(frames[3], 40);
  }
}

TEST_F(VideoDataTest, ClipsPerVideoMakesEachVideoNSamplesSpacedEvenly) {
  const std::string jsonl =
      Write("train.jsonl",
            "{\"video_filepath\": \"ramp.mkv\", \"label\": 3, \"start\": 0.41, \"end\": 1.61}\n"
            "{\"video_filepath\": \"ramp.mkv\", \"label\": 5}\n");
  auto one = Open(jsonl);
  auto three = Open(jsonl, 3);
  ASSERT_TRUE(one.ok() && three.ok()) << three.status();
  ASSERT_EQ((*three)->size(), 6);
  EXPECT_NE((*three)->fingerprint(), (*one)->fingerprint());
  EXPECT_EQ((*three)->label(2), 3);
  EXPECT_EQ((*three)->label(3), 5);
  EXPECT_EQ((*three)->window(4).clip, 1);
  EXPECT_EQ((*three)->window(4).clips, 3);
  EXPECT_THAT((*three)->SamplePath(4), HasSubstr("ramp.mkv#clip1"));
  auto uniform =
      MakePipeline("stages { decode_video { frames: 4 stride: 2 sampler: SAMPLER_UNIFORM } }");
  // In the window [0.41, 1.61]: starts 0.41, 0.87 and 1.33 s.
  EXPECT_THAT(Frames(**three, *uniform, 0), ElementsAre(10, 12, 14, 16));
  EXPECT_THAT(Frames(**three, *uniform, 1), ElementsAre(21, 23, 25, 27));
  EXPECT_THAT(Frames(**three, *uniform, 2), ElementsAre(33, 35, 37, 39));
  // The whole video: starts 0, 0.86 and the last, 1.72 s (frame 43, or 42
  // as the header's duration rounds).
  EXPECT_THAT(Frames(**three, *uniform, 3), ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(Frames(**three, *uniform, 4), ElementsAre(21, 23, 25, 27));
  const std::vector<int> last = Frames(**three, *uniform, 5);
  ASSERT_EQ(last.size(), 4u);
  EXPECT_GE(last[0], 42);
  EXPECT_EQ(last[3], last[0] + 6);
  EXPECT_LE(last[3], 49);
  // One clip per video: the first.
  EXPECT_THAT(Frames(**one, *uniform, 1), ElementsAre(0, 2, 4, 6));
  // Random samplers draw each clip on its own.
  auto random = MakePipeline("stages { decode_video { frames: 2 stride: 2 } }", 3);
  std::set<int> firsts;
  for (int64_t i = 3; i < 6; ++i) firsts.insert(Frames(**three, *random, i)[0]);
  EXPECT_GT(firsts.size(), 1u);
}

TEST_F(VideoDataTest, StrideJitterDrawsAStridePerClip) {
  const std::string csv = Write("a.csv", "path\nramp.mkv\n");
  auto ds = Open(csv, 12);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto p = MakePipeline("stages { decode_video { frames: 3 stride: 1 max_stride: 4 } }", 1);
  std::set<int> strides;
  for (int64_t i = 0; i < 12; ++i) {
    const std::vector<int> f = Frames(**ds, *p, i);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[2] - f[1], f[1] - f[0]);
    strides.insert(f[1] - f[0]);
  }
  EXPECT_THAT(strides, ::testing::Each(::testing::AllOf(::testing::Ge(1), ::testing::Le(4))));
  EXPECT_GT(strides.size(), 2u);
}

TEST_F(VideoDataTest, BadLinesAndWindowsAreNamed) {
  struct Bad {
    const char* name;
    const char* text;
    const char* message;
  };
  for (const Bad& bad : {
           Bad{"a.csv", "path,start\nramp.mkv,-1\n", "a.csv:2: start: expected seconds"},
           Bad{"b.csv", "path,start,end\nramp.mkv,2,1\n", "b.csv:2: end: must be after start"},
           Bad{"c.csv", "path,label\nramp.mkv\n", "c.csv:2: 1 fields, and the header 2"},
           Bad{"d.csv", "path\n\"ramp.mkv\n", "d.csv:2: a quoted field runs to the end"},
           Bad{"e.jsonl", "{\"path\": \"x.flac\", \"start\": 1}\n",
               "e.jsonl:1: start: only a video's part is read"},
           Bad{"f.jsonl", "{\"video_filepath\": 7}\n",
               "f.jsonl:1: video_filepath: expected the video file"},
           Bad{"g.csv", "path,end\nramp.mkv,1e300\n", "g.csv:2: end: expected seconds"},
       }) {
    auto ds = Open(Write(bad.name, bad.text));
    ASSERT_FALSE(ds.ok()) << bad.name;
    EXPECT_THAT(ds.status().message(), HasSubstr(bad.message)) << bad.name;
  }
  auto over = Open(Write("h.csv", "path\nramp.mkv\n"), kMaxClipsPerVideo + 1);
  EXPECT_THAT(over.status().message(), HasSubstr("--clips-per-video"));
  // A window past the video's end fails its sample, naming it.
  auto ds = Open(Write("i.csv", "path,start,end\nramp.mkv,5,6\n"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto p = MakePipeline("stages { decode_video { frames: 2 } }");
  absl::Status status;
  Frames(**ds, *p, 0, &status);
  EXPECT_THAT(status.message(), HasSubstr("past the video's end"));
}

}  // namespace
}  // namespace prepflow
