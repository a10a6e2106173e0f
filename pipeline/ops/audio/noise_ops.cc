// add_noise: noise from a noise set, mixed in at a drawn SNR.
//
// The set is decoded once, when the pipeline is built (Op::Open), each clip
// mixed down to mono; a waveform at another rate than a clip's gets the
// clip resampled with torchaudio's kernel, once per rate (PerRate). Apply
// only draws and mixes, so a sample's result is the same wherever it runs:
// the same bytes decode, mix down and resample to the same floats.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/ops/audio/audio_decode.h"
#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/audio/audio_op.h"
#include "pipeline/ops/audio/resample.h"

namespace prepflow {
namespace {

using audio::ExpectAudio;
using audio::Samples;
using proto::Stage;

// One clip of the set: mono float32 at `rate`.
struct NoiseClip {
  std::vector<float> samples;
  int rate = 0;
};
using NoiseClips = std::vector<std::shared_ptr<const NoiseClip>>;

// `a` mixed down to mono as downmix does (one channel stays as it is).
NoiseClip MixDown(const DecodedAudio& a) {
  NoiseClip clip;
  clip.rate = a.sample_rate;
  clip.samples.resize(static_cast<size_t>(a.frames));
  audio::ChannelMean(a.data, a.channels, a.frames, clip.samples.data());
  return clip;
}

// The set at a rate other than its clips' own, its bytes counted in the
// op's total from when it is made until it is dropped (PerRate keeps one
// per rate, and drops a copy made twice or past its count).
struct ResampledClips {
  NoiseClips clips;
  std::atomic<int64_t>* held = nullptr;
  int64_t bytes = 0;

  ResampledClips() = default;
  ResampledClips(ResampledClips&& o) noexcept
      : clips(std::move(o.clips)), held(o.held), bytes(std::exchange(o.bytes, 0)) {}
  ResampledClips& operator=(ResampledClips&&) = delete;
  ~ResampledClips() {
    if (held != nullptr) held->fetch_sub(bytes);
  }
};

class AddNoiseOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::AddNoise& p = stage.add_noise();
    if (p.path().empty()) {
      return absl::InvalidArgumentError(
          "path: name the noise set (a folder of audio files, a manifest or shards)");
    }
    if (!(std::abs(p.snr_min()) <= kMaxSnr && std::abs(p.snr_max()) <= kMaxSnr &&
          p.snr_min() <= p.snr_max())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("snr_min, snr_max: must be finite, within +-%g dB and snr_min <= "
                          "snr_max, got %g and %g",
                          kMaxSnr, p.snr_min(), p.snr_max()));
    }
    if (!(p.p() >= 0 && p.p() <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat("p: must be 0 to 1, got %g", p.p()));
    }
    if (p.max_bytes() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_bytes: must be positive, got ", p.max_bytes()));
    }
    auto op = std::make_unique<AddNoiseOp>();
    op->params_ = p;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return in;
  }

  absl::Status Open(const OpEnvironment& env) override;

  // Draws (u < p when p < 1), the clip, the SNR, then the window's first
  // frame; the window is the clip from there, repeated when the clip is
  // shorter than the waveform.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    if (params_.p() < 1 && !(rng.Uniform() < params_.p())) return absl::OkStatus();
    const int64_t pick = rng.UniformInt(0, static_cast<int64_t>(native_->size()) - 1);
    const double snr = rng.Uniform(params_.snr_min(), params_.snr_max());
    std::shared_ptr<const ResampledClips> keep;
    absl::StatusOr<const NoiseClips*> at_rate = Clips(s.sample_rate, &keep);
    if (!at_rate.ok()) return at_rate.status();
    const std::vector<float>& clip = (**at_rate)[pick]->samples;
    const auto length = static_cast<int64_t>(clip.size());
    const int64_t frames = s.shape[1];
    if (frames == 0 || length == 0) return absl::OkStatus();
    const int64_t first = rng.UniformInt(0, length >= frames ? length - frames : length - 1);
    auto* window =
        reinterpret_cast<float*>(ctx.ws->ScratchFor(s.data)->Reserve(sizeof(float) * frames));
    for (int64_t t = 0, j = first; t < frames; ++t, j = j + 1 == length ? 0 : j + 1) {
      window[t] = clip[j];
    }
    Mix(snr, window, ctx, s);
    return absl::OkStatus();
  }

 private:
  static constexpr double kMaxSnr = 200;

  // The set with every clip at `rate`: the clips as decoded where they are
  // at it, the others resampled (kept alive by `keep`).
  absl::StatusOr<const NoiseClips*> Clips(int rate,
                                          std::shared_ptr<const ResampledClips>* keep) const {
    if (rate == native_rate_) return native_.get();
    absl::StatusOr<std::shared_ptr<const ResampledClips>> made = at_rate_.Get(rate);
    if (!made.ok()) return made.status();
    *keep = *std::move(made);
    return &(*keep)->clips;
  }
  absl::StatusOr<ResampledClips> Resampled(int rate) const;

  // out = x + scale * window per channel, where scale makes the channel's
  // energy over the window's `snr` dB: 10^((10 log10(Es / En) - snr) / 20).
  // Silence (either energy 0) adds nothing.
  void Mix(double snr, const float* window, const StageContext& ctx, Sample& s) const {
    const int64_t channels = s.shape[0], frames = s.shape[1];
    double noise_energy = 0;
    for (int64_t t = 0; t < frames; ++t) noise_energy += double{window[t]} * window[t];
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, window, s.size));
    const float* in = Samples(s);
    for (int64_t c = 0; c < channels; ++c) {
      const float* x = in + c * frames;
      double energy = 0;
      for (int64_t t = 0; t < frames; ++t) energy += double{x[t]} * x[t];
      const auto scale =
          energy > 0 && noise_energy > 0
              ? static_cast<float>(std::sqrt(energy / noise_energy) * std::pow(10.0, -snr / 20))
              : 0.0f;
      float* y = out + c * frames;
      for (int64_t t = 0; t < frames; ++t) y[t] = x[t] + scale * window[t];
    }
    s.data = reinterpret_cast<uint8_t*>(out);
  }

  proto::AddNoise params_;
  int64_t limit_ = 0;  // max_bytes, or less where the environment says
  std::string limit_name_ = "max_bytes";
  std::shared_ptr<const NoiseClips> native_;  // as decoded (mono)
  int native_rate_ = 0;                       // every clip's, or 0 when they differ
  int64_t native_bytes_ = 0;
  // What the set holds at every rate (native_bytes_ and each resampled
  // set's), within limit_. Before at_rate_: its sets count out into it.
  mutable std::atomic<int64_t> held_{0};
  audio::PerRate<ResampledClips> at_rate_{[this](int rate) { return Resampled(rate); }};
};

absl::Status AddNoiseOp::Open(const OpEnvironment& env) {
  const std::string& path = params_.path();
  if (!env.open_data || env.decode == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("path: the noise set ", path, " cannot be opened here (no data access)"));
  }
  absl::StatusOr<std::unique_ptr<OpData>> data = env.open_data(path);
  if (!data.ok()) {
    return absl::Status(data.status().code(),
                        absl::StrCat("path: noise set: ", data.status().message()));
  }
  if ((*data)->size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("path: noise set ", path, " holds no audio"));
  }
  limit_ = params_.max_bytes();
  if (env.max_data_bytes > 0 && env.max_data_bytes < limit_) {
    limit_ = env.max_data_bytes;
    limit_name_ = "this worker's limit for an op's data (a quarter of its --max-memory-bytes)";
  }
  Buffer bytes, decoded, scratch;
  auto clips = std::make_shared<NoiseClips>();
  for (int64_t i = 0; i < (*data)->size(); ++i) {
    size_t size = 0;
    DecodedAudio a;
    absl::Status st = (*data)->Read(i, &bytes, &size);
    if (st.ok()) st = DecodeAudio(bytes.data(), size, *env.decode, &decoded, &scratch, &a);
    if (st.ok() && a.frames == 0) st = absl::InvalidArgumentError("no frames");
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("path: noise clip ", (*data)->Where(i), ": ", st.message()));
    }
    native_bytes_ += static_cast<int64_t>(sizeof(float)) * a.frames;
    if (native_bytes_ > limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "max_bytes: noise set ", path, " decodes to more than ", limit_, " bytes (float32 mono, ",
          limit_name_, ") by ", (*data)->Where(i), "; use less noise, or raise max_bytes"));
    }
    clips->push_back(std::make_shared<const NoiseClip>(MixDown(a)));
    native_rate_ = i == 0 || native_rate_ == a.sample_rate ? a.sample_rate : 0;
  }
  native_ = std::move(clips);
  held_ = native_bytes_;
  return absl::OkStatus();
}

absl::StatusOr<ResampledClips> AddNoiseOp::Resampled(int rate) const {
  std::vector<ResampleKernel> kernels;  // one per clip at another rate, in order
  int64_t bytes = 0;
  for (const auto& clip : *native_) {
    if (clip->rate == rate) continue;
    absl::StatusOr<ResampleKernel> k = ResampleKernel::Make(clip->rate, rate, ResampleParams());
    if (!k.ok()) {
      return absl::Status(k.status().code(),
                          absl::StrCat("add_noise: resampling a ", clip->rate,
                                       " Hz noise clip: ", k.status().message()));
    }
    bytes += static_cast<int64_t>(sizeof(float)) *
             k->OutputFrames(static_cast<int64_t>(clip->samples.size()));
    kernels.push_back(*std::move(k));
  }
  // Taken before the work: every rate's copy counts in one total.
  if (const int64_t before = held_.fetch_add(bytes); before + bytes > limit_) {
    held_.fetch_sub(bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        "add_noise: max_bytes: noise set ", params_.path(), " at ", rate, " Hz takes ", bytes,
        " bytes more beside the ", before, " it holds, over ", limit_, " (", limit_name_, ")"));
  }
  ResampledClips out;
  out.held = &held_;
  out.bytes = bytes;
  auto kernel = kernels.begin();
  for (const auto& clip : *native_) {
    if (clip->rate == rate) {
      out.clips.push_back(clip);
      continue;
    }
    auto made = std::make_shared<NoiseClip>();
    made->rate = rate;
    const auto frames = static_cast<int64_t>(clip->samples.size());
    made->samples.resize(static_cast<size_t>(kernel->OutputFrames(frames)));
    kernel->Apply(clip->samples.data(), frames, made->samples.data());
    out.clips.push_back(std::move(made));
    ++kernel;
  }
  return out;
}

}  // namespace

void RegisterAudioNoiseOps(OpRegistry* registry) {
  registry->Register(Stage::kAddNoise, FactoryOf<AddNoiseOp>());
}

}  // namespace prepflow
