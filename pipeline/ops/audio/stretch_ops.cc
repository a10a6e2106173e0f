// The complex-spectrum ops: time_stretch (torchaudio's phase vocoder),
// magnitude (|z|^power) and mel_scale (a spectrogram onto the mel
// filterbank), for pipelines that stretch in the frequency domain (cedar's
// and PRESTO's: STFT -> time stretch -> masks -> mel). A complex value is a
// float32 tensor whose last dimension is 2 (real, imaginary), as
// torch.view_as_real lays it out.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/audio/audio_op.h"
#include "pipeline/ops/audio/spectrogram.h"

namespace prepflow {
namespace {

using audio::ExpectTensor;
using audio::SetTensor;
using proto::Stage;

// A complex spectrogram's type: [..., bins, frames, 2] with bins fixed.
absl::Status ExpectComplex(const ValueType& in) {
  if (absl::Status s = ExpectTensor(in, 3, "a complex spectrogram [..., bins, frames, 2]");
      !s.ok()) {
    return s;
  }
  const size_t r = in.shape.size();
  if (in.shape[r - 1] != 2 || in.shape[r - 3] <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expects a complex spectrogram [..., bins, frames, 2] (spectrogram with complex: "
        "true) but gets ",
        in.DebugString()));
  }
  return absl::OkStatus();
}

// How many blocks a tensor of `shape` holds: the product of the dimensions
// before dim `first`.
int64_t Leading(const Shape& shape, size_t first) {
  int64_t n = 1;
  for (size_t d = 0; d < first; ++d) n *= shape[d];
  return n;
}

// ------------------------------------------------------------ time_stretch

constexpr double kMinRate = 0.1, kMaxRate = 10;

class TimeStretchOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::TimeStretch& p = stage.time_stretch();
    const double min = p.fixed_rate() > 0 ? p.fixed_rate() : p.rate_min();
    const double max = p.fixed_rate() > 0 ? p.fixed_rate() : p.rate_max();
    if (!(min >= kMinRate && min <= max && max <= kMaxRate)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fixed_rate, or rate_min <= rate_max: rates in [%g, %g], got %g (or %g, %g)", kMinRate,
          kMaxRate, p.fixed_rate(), p.rate_min(), p.rate_max()));
    }
    if (p.hop_length() < 0 || p.hop_length() > (1 << 16)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("hop_length: must be 0 to 65536, got %d", p.hop_length()));
    }
    return std::make_unique<TimeStretchOp>(p.hop_length(), min, max);
  }

  TimeStretchOp(int hop, double min, double max)
      : min_(min), max_(max), advances_([hop](int bins) { return PhaseAdvance(hop, bins); }) {}

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectComplex(in); !s.ok()) return s;
    ValueType out = in;
    int64_t& frames = out.shape[in.shape.size() - 2];
    if (min_ != max_ || frames < 0) {
      frames = -1;
    } else if (min_ != 1.0) {
      frames = static_cast<int64_t>(std::ceil(frames / min_));
    }
    return out;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const double rate = min_ == max_ ? min_ : rng.Uniform(min_, max_);
    if (rate == 1.0) return absl::OkStatus();  // as torchaudio: the input itself
    const size_t r = s.shape.size();
    const int64_t bins = s.shape[r - 3], frames = s.shape[r - 2];
    const auto out_frames = static_cast<int64_t>(std::ceil(frames / rate));
    const int64_t slices = Leading(s.shape, r - 3) * bins;
    auto* out =
        reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * 2 * slices * out_frames + 1));
    absl::StatusOr<std::shared_ptr<const std::vector<float>>> advance =
        advances_.Get(static_cast<int>(bins));
    if (!advance.ok()) return advance.status();
    const float* in = audio::Samples(s);
    for (int64_t k = 0; k < slices; ++k) {
      Vocode(in + 2 * k * frames, frames, rate, out_frames, (**advance)[k % bins],
             out + 2 * k * out_frames);
    }
    Shape shape = s.shape;
    shape[r - 2] = out_frames;
    SetTensor(s, out, std::move(shape));
    return absl::OkStatus();
  }

 private:
  // torch.linspace(0, pi * hop, bins): each bin's expected phase advance
  // (hop 0: n_fft / 2 with n_fft = 2 (bins - 1), torchaudio's default).
  static absl::StatusOr<std::vector<float>> PhaseAdvance(int hop, int bins) {
    if (hop == 0) hop = bins - 1;
    std::vector<float> out(bins);
    for (int b = 0; b < bins; ++b) out[b] = TorchLinspace(0, M_PI * hop, bins, b);
    return out;
  }

  // One bin's frames [frames, 2] stretched to `steps` frames at `rate`, as
  // functional.phase_vocoder: step i at float(rate x i) (torch.arange),
  // magnitudes interpolated between the frames it falls between, phases
  // advanced by each pair's difference (wrapped about the expected advance)
  // and accumulated (in double, as torch.cumsum on the CPU).
  static void Vocode(const float* in, int64_t frames, double rate, int64_t steps, float advance,
                     float* out) {
    auto at = [&](int64_t t, int part) { return t < frames ? in[2 * t + part] : 0.0f; };
    constexpr auto kTwoPi = static_cast<float>(2 * M_PI);
    double acc = std::atan2(at(0, 1), at(0, 0));
    float previous = 0;  // phase[i - 1]
    for (int64_t i = 0; i < steps; ++i) {
      const auto step = static_cast<float>(rate * i);
      const auto t0 = static_cast<int64_t>(step), t1 = static_cast<int64_t>(step + 1.0f);
      const float re0 = at(t0, 0), im0 = at(t0, 1), re1 = at(t1, 0), im1 = at(t1, 1);
      if (i > 0) acc += previous;
      const float alpha = step - std::floor(step);
      const float mag = alpha * std::hypot(re1, im1) + (1.0f - alpha) * std::hypot(re0, im0);
      const auto phase = static_cast<float>(acc);
      out[2 * i] = mag * std::cos(phase);
      out[2 * i + 1] = mag * std::sin(phase);
      float d = std::atan2(im1, re1) - std::atan2(im0, re0) - advance;
      d = d - kTwoPi * std::nearbyint(d / kTwoPi);
      previous = d + advance;
    }
  }

  double min_ = 1, max_ = 1;
  // The phase advance per spectrogram size (one, in practice).
  audio::PerRate<std::vector<float>> advances_;
};

// --------------------------------------------------------------- magnitude

class MagnitudeOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    auto op = std::make_unique<MagnitudeOp>();
    op->power_ = stage.magnitude().power();
    if (!(op->power_ > 0 && op->power_ <= 16)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("power: must be in (0, 16], got %g", op->power_));
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectTensor(in, 1, "a complex tensor [..., 2]"); !s.ok()) return s;
    if (in.shape.back() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expects a complex tensor [..., 2] (real, imaginary) but gets ", in.DebugString()));
    }
    ValueType out = in;
    out.shape.pop_back();
    return out;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t n = s.size / (2 * sizeof(float));
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, n * sizeof(float) + 1));
    const float* in = audio::Samples(s);
    const auto power = static_cast<float>(power_);
    for (size_t i = 0; i < n; ++i) {
      const float mag = std::hypot(in[2 * i], in[2 * i + 1]);
      out[i] = power_ == 2 ? mag * mag : power_ == 1 ? mag : std::pow(mag, power);
    }
    Shape shape = s.shape;
    shape.pop_back();
    SetTensor(s, out, std::move(shape));
    return absl::OkStatus();
  }

 private:
  double power_ = 2;
};

// --------------------------------------------------------------- mel_scale

class MelScaleOp : public Op {
 public:
  MelScaleOp(int rate, const MelOptions& o)
      : n_mels_(o.n_mels), banks_([rate, o](int bins) { return MelBank::Make(bins, rate, o); }) {}

  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::MelScale& p = stage.mel_scale();
    if (p.sample_rate() < 1 || p.sample_rate() > kMaxAudioRate) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sample_rate: must be 1 to %d, got %d", kMaxAudioRate, p.sample_rate()));
    }
    MelOptions o;
    o.n_mels = p.n_mels();
    o.f_min = p.f_min();
    o.f_max = p.f_max();
    o.slaney_scale = p.slaney_scale();
    o.slaney_norm = p.slaney_norm();
    // The bands are checked here, against a spectrogram of n_fft 400.
    if (absl::StatusOr<MelBank> b = MelBank::Make(201, p.sample_rate(), o); !b.ok()) {
      return b.status();
    }
    return std::make_unique<MelScaleOp>(p.sample_rate(), o);
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectTensor(in, 2, "a spectrogram [..., n_stft, frames]"); !s.ok()) {
      return s;
    }
    const int64_t bins = in.shape[in.shape.size() - 2];
    if (bins <= 0 || bins > (1 << 16)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expects a spectrogram [..., n_stft, frames] with n_stft fixed but gets ",
                       in.DebugString()));
    }
    if (absl::Status s = banks_.Get(static_cast<int>(bins)).status(); !s.ok()) return s;
    ValueType out = in;
    out.shape[in.shape.size() - 2] = n_mels_;
    return out;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t r = s.shape.size();
    const int64_t bins = s.shape[r - 2], frames = s.shape[r - 1];
    const int64_t slices = Leading(s.shape, r - 2), mels = n_mels_;
    absl::StatusOr<std::shared_ptr<const MelBank>> bank = banks_.Get(static_cast<int>(bins));
    if (!bank.ok()) return bank.status();
    auto* out =
        reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * slices * mels * frames + 1));
    thread_local std::vector<double> acc;
    for (int64_t k = 0; k < slices; ++k) {
      (*bank)->Project(audio::Samples(s) + k * bins * frames, frames, out + k * mels * frames,
                       &acc);
    }
    Shape shape = s.shape;
    shape[r - 2] = mels;
    SetTensor(s, out, std::move(shape));
    return absl::OkStatus();
  }

 private:
  int n_mels_;
  // The filterbank per spectrogram size (one, in practice).
  audio::PerRate<MelBank> banks_;
};

}  // namespace

void RegisterAudioStretchOps(OpRegistry* registry) {
  registry->Register(Stage::kTimeStretch, FactoryOf<TimeStretchOp>());
  registry->Register(Stage::kMagnitude, FactoryOf<MagnitudeOp>());
  registry->Register(Stage::kMelScale, FactoryOf<MelScaleOp>());
}

}  // namespace prepflow
