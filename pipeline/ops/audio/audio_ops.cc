// The audio ops: decode_audio, downmix, fix_length, random_segment and
// resample, on float32 [channels, frames] values with a sample rate, as
// torchaudio defines them. Kernels are in audio_decode.h and resample.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/ops/audio/audio_decode.h"
#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/audio/resample.h"

namespace prepflow {
namespace {

using proto::Stage;

absl::Status ExpectAudio(const ValueType& in) {
  if (in.kind == ValueKind::kAudio) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "expects audio (put a decode_audio stage before it) but gets ", in.DebugString()));
}

void SetAudio(Sample& s, float* data, int64_t channels, int64_t frames, int rate) {
  s.kind = ValueKind::kAudio;
  s.data = reinterpret_cast<uint8_t*>(data);
  s.size = sizeof(float) * channels * frames;
  s.shape = {channels, frames};
  s.view = ImageView();
  s.sample_rate = rate;
}

const float* Samples(const Sample& s) { return reinterpret_cast<const float*>(s.data); }

// ResourceExhausted when an op would make audio longer than the limit.
absl::Status CheckFrames(const StageContext& ctx, const char* op, int64_t frames) {
  if (ctx.decode == nullptr || frames <= MaxAudioFrames(*ctx.decode)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrFormat("%s: %d frames is over the limit (--max-audio-seconds %g at %d Hz)", op,
                      frames, ctx.decode->max_audio_seconds, kMaxAudioRate));
}

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
    const float* in = Samples(s);
    const auto n = static_cast<float>(channels);
    for (int64_t t = 0; t < frames; ++t) {
      float sum = 0;
      for (int64_t c = 0; c < channels; ++c) sum += in[c * frames + t];
      out[t] = sum / n;
    }
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
    absl::StatusOr<std::shared_ptr<const ResampleKernel>> kernel = KernelFrom(s.sample_rate);
    if (!kernel.ok()) return kernel.status();
    const int64_t channels = s.shape[0], frames = s.shape[1];
    const int64_t n = (*kernel)->OutputFrames(frames);
    if (absl::Status st = CheckFrames(ctx, "resample", n); !st.ok()) return st;
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * channels * n + 1));
    for (int64_t c = 0; c < channels; ++c) {
      (*kernel)->Apply(Samples(s) + c * frames, frames, out + c * n);
    }
    SetAudio(s, out, channels, n, rate_);
    return absl::OkStatus();
  }

 private:
  // Kernels by input rate, made once each (a dataset has few rates; past
  // kMaxKernels distinct ones, the rest are made per sample).
  absl::StatusOr<std::shared_ptr<const ResampleKernel>> KernelFrom(int from) const {
    static constexpr size_t kMaxKernels = 32;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = kernels_.find(from); it != kernels_.end()) return it->second;
    }
    absl::StatusOr<ResampleKernel> made = ResampleKernel::Make(from, rate_, params_);
    if (!made.ok()) return made.status();
    auto kernel = std::make_shared<const ResampleKernel>(*std::move(made));
    absl::MutexLock lock(&mu_);
    if (kernels_.size() < kMaxKernels) kernels_.emplace(from, kernel);
    return kernel;
  }

  int rate_ = 0;
  ResampleParams params_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<int, std::shared_ptr<const ResampleKernel>> kernels_
      ABSL_GUARDED_BY(mu_);
};

template <typename T>
OpFactory FactoryOf() {
  return [](const proto::Stage& stage) { return T::Create(stage); };
}

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
}

}  // namespace prepflow
