// The audio ops: decoding (files written here by libsndfile), the limits a
// hostile file meets, the window ops, resampling's lengths and kernel, and
// every cut of an audio pipeline. tests/python/test_audio.py holds them to
// torchaudio on generated speech.
#include <sndfile.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/wire.h"
#include "pipeline/ops/audio/audio_decode.h"
#include "pipeline/ops/audio/resample.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::ExpectEveryCutSame;
using ::prepflow::testing::MakePipeline;
using ::prepflow::testing::RunPipeline;
using ::testing::HasSubstr;

// libsndfile's virtual I/O writing into a vector.
struct Sink {
  std::vector<uint8_t> bytes;
  sf_count_t pos = 0;
};
sf_count_t SinkLength(void* u) { return static_cast<Sink*>(u)->bytes.size(); }
sf_count_t SinkSeek(sf_count_t offset, int whence, void* u) {
  auto* s = static_cast<Sink*>(u);
  s->pos = whence == SEEK_SET   ? offset
           : whence == SEEK_CUR ? s->pos + offset
                                : s->bytes.size() + offset;
  return s->pos;
}
sf_count_t SinkRead(void* ptr, sf_count_t n, void* u) {
  auto* s = static_cast<Sink*>(u);
  const sf_count_t k = std::max<sf_count_t>(0, std::min<sf_count_t>(n, s->bytes.size() - s->pos));
  std::memcpy(ptr, s->bytes.data() + s->pos, k);
  s->pos += k;
  return k;
}
sf_count_t SinkWrite(const void* ptr, sf_count_t n, void* u) {
  auto* s = static_cast<Sink*>(u);
  if (s->bytes.size() < static_cast<size_t>(s->pos + n)) s->bytes.resize(s->pos + n);
  std::memcpy(s->bytes.data() + s->pos, ptr, n);
  s->pos += n;
  return n;
}
sf_count_t SinkTell(void* u) { return static_cast<Sink*>(u)->pos; }

// `frames` x `channels` samples (interleaved) encoded as `format`.
std::vector<uint8_t> Encode(const std::vector<float>& interleaved, int channels, int rate,
                            int format) {
  Sink sink;
  SF_VIRTUAL_IO io{SinkLength, SinkSeek, SinkRead, SinkWrite, SinkTell};
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = format;
  SNDFILE* f = sf_open_virtual(&io, SFM_WRITE, &info, &sink);
  EXPECT_NE(f, nullptr) << sf_strerror(nullptr);
  if (f == nullptr) return {};
  sf_writef_float(f, interleaved.data(), interleaved.size() / channels);
  sf_close(f);
  return sink.bytes;
}

// A chirp-like test signal: channel c, frame t.
float Signal(int c, int64_t t) {
  return static_cast<float>(0.5 * std::sin(0.001 * t * t / 100 + c) * std::cos(0.01 * t));
}

std::vector<float> Interleaved(int channels, int64_t frames) {
  std::vector<float> out(static_cast<size_t>(channels * frames));
  for (int64_t t = 0; t < frames; ++t) {
    for (int c = 0; c < channels; ++c) out[t * channels + c] = Signal(c, t);
  }
  return out;
}

constexpr int kWav16 = SF_FORMAT_WAV | SF_FORMAT_PCM_16;

// One second of a 1 kHz tone at 16 kHz, amplitude 0.5.
std::vector<float> Tone1kHz() {
  std::vector<float> tone(16000);
  for (size_t t = 0; t < tone.size(); ++t) {
    tone[t] = static_cast<float>(0.5 * std::sin(2 * M_PI * 1000 * t / 16000.0));
  }
  return tone;
}

TEST(AudioDecode, WavIsChannelsFirstAtTheFilesRate) {
  const std::vector<float> x = Interleaved(2, 1000);
  auto p = MakePipeline("stages { decode_audio {} }");
  auto out = RunPipeline(*p, Encode(x, 2, 22050, kWav16));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.kind, ValueKind::kAudio);
  ASSERT_THAT(out.shape, ::testing::ElementsAre(2, 1000));
  const auto* f = reinterpret_cast<const float*>(out.bytes.data());
  for (int c = 0; c < 2; ++c) {
    for (int t = 0; t < 1000; t += 97) {
      // 16-bit PCM: libsndfile's rounding of x * 32767, read back over 32768.
      EXPECT_NEAR(f[c * 1000 + t], x[t * 2 + c], 1.0 / 32768) << c << "," << t;
      EXPECT_EQ(std::round(f[c * 1000 + t] * 32768), f[c * 1000 + t] * 32768);
    }
  }
}

TEST(AudioDecode, FlacAndFloatWavDecodeToTheSameSamples) {
  const std::vector<float> x = Interleaved(1, 4000);
  auto p = MakePipeline("stages { decode_audio {} }");
  auto wav = RunPipeline(*p, Encode(x, 1, 16000, kWav16));
  auto flac = RunPipeline(*p, Encode(x, 1, 16000, SF_FORMAT_FLAC | SF_FORMAT_PCM_16));
  ASSERT_TRUE(wav.status.ok() && flac.status.ok()) << wav.status << flac.status;
  EXPECT_EQ(wav.bytes, flac.bytes);  // both 16-bit PCM, lossless
  auto fl = RunPipeline(*p, Encode(x, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
  ASSERT_TRUE(fl.status.ok()) << fl.status;
  EXPECT_EQ(0, std::memcmp(fl.bytes.data(), x.data(), x.size() * sizeof(float)));
}

TEST(AudioDecode, HostileFilesAreRefusedWithTheLimitNamed) {
  DecodeOptions small;
  small.max_audio_seconds = 0.5;
  small.max_audio_channels = 2;
  Buffer out, scratch;
  DecodedAudio audio;
  const std::vector<uint8_t> second = Encode(Interleaved(1, 8000), 1, 8000, kWav16);
  absl::Status s = DecodeAudio(second.data(), second.size(), small, &out, &scratch, &audio);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("the header claims 1.0 s"));
  EXPECT_THAT(s.message(), HasSubstr("--max-audio-seconds"));
  // More channels than allowed: refused before a frame is read.
  const std::vector<uint8_t> three = Encode(Interleaved(3, 10), 3, 8000, kWav16);
  s = DecodeAudio(three.data(), three.size(), small, &out, &scratch, &audio);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("3 channels, outside 1 to 2 (--max-audio-channels)"));
  // A float WAV holding NaN.
  std::vector<float> nan = Interleaved(1, 100);
  nan[50] = std::nanf("");
  const std::vector<uint8_t> bad = Encode(nan, 1, 8000, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
  s = DecodeAudio(bad.data(), bad.size(), DecodeOptions(), &out, &scratch, &audio);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("NaN or infinite"));
  // Not audio at all.
  const std::string junk = "RIFF\x10\0\0\0WAVEjunkjunkjunk";
  s = DecodeAudio(reinterpret_cast<const uint8_t*>(junk.data()), junk.size(), DecodeOptions(), &out,
                  &scratch, &audio);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("libsndfile cannot read it"));
}

// A WAV whose data chunk claims 2^32 - 1 bytes (about 37 hours at 16 kHz)
// over 100 real frames: nothing near that is allocated, and what is there
// decodes (libsndfile bounds the claim by the file).
TEST(AudioDecode, AHeaderClaimingHoursAllocatesNothingNearThat) {
  std::vector<uint8_t> wav = Encode(Interleaved(1, 100), 1, 16000, kWav16);
  ASSERT_GE(wav.size(), 44u);
  const uint32_t huge = 0xFFFFFFFFu;
  std::memcpy(&wav[40], &huge, 4);  // the data chunk's size
  Buffer out, scratch;
  DecodedAudio audio;
  const absl::Status s =
      DecodeAudio(wav.data(), wav.size(), DecodeOptions(), &out, &scratch, &audio);
  if (s.ok()) {
    EXPECT_LE(audio.frames, 100);
  } else {
    EXPECT_THAT(s.code(), ::testing::AnyOf(absl::StatusCode::kResourceExhausted,
                                           absl::StatusCode::kDataLoss));
  }
  EXPECT_LT(scratch.capacity() + out.capacity(), size_t{1} << 20);
}

// A WAV's or FLAC's length from its first bytes (batching by length reads
// no more of it), the same as from the whole file; an Ogg's or a header
// that runs past those bytes gives no answer, and the whole file is read.
TEST(AudioDecode, LengthFromTheFirstBytes) {
  std::vector<float> minute(60 * 16000);
  for (size_t t = 0; t < minute.size(); ++t) minute[t] = 0.3f * std::sin(0.01f * t + 1e-5f * t * t);
  const std::vector<float> five(minute.begin(), minute.begin() + 5 * 16000);
  for (const int format : {kWav16, SF_FORMAT_FLAC | SF_FORMAT_PCM_16}) {
    const std::vector<uint8_t> file = Encode(minute, 1, 16000, format);
    ASSERT_GT(file.size(), size_t{200'000});
    ASSERT_TRUE(HeaderHoldsLength(file.data(), file.size()));
    absl::StatusOr<double> all = AudioSeconds(file.data(), file.size());
    // What SampleSeconds reads: 64 KiB (libFLAC reads its metadata in
    // buffers larger than 4 KiB).
    absl::StatusOr<double> head = AudioSeconds(file.data(), 65536, file.size());
    ASSERT_TRUE(all.ok() && head.ok()) << head.status();
    EXPECT_EQ(*head, *all);
    EXPECT_DOUBLE_EQ(*all, 60.0);
  }
  const std::vector<uint8_t> ogg = Encode(five, 1, 16000, SF_FORMAT_OGG | SF_FORMAT_VORBIS);
  EXPECT_FALSE(HeaderHoldsLength(ogg.data(), ogg.size()));
  EXPECT_EQ(AudioSeconds(ogg.data(), 4096, ogg.size()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // 70 000 bytes of JUNK before the fmt and data chunks: their header is
  // not in the first 64 KiB.
  std::vector<uint8_t> junk = Encode(five, 1, 16000, kWav16);
  std::vector<uint8_t> chunk = {'J', 'U', 'N', 'K', 0x70, 0x11, 0x01, 0x00};  // 70000
  chunk.resize(8 + 70000, 0);
  junk.insert(junk.begin() + 12, chunk.begin(), chunk.end());
  const uint32_t riff = static_cast<uint32_t>(junk.size() - 8);
  std::memcpy(junk.data() + 4, &riff, 4);
  ASSERT_TRUE(AudioSeconds(junk.data(), junk.size()).ok());
  EXPECT_DOUBLE_EQ(*AudioSeconds(junk.data(), junk.size()), 5.0);
  EXPECT_FALSE(AudioSeconds(junk.data(), 65536, junk.size()).ok());
}

TEST(AudioDecode, ATruncatedFlacIsDataLoss) {
  std::vector<uint8_t> flac =
      Encode(Interleaved(1, 48000), 1, 16000, SF_FORMAT_FLAC | SF_FORMAT_PCM_16);
  flac.resize(flac.size() / 2);
  auto p = MakePipeline("stages { decode_audio {} }");
  auto out = RunPipeline(*p, flac);
  EXPECT_FALSE(out.status.ok());
  EXPECT_THAT(out.status.message(), HasSubstr("audio: "));
}

TEST(AudioOps, FixLengthPadsAndCuts) {
  const std::vector<uint8_t> wav = Encode(Interleaved(2, 300), 2, 8000, kWav16);
  auto full = RunPipeline(*MakePipeline("stages { decode_audio {} }"), wav);
  const auto* in = reinterpret_cast<const float*>(full.bytes.data());
  auto longer = RunPipeline(
      *MakePipeline("stages { decode_audio {} } stages { fix_length { frames: 500 } }"), wav);
  ASSERT_THAT(longer.shape, ::testing::ElementsAre(2, 500));
  const auto* l = reinterpret_cast<const float*>(longer.bytes.data());
  EXPECT_EQ(0, std::memcmp(l + 500, in + 300, 300 * sizeof(float)));  // channel 1
  EXPECT_EQ(l[500 + 300], 0.0f);
  EXPECT_EQ(l[999], 0.0f);
  auto shorter = RunPipeline(
      *MakePipeline("stages { decode_audio {} } stages { fix_length { seconds: 0.02 } }"), wav);
  ASSERT_THAT(shorter.shape, ::testing::ElementsAre(2, 160));
  EXPECT_EQ(0, std::memcmp(shorter.bytes.data() + 160 * 4, in + 300, 160 * sizeof(float)));
  auto mono = RunPipeline(*MakePipeline("stages { decode_audio {} } stages { downmix {} }"), wav);
  ASSERT_THAT(mono.shape, ::testing::ElementsAre(1, 300));
  const auto* m = reinterpret_cast<const float*>(mono.bytes.data());
  for (int t = 0; t < 300; ++t) ASSERT_EQ(m[t], (in[t] + in[300 + t]) / 2.0f) << t;
}

TEST(AudioOps, RandomSegmentIsAWindowOfTheWaveform) {
  const std::vector<uint8_t> wav = Encode(Interleaved(1, 1000), 1, 8000, kWav16);
  auto full = RunPipeline(*MakePipeline("stages { decode_audio {} }"), wav);
  const auto* in = reinterpret_cast<const float*>(full.bytes.data());
  auto p = MakePipeline("stages { decode_audio {} } stages { random_segment { frames: 100 } }");
  std::set<int64_t> starts;
  for (int64_t i = 0; i < 50; ++i) {
    auto out = RunPipeline(*p, wav, i);
    ASSERT_THAT(out.shape, ::testing::ElementsAre(1, 100));
    const auto* w = reinterpret_cast<const float*>(out.bytes.data());
    int64_t start = -1;
    for (int64_t s = 0; s <= 900 && start < 0; ++s) {
      if (std::memcmp(w, in + s, 100 * sizeof(float)) == 0) start = s;
    }
    ASSERT_GE(start, 0) << "sample " << i << " is no window of the waveform";
    starts.insert(start);
  }
  EXPECT_GT(starts.size(), 40u);  // 50 draws over 901 starts
  // Shorter than the window: padded, or whole without pad.
  auto padded = RunPipeline(
      *MakePipeline("stages { decode_audio {} } stages { random_segment { frames: 1500 } }"), wav);
  EXPECT_THAT(padded.shape, ::testing::ElementsAre(1, 1500));
  auto whole = RunPipeline(*MakePipeline("stages { decode_audio {} } stages { random_segment { "
                                         "frames: 1500 pad: false } }"),
                           wav);
  EXPECT_THAT(whole.shape, ::testing::ElementsAre(1, 1000));
}

TEST(Resample, LengthsAndKernelAreTorchaudios) {
  // 44100 -> 16000 reduces to 441 -> 160; torchaudio keeps ceil(160 n / 441).
  auto k = ResampleKernel::Make(44100, 16000, ResampleParams());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->from(), 441);
  EXPECT_EQ(k->to(), 160);
  EXPECT_EQ(k->OutputFrames(44100), 16000);
  EXPECT_EQ(k->OutputFrames(1000), 363);  // ceil(362.8...)
  // A constant signal stays constant inside (the kernel sums to ~1 there).
  std::vector<float> ones(4410, 1.0f), out(k->OutputFrames(4410));
  k->Apply(ones.data(), ones.size(), out.data());
  for (size_t i = 100; i + 100 < out.size(); ++i) ASSERT_NEAR(out[i], 1.0, 2e-3) << i;
  EXPECT_THAT(ResampleKernel::Make(44100, 44101, ResampleParams()).status().message(),
              HasSubstr("over 64 MiB"));
  ResampleParams bad;
  bad.rolloff = 1.5;
  EXPECT_THAT(ResampleKernel::Make(8000, 16000, bad).status().message(),
              HasSubstr("rolloff: must be in (0, 1]"));
}

TEST(AudioOps, WrongValueKindsAndBadFieldsAreNamed) {
  testing::ExpectSpecErrors({
      {"fix_length {}", "frames, seconds: set one"},
      {"fix_length { frames: 5 seconds: 1 }", "frames, seconds: set one"},
      {"random_segment { seconds: -1 }", "frames, seconds: set one"},
      {"resample {}", "rate: must be 1 to 192000 Hz"},
      {"resample { rate: 16000 lowpass_filter_width: 0 }", "lowpass_filter_width"},
  });
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "stages { decode {} } stages { fix_length { frames: 10 } }", &spec));
  EXPECT_THAT(Pipeline::Create(spec, PipelineOptions()).status().message(),
              HasSubstr("expects audio (put a decode_audio stage before it)"));
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "stages { decode_audio {} } stages { random_horizontal_flip {} }", &spec));
  EXPECT_THAT(Pipeline::Create(spec, PipelineOptions()).status().message(),
              HasSubstr("expects an image"));
}

// A 1 kHz tone at 16 kHz: its energy sits in the mel band holding 1 kHz, in
// every frame, and the frames are 1 + length / hop.
TEST(AudioOps, MelSpectrogramPutsAToneInItsBand) {
  const std::vector<float> tone = Tone1kHz();
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { mel_spectrogram { n_mels: 40 hop_length: 160 } }");
  auto out = RunPipeline(*p, Encode(tone, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.kind, ValueKind::kTensor);
  ASSERT_THAT(out.shape, ::testing::ElementsAre(1, 40, 101));
  const auto* mel = reinterpret_cast<const float*>(out.bytes.data());
  // 1 kHz is FFT bin 25, which melscale_fbanks(201, 0, 8000, 40, 16000)
  // puts in bands 13 (0.571) and 14 (0.429).
  for (int t = 5; t < 95; t += 10) {
    int best = 0;
    for (int m = 1; m < 40; ++m) {
      if (mel[m * 101 + t] > mel[best * 101 + t]) best = m;
    }
    EXPECT_EQ(best, 13) << "frame " << t;
  }
  // Too short for the reflect padding torch.stft needs.
  auto short_one = RunPipeline(*p, Encode(std::vector<float>(100, 0.1f), 1, 16000, kWav16));
  EXPECT_THAT(short_one.status.message(), HasSubstr("too few for reflect padding of 200"));
  testing::ExpectSpecErrors({
      {"mel_spectrogram { n_fft: 1 }", "n_fft: must be 2 to 65536"},
      {"mel_spectrogram { win_length: 500 }", "win_length: must be 1 to n_fft (400)"},
      {"mel_spectrogram { f_min: 9000 f_max: 8000 }", "f_min, f_max"},
      {"amplitude_to_db { top_db: -1 }", "top_db: must be finite and >= 0"},
  });
}

// Threads share an op: each must get the same floats as one thread alone
// (a real-FFT plan holds scratch; shared, it gave other threads' spectra).
TEST(AudioOps, MelSpectrogramIsTheSameFromManyThreads) {
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { mel_spectrogram { n_mels: 40 n_fft: 512 } }");
  const std::vector<uint8_t> wav = Encode(Interleaved(1, 16000), 1, 16000, kWav16);
  const auto reference = RunPipeline(*p, wav);
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  std::atomic<int> differ{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        if (RunPipeline(*p, wav).bytes != reference.bytes) ++differ;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(differ.load(), 0);
}

// SpecAugment: each mask zeroes one run of bands (or frames), the same in
// every channel and frame, narrower than the parameter; the rest is the
// spectrogram as it was. Widths and starts vary from sample to sample.
TEST(AudioOps, MasksZeroOneRunOfBandsOrFrames) {
  const std::vector<uint8_t> wav = Encode(Interleaved(2, 8000), 2, 8000, kWav16);
  const std::string base =
      "stages { decode_audio {} } stages { mel_spectrogram { n_mels: 40 n_fft: 256 } } ";
  auto plain = RunPipeline(*MakePipeline(base), wav);
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  const int64_t c = plain.shape[0], f = plain.shape[1], t = plain.shape[2];
  const auto* before = reinterpret_cast<const float*>(plain.bytes.data());
  for (const bool time : {false, true}) {
    auto p = MakePipeline(base + (time ? "stages { time_masking { time_mask_param: 12 } }"
                                       : "stages { frequency_masking { freq_mask_param: 12 } }"));
    std::set<int64_t> widths, starts;
    for (int64_t i = 0; i < 60; ++i) {
      auto out = RunPipeline(*p, wav, i);
      ASSERT_TRUE(out.status.ok()) << out.status;
      const auto* after = reinterpret_cast<const float*>(out.bytes.data());
      // The masked positions along the axis: every value zero across the
      // other axis and the channels, and only there do values change.
      const int64_t n = time ? t : f;
      int64_t first = -1, last = -1;
      for (int64_t k = 0; k < n; ++k) {
        bool zero = true, same = true;
        for (int64_t ch = 0; ch < c; ++ch) {
          for (int64_t j = 0; j < (time ? f : t); ++j) {
            const int64_t at = ch * f * t + (time ? j * t + k : k * t + j);
            zero &= after[at] == 0.0f;
            same &= after[at] == before[at];
          }
        }
        ASSERT_TRUE(zero || same) << "sample " << i << " position " << k;
        if (zero && !same) {
          if (first < 0) first = k;
          ASSERT_TRUE(last < 0 || last == k - 1) << "sample " << i << ": not one run";
          last = k;
        }
      }
      const int64_t width = first < 0 ? 0 : last - first + 1;
      ASSERT_LT(width, 12) << "sample " << i;
      widths.insert(width);
      if (first >= 0) starts.insert(first);
    }
    EXPECT_GE(widths.size(), 8u) << (time ? "time" : "frequency");  // of 12, in 60 draws
    EXPECT_GE(starts.size(), 8u) << (time ? "time" : "frequency");
  }
  testing::ExpectSpecErrors({
      {"time_masking { time_mask_param: -1 }", "time_mask_param: must be >= 0"},
      {"frequency_masking { freq_mask_param: 3 p: 2 }", "p: must be in [0, 1]"},
  });
}

// Cut anywhere: the waveform crosses the wire with its rate, and every
// placement gives the same bytes.
// Kaldi fbank: a 1 kHz tone's energy sits in the band around 1 kHz in
// every frame; frames are 1 + (length - 400) / 160 at 16 kHz; a signal
// shorter than a window fails naming both.
TEST(AudioOps, KaldiFbankPutsAToneInItsBand) {
  const std::vector<float> tone = Tone1kHz();
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { kaldi_fbank { num_mel_bins: 40 use_energy: true } }");
  auto out = RunPipeline(*p, Encode(tone, 1, 16000, SF_FORMAT_WAV | SF_FORMAT_FLOAT));
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_THAT(out.shape, ::testing::ElementsAre(98, 41));  // the energy first
  const auto* fb = reinterpret_cast<const float*>(out.bytes.data());
  // Kaldi's banks (20 Hz to 8 kHz, 40 bands on 1127 ln(1 + f / 700)) centre
  // band 13 at 986 Hz (torchaudio's get_mel_banks), nearest 1 kHz.
  for (int t = 0; t < 98; t += 7) {
    int best = 1;
    for (int b = 2; b <= 40; ++b) {
      if (fb[t * 41 + b] > fb[t * 41 + best]) best = b;
    }
    EXPECT_EQ(best - 1, 13) << "frame " << t;
  }
  auto short_one = RunPipeline(*p, Encode(std::vector<float>(399, 0.1f), 1, 16000, kWav16));
  EXPECT_THAT(short_one.status.message(), HasSubstr("399 samples are fewer than one window (400)"));
  testing::ExpectSpecErrors({
      {"kaldi_fbank { num_mel_bins: 3 }", "num_mel_bins: must be 4 to 4096"},
      {"kaldi_fbank { frame_length: 0.01 }", "frame_length, frame_shift"},
      {"kaldi_fbank { frame_shift: 0 }", "frame_length, frame_shift"},
      {"kaldi_fbank { round_to_power_of_two: false frame_length: 25.0625 }", "is odd"},
      {"kaldi_fbank { low_freq: 9000 }", "low_freq, high_freq"},
      {"kaldi_fbank { preemphasis_coefficient: 2 }", "preemphasis_coefficient"},
      {"speed_perturb {}", "factors: give 1 to 16 speeds"},
      {"speed_perturb { factors: [ 0 ] }", "factors: each must be in (0, 10]"},
      {"vol { gain: -1 }", "gain: must be finite"},
      {"utterance_cmvn { eps: -1 }", "eps: must be >= 0"},
      {"preemphasis { coeff: 1.5 }", "coeff: must be in [-1, 1], got 1.5"},
      {"log { offset: -1 }", "offset: must be finite and >= 0"},
      {"dct { n_mfcc: 0 }", "n_mfcc: must be in [1, 1024]"},
      {"time_shift { max_seconds: -1 }", "max_seconds: must be 0 to 86400, got -1"},
      {"spectrogram { n_fft: 1 }", "n_fft: must be 2 to 65536, got 1"},
  });
}

// CMVN: every feature's mean over time 0 (and its deviation 1 with
// norm_vars); transpose swaps the last two dimensions; speed perturbation
// changes the length as resampling from factor x rate does; vol clamps.
TEST(AudioOps, CmvnTransposeSpeedAndVol) {
  const std::vector<uint8_t> wav = Encode(Interleaved(1, 16000), 1, 16000, kWav16);
  const std::string fbank =
      "stages { decode_audio {} } stages { kaldi_fbank { num_mel_bins: 8 } } ";
  auto plain = RunPipeline(*MakePipeline(fbank), wav);
  auto normed = RunPipeline(
      *MakePipeline(fbank +
                    "stages { utterance_cmvn { dim: 0 norm_vars: true } } stages { transpose {} }"),
      wav);
  ASSERT_TRUE(plain.status.ok() && normed.status.ok()) << normed.status;
  ASSERT_THAT(plain.shape, ::testing::ElementsAre(98, 8));
  ASSERT_THAT(normed.shape, ::testing::ElementsAre(8, 98));
  proto::PipelineSpec bad_dim;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      fbank + "stages { utterance_cmvn { dim: 2 } }", &bad_dim));
  EXPECT_THAT(Pipeline::Create(bad_dim, PipelineOptions()).status().message(),
              HasSubstr("dim: 2 is not a dimension of float32 tensor [?, 8]"));
  const auto* x = reinterpret_cast<const float*>(plain.bytes.data());
  const auto* y = reinterpret_cast<const float*>(normed.bytes.data());
  for (int b = 0; b < 8; ++b) {
    double mean = 0, sq = 0;
    for (int t = 0; t < 98; ++t) mean += x[t * 8 + b] / 98.0;
    for (int t = 0; t < 98; ++t) sq += (x[t * 8 + b] - mean) * (x[t * 8 + b] - mean) / 98.0;
    double got_mean = 0, got_sq = 0;
    for (int t = 0; t < 98; ++t) {
      EXPECT_NEAR(y[b * 98 + t], (x[t * 8 + b] - mean) / std::sqrt(sq), 1e-5);
      got_mean += y[b * 98 + t] / 98.0;
      got_sq += y[b * 98 + t] * y[b * 98 + t] / 98.0;
    }
    EXPECT_NEAR(got_mean, 0, 1e-6);
    EXPECT_NEAR(got_sq, 1, 1e-5);
  }
  for (const auto& [factor, frames] : {std::pair{"0.9", 17778}, {"1.1", 14546}, {"1.0", 16000}}) {
    auto sped = RunPipeline(
        *MakePipeline(absl::StrCat(
            "stages { decode_audio {} } stages { speed_perturb { factors: ", factor, " } }")),
        wav);
    ASSERT_TRUE(sped.status.ok()) << sped.status;
    EXPECT_THAT(sped.shape, ::testing::ElementsAre(1, frames)) << factor;
  }
  auto loud = RunPipeline(
      *MakePipeline(
          "stages { decode_audio {} } stages { vol { gain: 20 gain_type: GAIN_TYPE_DB } }"),
      wav);
  ASSERT_TRUE(loud.status.ok());
  const auto* v = reinterpret_cast<const float*>(loud.bytes.data());
  int clamped = 0;
  for (int t = 0; t < 16000; ++t) {
    ASSERT_LE(std::abs(v[t]), 1.0f);
    clamped += std::abs(v[t]) == 1.0f;
  }
  EXPECT_GT(clamped, 1000);  // 10x a signal of amplitude 0.5
}

// A worker's items are sized from the bound on one value at the cut: for
// features made from audio, the audio's bound (the limits at the rate)
// through each stage's frames and bands, not an image's pixel limit.
TEST(AudioOps, FeaturesAreBoundedByTheAudioTheyAreMadeFrom) {
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { downmix {} } stages { resample { rate: 16000 } } "
      "stages { mel_spectrogram { n_mels: 40 hop_length: 160 } } stages { amplitude_to_db {} }");
  // --max-audio-seconds 600 at 16 kHz, one channel (MaxAudioFrames: + 1).
  const double samples = 600.0 * 16000 + 1;
  auto bound = [&](int bands, int hop) {
    return static_cast<int64_t>(std::ceil(4.0 * bands * (samples / hop + 1)));
  };
  EXPECT_EQ(p->MaxBytesAt(3, 0), static_cast<int64_t>(samples) * 4);
  EXPECT_EQ(p->MaxBytesAt(4, 0), bound(40, 160));
  EXPECT_EQ(p->MaxBytesAt(5, 0), bound(40, 160));
  auto kaldi = MakePipeline(
      "stages { decode_audio {} } stages { downmix {} } stages { resample { rate: 16000 } } "
      "stages { kaldi_fbank { num_mel_bins: 80 } } stages { utterance_cmvn { dim: 0 } } "
      "stages { transpose {} } stages { time_masking { time_mask_param: 5 } }");
  EXPECT_EQ(kaldi->MaxBytesAt(4, 0), bound(80, 160));
  EXPECT_EQ(kaldi->MaxBytesAt(7, 0), bound(80, 160));
  auto mfcc = MakePipeline(
      "stages { decode_audio {} } stages { downmix {} } stages { resample { rate: 16000 } } "
      "stages { preemphasis {} } stages { mel_spectrogram { n_mels: 40 hop_length: 160 } } "
      "stages { log {} } stages { dct { n_mfcc: 13 } }");
  EXPECT_EQ(mfcc->MaxBytesAt(6, 0), bound(40, 160));
  EXPECT_EQ(mfcc->MaxBytesAt(7, 0), bound(40, 160));  // at most its input's
  // At an unknown rate a frame may be one sample: the pixel limit bounds it.
  auto any_rate = MakePipeline(
      "stages { decode_audio {} } stages { downmix {} } stages { kaldi_fbank { num_mel_bins: 80 } "
      "}");
  EXPECT_EQ(any_rate->MaxBytesAt(3, 0), DecodeOptions().max_pixels * 3 * 4);
}

TEST(AudioOps, EveryCutGivesTheSameBytes) {
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { downmix {} } stages { resample { rate: 16000 } } "
      "stages { random_segment { seconds: 0.25 } } stages { fix_length { frames: 4000 } } "
      "stages { mel_spectrogram { n_mels: 32 } } stages { amplitude_to_db { top_db: 60 } } "
      "stages { frequency_masking { freq_mask_param: 8 } } "
      "stages { time_masking { time_mask_param: 5 } }",
      7);
  // 1 + 4000 / 200 frames.
  ExpectEveryCutSame(*p, Encode(Interleaved(2, 30000), 2, 44100, kWav16), {1, 32, 21});
}

// LibriSpeech's recipe: speed perturbation, Kaldi fbank, CMVN, SpecAugment.
TEST(AudioOps, EveryCutOfASpeechRecipeGivesTheSameBytes) {
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { downmix {} } "
      "stages { speed_perturb { factors: [ 1.1 ] } } stages { vol { gain: 2 } } "
      "stages { kaldi_fbank { num_mel_bins: 40 } } stages { utterance_cmvn { dim: 0 } } "
      "stages { transpose {} } stages { frequency_masking { freq_mask_param: 8 } } "
      "stages { time_masking { time_mask_param: 5 } }",
      7);
  // 16000 frames at 1.1x: 14546 (ceil(16000 x 10 / 11)); 1 + (14546 - 400) / 160 frames.
  ExpectEveryCutSame(*p, Encode(Interleaved(1, 16000), 1, 16000, kWav16), {40, 89});
}

// The MFCC recipe (DALI's Jasper steps, torchaudio's MFCC): pre-emphasis,
// mel bands, log, DCT; every cut the same bytes.
TEST(AudioOps, EveryCutOfAnMfccRecipeGivesTheSameBytes) {
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { preemphasis {} } "
      "stages { mel_spectrogram { n_mels: 40 } } stages { log {} } "
      "stages { dct { n_mfcc: 13 } }",
      7);
  // 1 + 16000 / 200 frames.
  ExpectEveryCutSame(*p, Encode(Interleaved(1, 16000), 1, 16000, kWav16), {1, 13, 81});
}

// cedar's frequency-domain recipe: a complex spectrogram stretched by a rate
// drawn per sample, to power, masked, onto the mel scale.
TEST(AudioOps, EveryCutOfAStretchRecipeGivesTheSameBytes) {
  auto p = MakePipeline(
      "stages { decode_audio {} } stages { spectrogram { n_fft: 256 complex: true } } "
      "stages { time_stretch { fixed_rate: 1.25 } } stages { magnitude {} } "
      "stages { time_masking { time_mask_param: 5 } } "
      "stages { mel_scale { n_mels: 32 sample_rate: 16000 } }",
      7);
  // 1 + 16000 / 128 = 126 frames, stretched to ceil(126 / 1.25) = 101.
  ExpectEveryCutSame(*p, Encode(Interleaved(1, 16000), 1, 16000, kWav16), {1, 32, 101});
}

// Pipeline::Create's status for `decode_audio` then `stages` (text that
// may close and open stages itself).
absl::Status CreateAfterDecodeAudio(const std::string& stages) {
  auto spec = LoadPipelineSpec(
      absl::StrCat("stages { decode_audio {} } stages { downmix {} } ", "stages { ", stages, " }"));
  if (!spec.ok()) return spec.status();
  return Pipeline::Create(*spec, PipelineOptions()).status();
}

// The stretch ops refuse what they cannot take, naming it.
TEST(AudioOps, StretchOpsCheckTheirInput) {
  EXPECT_THAT(CreateAfterDecodeAudio("time_stretch { fixed_rate: 1.2 }").message(),
              HasSubstr("complex spectrogram"));
  EXPECT_THAT(CreateAfterDecodeAudio("spectrogram { complex: true } } "
                                     "stages { time_stretch { rate_min: 2 rate_max: 1 }")
                  .message(),
              HasSubstr("rate_min <= rate_max"));
  EXPECT_THAT(CreateAfterDecodeAudio("spectrogram {} } stages { magnitude {}").message(),
              HasSubstr("complex tensor"));
  EXPECT_THAT(CreateAfterDecodeAudio("spectrogram { complex: true } } "
                                     "stages { magnitude { power: 0 }")
                  .message(),
              HasSubstr("power"));
  EXPECT_THAT(CreateAfterDecodeAudio("spectrogram { complex: true } } "
                                     "stages { time_stretch { fixed_rate: 2 hop_length: -1 }")
                  .message(),
              HasSubstr("hop_length"));
  EXPECT_THAT(CreateAfterDecodeAudio("spectrogram { complex: true } } "
                                     "stages { time_stretch { fixed_rate: 1e9 }")
                  .message(),
              HasSubstr("rates in"));
  EXPECT_THAT(
      CreateAfterDecodeAudio("spectrogram {} } stages { mel_scale { sample_rate: 0 }").message(),
      HasSubstr("sample_rate"));
}

// Pre-emphasis is y[n] = x[n] - c x[n-1] in float32, the first frame kept,
// per channel; the DCT's first orthonormal coefficient is the mean of the
// bands x sqrt(n_mels), and it refuses to keep more than there are.
TEST(AudioOps, PreemphasisLogAndDct) {
  const std::vector<float> interleaved = Interleaved(2, 400);
  auto raw = RunPipeline(*MakePipeline("stages { decode_audio {} }"),
                         Encode(interleaved, 2, 16000, kWav16));
  auto emphasized =
      RunPipeline(*MakePipeline("stages { decode_audio {} } stages { preemphasis { coeff: 0.5 } }"),
                  Encode(interleaved, 2, 16000, kWav16));
  ASSERT_TRUE(raw.status.ok() && emphasized.status.ok()) << emphasized.status;
  const auto* x = reinterpret_cast<const float*>(raw.bytes.data());
  const auto* y = reinterpret_cast<const float*>(emphasized.bytes.data());
  for (int c = 0; c < 2; ++c) {
    EXPECT_EQ(y[c * 400], x[c * 400]);
    for (int n = 1; n < 400; ++n) {
      const float product = 0.5f * x[c * 400 + n - 1];
      ASSERT_EQ(y[c * 400 + n], x[c * 400 + n] - product) << c << " " << n;
    }
  }
  const std::string mel =
      "stages { decode_audio {} } stages { mel_spectrogram { n_mels: 16 } } stages { log {} } ";
  const std::vector<uint8_t> wav = Encode(Interleaved(1, 3200), 1, 16000, kWav16);
  auto logmel = RunPipeline(*MakePipeline(mel), wav);
  auto mfcc = RunPipeline(*MakePipeline(mel + "stages { dct { n_mfcc: 4 } }"), wav);
  ASSERT_TRUE(logmel.status.ok() && mfcc.status.ok()) << mfcc.status;
  ASSERT_THAT(mfcc.shape, ::testing::ElementsAre(1, 4, 17));
  const auto* m = reinterpret_cast<const float*>(logmel.bytes.data());
  const auto* d = reinterpret_cast<const float*>(mfcc.bytes.data());
  for (int t = 0; t < 17; ++t) {
    double sum = 0;
    for (int b = 0; b < 16; ++b) sum += m[b * 17 + t];
    EXPECT_NEAR(d[t], sum / 4.0, 1e-4) << t;  // sum x sqrt(1/2) x sqrt(2/16)
  }
  proto::PipelineSpec too_many;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(mel + "stages { dct { n_mfcc: 17 } }",
                                                            &too_many));
  EXPECT_THAT(Pipeline::Create(too_many, PipelineOptions()).status().message(),
              HasSubstr("n_mfcc: 17 coefficients from 16 mel bands"));
}

// time_shift moves each sample by its own k in [-K, K] (every channel by
// the same), zero-filled or rolled; the spectrogram of a 1 kHz tone peaks
// in the bin that holds 1 kHz.
TEST(AudioOps, TimeShiftAndSpectrogram) {
  std::vector<float> ramp(2 * 800);
  for (int t = 0; t < 800; ++t) {
    ramp[2 * t] = static_cast<float>(t + 1) / 1024;
    ramp[2 * t + 1] = -static_cast<float>(t + 1) / 1024;
  }
  const std::vector<uint8_t> wav = Encode(ramp, 2, 8000, kWav16);
  auto plain = RunPipeline(*MakePipeline("stages { decode_audio {} }"), wav);
  ASSERT_TRUE(plain.status.ok());
  const auto* x = reinterpret_cast<const float*>(plain.bytes.data());
  for (const bool rollover : {false, true}) {
    std::set<int64_t> ks;
    auto p = MakePipeline(absl::StrCat("stages { decode_audio {} } stages { time_shift { ",
                                       "max_seconds: 0.01 rollover: ", rollover, " } }"));
    for (int64_t index = 0; index < 12; ++index) {
      auto shifted = RunPipeline(*p, wav, index);
      ASSERT_TRUE(shifted.status.ok()) << shifted.status;
      const auto* y = reinterpret_cast<const float*>(shifted.bytes.data());
      // Frame 0 came from frame -k (0 where that is outside, unless rolled).
      int64_t k = -81;
      for (int64_t c = -80; c <= 80 && k == -81; ++c) {
        bool same = true;
        for (int ch = 0; ch < 2 && same; ++ch) {
          for (int t = 0; t < 800 && same; ++t) {
            int64_t from = t - c;
            if (rollover) from = (from % 800 + 800) % 800;
            const float want = from >= 0 && from < 800 ? x[ch * 800 + from] : 0.0f;
            same = y[ch * 800 + t] == want;
          }
        }
        if (same) k = c;
      }
      ASSERT_NE(k, -81) << "no shift in [-80, 80] gives sample " << index;
      ks.insert(k);
    }
    EXPECT_GT(ks.size(), 3u) << "drawn per sample";
  }
  auto spec =
      RunPipeline(*MakePipeline("stages { decode_audio {} } stages { spectrogram { n_fft: 400 } }"),
                  Encode(Tone1kHz(), 1, 16000, kWav16));
  ASSERT_TRUE(spec.status.ok()) << spec.status;
  ASSERT_THAT(spec.shape, ::testing::ElementsAre(1, 201, 81));
  const auto* f = reinterpret_cast<const float*>(spec.bytes.data());
  for (int t = 10; t < 70; t += 9) {
    int best = 0;
    for (int b = 1; b < 201; ++b) {
      if (f[b * 81 + t] > f[best * 81 + t]) best = b;
    }
    EXPECT_EQ(best, 25) << "frame " << t;  // 1000 Hz / (16000 / 400) Hz a bin
  }
}

}  // namespace
}  // namespace prepflow
