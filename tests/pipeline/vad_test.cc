// vad: on a voiced sound (a 150 Hz buzz rich in harmonics, what the
// cepstral detector looks for) between stretches of faint hiss: what it
// keeps is a slice of the input, trimmed before the sound and with
// both_ends after it; channels are cut together; and bad parameters are
// named. tests/python/test_audio_augment.py holds the cut to torchaudio's
// transforms.Vad on speech.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/wire.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::ExpectSpecErrors;
using ::prepflow::testing::MakePipeline;

constexpr int kRate = 16000;

// Channel c: hiss for `before` s, a buzz for `voiced` s, hiss for `after` s.
std::vector<float> Clip(int channels, double before, double voiced, double after) {
  const auto n1 = static_cast<int64_t>(before * kRate), n2 = static_cast<int64_t>(voiced * kRate);
  const int64_t frames = n1 + n2 + static_cast<int64_t>(after * kRate);
  std::vector<float> x(static_cast<size_t>(channels * frames));
  uint32_t state = 12345;
  for (int c = 0; c < channels; ++c) {
    for (int64_t t = 0; t < frames; ++t) {
      state = state * 1664525u + 1013904223u;
      float v = 1e-4f * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
      if (t >= n1 && t < n1 + n2) {
        for (int h = 1; h <= 20; ++h) v += 0.3f / h * std::sin(2 * M_PI * 150 * h * t / kRate);
      }
      x[c * frames + t] = v;
    }
  }
  return x;
}

// x (channels first) as decoded audio at kRate.
Sample Audio(std::vector<float>& x, int channels) {
  Sample s;
  s.kind = ValueKind::kAudio;
  s.data = reinterpret_cast<uint8_t*>(x.data());
  s.size = x.size() * sizeof(float);
  s.shape = {channels, static_cast<int64_t>(x.size()) / channels};
  s.sample_rate = kRate;
  return s;
}

// Runs the stages after decode_audio on x.
Sample RunVad(const Pipeline& p, std::vector<float>& x, int channels, Workspace& ws) {
  Sample s = Audio(x, channels);
  const absl::Status st = p.Run(1, p.num_stages(), s, ws);
  EXPECT_TRUE(st.ok()) << st;
  return s;
}

// Where `s` (channel 0) starts in x's channel 0, or -1 when it is no slice.
int64_t SliceAt(const Sample& s, const std::vector<float>& x, int channels) {
  const int64_t frames = static_cast<int64_t>(x.size()) / channels, kept = s.shape[1];
  const auto* y = reinterpret_cast<const float*>(s.data);
  for (int64_t start = 0; start + kept <= frames; ++start) {
    bool same = true;
    for (int c = 0; c < channels && same; ++c) {
      same = std::memcmp(y + c * kept, x.data() + c * frames + start, kept * sizeof(float)) == 0;
    }
    if (same) return start;
  }
  return -1;
}

TEST(Vad, KeepsFromBeforeTheSoundAndWithBothEndsUpToItsEnd) {
  auto front = MakePipeline("stages { decode_audio {} } stages { vad {} }");
  auto both = MakePipeline("stages { decode_audio {} } stages { vad { both_ends: true } }");
  ASSERT_EQ(front->output_type().DebugString(), both->output_type().DebugString());
  for (int channels : {1, 2}) {
    std::vector<float> x = Clip(channels, 2.5, 1.0, 2.0);
    const int64_t frames = static_cast<int64_t>(x.size()) / channels;
    Workspace ws;
    const Sample a = RunVad(*front, x, channels, ws);
    const int64_t start = SliceAt(a, x, channels);
    // The kept audio begins in the second before the buzz (search_time 1 s)
    // and runs to the clip's end.
    EXPECT_GE(start, 1 * kRate) << channels;
    EXPECT_LE(start, 2.5 * kRate) << channels;
    EXPECT_EQ(start + a.shape[1], frames) << channels;
    Workspace ws2;
    const Sample b = RunVad(*both, x, channels, ws2);
    EXPECT_EQ(SliceAt(b, x, channels), start) << channels;
    EXPECT_GE(start + b.shape[1], 3.5 * kRate) << channels;
    EXPECT_LE(start + b.shape[1], 4.5 * kRate) << channels;
  }
}

// No activity: torchaudio keeps the last pre-trigger + search + measure
// samples it buffered (here 1.1 s); a clip shorter than that stays whole.
TEST(Vad, WithoutActivityTheBufferedEndIsKept) {
  auto p = MakePipeline("stages { decode_audio {} } stages { vad {} }");
  std::vector<float> hiss = Clip(1, 3.0, 0, 0);
  Workspace ws;
  EXPECT_EQ(RunVad(*p, hiss, 1, ws).shape[1], 17600);
  std::vector<float> short_hiss = Clip(1, 0.5, 0, 0);
  EXPECT_EQ(RunVad(*p, short_hiss, 1, ws).shape[1], 8000);
}

TEST(Vad, BadParametersAreNamed) {
  ExpectSpecErrors({
      {"vad { search_time: 11 }", "search_time: must be 0 to 10"},
      {"vad { measure_freq: 0 }", "measure_freq: must be"},
      {"vad { trigger_time: nan }", "trigger_time: must be"},
      {"vad { hp_lifter_freq: 0 }", "hp_lifter_freq"},
      {"vad { measure_duration: 2 }", "measure_duration: must be 0 to 1"},
      {"vad { measure_freq: 100 measure_duration: 0.5 }", "overlap 50-fold"},
  });
  // Bands that are empty at the audio's rate fail the sample, naming it.
  auto p = MakePipeline("stages { decode_audio {} } stages { vad { hp_lifter_freq: 4000 } }");
  std::vector<float> x = Clip(1, 0.5, 0.5, 0);
  Sample s = Audio(x, 1);
  Workspace ws;
  const absl::Status st = p->Run(1, 2, s, ws);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), ::testing::HasSubstr("at 16000 Hz its bands are empty"));
}

}  // namespace
}  // namespace prepflow
