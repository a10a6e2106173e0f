// The audio ops: decode_audio, downmix, fix_length, random_segment,
// time_shift, resample, spectrogram, mel_spectrogram, amplitude_to_db and the
// SpecAugment masks, on
// float32 [channels, frames] values with a sample rate (the features are
// tensors), as torchaudio defines them. Kernels are in audio_decode.h,
// resample.h and spectrogram.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/ops/audio/audio_decode.h"
#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/audio/audio_op.h"
#include "pipeline/ops/audio/resample.h"
#include "pipeline/ops/audio/spectrogram.h"

namespace prepflow {
namespace {

using audio::CheckFrames;
using audio::ExpectAudio;
using audio::PerRate;
using audio::Samples;
using audio::SetAudio;
using audio::SetTensor;
using proto::Stage;

// ------------------------------------------------------------ decode_audio

class DecodeAudioOp : public Op {
 public:
  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kEncoded) {
      return absl::InvalidArgumentError(
          absl::StrCat("expects encoded bytes but gets ", in.DebugString()));
    }
    return ValueType{ValueKind::kAudio, {-1, -1}};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    static const DecodeOptions kDefaults;
    const DecodeOptions& options = ctx.decode != nullptr ? *ctx.decode : kDefaults;
    // Two buffers apart from the input and from each other (a buffer is
    // told apart by an address inside its storage, so the first gets some).
    Buffer* frames = ctx.ws->ScratchFor(s.data);
    Buffer* out = ctx.ws->ScratchFor(s.data, frames->Reserve(1));
    DecodedAudio audio;
    if (absl::Status st = DecodeAudio(s.data, s.size, options, out, frames, &audio); !st.ok()) {
      return st;
    }
    SetAudio(s, audio.data, audio.channels, audio.frames, audio.sample_rate);
    return absl::OkStatus();
  }
};

// ----------------------------------------------------------------- downmix

class DownmixOp : public Op {
 public:
  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return ValueType{ValueKind::kAudio, {1, in.shape[1]}, in.sample_rate};
  }

  // waveform.mean(0, keepdim=True): a float32 sum over the channels in
  // order, divided by their number.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int64_t channels = s.shape[0], frames = s.shape[1];
    if (channels == 1) return absl::OkStatus();
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * frames));
    audio::ChannelMean(Samples(s), channels, frames, out);
    SetAudio(s, out, 1, frames, s.sample_rate);
    return absl::OkStatus();
  }
};

// ---------------------------------------------- fix_length, random_segment

// A length in frames, or in seconds at each sample's rate.
struct Length {
  int64_t frames = 0;
  double seconds = 0;

  static absl::StatusOr<Length> Read(int64_t frames, double seconds) {
    if ((frames != 0) == (seconds != 0) || frames < 0 || !(seconds >= 0 && seconds <= 1e6)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "frames, seconds: set one, positive (got frames %d, seconds %g)", frames, seconds));
    }
    return Length{frames, seconds};
  }
  int64_t At(int rate) const {
    return frames != 0 ? frames : static_cast<int64_t>(std::floor(seconds * rate));
  }
  // The length every value has, given the rate they all have (0: varies),
  // or -1.
  int64_t Static(int rate) const { return frames != 0 ? frames : rate > 0 ? At(rate) : -1; }
};

// Copies frames [start, start + n) of each channel (zeros past the end) into
// a value of n frames.
absl::Status Window(const StageContext& ctx, const char* op, Sample& s, int64_t start, int64_t n) {
  if (absl::Status st = CheckFrames(ctx, op, n); !st.ok()) return st;
  const int64_t channels = s.shape[0], frames = s.shape[1];
  auto* out = reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * channels * n + 1));
  const int64_t kept = std::clamp<int64_t>(frames - start, 0, n);
  for (int64_t c = 0; c < channels; ++c) {
    float* row = out + c * n;
    std::memcpy(row, Samples(s) + c * frames + start, sizeof(float) * kept);
    std::fill(row + kept, row + n, 0.0f);
  }
  SetAudio(s, out, channels, n, s.sample_rate);
  return absl::OkStatus();
}

class FixLengthOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    auto length = Length::Read(stage.fix_length().frames(), stage.fix_length().seconds());
    if (!length.ok()) return length.status();
    auto op = std::make_unique<FixLengthOp>();
    op->length_ = *length;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return ValueType{
        ValueKind::kAudio, {in.shape[0], length_.Static(in.sample_rate)}, in.sample_rate};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int64_t n = length_.At(s.sample_rate);
    if (n == s.shape[1]) return absl::OkStatus();
    return Window(ctx, "fix_length", s, 0, n);
  }

 private:
  Length length_;
};

class RandomSegmentOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomSegment& p = stage.random_segment();
    auto length = Length::Read(p.frames(), p.seconds());
    if (!length.ok()) return length.status();
    auto op = std::make_unique<RandomSegmentOp>();
    op->length_ = *length;
    op->pad_ = p.pad();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return ValueType{ValueKind::kAudio,
                     {in.shape[0], pad_ ? length_.Static(in.sample_rate) : -1},
                     in.sample_rate};
  }

  // The start is uniform over [0, frames - n]; shorter audio starts at 0
  // (padded, or whole without `pad`). One draw per sample either way.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const int64_t n = length_.At(s.sample_rate), frames = s.shape[1];
    const int64_t start = rng.UniformInt(0, std::max<int64_t>(frames - n, 0));
    if (frames <= n && (!pad_ || frames == n)) return absl::OkStatus();
    return Window(ctx, "random_segment", s, start, n);
  }

 private:
  Length length_;
  bool pad_ = true;
};

// ---------------------------------------------------------------- resample

class ResampleOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Resample& p = stage.resample();
    auto op = std::make_unique<ResampleOp>();
    if (p.rate() <= 0 || p.rate() > kMaxAudioRate) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rate: must be 1 to %d Hz, got %d", kMaxAudioRate, p.rate()));
    }
    op->rate_ = p.rate();
    op->params_.lowpass_filter_width = p.lowpass_filter_width();
    op->params_.rolloff = p.rolloff();
    op->params_.kaiser = p.method() == proto::Resample::METHOD_SINC_KAISER;
    op->params_.beta = p.beta();
    if (absl::Status s = ResampleKernel::CheckParams(op->params_); !s.ok()) return s;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return ValueType{ValueKind::kAudio, {in.shape[0], -1}, rate_};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    if (s.sample_rate == rate_) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<const ResampleKernel>> kernel = kernels_.Get(s.sample_rate);
    if (!kernel.ok()) return kernel.status();
    return audio::ResampleInto(**kernel, ctx, "resample", rate_, s);
  }

 private:
  int rate_ = 0;
  ResampleParams params_;
  PerRate<ResampleKernel> kernels_{
      [this](int from) { return ResampleKernel::Make(from, rate_, params_); }};
};

// --------------------------------------------- mel_spectrogram, amplitude_to_db

class MelSpectrogramOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::MelSpectrogram& p = stage.mel_spectrogram();
    absl::StatusOr<std::shared_ptr<const Stft>> stft =
        Stft::Make(p.n_fft(), p.win_length(), p.hop_length(), p.power());
    if (!stft.ok()) return stft.status();
    auto op = std::make_unique<MelSpectrogramOp>();
    op->stft_ = *std::move(stft);
    op->mel_ = MelOptions{p.n_mels(), p.f_min(), p.f_max(), p.slaney_scale(), p.slaney_norm()};
    // The bands checked at a rate that holds f_max (each sample's rate is
    // checked when its filterbank is made).
    const int rate = static_cast<int>(std::max(2 * std::ceil(p.f_max()), 2.0 * p.f_min() + 2));
    if (auto fb = MelFilterbank(op->stft_->bins(), rate, op->mel_); !fb.ok()) return fb.status();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    const int64_t frames = in.shape[1] >= 0 ? stft_->Frames(in.shape[1]) : -1;
    return ValueType{ValueKind::kTensor, {in.shape[0], mel_.n_mels, frames}};
  }

  // MelScale(Spectrogram(x)): per channel, the power spectrogram [bins, T],
  // then each frame's bins through the filterbank ([bins, n_mels]).
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    absl::StatusOr<std::shared_ptr<const MelBank>> bank = banks_.Get(s.sample_rate);
    if (!bank.ok()) return bank.status();
    const int64_t channels = s.shape[0], length = s.shape[1], frames = stft_->Frames(length);
    const int bins = stft_->bins(), n = mel_.n_mels;
    auto* out =
        reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * channels * n * frames + 1));
    thread_local std::vector<float> spec, scratch;
    thread_local std::vector<double> sums;
    spec.resize(static_cast<size_t>(bins) * frames);
    for (int64_t c = 0; c < channels; ++c) {
      if (absl::Status st = stft_->Apply(Samples(s) + c * length, length, spec.data(), &scratch);
          !st.ok()) {
        return st;
      }
      (*bank)->Project(spec.data(), frames, out + c * n * frames, &sums);
    }
    SetTensor(s, out, {channels, n, frames});
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const Stft> stft_;
  MelOptions mel_;
  PerRate<MelBank> banks_{[this](int rate) { return MelBank::Make(stft_->bins(), rate, mel_); }};
};

// ------------------------------------------------------------- spectrogram

class SpectrogramOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Spectrogram& p = stage.spectrogram();
    absl::StatusOr<std::shared_ptr<const Stft>> stft =
        Stft::Make(p.n_fft(), p.win_length(), p.hop_length(), p.power());
    if (!stft.ok()) return stft.status();
    auto op = std::make_unique<SpectrogramOp>();
    op->stft_ = *std::move(stft);
    op->complex_ = p.complex();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    const int64_t frames = in.shape[1] >= 0 ? stft_->Frames(in.shape[1]) : -1;
    if (complex_) return ValueType{ValueKind::kTensor, {in.shape[0], stft_->bins(), frames, 2}};
    return ValueType{ValueKind::kTensor, {in.shape[0], stft_->bins(), frames}};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int64_t channels = s.shape[0], length = s.shape[1], frames = stft_->Frames(length);
    const int bins = stft_->bins();
    const int parts = complex_ ? 2 : 1;  // floats per value
    auto* out = reinterpret_cast<float*>(
        ctx.Output(s.data, sizeof(float) * channels * bins * frames * parts + 1));
    thread_local std::vector<float> scratch;
    for (int64_t c = 0; c < channels; ++c) {
      const float* x = Samples(s) + c * length;
      float* y = out + c * bins * frames * parts;
      absl::Status st = complex_ ? stft_->ApplyComplex(x, length, y, &scratch)
                                 : stft_->Apply(x, length, y, &scratch);
      if (!st.ok()) return st;
    }
    if (complex_) {
      SetTensor(s, out, {channels, bins, frames, 2});
    } else {
      SetTensor(s, out, {channels, bins, frames});
    }
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<const Stft> stft_;
  bool complex_ = false;
};

// -------------------------------------------------------------- time_shift

class TimeShiftOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::TimeShift& p = stage.time_shift();
    if (!(p.max_seconds() >= 0 && p.max_seconds() <= kMaxAudioSecondsLimit)) {
      return absl::InvalidArgumentError(absl::StrFormat("max_seconds: must be 0 to %d, got %g",
                                                        kMaxAudioSecondsLimit, p.max_seconds()));
    }
    auto op = std::make_unique<TimeShiftOp>();
    op->max_seconds_ = p.max_seconds();
    op->rollover_ = p.rollover();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return in;
  }

  // k uniform over [-K, K]; frame t of the output is frame t - k of the
  // input (zero, or wrapped around with rollover, where that is outside).
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const auto most = static_cast<int64_t>(std::floor(max_seconds_ * s.sample_rate));
    const int64_t k = rng.UniformInt(-most, most);
    const int64_t channels = s.shape[0], frames = s.shape[1];
    if (k == 0 || frames == 0) return absl::OkStatus();
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
    const float* in = Samples(s);
    const int64_t shift = rollover_ ? ((k % frames) + frames) % frames : k;
    for (int64_t c = 0; c < channels; ++c) {
      const float* x = in + c * frames;
      float* y = out + c * frames;
      for (int64_t t = 0; t < frames; ++t) {
        const int64_t from = t - shift;
        y[t] =
            rollover_ ? x[(from + frames) % frames] : (from >= 0 && from < frames ? x[from] : 0.0f);
      }
    }
    s.data = reinterpret_cast<uint8_t*>(out);
    return absl::OkStatus();
  }

 private:
  static constexpr int kMaxAudioSecondsLimit = 86400;
  double max_seconds_ = 0.1;
  bool rollover_ = false;
};

// --------------------------------------------------------- amplitude_to_db

class AmplitudeToDbOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::AmplitudeToDb& p = stage.amplitude_to_db();
    if (!(p.top_db() >= 0 && std::isfinite(p.top_db()))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("top_db: must be finite and >= 0 (0: none), got %g", p.top_db()));
    }
    auto op = std::make_unique<AmplitudeToDbOp>();
    op->multiplier_ = p.magnitude() ? 20.0f : 10.0f;
    op->top_db_ = static_cast<float>(p.top_db());
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expects a tensor (put it after mel_spectrogram) but gets ", in.DebugString()));
    }
    return in;
  }

  // F.amplitude_to_DB with amin 1e-10 and ref 1 (log10(ref) = 0): float32
  // multiplier * log10(max(x, amin)); top_db floors at the sample's maximum
  // minus top_db.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t n = s.size / sizeof(float);
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
    const float* in = reinterpret_cast<const float*>(s.data);
    float peak = -INFINITY;
    for (size_t i = 0; i < n; ++i) {
      out[i] = multiplier_ * std::log10(std::max(in[i], 1e-10f));
      peak = std::max(peak, out[i]);
    }
    if (top_db_ > 0) {
      const float floor = peak - top_db_;
      for (size_t i = 0; i < n; ++i) out[i] = std::max(out[i], floor);
    }
    s.data = reinterpret_cast<uint8_t*>(out);
    return absl::OkStatus();
  }

 private:
  float multiplier_ = 10, top_db_ = 0;
};

// ------------------------------------------ frequency_masking, time_masking

// torchaudio's mask_along_axis on one sample: the same band (or frames) of
// every channel, its width and start from two torch.rand(1) draws.
class AxisMaskingOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    auto op = std::make_unique<AxisMaskingOp>();
    const bool time = stage.has_time_masking();
    op->from_end_ = time ? 1 : 2;
    op->param_ =
        time ? stage.time_masking().time_mask_param() : stage.frequency_masking().freq_mask_param();
    op->p_ = time ? stage.time_masking().p() : stage.frequency_masking().p();
    const char* field = time ? "time_mask_param" : "freq_mask_param";
    if (op->param_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: must be >= 0, got %d", field, op->param_));
    }
    if (!(op->p_ >= 0 && op->p_ <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat("p: must be in [0, 1], got %g", op->p_));
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kTensor || in.shape.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expects a [..., freq, time] tensor (put it after mel_spectrogram) but gets ",
          in.DebugString()));
    }
    return in;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t rank = s.shape.size();
    const int64_t freq = s.shape[rank - 2], time = s.shape[rank - 1];
    const int64_t size = from_end_ == 1 ? time : freq;
    // _get_mask_param: with p < 1 the mask is also held to p of the axis.
    const int64_t param =
        p_ == 1.0 ? param_ : std::min<int64_t>(param_, static_cast<int64_t>(size * p_));
    if (param < 1) return absl::OkStatus();
    SampleRng rng = ctx.Rng(s);
    const float value = TorchRand(rng) * static_cast<float>(param);
    const float min_value = TorchRand(rng) * (static_cast<float>(size) - value);
    const auto start = static_cast<int64_t>(min_value);
    const int64_t end = start + static_cast<int64_t>(value);
    if (end <= start) return absl::OkStatus();
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
    if (reinterpret_cast<uint8_t*>(out) != s.data) std::memcpy(out, s.data, s.size);
    const int64_t planes = static_cast<int64_t>(s.size / sizeof(float)) / (freq * time);
    for (int64_t c = 0; c < planes; ++c) {
      float* plane = out + c * freq * time;
      if (from_end_ == 1) {
        for (int64_t f = 0; f < freq; ++f)
          std::fill(plane + f * time + start, plane + f * time + end, 0.0f);
      } else {
        std::fill(plane + start * time, plane + end * time, 0.0f);
      }
    }
    s.data = reinterpret_cast<uint8_t*>(out);
    return absl::OkStatus();
  }

 private:
  // torch.rand(1): a float32 with 24 random bits, in [0, 1).
  static float TorchRand(SampleRng& rng) {
    return static_cast<float>(std::floor(rng.Uniform() * 16777216.0) / 16777216.0);
  }

  int from_end_ = 1;  // the masked axis: 1 time (last), 2 frequency
  int param_ = 0;
  double p_ = 1;
};

}  // namespace

void RegisterAudioOps(OpRegistry* registry) {
  registry->Register(Stage::kDecodeAudio, [](const Stage&) -> absl::StatusOr<std::unique_ptr<Op>> {
    return std::make_unique<DecodeAudioOp>();
  });
  registry->Register(Stage::kDownmix, [](const Stage&) -> absl::StatusOr<std::unique_ptr<Op>> {
    return std::make_unique<DownmixOp>();
  });
  registry->Register(Stage::kFixLength, FactoryOf<FixLengthOp>());
  registry->Register(Stage::kRandomSegment, FactoryOf<RandomSegmentOp>());
  registry->Register(Stage::kResample, FactoryOf<ResampleOp>());
  registry->Register(Stage::kMelSpectrogram, FactoryOf<MelSpectrogramOp>());
  registry->Register(Stage::kAmplitudeToDb, FactoryOf<AmplitudeToDbOp>());
  registry->Register(Stage::kFrequencyMasking, FactoryOf<AxisMaskingOp>());
  registry->Register(Stage::kTimeMasking, FactoryOf<AxisMaskingOp>());
  RegisterAudioFeatureOps(registry);
  registry->Register(Stage::kSpectrogram, FactoryOf<SpectrogramOp>());
  registry->Register(Stage::kTimeShift, FactoryOf<TimeShiftOp>());
  RegisterAudioStretchOps(registry);
  RegisterAudioNoiseOps(registry);
  RegisterAudioVadOps(registry);
}

}  // namespace prepflow
