// The automatic augmentation policies of torchvision.transforms.autoaugment:
// TrivialAugmentWide, RandAugment, AutoAugment (ImageNet, CIFAR-10, SVHN) and
// AugMix.
//
// Each policy draws a short list of steps (an augmentation and its magnitude)
// from the sample's stream, in the order and with the ranges torchvision
// draws them; ApplyAugment runs one step with the colour and geometry
// kernels (color.h, geometry.h), exactly as torchvision's _apply_op does on a
// PIL image. Magnitude tables are torch.linspace's values by its scalar
// formula in float32 (start + step * i below the halfway point, end - step *
// (n - 1 - i) from it); torch's vectorized CPU kernel rounds a few of them
// one float32 ulp differently, depending on the CPU.
//
// Thread-safe: pure functions.
#ifndef PREPFLOW_PIPELINE_OPS_IMAGE_AUGMENT_H_
#define PREPFLOW_PIPELINE_OPS_IMAGE_AUGMENT_H_

#include <array>
#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "pipeline/core/rng.h"
#include "pipeline/core/sample.h"
#include "pipeline/ops/image/geometry.h"

namespace prepflow {

// _apply_op's operations, in torchvision's augmentation-space order.
enum class AugmentOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
};
const char* AugmentOpName(AugmentOp op);  // torchvision's name: "ShearX"

struct AugmentStep {
  AugmentOp op = AugmentOp::kIdentity;
  double magnitude = 0;  // signed; a float32 value, as torch's tables hold
};

// The steps one sample gets (no allocation for the usual one or two).
using AugmentSteps = absl::InlinedVector<AugmentStep, 2>;

enum class AutoAugmentPolicy { kImageNet, kCifar10, kSvhn };

// TrivialAugmentWide.forward's draws: one op of 14, a magnitude bin of
// `num_bins`, a sign.
AugmentStep DrawTrivialAugmentWide(SampleRng& rng, int num_bins);
// RandAugment.forward's draws for `num_ops` ops at bin `magnitude` of
// `num_bins`; the translation range depends on the image's size.
AugmentSteps DrawRandAugment(SampleRng& rng, int num_ops, int magnitude, int num_bins, int height,
                             int width);
// AutoAugment.forward's draws: a sub-policy of 25, then each of its two
// steps with its probability (steps not taken are left out).
AugmentSteps DrawAutoAugment(SampleRng& rng, AutoAugmentPolicy policy, int height, int width);

// AugMix's parameters (the aug_mix op's fields, validated there).
struct AugMixParams {
  int severity = 3;       // magnitude bins drawn from, of 10
  int mixture_width = 3;  // chains
  int chain_depth = -1;   // steps per chain; <= 0: 1 to 3, drawn per chain
  double alpha = 1.0;     // of the Dirichlet and Beta weights
  bool all_ops = true;    // also Brightness, Color, Contrast, Sharpness
};

// AugMix.forward's draws: the original image's weight (m[0] of a Beta drawn
// as a two-way Dirichlet) and, per chain, its weight (a Dirichlet draw times
// m[1], in float32 as torch multiplies them) and its steps.
struct AugMixDraw {
  float original_weight = 1;
  absl::InlinedVector<float, 4> chain_weights;
  absl::InlinedVector<AugmentSteps, 4> chains;
};
// InvalidArgument naming the field unless severity is 1 to 10, mixture_width
// 1 to 16, chain_depth at most 16 and alpha in (0, 1000].
absl::Status CheckAugMixParams(const AugMixParams& params);
// REQUIRES: CheckAugMixParams(params).ok().
AugMixDraw DrawAugMix(SampleRng& rng, const AugMixParams& params, int height, int width);

// AugMix's mix of `in` (height x width RGB) into `out`: each chain's steps
// applied from `in` with ApplyAugment, weighted and summed in float32 as
// torch sums them (m[0] * img, then += weight * chain), truncated to uint8 as
// torch's .to(uint8) does. `scratch` holds one image, `mix` one float per
// value; `in` must not overlap the others.
void ApplyAugMix(const AugMixDraw& draw, const uint8_t* in, uint8_t* out, uint8_t* scratch,
                 float* mix, int height, int width, Resample resample,
                 const std::array<uint8_t, 3>& fill);

// _apply_op(img, op, magnitude, interpolation, fill) on an RGB image: `in`
// and `out` are height x width and distinct.
void ApplyAugment(const AugmentStep& step, const uint8_t* in, uint8_t* out, int height, int width,
                  Resample resample, const std::array<uint8_t, 3>& fill);

// torch.linspace(start, end, steps)[i] in float32, by the scalar formula.
float Linspace(float start, float end, int steps, int i);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_IMAGE_AUGMENT_H_
