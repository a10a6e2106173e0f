// The automatic augmentation ops: TrivialAugmentWide, RandAugment,
// AutoAugment, AugMix. Their draws and steps are in augment.h.
#include <algorithm>
#include <functional>

#include "absl/strings/str_format.h"
#include "pipeline/ops/image/augment.h"
#include "pipeline/ops/image/image_op.h"

namespace prepflow::detail {
namespace {

using proto::Stage;

// What every policy op shares: it draws a list of steps for a sample, then
// applies them in order, the last one into the op's output.
class AugmentPolicyOp : public SameShapeImageOp {
 public:
  using Draw = std::function<AugmentSteps(SampleRng&, int height, int width)>;

  template <typename P>
  static absl::StatusOr<std::unique_ptr<Op>> Create(const P& p, Draw draw) {
    absl::StatusOr<Resample> resample = ReadResample(p.interpolation());
    if (!resample.ok()) return resample.status();
    absl::StatusOr<Fill3> fill = ReadFill(p.fill());
    if (!fill.ok()) return fill.status();
    return std::unique_ptr<Op>(new AugmentPolicyOp(std::move(draw), *resample, *fill));
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const int h = s.height(), w = s.width();
    AugmentSteps steps = draw_(rng, h, w);
    steps.erase(std::remove_if(steps.begin(), steps.end(),
                               [](const AugmentStep& a) { return a.op == AugmentOp::kIdentity; }),
                steps.end());
    if (steps.empty()) return absl::OkStatus();
    // Alternate between the output and a scratch buffer so that the last
    // step writes the output.
    uint8_t* out = ctx.Output(s.data, s.size);
    uint8_t* other = ctx.ws->ScratchFor(s.data, out)->Reserve(s.size);
    const uint8_t* in = s.data;
    for (size_t i = 0; i < steps.size(); ++i) {
      uint8_t* dst = (steps.size() - i) % 2 == 1 ? out : other;
      ApplyAugment(steps[i], in, dst, h, w, resample_, fill_);
      in = dst;
    }
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  AugmentPolicyOp(Draw draw, Resample resample, Fill3 fill)
      : draw_(std::move(draw)), resample_(resample), fill_(fill) {}

  Draw draw_;
  Resample resample_;
  Fill3 fill_;
};

absl::Status CheckBins(int bins) {
  if (bins >= 2 && bins <= 1024) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("num_magnitude_bins: must be 2 to 1024, got %d", bins));
}

absl::StatusOr<std::unique_ptr<Op>> CreateTrivialAugmentWide(const Stage& stage) {
  const proto::TrivialAugmentWide& p = stage.trivial_augment_wide();
  const int bins = p.num_magnitude_bins();
  if (absl::Status s = CheckBins(bins); !s.ok()) return s;
  return AugmentPolicyOp::Create(p, [bins](SampleRng& rng, int, int) {
    return AugmentSteps{DrawTrivialAugmentWide(rng, bins)};
  });
}

absl::StatusOr<std::unique_ptr<Op>> CreateRandAugment(const Stage& stage) {
  const proto::RandAugment& p = stage.rand_augment();
  const int bins = p.num_magnitude_bins(), magnitude = p.magnitude(), num_ops = p.num_ops();
  if (absl::Status s = CheckBins(bins); !s.ok()) return s;
  if (magnitude < 0 || magnitude >= bins) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "magnitude: must be 0 to num_magnitude_bins - 1 (%d), got %d", bins - 1, magnitude));
  }
  if (num_ops < 0 || num_ops > 64) {
    return absl::InvalidArgumentError(absl::StrFormat("num_ops: must be 0 to 64, got %d", num_ops));
  }
  return AugmentPolicyOp::Create(p, [=](SampleRng& rng, int h, int w) {
    return DrawRandAugment(rng, num_ops, magnitude, bins, h, w);
  });
}

absl::StatusOr<std::unique_ptr<Op>> CreateAutoAugment(const Stage& stage) {
  const proto::AutoAugment& p = stage.auto_augment();
  AutoAugmentPolicy policy;
  switch (p.policy()) {
    case proto::AUTO_AUGMENT_IMAGENET:
      policy = AutoAugmentPolicy::kImageNet;
      break;
    case proto::AUTO_AUGMENT_CIFAR10:
      policy = AutoAugmentPolicy::kCifar10;
      break;
    case proto::AUTO_AUGMENT_SVHN:
      policy = AutoAugmentPolicy::kSvhn;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("policy: unknown value %d", static_cast<int>(p.policy())));
  }
  return AugmentPolicyOp::Create(
      p, [policy](SampleRng& rng, int h, int w) { return DrawAutoAugment(rng, policy, h, w); });
}

// AugMix: chains of steps mixed in float32 (augment.h).
class AugMixOp : public SameShapeImageOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::AugMix& p = stage.aug_mix();
    absl::StatusOr<Resample> resample = ReadResample(p.interpolation());
    if (!resample.ok()) return resample.status();
    absl::StatusOr<Fill3> fill = ReadFill(p.fill());
    if (!fill.ok()) return fill.status();
    const AugMixParams params{p.severity(), p.mixture_width(), p.chain_depth(), p.alpha(),
                              p.all_ops()};
    if (absl::Status st = CheckAugMixParams(params); !st.ok()) return st;
    return std::unique_ptr<Op>(new AugMixOp(params, *resample, *fill));
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const int h = s.height(), w = s.width();
    const AugMixDraw draw = DrawAugMix(rng, params_, h, w);
    uint8_t* out = ctx.Output(s.data, s.size);
    // One float per value for the mix, then one image for the chains.
    uint8_t* scratch = ctx.ws->ScratchFor(s.data, out)->Reserve(s.size * (sizeof(float) + 1));
    auto* mix = reinterpret_cast<float*>(scratch);
    ApplyAugMix(draw, s.data, out, scratch + s.size * sizeof(float), mix, h, w, resample_, fill_);
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  AugMixOp(const AugMixParams& params, Resample resample, Fill3 fill)
      : params_(params), resample_(resample), fill_(fill) {}

  AugMixParams params_;
  Resample resample_;
  Fill3 fill_;
};

}  // namespace

void RegisterAugmentOps(OpRegistry* registry) {
  registry->Register(Stage::kTrivialAugmentWide, CreateTrivialAugmentWide);
  registry->Register(Stage::kRandAugment, CreateRandAugment);
  registry->Register(Stage::kAutoAugment, CreateAutoAugment);
  registry->Register(Stage::kAugMix, FactoryOf<AugMixOp>());
}

}  // namespace prepflow::detail
