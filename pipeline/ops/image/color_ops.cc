// The colour ops: ColorJitter, GaussianBlur and the ImageOps-style ops that
// torchvision applies with probability p. Kernels are in color.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "opencv2/core.hpp"
#include "pipeline/ops/image/color.h"
#include "pipeline/ops/image/image_op.h"

namespace prepflow::detail {
namespace {

using proto::Stage;

// A factor range as ColorJitter._check_input reads it; `on` false when the
// property is left alone.
struct FactorRange {
  bool on = false;
  double lo = 0, hi = 0;
};

// One value v: [center - v, center + v] (the low end clipped at 0 unless
// `center` is 0, i.e. hue); two: [min, max] within [bound_lo, bound_hi].
absl::StatusOr<FactorRange> ReadRange(const char* field,
                                      const google::protobuf::RepeatedField<double>& v,
                                      double center, double bound_lo, double bound_hi) {
  FactorRange r;
  if (v.empty()) return r;
  if (v.size() == 1) {
    const double max_single = center == 0 ? bound_hi : HUGE_VAL;
    if (!(v[0] >= 0 && v[0] <= max_single)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a single value must be in [0, %g], got %g", field, max_single, v[0]));
    }
    r.lo = center == 0 ? -v[0] : std::max(center - v[0], 0.0);
    r.hi = center + v[0];
  } else if (v.size() == 2) {
    if (!(bound_lo <= v[0] && v[0] <= v[1] && v[1] <= bound_hi)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: need %g <= min <= max <= %g, got [%g, %g]", field, bound_lo, bound_hi, v[0], v[1]));
    }
    r.lo = v[0];
    r.hi = v[1];
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: one value (an amount) or two ([min, max]), got %d", field, v.size()));
  }
  // Factors are float32 (as torch draws them): a bound past float's range
  // would blend with infinity.
  if (!std::isfinite(static_cast<float>(r.lo)) || !std::isfinite(static_cast<float>(r.hi))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: [%g, %g] is beyond float32's range", field, r.lo, r.hi));
  }
  r.on = !(r.lo == center && r.hi == center);
  return r;
}

class ColorJitterOp : public SameShapeImageOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::ColorJitter& p = stage.color_jitter();
    auto op = std::make_unique<ColorJitterOp>();
    const struct {
      const char* name;
      const google::protobuf::RepeatedField<double>& values;
      double center, lo, hi;
    } fields[kAdjustments] = {{"brightness", p.brightness(), 1, 0, HUGE_VAL},
                              {"contrast", p.contrast(), 1, 0, HUGE_VAL},
                              {"saturation", p.saturation(), 1, 0, HUGE_VAL},
                              {"hue", p.hue(), 0, -0.5, 0.5}};
    for (int i = 0; i < kAdjustments; ++i) {
      const auto& f = fields[i];
      absl::StatusOr<FactorRange> r = ReadRange(f.name, f.values, f.center, f.lo, f.hi);
      if (!r.ok()) return r.status();
      op->ranges_[i] = *r;
    }
    return op;
  }

  // ColorJitter.forward: a permutation of the four, then the enabled factors
  // in the order brightness, contrast, saturation, hue.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    std::array<int, kAdjustments> order = {0, 1, 2, 3};
    for (int i = kAdjustments - 1; i > 0; --i) {
      std::swap(order[i], order[rng.UniformInt(0, i)]);
    }
    std::array<double, kAdjustments> factor{};
    bool any = false;
    for (int i = 0; i < kAdjustments; ++i) {
      if (!ranges_[i].on) continue;
      factor[i] = DrawFloat32(rng, ranges_[i].lo, ranges_[i].hi);
      any = true;
    }
    if (!any) return absl::OkStatus();
    const size_t pixels = static_cast<size_t>(s.height()) * s.width();
    uint8_t* out = ctx.Output(s.data, s.size);
    const uint8_t* in = s.data;  // the first adjustment reads the input, the rest `out`
    for (int k : order) {
      if (!ranges_[k].on) continue;
      switch (k) {
        case 0:
          AdjustBrightness(in, out, pixels, factor[k]);
          break;
        case 1:
          AdjustContrast(in, out, pixels, factor[k]);
          break;
        case 2:
          AdjustSaturation(in, out, pixels, factor[k]);
          break;
        default:
          AdjustHue(in, out, pixels, factor[k]);
          break;
      }
      in = out;
    }
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  static constexpr int kAdjustments = 4;
  std::array<FactorRange, kAdjustments> ranges_;
};

class GaussianBlurOp : public SameShapeImageOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::GaussianBlur& p = stage.gaussian_blur();
    auto op = std::make_unique<GaussianBlurOp>();
    if (p.kernel_size_size() != 1 && p.kernel_size_size() != 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kernel_size: one value (square) or two ([kx, ky]), got %d", p.kernel_size_size()));
    }
    op->kx_ = p.kernel_size(0);
    op->ky_ = p.kernel_size(p.kernel_size_size() - 1);
    for (int k : {op->kx_, op->ky_}) {
      if (k < 1 || k > kMaxGaussianKernel || k % 2 == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "kernel_size: must be odd and in [1, %d], got %d", kMaxGaussianKernel, k));
      }
    }
    if (p.sigma_size() != 1 && p.sigma_size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sigma: one value (fixed) or two ([min, max]), got %d", p.sigma_size()));
    }
    op->sigma_.lo = p.sigma(0);
    op->sigma_.hi = p.sigma(p.sigma_size() - 1);
    // sigma is used as float32: it must stay positive and finite there.
    if (!(static_cast<float>(op->sigma_.lo) > 0 && op->sigma_.lo <= op->sigma_.hi &&
          std::isfinite(static_cast<float>(op->sigma_.hi)))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sigma: need 0 < min <= max, positive and finite as float32, got [%g, %g]", op->sigma_.lo,
          op->sigma_.hi));
    }
    return op;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const double sigma = DrawFloat32(rng, sigma_.lo, sigma_.hi);
    uint8_t* out = ctx.Output(s.data, s.size);
    GaussianBlur(s.data, out, s.height(), s.width(), kx_, ky_, sigma, sigma,
                 ctx.ws->ScratchFor(s.data, out));
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  int kx_ = 0, ky_ = 0;
  FactorRange sigma_;
};

size_t Pixels(const cv::Mat& m) { return static_cast<size_t>(m.rows) * m.cols; }

absl::StatusOr<std::unique_ptr<Op>> CreatePosterize(const Stage& stage) {
  const proto::RandomPosterize& p = stage.random_posterize();
  if (!p.has_bits() || p.bits() < 0 || p.bits() > 8) {
    return absl::InvalidArgumentError(
        p.has_bits() ? absl::StrFormat("bits: must be in [0, 8], got %d", p.bits())
                     : "bits: required (the bits to keep, 0 to 8)");
  }
  const int bits = p.bits();
  return RandomImageOp::Create(p.p(), [bits](const cv::Mat& src, cv::Mat& dst) {
    Posterize(src.data, dst.data, Pixels(src), bits);
  });
}

absl::StatusOr<std::unique_ptr<Op>> CreateSolarize(const Stage& stage) {
  const proto::RandomSolarize& p = stage.random_solarize();
  if (!p.has_threshold() || !(p.threshold() >= 0 && p.threshold() <= 255)) {
    return absl::InvalidArgumentError(
        p.has_threshold() ? absl::StrFormat("threshold: must be in [0, 255], got %g", p.threshold())
                          : "threshold: required (values at or above it are inverted)");
  }
  const double threshold = p.threshold();
  return RandomImageOp::Create(p.p(), [threshold](const cv::Mat& src, cv::Mat& dst) {
    Solarize(src.data, dst.data, Pixels(src), threshold);
  });
}

absl::StatusOr<std::unique_ptr<Op>> CreateSharpness(const Stage& stage) {
  const proto::RandomAdjustSharpness& p = stage.random_adjust_sharpness();
  const double factor = p.sharpness_factor();
  if (!p.has_sharpness_factor() || !(factor >= 0 && std::isfinite(static_cast<float>(factor)))) {
    return absl::InvalidArgumentError(
        p.has_sharpness_factor()
            ? absl::StrFormat("sharpness_factor: must be finite and >= 0, got %g", factor)
            : "sharpness_factor: required (0 blurs, 1 keeps, 2 sharpens)");
  }
  return RandomImageOp::Create(p.p(), [factor](const cv::Mat& src, cv::Mat& dst) {
    AdjustSharpness(src.data, dst.data, src.rows, src.cols, factor);
  });
}

void GrayscaleMat(const cv::Mat& src, cv::Mat& dst) {
  ToGrayscale(src.data, dst.data, Pixels(src));
}
void InvertMat(const cv::Mat& src, cv::Mat& dst) { cv::bitwise_not(src, dst); }
void AutocontrastMat(const cv::Mat& src, cv::Mat& dst) {
  Autocontrast(src.data, dst.data, Pixels(src));
}
void EqualizeMat(const cv::Mat& src, cv::Mat& dst) { Equalize(src.data, dst.data, Pixels(src)); }

// v2's RandomChannelPermutation: torch.randperm(3) drawn per sample, here
// one of the six orders uniformly (after the p draw).
class ChannelPermutationOp : public SameShapeImageOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const double p =
        stage.random_channel_permutation().has_p() ? stage.random_channel_permutation().p() : 1.0;
    if (absl::Status s = CheckProbability("p", p); !s.ok()) return s;
    auto op = std::make_unique<ChannelPermutationOp>();
    op->p_ = p;
    return op;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    static constexpr std::array<std::array<int, 3>, 6> kOrders = {
        {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};
    SampleRng rng = ctx.Rng(s);
    if (!(rng.Uniform() < p_)) return absl::OkStatus();
    const std::array<int, 3>& order = kOrders[rng.UniformInt(0, 5)];
    const size_t pixels = static_cast<size_t>(s.width()) * s.height();
    uint8_t* out = ctx.Output(s.data, s.size);
    for (size_t i = 0; i < 3 * pixels; i += 3) {
      out[i] = s.data[i + order[0]];
      out[i + 1] = s.data[i + order[1]];
      out[i + 2] = s.data[i + order[2]];
    }
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  double p_ = 1;
};

}  // namespace

void RegisterColorOps(OpRegistry* registry) {
  registry->Register(Stage::kRandomGrayscale, [](const Stage& stage) {
    return RandomImageOp::Create(stage.random_grayscale().p(), GrayscaleMat);
  });
  registry->Register(Stage::kRandomInvert, [](const Stage& stage) {
    return RandomImageOp::Create(stage.random_invert().p(), InvertMat);
  });
  registry->Register(Stage::kColorJitter, FactoryOf<ColorJitterOp>());
  registry->Register(Stage::kGaussianBlur, FactoryOf<GaussianBlurOp>());
  registry->Register(Stage::kRandomPosterize, CreatePosterize);
  registry->Register(Stage::kRandomSolarize, CreateSolarize);
  registry->Register(Stage::kRandomAdjustSharpness, CreateSharpness);
  registry->Register(Stage::kRandomAutocontrast, [](const Stage& stage) {
    return RandomImageOp::Create(stage.random_autocontrast().p(), AutocontrastMat);
  });
  registry->Register(Stage::kRandomChannelPermutation, FactoryOf<ChannelPermutationOp>());
  registry->Register(Stage::kRandomEqualize, [](const Stage& stage) {
    return RandomImageOp::Create(stage.random_equalize().p(), EqualizeMat);
  });
}

}  // namespace prepflow::detail
