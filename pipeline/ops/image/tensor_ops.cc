// Ops on float32 CHW tensors (after normalize): RandomErasing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "pipeline/ops/image/image_op.h"

namespace prepflow::detail {
namespace {

using proto::Stage;

class RandomErasingOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomErasing& p = stage.random_erasing();
    auto op = std::make_unique<RandomErasingOp>();
    if (absl::Status s = CheckProbability("p", p.p()); !s.ok()) return s;
    if (!(p.scale_min() >= 0 && p.scale_min() <= p.scale_max() && p.scale_max() <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("scale_min, scale_max: need 0 <= scale_min <= scale_max <= 1, got %g, %g",
                          p.scale_min(), p.scale_max()));
    }
    if (!(p.ratio_min() > 0 && p.ratio_min() <= p.ratio_max() && std::isfinite(p.ratio_max()))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ratio_min, ratio_max: need 0 < ratio_min <= ratio_max < infinity, got %g, %g",
          p.ratio_min(), p.ratio_max()));
    }
    if (!p.random_value()) {
      if (p.value().empty() || !std::all_of(p.value().begin(), p.value().end(), [](double v) {
            return std::isfinite(static_cast<float>(v));
          })) {
        return absl::InvalidArgumentError(
            absl::StrFormat("value: one finite value or one per channel, got [%s]",
                            absl::StrJoin(p.value(), ", ")));
      }
      // torch.tensor(value) holds Python floats as float32.
      for (double v : p.value()) op->value_.push_back(static_cast<float>(v));
    }
    op->p_ = p.p();
    op->scale_ = {p.scale_min(), p.scale_max()};
    // log(torch.tensor(ratio)): float32 logarithms of float32 ratios.
    op->log_ratio_ = {std::log(static_cast<float>(p.ratio_min())),
                      std::log(static_cast<float>(p.ratio_max()))};
    op->random_value_ = p.random_value();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kTensor || in.shape.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expects a float32 CHW tensor (put it after normalize) but gets ", in.DebugString()));
    }
    if (!random_value_ && value_.size() != 1 && in.shape[0] >= 0 &&
        static_cast<int64_t>(value_.size()) != in.shape[0]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("value: %d values for %d channels (give one, or one per channel)",
                          value_.size(), in.shape[0]));
    }
    return in;
  }

  // RandomErasing.forward and get_params.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    if (!(rng.Uniform() < p_)) return absl::OkStatus();
    const int c = static_cast<int>(s.shape[0]), h = static_cast<int>(s.shape[1]),
              w = static_cast<int>(s.shape[2]);
    const double area = static_cast<double>(h) * w;
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double erase_area = area * DrawFloat32(rng, scale_.first, scale_.second);
      // torch.exp of the float32 draw: a float32 exponential.
      const double aspect =
          std::exp(static_cast<float>(DrawFloat32(rng, log_ratio_.first, log_ratio_.second)));
      // Python's round(): half to even; compared as doubles (no int overflow).
      const double eh = std::nearbyint(std::sqrt(erase_area * aspect));
      const double ew = std::nearbyint(std::sqrt(erase_area / aspect));
      if (!(eh < h && ew < w)) continue;
      Erase(ctx, s, c, h, w, static_cast<int>(eh), static_cast<int>(ew), rng);
      return absl::OkStatus();
    }
    return absl::OkStatus();  // ten misses: the tensor as it was
  }

 private:
  void Erase(const StageContext& ctx, Sample& s, int c, int h, int w, int eh, int ew,
             SampleRng& rng) const {
    float* noise = nullptr;
    const size_t noise_n = static_cast<size_t>(c) * eh * ew;
    uint8_t* out = ctx.Output(s.data, s.size);
    if (random_value_) {  // drawn before the position, as get_params does
      noise = reinterpret_cast<float*>(
          ctx.ws->ScratchFor(s.data, out)->Reserve(noise_n * sizeof(float)));
      for (size_t k = 0; k < noise_n; ++k) noise[k] = static_cast<float>(rng.Normal());
    }
    const int top = static_cast<int>(rng.UniformInt(0, h - eh));
    const int left = static_cast<int>(rng.UniformInt(0, w - ew));
    if (out != s.data) std::memcpy(out, s.data, s.size);
    auto* t = reinterpret_cast<float*>(out);
    for (int ch = 0; ch < c; ++ch) {
      const float v = value_.empty() ? 0 : value_[value_.size() == 1 ? 0 : ch];
      for (int y = 0; y < eh; ++y) {
        float* row = t + (static_cast<size_t>(ch) * h + top + y) * w + left;
        if (noise != nullptr) {
          std::memcpy(row, noise + (static_cast<size_t>(ch) * eh + y) * ew, ew * sizeof(float));
        } else {
          std::fill(row, row + ew, v);
        }
      }
    }
    s.data = out;
  }

  double p_ = 0.5;
  std::pair<double, double> scale_, log_ratio_;
  std::vector<float> value_;
  bool random_value_ = false;
};

}  // namespace

void RegisterTensorOps(OpRegistry* registry) {
  registry->Register(Stage::kRandomErasing, FactoryOf<RandomErasingOp>());
}

}  // namespace prepflow::detail
