#include "pipeline/ops/image/augment.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "pipeline/ops/image/color.h"

namespace prepflow {
namespace {

using Op = AugmentOp;

// The augmentation spaces' op lists, in torchvision's dict order (the index
// drawn picks from these).
constexpr Op kTrivialAugmentOps[] = {
    Op::kIdentity,  Op::kShearX,     Op::kShearY,       Op::kTranslateX, Op::kTranslateY,
    Op::kRotate,    Op::kBrightness, Op::kColor,        Op::kContrast,   Op::kSharpness,
    Op::kPosterize, Op::kSolarize,   Op::kAutoContrast, Op::kEqualize};
// RandAugment's space is the same 14.
constexpr const Op* kRandAugmentOps = kTrivialAugmentOps;
constexpr int kSpaceSize = 14;

bool Signed(Op op) {
  switch (op) {
    case Op::kShearX:
    case Op::kShearY:
    case Op::kTranslateX:
    case Op::kTranslateY:
    case Op::kRotate:
    case Op::kBrightness:
    case Op::kColor:
    case Op::kContrast:
    case Op::kSharpness:
      return true;
    default:
      return false;
  }
}

bool HasMagnitudes(Op op) { return Signed(op) || op == Op::kPosterize || op == Op::kSolarize; }

// 8 - (arange(n) / ((n - 1) / d)).round().int(), in float32 with round half
// to even.
double PosterizeBits(int bin, int num_bins, double d) {
  const float q = static_cast<float>(bin) / static_cast<float>((num_bins - 1) / d);
  return 8 - static_cast<int>(std::nearbyint(q));
}

// TrivialAugmentWide._augmentation_space(num_bins)[op][bin].
double WideMagnitude(Op op, int bin, int n) {
  switch (op) {
    case Op::kShearX:
    case Op::kShearY:
    case Op::kBrightness:
    case Op::kColor:
    case Op::kContrast:
    case Op::kSharpness:
      return Linspace(0.0f, 0.99f, n, bin);
    case Op::kTranslateX:
    case Op::kTranslateY:
      return Linspace(0.0f, 32.0f, n, bin);
    case Op::kRotate:
      return Linspace(0.0f, 135.0f, n, bin);
    case Op::kPosterize:
      return PosterizeBits(bin, n, 6);
    case Op::kSolarize:
      return Linspace(255.0f, 0.0f, n, bin);
    default:
      return 0;
  }
}

// AugMix's space, in its dict order: the first 9 without all_ops.
constexpr Op kAugMixOps[] = {Op::kShearX,   Op::kShearY,     Op::kTranslateX, Op::kTranslateY,
                             Op::kRotate,   Op::kPosterize,  Op::kSolarize,   Op::kAutoContrast,
                             Op::kEqualize, Op::kBrightness, Op::kColor,      Op::kContrast,
                             Op::kSharpness};
constexpr int kAugMixBins = 10;  // AugMix._PARAMETER_MAX

// AugMix._augmentation_space(10, (h, w))[op][bin].
double AugMixMagnitude(Op op, int bin, int height, int width) {
  constexpr int n = kAugMixBins;
  switch (op) {
    case Op::kShearX:
    case Op::kShearY:
      return Linspace(0.0f, 0.3f, n, bin);
    case Op::kTranslateX:
      return Linspace(0.0f, static_cast<float>(width / 3.0), n, bin);
    case Op::kTranslateY:
      return Linspace(0.0f, static_cast<float>(height / 3.0), n, bin);
    case Op::kRotate:
      return Linspace(0.0f, 30.0f, n, bin);
    case Op::kPosterize:
      return PosterizeBits(bin, n, 4) - 4;  // 4 - round(...): 4 bits down to 0
    case Op::kSolarize:
      return Linspace(255.0f, 0.0f, n, bin);
    case Op::kBrightness:
    case Op::kColor:
    case Op::kContrast:
    case Op::kSharpness:
      return Linspace(0.0f, 0.9f, n, bin);
    default:
      return 0;
  }
}

// torch._sample_dirichlet on float32: gammas in double (at least DBL_MIN),
// normalized in double, rounded to float32.
void DrawDirichlet(SampleRng& rng, double alpha, float* out, int n) {
  absl::InlinedVector<double, 4> gammas(static_cast<size_t>(n));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += gammas[i] = std::max(DBL_MIN, rng.Gamma(alpha));
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(gammas[i] / sum);
}

// RandAugment's and AutoAugment's _augmentation_space(num_bins, (h, w)).
double StandardMagnitude(Op op, int bin, int n, int height, int width) {
  switch (op) {
    case Op::kShearX:
    case Op::kShearY:
      return Linspace(0.0f, 0.3f, n, bin);
    case Op::kTranslateX:
      return Linspace(0.0f, static_cast<float>(150.0 / 331.0 * width), n, bin);
    case Op::kTranslateY:
      return Linspace(0.0f, static_cast<float>(150.0 / 331.0 * height), n, bin);
    case Op::kRotate:
      return Linspace(0.0f, 30.0f, n, bin);
    case Op::kBrightness:
    case Op::kColor:
    case Op::kContrast:
    case Op::kSharpness:
      return Linspace(0.0f, 0.9f, n, bin);
    case Op::kPosterize:
      return PosterizeBits(bin, n, 4);
    case Op::kSolarize:
      return Linspace(255.0f, 0.0f, n, bin);
    default:
      return 0;
  }
}

// `torch.randint(2, (1,))` is 1: the magnitude is negated.
inline bool DrawBit(SampleRng& rng) { return rng.UniformInt(0, 1) == 1; }

struct PolicyStep {
  Op op;
  float p;
  int bin;  // -1: no magnitude
};
using SubPolicy = std::array<PolicyStep, 2>;

// AutoAugment._get_policies, as torchvision lists them.
constexpr SubPolicy kImageNetPolicy[] = {
    {{{Op::kPosterize, 0.4f, 8}, {Op::kRotate, 0.6f, 9}}},
    {{{Op::kSolarize, 0.6f, 5}, {Op::kAutoContrast, 0.6f, -1}}},
    {{{Op::kEqualize, 0.8f, -1}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kPosterize, 0.6f, 7}, {Op::kPosterize, 0.6f, 6}}},
    {{{Op::kEqualize, 0.4f, -1}, {Op::kSolarize, 0.2f, 4}}},
    {{{Op::kEqualize, 0.4f, -1}, {Op::kRotate, 0.8f, 8}}},
    {{{Op::kSolarize, 0.6f, 3}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kPosterize, 0.8f, 5}, {Op::kEqualize, 1.0f, -1}}},
    {{{Op::kRotate, 0.2f, 3}, {Op::kSolarize, 0.6f, 8}}},
    {{{Op::kEqualize, 0.6f, -1}, {Op::kPosterize, 0.4f, 6}}},
    {{{Op::kRotate, 0.8f, 8}, {Op::kColor, 0.4f, 0}}},
    {{{Op::kRotate, 0.4f, 9}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kEqualize, 0.0f, -1}, {Op::kEqualize, 0.8f, -1}}},
    {{{Op::kInvert, 0.6f, -1}, {Op::kEqualize, 1.0f, -1}}},
    {{{Op::kColor, 0.6f, 4}, {Op::kContrast, 1.0f, 8}}},
    {{{Op::kRotate, 0.8f, 8}, {Op::kColor, 1.0f, 2}}},
    {{{Op::kColor, 0.8f, 8}, {Op::kSolarize, 0.8f, 7}}},
    {{{Op::kSharpness, 0.4f, 7}, {Op::kInvert, 0.6f, -1}}},
    {{{Op::kShearX, 0.6f, 5}, {Op::kEqualize, 1.0f, -1}}},
    {{{Op::kColor, 0.4f, 0}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kEqualize, 0.4f, -1}, {Op::kSolarize, 0.2f, 4}}},
    {{{Op::kSolarize, 0.6f, 5}, {Op::kAutoContrast, 0.6f, -1}}},
    {{{Op::kInvert, 0.6f, -1}, {Op::kEqualize, 1.0f, -1}}},
    {{{Op::kColor, 0.6f, 4}, {Op::kContrast, 1.0f, 8}}},
    {{{Op::kEqualize, 0.8f, -1}, {Op::kEqualize, 0.6f, -1}}},
};
constexpr SubPolicy kCifar10Policy[] = {
    {{{Op::kInvert, 0.1f, -1}, {Op::kContrast, 0.2f, 6}}},
    {{{Op::kRotate, 0.7f, 2}, {Op::kTranslateX, 0.3f, 9}}},
    {{{Op::kSharpness, 0.8f, 1}, {Op::kSharpness, 0.9f, 3}}},
    {{{Op::kShearY, 0.5f, 8}, {Op::kTranslateY, 0.7f, 9}}},
    {{{Op::kAutoContrast, 0.5f, -1}, {Op::kEqualize, 0.9f, -1}}},
    {{{Op::kShearY, 0.2f, 7}, {Op::kPosterize, 0.3f, 7}}},
    {{{Op::kColor, 0.4f, 3}, {Op::kBrightness, 0.6f, 7}}},
    {{{Op::kSharpness, 0.3f, 9}, {Op::kBrightness, 0.7f, 9}}},
    {{{Op::kEqualize, 0.6f, -1}, {Op::kEqualize, 0.5f, -1}}},
    {{{Op::kContrast, 0.6f, 7}, {Op::kSharpness, 0.6f, 5}}},
    {{{Op::kColor, 0.7f, 7}, {Op::kTranslateX, 0.5f, 8}}},
    {{{Op::kEqualize, 0.3f, -1}, {Op::kAutoContrast, 0.4f, -1}}},
    {{{Op::kTranslateY, 0.4f, 3}, {Op::kSharpness, 0.2f, 6}}},
    {{{Op::kBrightness, 0.9f, 6}, {Op::kColor, 0.2f, 8}}},
    {{{Op::kSolarize, 0.5f, 2}, {Op::kInvert, 0.0f, -1}}},
    {{{Op::kEqualize, 0.2f, -1}, {Op::kAutoContrast, 0.6f, -1}}},
    {{{Op::kEqualize, 0.2f, -1}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kColor, 0.9f, 9}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kAutoContrast, 0.8f, -1}, {Op::kSolarize, 0.2f, 8}}},
    {{{Op::kBrightness, 0.1f, 3}, {Op::kColor, 0.7f, 0}}},
    {{{Op::kSolarize, 0.4f, 5}, {Op::kAutoContrast, 0.9f, -1}}},
    {{{Op::kTranslateY, 0.9f, 9}, {Op::kTranslateY, 0.7f, 9}}},
    {{{Op::kAutoContrast, 0.9f, -1}, {Op::kSolarize, 0.8f, 3}}},
    {{{Op::kEqualize, 0.8f, -1}, {Op::kInvert, 0.1f, -1}}},
    {{{Op::kTranslateY, 0.7f, 9}, {Op::kAutoContrast, 0.9f, -1}}},
};
constexpr SubPolicy kSvhnPolicy[] = {
    {{{Op::kShearX, 0.9f, 4}, {Op::kInvert, 0.2f, -1}}},
    {{{Op::kShearY, 0.9f, 8}, {Op::kInvert, 0.7f, -1}}},
    {{{Op::kEqualize, 0.6f, -1}, {Op::kSolarize, 0.6f, 6}}},
    {{{Op::kInvert, 0.9f, -1}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kEqualize, 0.6f, -1}, {Op::kRotate, 0.9f, 3}}},
    {{{Op::kShearX, 0.9f, 4}, {Op::kAutoContrast, 0.8f, -1}}},
    {{{Op::kShearY, 0.9f, 8}, {Op::kInvert, 0.4f, -1}}},
    {{{Op::kShearY, 0.9f, 5}, {Op::kSolarize, 0.2f, 6}}},
    {{{Op::kInvert, 0.9f, -1}, {Op::kAutoContrast, 0.8f, -1}}},
    {{{Op::kEqualize, 0.6f, -1}, {Op::kRotate, 0.9f, 3}}},
    {{{Op::kShearX, 0.9f, 4}, {Op::kSolarize, 0.3f, 3}}},
    {{{Op::kShearY, 0.8f, 8}, {Op::kInvert, 0.7f, -1}}},
    {{{Op::kEqualize, 0.9f, -1}, {Op::kTranslateY, 0.6f, 6}}},
    {{{Op::kInvert, 0.9f, -1}, {Op::kEqualize, 0.6f, -1}}},
    {{{Op::kContrast, 0.3f, 3}, {Op::kRotate, 0.8f, 4}}},
    {{{Op::kInvert, 0.8f, -1}, {Op::kTranslateY, 0.0f, 2}}},
    {{{Op::kShearY, 0.7f, 6}, {Op::kSolarize, 0.4f, 8}}},
    {{{Op::kInvert, 0.6f, -1}, {Op::kRotate, 0.8f, 4}}},
    {{{Op::kShearY, 0.3f, 7}, {Op::kTranslateX, 0.9f, 3}}},
    {{{Op::kShearX, 0.1f, 6}, {Op::kInvert, 0.6f, -1}}},
    {{{Op::kSolarize, 0.7f, 2}, {Op::kTranslateY, 0.6f, 7}}},
    {{{Op::kShearY, 0.8f, 4}, {Op::kInvert, 0.8f, -1}}},
    {{{Op::kShearX, 0.7f, 9}, {Op::kTranslateY, 0.8f, 3}}},
    {{{Op::kShearY, 0.8f, 5}, {Op::kAutoContrast, 0.7f, -1}}},
    {{{Op::kShearX, 0.7f, 2}, {Op::kInvert, 0.1f, -1}}},
};
constexpr int kSubPolicies = 25;

const SubPolicy* Policy(AutoAugmentPolicy policy) {
  switch (policy) {
    case AutoAugmentPolicy::kCifar10:
      return kCifar10Policy;
    case AutoAugmentPolicy::kSvhn:
      return kSvhnPolicy;
    default:
      return kImageNetPolicy;
  }
}

// Python's math.degrees.
inline double Degrees(double radians) { return radians * (180.0 / M_PI); }

void Affine(const uint8_t* in, uint8_t* out, int h, int w, double cx, double cy, double tx,
            double ty, double shear_x, double shear_y, Resample resample,
            const std::array<uint8_t, 3>& fill) {
  const AffineMatrix m = InverseAffineMatrix(cx, cy, 0.0, tx, ty, 1.0, shear_x, shear_y);
  AffineTransform(in, h, w, out, h, w, m, resample, fill);
}

}  // namespace

const char* AugmentOpName(AugmentOp op) {
  static constexpr const char* kNames[] = {"Identity",     "ShearX",    "ShearY",     "TranslateX",
                                           "TranslateY",   "Rotate",    "Brightness", "Color",
                                           "Contrast",     "Sharpness", "Posterize",  "Solarize",
                                           "AutoContrast", "Equalize",  "Invert"};
  return kNames[static_cast<int>(op)];
}

float Linspace(float start, float end, int steps, int i) {
  if (steps == 1) return start;
  const float step = (end - start) / static_cast<float>(steps - 1);
  return i < steps / 2 ? start + step * static_cast<float>(i)
                       : end - step * static_cast<float>(steps - i - 1);
}

AugmentStep DrawTrivialAugmentWide(SampleRng& rng, int num_bins) {
  AugmentStep step;
  step.op = kTrivialAugmentOps[rng.UniformInt(0, kSpaceSize - 1)];
  if (HasMagnitudes(step.op)) {
    step.magnitude =
        WideMagnitude(step.op, static_cast<int>(rng.UniformInt(0, num_bins - 1)), num_bins);
  }
  if (Signed(step.op) && DrawBit(rng)) step.magnitude = -step.magnitude;
  return step;
}

AugmentSteps DrawRandAugment(SampleRng& rng, int num_ops, int magnitude, int num_bins, int height,
                             int width) {
  AugmentSteps steps(num_ops);
  for (AugmentStep& step : steps) {
    step.op = kRandAugmentOps[rng.UniformInt(0, kSpaceSize - 1)];
    if (HasMagnitudes(step.op)) {
      step.magnitude = StandardMagnitude(step.op, magnitude, num_bins, height, width);
    }
    if (Signed(step.op) && DrawBit(rng)) step.magnitude = -step.magnitude;
  }
  return steps;
}

AugmentSteps DrawAutoAugment(SampleRng& rng, AutoAugmentPolicy policy, int height, int width) {
  const SubPolicy& sub = Policy(policy)[rng.UniformInt(0, kSubPolicies - 1)];
  // torch.rand((2,)) and torch.randint(2, (2,)): all four drawn up front.
  float probs[2];
  for (float& p : probs) p = static_cast<float>(rng.Uniform());
  bool negative[2];
  for (bool& n : negative) n = rng.UniformInt(0, 1) == 0;  // a sign of 0 negates here
  AugmentSteps steps;
  for (int i = 0; i < 2; ++i) {
    if (!(probs[i] <= sub[i].p)) continue;
    AugmentStep step{sub[i].op, 0.0};
    if (sub[i].bin >= 0) step.magnitude = StandardMagnitude(step.op, sub[i].bin, 10, height, width);
    if (Signed(step.op) && negative[i]) step.magnitude = -step.magnitude;
    steps.push_back(step);
  }
  return steps;
}

absl::Status CheckAugMixParams(const AugMixParams& p) {
  if (p.severity < 1 || p.severity > 10) {
    return absl::InvalidArgumentError(
        absl::StrFormat("severity: must be 1 to 10, got %d", p.severity));
  }
  if (p.mixture_width < 1 || p.mixture_width > 16) {
    return absl::InvalidArgumentError(
        absl::StrFormat("mixture_width: must be 1 to 16, got %d", p.mixture_width));
  }
  if (p.chain_depth > 16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "chain_depth: must be at most 16 (0 or less draws 1 to 3), got %d", p.chain_depth));
  }
  if (!(p.alpha > 0 && p.alpha <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("alpha: must be above 0 and at most 1000, got %g", p.alpha));
  }
  return absl::OkStatus();
}

AugMixDraw DrawAugMix(SampleRng& rng, const AugMixParams& params, int height, int width) {
  const int k = params.mixture_width;
  AugMixDraw draw;
  float m[2];
  DrawDirichlet(rng, params.alpha, m, 2);
  draw.original_weight = m[0];
  draw.chain_weights.resize(k);
  DrawDirichlet(rng, params.alpha, draw.chain_weights.data(), k);
  for (float& w : draw.chain_weights) w *= m[1];
  const int space = params.all_ops ? 13 : 9;
  for (int i = 0; i < k; ++i) {
    const int depth =
        params.chain_depth > 0 ? params.chain_depth : static_cast<int>(rng.UniformInt(1, 3));
    AugmentSteps& chain = draw.chains.emplace_back(depth);
    for (AugmentStep& step : chain) {
      step.op = kAugMixOps[rng.UniformInt(0, space - 1)];
      if (HasMagnitudes(step.op)) {
        const int bin = static_cast<int>(rng.UniformInt(0, params.severity - 1));
        step.magnitude = AugMixMagnitude(step.op, bin, height, width);
      }
      if (Signed(step.op) && DrawBit(rng)) step.magnitude = -step.magnitude;
    }
  }
  return draw;
}

void ApplyAugMix(const AugMixDraw& draw, const uint8_t* in, uint8_t* out, uint8_t* scratch,
                 float* mix, int height, int width, Resample resample,
                 const std::array<uint8_t, 3>& fill) {
  const size_t n = static_cast<size_t>(height) * width * 3;
  const float w0 = draw.original_weight;
  for (size_t i = 0; i < n; ++i) mix[i] = w0 * static_cast<float>(in[i]);
  for (size_t c = 0; c < draw.chains.size(); ++c) {
    const AugmentSteps& chain = draw.chains[c];
    const uint8_t* aug = in;
    for (size_t j = 0; j < chain.size(); ++j) {
      uint8_t* dst = j % 2 == 0 ? scratch : out;  // `out` is free until the end
      ApplyAugment(chain[j], aug, dst, height, width, resample, fill);
      aug = dst;
    }
    const float w = draw.chain_weights[c];
    for (size_t i = 0; i < n; ++i) mix[i] += w * static_cast<float>(aug[i]);
  }
  // .to(uint8) truncates; the weights sum to 1 within float32 rounding, so a
  // value can land a hair above 255.
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(std::min(mix[i], 255.0f));
}

void ApplyAugment(const AugmentStep& step, const uint8_t* in, uint8_t* out, int height, int width,
                  Resample resample, const std::array<uint8_t, 3>& fill) {
  const size_t pixels = static_cast<size_t>(height) * width;
  const double m = step.magnitude;
  switch (step.op) {
    case Op::kShearX:
      Affine(in, out, height, width, 0, 0, 0, 0, Degrees(std::atan(m)), 0.0, resample, fill);
      break;
    case Op::kShearY:
      Affine(in, out, height, width, 0, 0, 0, 0, 0.0, Degrees(std::atan(m)), resample, fill);
      break;
    case Op::kTranslateX:
      Affine(in, out, height, width, width * 0.5, height * 0.5, static_cast<int>(m), 0, 0.0, 0.0,
             resample, fill);
      break;
    case Op::kTranslateY:
      Affine(in, out, height, width, width * 0.5, height * 0.5, 0, static_cast<int>(m), 0.0, 0.0,
             resample, fill);
      break;
    case Op::kRotate:
      Rotate(PlanRotation(m, width, height, false), in, height, width, out, resample, fill);
      break;
    case Op::kBrightness:
      AdjustBrightness(in, out, pixels, 1.0 + m);
      break;
    case Op::kColor:
      AdjustSaturation(in, out, pixels, 1.0 + m);
      break;
    case Op::kContrast:
      AdjustContrast(in, out, pixels, 1.0 + m);
      break;
    case Op::kSharpness:
      AdjustSharpness(in, out, height, width, 1.0 + m);
      break;
    case Op::kPosterize:
      Posterize(in, out, pixels, static_cast<int>(m));
      break;
    case Op::kSolarize:
      Solarize(in, out, pixels, m);
      break;
    case Op::kAutoContrast:
      Autocontrast(in, out, pixels);
      break;
    case Op::kEqualize:
      Equalize(in, out, pixels);
      break;
    case Op::kInvert:
      for (size_t i = 0; i < pixels * 3; ++i) out[i] = static_cast<uint8_t>(255 - in[i]);
      break;
    case Op::kIdentity:
      std::memcpy(out, in, pixels * 3);
      break;
  }
}

}  // namespace prepflow
