// add_noise: noise sets written here by libsndfile, the SNR each window is
// mixed at, the draws' reproducibility, resampling a clip to the waveform's
// rate, the limits, and a noise set outside the data root.
// tests/python/test_noise.py holds the mix to the reference formula and runs
// it on workers.
#include <sndfile.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::ExpectSpecErrors;
using ::prepflow::testing::ReadFile;
using ::prepflow::testing::RunPipeline;
using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;

// Writes `channels` x `frames` of f(c, t) to a 16-bit WAV at `path`.
template <typename F>
void WriteWav(const std::string& path, int channels, int rate, int64_t frames, F f) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  std::vector<float> interleaved(static_cast<size_t>(channels * frames));
  for (int64_t t = 0; t < frames; ++t) {
    for (int c = 0; c < channels; ++c) interleaved[t * channels + c] = f(c, t);
  }
  sf_writef_float(file, interleaved.data(), frames);
  sf_close(file);
}

float Speech(int c, int64_t t) {
  return static_cast<float>(0.4 * std::sin(0.05 * t + c) * std::cos(0.0007 * t));
}
// Noise: a hashed sequence in [-0.5, 0.5], different per clip `seed`.
float Hash(uint64_t seed, int64_t t) {
  uint64_t x =
      (seed + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(t) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 - 0.5);
}

class AddNoiseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two clips of noise at 16 kHz: a mono one longer than the speech, a
    // stereo one shorter (it is mixed down, then repeated).
    WriteWav(dir_.Join("noise/hum/long.wav"), 1, 16000, 12000,
             [](int, int64_t t) { return Hash(1, t); });
    WriteWav(dir_.Join("noise/hum/short.wav"), 2, 16000, 700,
             [](int c, int64_t t) { return Hash(2 + c, t); });
    WriteWav(dir_.Join("speech.wav"), 2, 16000, 4000, Speech);
  }

  absl::StatusOr<std::unique_ptr<Pipeline>> Make(const std::string& stage,
                                                 DatasetOptions data = {}) {
    proto::PipelineSpec spec;
    const std::string text = absl::StrCat("stages { decode_audio {} } stages { add_noise { path: '",
                                          dir_.Join("noise"), "' ", stage, " } }");
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
    PipelineOptions options;
    options.seed = 11;
    options.open_data = OpDataOpenerFor(std::move(data));
    return Pipeline::Create(spec, options);
  }

  // The noise clips as the op holds them: mono, in the set's order.
  std::vector<std::vector<float>> Clips() const {
    std::vector<float> short_clip(700);
    for (int64_t t = 0; t < 700; ++t) short_clip[t] = (Hash(2, t) + Hash(3, t)) / 2.0f;
    std::vector<float> long_clip(12000);
    for (int64_t t = 0; t < 12000; ++t) long_clip[t] = Hash(1, t);
    return {long_clip, short_clip};
  }

  TempDir dir_;
};

// Each channel's residual is one window of a clip (wrapped when the clip is
// shorter) times one scale, and the channel's energy over the residual's is
// the SNR asked for.
TEST_F(AddNoiseTest, EachChannelGetsAWindowOfAClipAtTheSnr) {
  auto p = Make("snr_min: 7.5 snr_max: 7.5");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<std::vector<float>> clips = Clips();
  std::vector<int> used(2, 0);
  for (int64_t index = 0; index < 12; ++index) {
    auto out = RunPipeline(**p, ReadFile(dir_.Join("speech.wav")), index);
    ASSERT_TRUE(out.status.ok()) << out.status;
    ASSERT_THAT(out.shape, ::testing::ElementsAre(2, 4000));
    const auto* y = reinterpret_cast<const float*>(out.bytes.data());
    // Which clip and where: the residual's first samples over the scale.
    std::vector<double> residual(8000);
    for (int c = 0; c < 2; ++c) {
      for (int t = 0; t < 4000; ++t) residual[c * 4000 + t] = y[c * 4000 + t] - Speech(c, t);
    }
    int found = -1;
    int64_t first = -1;
    for (int k = 0; k < 2 && found < 0; ++k) {
      const auto& clip = clips[k];
      const auto n = static_cast<int64_t>(clip.size());
      for (int64_t j = 0; j < n && found < 0; ++j) {
        double rw = 0, ww = 0;  // the scale that fits channel 0 best at probes
        for (int t = 0; t < 4000; t += 37) {
          rw += residual[t] * clip[(j + t) % n];
          ww += double{clip[(j + t) % n]} * clip[(j + t) % n];
        }
        bool same = ww > 0;
        for (int t = 0; t < 4000 && same; t += 37) {
          same = std::abs(residual[t] - rw / ww * clip[(j + t) % n]) < 1e-5;
        }
        if (same) found = k, first = j;
      }
    }
    ASSERT_GE(found, 0) << "sample " << index << ": no clip window matches";
    ++used[found];
    if (found == 0) {
      EXPECT_LE(first + 4000, 12000);  // a longer clip is never wrapped
    }
    for (int c = 0; c < 2; ++c) {
      double speech = 0, noise = 0;
      for (int t = 0; t < 4000; ++t) {
        speech += double{Speech(c, t)} * Speech(c, t);
        noise += residual[c * 4000 + t] * residual[c * 4000 + t];
      }
      EXPECT_NEAR(10 * std::log10(speech / noise), 7.5, 1e-3) << "sample " << index;
    }
  }
  EXPECT_GT(used[0], 0);
  EXPECT_GT(used[1], 0);
}

TEST_F(AddNoiseTest, DrawsRepeatPerSampleAndDifferBetweenSamples) {
  auto p = Make("snr_min: 0 snr_max: 30");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<uint8_t> speech = ReadFile(dir_.Join("speech.wav"));
  auto a = RunPipeline(**p, speech, 3);
  auto b = RunPipeline(**p, speech, 3);
  auto c = RunPipeline(**p, speech, 4);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_NE(a.bytes, c.bytes);
  // With p = 0 nothing is added: the decoded speech as it is.
  auto off = Make("p: 0");
  ASSERT_TRUE(off.ok()) << off.status();
  auto decoded = RunPipeline(**off, speech, 3, 0, 1);
  EXPECT_EQ(RunPipeline(**off, speech, 3).bytes, decoded.bytes);
}

// A waveform at 8 kHz gets the 16 kHz clips resampled to it, and still the
// SNR asked for.
TEST_F(AddNoiseTest, ClipsAreResampledToTheWaveformsRate) {
  WriteWav(dir_.Join("speech8k.wav"), 1, 8000, 3000, Speech);
  auto p = Make("snr_min: 3 snr_max: 3");
  ASSERT_TRUE(p.ok()) << p.status();
  auto out = RunPipeline(**p, ReadFile(dir_.Join("speech8k.wav")), 5);
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_THAT(out.shape, ::testing::ElementsAre(1, 3000));
  const auto* y = reinterpret_cast<const float*>(out.bytes.data());
  double speech = 0, noise = 0;
  for (int t = 0; t < 3000; ++t) {
    speech += double{Speech(0, t)} * Speech(0, t);
    noise += (y[t] - double{Speech(0, t)}) * (y[t] - double{Speech(0, t)});
  }
  EXPECT_NEAR(10 * std::log10(speech / noise), 3, 1e-3);
}

// Every rate's resampled copy counts in one total with the decoded set:
// 50800 bytes decoded, 25400 more at 8 kHz, then 38100 more at 12 kHz is
// over max_bytes 90000, though the decoded set and either copy alone fit
// (and the sample fails, naming it).
TEST_F(AddNoiseTest, ResampledCopiesCountInOneTotal) {
  WriteWav(dir_.Join("speech8k.wav"), 1, 8000, 3000, Speech);
  WriteWav(dir_.Join("speech12k.wav"), 1, 12000, 3000, Speech);
  auto p = Make("max_bytes: 90000");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(RunPipeline(**p, ReadFile(dir_.Join("speech8k.wav")), 1).status.ok());
  auto over = RunPipeline(**p, ReadFile(dir_.Join("speech12k.wav")), 1).status;
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("at 12000 Hz takes 38100 bytes more"));
  EXPECT_THAT(over.message(), HasSubstr("beside the 76200 it holds, over 90000 (max_bytes)"));
}

TEST_F(AddNoiseTest, BadParametersAndDataAreRefusedNamingThem) {
  ExpectSpecErrors({
      {"add_noise {}", "path: name the noise set"},
      {"add_noise { path: 'x' snr_min: 10 snr_max: 5 }", "snr_min <= snr_max"},
      {"add_noise { path: 'x' snr_max: inf }", "snr_min, snr_max: must be finite"},
      {"add_noise { path: 'x' p: 1.5 }", "p: must be 0 to 1"},
      {"add_noise { path: 'x' max_bytes: 0 }", "max_bytes: must be positive"},
  });
  // Over max_bytes: the 12700 frames take 50800 bytes.
  auto big = Make("max_bytes: 40000");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("stage 1 (add_noise): max_bytes: noise set"));
  // A worker's limit for an op's data holds whatever max_bytes says.
  {
    proto::PipelineSpec spec;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        absl::StrCat("stages { decode_audio {} } stages { add_noise { path: '", dir_.Join("noise"),
                     "' max_bytes: 1000000000 } }"),
        &spec));
    PipelineOptions options;
    options.open_data = OpDataOpenerFor({});
    options.max_data_bytes = 40000;
    auto capped = Pipeline::Create(spec, options);
    EXPECT_EQ(capped.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(capped.status().message(), HasSubstr("more than 40000 bytes"));
    EXPECT_THAT(capped.status().message(), HasSubstr("--max-memory-bytes"));
  }
  // A clip that is not audio is named.
  testing::WriteFile(dir_.Join("noise/hum/zz-broken.wav"), {'R', 'I', 'F', 'F', 1, 2, 3});
  auto broken = Make("");
  EXPECT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("zz-broken.wav"));
  // Built without data access (no opener): refused, naming the set.
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "stages { decode_audio {} } stages { add_noise { path: '/n' } }", &spec));
  auto none = Pipeline::Create(spec, PipelineOptions());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("noise set /n cannot be opened here"));
}

// Opened as a worker opens data: a set outside its data root is refused.
TEST_F(AddNoiseTest, ASetOutsideTheDataRootIsRefused) {
  std::filesystem::create_directories(dir_.Join("root"));
  DatasetOptions confined;
  confined.confine_to = dir_.Join("root");
  auto p = Make("", confined);
  EXPECT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("stage 1 (add_noise): path: noise set"));
  EXPECT_THAT(p.status().message(), HasSubstr("root"));
}

}  // namespace
}  // namespace prepflow
