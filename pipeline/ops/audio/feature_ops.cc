// The speech-recipe ops: speed_perturb, vol and preemphasis on waveforms,
// kaldi_fbank (Kaldi's filterbank features, kaldi.h), utterance_cmvn,
// transpose, log and dct (MFCC's last step) on features, as torchaudio (and
// ESPnet, for CMVN) define them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/audio/audio_op.h"
#include "pipeline/ops/audio/kaldi.h"
#include "pipeline/ops/audio/resample.h"

namespace prepflow {
namespace {

using audio::ExpectAudio;
using audio::ExpectTensor;
using audio::MapFloats;
using audio::PerRate;
using audio::Samples;
using audio::SetAudio;
using audio::SetTensor;
using proto::Stage;

// ----------------------------------------------------------- speed_perturb

class SpeedPerturbOp : public Op {
 public:
  static constexpr int kMaxFactors = 16;

  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    auto op = std::make_unique<SpeedPerturbOp>();
    for (const double f : stage.speed_perturb().factors()) {
      if (!(f > 0 && f <= 10)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("factors: each must be in (0, 10], got %g", f));
      }
      op->factors_.push_back(f);
    }
    if (op->factors_.empty() || op->factors_.size() > kMaxFactors) {
      return absl::InvalidArgumentError(
          absl::StrFormat("factors: give 1 to %d speeds (e.g. [0.9, 1.0, 1.1])", kMaxFactors));
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return ValueType{ValueKind::kAudio, {in.shape[0], -1}, in.sample_rate};
  }

  // torchaudio.functional.speed: resample from int(factor * rate) to rate.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const auto pick =
        static_cast<int>(rng.UniformInt(0, static_cast<int64_t>(factors_.size()) - 1));
    const int rate = s.sample_rate;
    const auto source = static_cast<int64_t>(factors_[pick] * rate);
    if (source == rate) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<const ResampleKernel>> kernel =
        kernels_.Get(rate * kMaxFactors + pick);
    if (!kernel.ok()) return kernel.status();
    return audio::ResampleInto(**kernel, ctx, "speed_perturb", rate, s);
  }

 private:
  std::vector<double> factors_;
  // Keyed by rate x kMaxFactors + the factor's place.
  PerRate<ResampleKernel> kernels_{[this](int key) -> absl::StatusOr<ResampleKernel> {
    const int rate = key / kMaxFactors;
    const double factor = factors_[key % kMaxFactors];
    absl::StatusOr<ResampleKernel> k =
        ResampleKernel::Make(static_cast<int>(factor * rate), rate, ResampleParams());
    if (!k.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("speed_perturb: factor %g at %d Hz: %s",
                                                        factor, rate, k.status().message()));
    }
    return k;
  }};
};

// --------------------------------------------------------------------- vol

class VolOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Vol& p = stage.vol();
    if (!std::isfinite(p.gain()) || (p.gain_type() != proto::Vol::GAIN_TYPE_DB && p.gain() < 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "gain: must be finite, and >= 0 for an amplitude or power ratio; got %g", p.gain()));
    }
    auto op = std::make_unique<VolOp>();
    // Vol: amplitude as it is; F.gain(x, db) multiplies by 10^(db / 20);
    // power is 10 log10(gain) decibels. Each a float32 multiply.
    const double db =
        p.gain_type() == proto::Vol::GAIN_TYPE_POWER ? 10 * std::log10(p.gain()) : p.gain();
    op->ratio_ = static_cast<float>(
        p.gain_type() == proto::Vol::GAIN_TYPE_AMPLITUDE ? p.gain() : std::pow(10.0, db / 20));
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return in;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    MapFloats(ctx, s, [r = ratio_](float x) { return std::clamp(x * r, -1.0f, 1.0f); });
    return absl::OkStatus();
  }

 private:
  float ratio_ = 1;
};

// ------------------------------------------------------------- kaldi_fbank

class KaldiFbankOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    auto op = std::make_unique<KaldiFbankOp>();
    op->options_ = stage.kaldi_fbank();
    // Checked at 16 kHz now (each sample's rate when its plan is made).
    absl::StatusOr<KaldiFbank> at16k = KaldiFbank::Make(op->options_, 16000);
    if (!at16k.ok()) return at16k.status();
    op->columns_ = at16k->columns();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    int64_t frames = -1;
    if (in.sample_rate > 0 && in.shape[1] >= 0) {
      absl::StatusOr<std::shared_ptr<const KaldiFbank>> plan = plans_.Get(in.sample_rate);
      if (!plan.ok()) return plan.status();
      absl::StatusOr<int64_t> n = (*plan)->Frames(in.shape[1]);
      if (!n.ok()) return n.status();
      frames = *n;
    }
    return ValueType{ValueKind::kTensor, {frames, columns_}};
  }

  // torchaudio's channel=-1: the first channel.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    absl::StatusOr<std::shared_ptr<const KaldiFbank>> plan = plans_.Get(s.sample_rate);
    if (!plan.ok()) return plan.status();
    absl::StatusOr<int64_t> frames = (*plan)->Frames(s.shape[1]);
    if (!frames.ok()) return frames.status();
    auto* out =
        reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * *frames * columns_ + 1));
    thread_local std::vector<float> scratch;
    (*plan)->Apply(Samples(s), s.shape[1], out, &scratch);
    SetTensor(s, out, {*frames, columns_});
    return absl::OkStatus();
  }

 private:
  proto::KaldiFbank options_;
  int64_t columns_ = 0;
  PerRate<KaldiFbank> plans_{[this](int rate) { return KaldiFbank::Make(options_, rate); }};
};

// ---------------------------------------------------------- utterance_cmvn

class UtteranceCmvnOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::UtteranceCmvn& p = stage.utterance_cmvn();
    if (!(p.eps() >= 0 && std::isfinite(p.eps()))) {
      return absl::InvalidArgumentError(absl::StrFormat("eps: must be >= 0, got %g", p.eps()));
    }
    auto op = std::make_unique<UtteranceCmvnOp>();
    op->dim_ = p.dim();
    op->norm_vars_ = p.norm_vars();
    op->eps_ = p.eps();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectTensor(in, 1, "features (a tensor)"); !s.ok()) return s;
    const auto rank = static_cast<int>(in.shape.size());
    if (dim_ < -rank || dim_ >= rank) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dim: %d is not a dimension of %s", dim_, in.DebugString()));
    }
    return in;
  }

  // Per position off `dim`: the mean over it (and the standard deviation,
  // two-pass, at least eps), in double, each value rounded once.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const auto rank = static_cast<int>(s.shape.size());
    const int d = dim_ < 0 ? dim_ + rank : dim_;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < rank; ++i) {
      if (i < d) outer *= s.shape[i];
      if (i > d) inner *= s.shape[i];
    }
    const int64_t n = s.shape[d];
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
    const float* in = reinterpret_cast<const float*>(s.data);
    for (int64_t o = 0; o < outer && n > 0; ++o) {
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t base = o * n * inner + k;
        double sum = 0;
        for (int64_t t = 0; t < n; ++t) sum += in[base + t * inner];
        const double mean = sum / static_cast<double>(n);
        double scale = 1;
        if (norm_vars_) {
          double sq = 0;
          for (int64_t t = 0; t < n; ++t) {
            const double v = in[base + t * inner] - mean;
            sq += v * v;
          }
          scale = 1 / std::max(std::sqrt(sq / static_cast<double>(n)), eps_);
        }
        for (int64_t t = 0; t < n; ++t) {
          out[base + t * inner] = static_cast<float>((in[base + t * inner] - mean) * scale);
        }
      }
    }
    s.data = reinterpret_cast<uint8_t*>(out);
    return absl::OkStatus();
  }

 private:
  int dim_ = -1;
  bool norm_vars_ = false;
  double eps_ = 1e-20;
};

// --------------------------------------------------------------- transpose

class TransposeOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage&) {
    return std::make_unique<TransposeOp>();
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectTensor(in, 2, "a tensor of two or more dimensions"); !s.ok()) {
      return s;
    }
    ValueType out = in;
    std::swap(out.shape[out.shape.size() - 1], out.shape[out.shape.size() - 2]);
    return out;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t rank = s.shape.size();
    const int64_t rows = s.shape[rank - 2], cols = s.shape[rank - 1];
    const int64_t planes =
        rows * cols == 0 ? 0 : static_cast<int64_t>(s.size / sizeof(float)) / (rows * cols);
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
    const float* in = reinterpret_cast<const float*>(s.data);
    for (int64_t p = 0; p < planes; ++p) {
      const float* a = in + p * rows * cols;
      float* b = out + p * rows * cols;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) b[c * rows + r] = a[r * cols + c];
      }
    }
    Shape shape = s.shape;
    std::swap(shape[rank - 1], shape[rank - 2]);
    SetTensor(s, out, std::move(shape));
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------- preemphasis

class PreemphasisOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const double c = stage.preemphasis().coeff();
    if (!(c >= -1 && c <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat("coeff: must be in [-1, 1], got %g", c));
    }
    auto op = std::make_unique<PreemphasisOp>();
    op->coeff_ = static_cast<float>(c);  // torch multiplies a float tensor in float
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return in;
  }

  // torchaudio: waveform[..., 1:] -= coeff * waveform[..., :-1] on a copy:
  // each product rounded, then the difference (no fused multiply-add).
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int64_t channels = s.shape[0], frames = s.shape[1];
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
    const float* in = Samples(s);
    for (int64_t c = 0; c < channels; ++c) {
      const float* x = in + c * frames;
      float* y = out + c * frames;
      if (frames > 0) y[0] = x[0];
      for (int64_t n = 1; n < frames; ++n) {
        const float product = coeff_ * x[n - 1];
        y[n] = x[n] - product;
      }
    }
    s.data = reinterpret_cast<uint8_t*>(out);
    return absl::OkStatus();
  }

 private:
  float coeff_ = 0.97f;
};

// --------------------------------------------------------------------- log

class LogOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const double offset = stage.log().offset();
    if (!(offset >= 0 && std::isfinite(offset))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("offset: must be finite and >= 0, got %g", offset));
    }
    auto op = std::make_unique<LogOp>();
    op->offset_ = static_cast<float>(offset);
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectTensor(in, 1, "a tensor"); !s.ok()) return s;
    return in;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    MapFloats(ctx, s, [o = offset_](float x) { return std::log(x + o); });
    return absl::OkStatus();
  }

 private:
  float offset_ = 1e-6f;
};

// --------------------------------------------------------------------- dct

class DctOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Dct& p = stage.dct();
    if (p.n_mfcc() < 1 || p.n_mfcc() > kMaxCoefficients) {
      return absl::InvalidArgumentError(
          absl::StrFormat("n_mfcc: must be in [1, %d], got %d", kMaxCoefficients, p.n_mfcc()));
    }
    auto op = std::make_unique<DctOp>();
    op->n_mfcc_ = p.n_mfcc();
    op->ortho_ = p.ortho();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectTensor(in, 2, "features [..., n_mels, time]"); !s.ok()) return s;
    ValueType out = in;
    const int64_t mels = in.shape[in.shape.size() - 2];
    if (mels >= 0 && mels < n_mfcc_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "n_mfcc: %d coefficients from %d mel bands; keep at most %d", n_mfcc_, mels, mels));
    }
    if (mels > kMaxCoefficients) {
      return absl::InvalidArgumentError(
          absl::StrFormat("expects at most %d mel bands, gets %d", kMaxCoefficients, mels));
    }
    out.shape[out.shape.size() - 2] = n_mfcc_;
    return out;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t rank = s.shape.size();
    const int64_t mels = s.shape[rank - 2], frames = s.shape[rank - 1];
    if (mels < n_mfcc_ || mels > kMaxCoefficients) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dct: %d mel bands for %d coefficients", mels, n_mfcc_));
    }
    absl::StatusOr<std::shared_ptr<const std::vector<float>>> matrix =
        matrices_.Get(static_cast<int>(mels));
    if (!matrix.ok()) return matrix.status();
    const int64_t planes =
        mels * frames == 0 ? 0 : static_cast<int64_t>(s.size / sizeof(float)) / (mels * frames);
    auto* out =
        reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * planes * n_mfcc_ * frames + 1));
    const auto* in = reinterpret_cast<const float*>(s.data);
    const float* dct = (*matrix)->data();  // [n_mfcc, mels]
    thread_local std::vector<double> acc;
    acc.assign(static_cast<size_t>(frames), 0);
    for (int64_t p = 0; p < planes; ++p) {
      const float* x = in + p * mels * frames;
      for (int k = 0; k < n_mfcc_; ++k) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t m = 0; m < mels; ++m) {
          const double w = dct[k * mels + m];
          const float* row = x + m * frames;
          for (int64_t t = 0; t < frames; ++t) acc[t] += w * row[t];
        }
        float* y = out + (p * n_mfcc_ + k) * frames;
        for (int64_t t = 0; t < frames; ++t) y[t] = static_cast<float>(acc[t]);
      }
    }
    Shape shape = s.shape;
    shape[rank - 2] = n_mfcc_;
    SetTensor(s, out, std::move(shape));
    return absl::OkStatus();
  }

 private:
  static constexpr int kMaxCoefficients = 1024;

  // F.create_dct in float32, as torch computes it: cos(pi / n_mels *
  // (n + 0.5) * k) of float32 aranges, then the scaling. [n_mfcc, n_mels].
  absl::StatusOr<std::vector<float>> Matrix(int mels) const {
    std::vector<float> m(static_cast<size_t>(n_mfcc_) * mels);
    const float step = static_cast<float>(M_PI / static_cast<double>(mels));
    const auto first = static_cast<float>(1.0 / std::sqrt(2.0));
    const float scale = static_cast<float>(std::sqrt(2.0 / static_cast<double>(mels)));
    for (int k = 0; k < n_mfcc_; ++k) {
      for (int n = 0; n < mels; ++n) {
        float v = std::cos(step * (static_cast<float>(n) + 0.5f) * static_cast<float>(k));
        if (ortho_) {
          if (k == 0) v *= first;
          v *= scale;
        } else {
          v *= 2.0f;
        }
        m[static_cast<size_t>(k) * mels + n] = v;
      }
    }
    return m;
  }

  int n_mfcc_ = 40;
  bool ortho_ = true;
  PerRate<std::vector<float>> matrices_{[this](int mels) { return Matrix(mels); }};
};

}  // namespace

void RegisterAudioFeatureOps(OpRegistry* registry) {
  registry->Register(Stage::kSpeedPerturb, FactoryOf<SpeedPerturbOp>());
  registry->Register(Stage::kVol, FactoryOf<VolOp>());
  registry->Register(Stage::kKaldiFbank, FactoryOf<KaldiFbankOp>());
  registry->Register(Stage::kUtteranceCmvn, FactoryOf<UtteranceCmvnOp>());
  registry->Register(Stage::kTranspose, FactoryOf<TransposeOp>());
  registry->Register(Stage::kPreemphasis, FactoryOf<PreemphasisOp>());
  registry->Register(Stage::kLog, FactoryOf<LogOp>());
  registry->Register(Stage::kDct, FactoryOf<DctOp>());
}

}  // namespace prepflow
