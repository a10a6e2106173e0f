#include "pipeline/ops/batch_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/core/op_schema.h"

namespace prepflow {
namespace {

// Batch streams: sample indices stay below 2^63, so setting the top bit
// gives every batch a stream no sample shares.
constexpr uint64_t kBatchStream = uint64_t{1} << 63;

}  // namespace

double SampleBeta(SampleRng& rng, double alpha) {
  const double x = rng.Gamma(alpha), y = rng.Gamma(alpha);
  return x + y > 0 ? x / (x + y) : 0.5;
}

absl::StatusOr<std::unique_ptr<MixupCutmix>> MixupCutmix::Create(const proto::MixupCutmix& p,
                                                                 const ValueType& sample_type,
                                                                 int64_t dataset_classes) {
  std::unique_ptr<MixupCutmix> op(new MixupCutmix);
  for (auto [name, alpha] :
       {std::pair{"mixup_alpha", p.mixup_alpha()}, std::pair{"cutmix_alpha", p.cutmix_alpha()}}) {
    if (!(alpha >= 0 && alpha <= 1000)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: must be 0 (off) or positive, up to 1000, got %g", name, alpha));
    }
  }
  if (p.mixup_alpha() == 0 && p.cutmix_alpha() == 0) {
    return absl::InvalidArgumentError("mixup_alpha, cutmix_alpha: set at least one above 0");
  }
  for (auto [name, v] : {std::pair{"p", p.p()}, std::pair{"switch_prob", p.switch_prob()}}) {
    if (!(v >= 0 && v <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: must be in [0, 1], got %g", name, v));
    }
  }
  if (sample_type.kind != ValueKind::kTensor || sample_type.shape.size() != 3 ||
      !sample_type.fixed()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mixup_cutmix: needs fixed-size float32 CHW samples (end the stages with "
                     "normalize), got ",
                     sample_type.DebugString()));
  }
  op->num_classes_ = p.num_classes() != 0 ? p.num_classes() : dataset_classes;
  if (op->num_classes_ <= 0 || op->num_classes_ > 1'000'000) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_classes: must be 1 to 1000000 (0 takes the dataset's, which has %d), got %d",
        dataset_classes, p.num_classes()));
  }
  op->mixup_alpha_ = p.mixup_alpha();
  op->cutmix_alpha_ = p.cutmix_alpha();
  op->p_ = p.p();
  op->switch_prob_ = p.switch_prob();
  op->channels_ = static_cast<int>(sample_type.shape[0]);
  op->height_ = static_cast<int>(sample_type.shape[1]);
  op->width_ = static_cast<int>(sample_type.shape[2]);
  return op;
}

absl::Status MixupCutmix::Apply(uint64_t seed, Batch* batch) const {
  const int64_t n = batch->size();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = batch->labels()[i];
    if (label < 0 || label >= num_classes_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("mixup_cutmix: sample %d has label %d, outside [0, num_classes = %d)",
                          batch->indices()[i], label, num_classes_));
    }
  }
  float* soft = batch->ResetSoftLabels(num_classes_);
  for (int64_t i = 0; i < n; ++i) soft[i * num_classes_ + batch->labels()[i]] = 1.0f;
  SampleRng rng(seed, batch->epoch(), kBatchStream | static_cast<uint64_t>(batch->number()), 0);
  if (n < 2 || !(rng.Uniform() < p_)) return absl::OkStatus();
  const bool cutmix = mixup_alpha_ == 0 || (cutmix_alpha_ != 0 && rng.Uniform() < switch_prob_);
  const double lambda = SampleBeta(rng, cutmix ? cutmix_alpha_ : mixup_alpha_);
  const double own = cutmix ? Cutmix(batch, rng, lambda) : lambda;
  if (!cutmix) Mixup(batch, lambda);
  // target.mul_(own).add_(target_rolled.mul_(1 - own)), in float32: sample i
  // takes the label of i - 1 (the first takes the last's).
  const float keep = static_cast<float>(own), take = static_cast<float>(1.0 - own);
  std::vector<float> last(soft + (n - 1) * num_classes_, soft + n * num_classes_);
  for (int64_t i = n - 1; i >= 0; --i) {
    const float* prev = i > 0 ? soft + (i - 1) * num_classes_ : last.data();
    float* row = soft + i * num_classes_;
    for (int64_t k = 0; k < num_classes_; ++k) row[k] = row[k] * keep + prev[k] * take;
  }
  return absl::OkStatus();
}

// batch.mul_(lambda).add_(batch.roll(1, 0).mul_(1 - lambda)), in float32.
// Going from the last sample down, sample i - 1 is still unmixed when sample i
// needs it; the last sample is kept for the first.
void MixupCutmix::Mixup(Batch* batch, double lambda) const {
  const int64_t n = batch->size();
  const size_t len = static_cast<size_t>(channels_) * height_ * width_;
  float* x = batch->mutable_floats();
  const std::vector<float> last(x + (n - 1) * len, x + n * len);
  const float keep = static_cast<float>(lambda), take = static_cast<float>(1.0 - lambda);
  for (int64_t i = n - 1; i >= 0; --i) {
    const float* prev = i > 0 ? x + (i - 1) * len : last.data();
    float* cur = x + i * len;
    for (size_t k = 0; k < len; ++k) cur[k] = cur[k] * keep + prev[k] * take;
  }
}

// RandomCutmix: a box centred on a uniform pixel, half-sides
// int(0.5 sqrt(1 - lambda) * side), clipped; each sample gets the box from
// the sample before it.
double MixupCutmix::Cutmix(Batch* batch, SampleRng& rng, double lambda) const {
  const int rx = static_cast<int>(rng.UniformInt(0, width_ - 1));
  const int ry = static_cast<int>(rng.UniformInt(0, height_ - 1));
  const double r = 0.5 * std::sqrt(1.0 - lambda);
  const int half_w = static_cast<int>(r * width_), half_h = static_cast<int>(r * height_);
  const int x1 = std::max(rx - half_w, 0), y1 = std::max(ry - half_h, 0);
  const int x2 = std::min(rx + half_w, width_), y2 = std::min(ry + half_h, height_);
  const int64_t n = batch->size();
  const size_t plane = static_cast<size_t>(height_) * width_, len = plane * channels_;
  float* x = batch->mutable_floats();
  const std::vector<float> last(x + (n - 1) * len, x + n * len);
  for (int64_t i = n - 1; i >= 0; --i) {
    const float* prev = i > 0 ? x + (i - 1) * len : last.data();
    float* cur = x + i * len;
    for (int c = 0; c < channels_; ++c) {
      for (int y = y1; y < y2; ++y) {
        const size_t at = c * plane + static_cast<size_t>(y) * width_ + x1;
        std::memcpy(cur + at, prev + at, static_cast<size_t>(x2 - x1) * sizeof(float));
      }
    }
  }
  return 1.0 - static_cast<double>(x2 - x1) * (y2 - y1) / (static_cast<double>(width_) * height_);
}

absl::StatusOr<std::unique_ptr<MixupCutmix>> CreateBatchOps(const proto::PipelineSpec& spec,
                                                            const ValueType& sample_type,
                                                            int64_t dataset_classes) {
  if (spec.batch_stages_size() == 0) return std::unique_ptr<MixupCutmix>();
  if (spec.batch_stages_size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch_stages: one is supported (mixup_cutmix does both), got %d",
                        spec.batch_stages_size()));
  }
  proto::BatchStage stage = spec.batch_stages(0);
  if (absl::Status s = ApplyDefaults(&stage); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("batch_stages: ", s.message()));
  }
  auto op = MixupCutmix::Create(stage.mixup_cutmix(), sample_type, dataset_classes);
  if (!op.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch stage 0 (mixup_cutmix): ", op.status().message()));
  }
  return op;
}

}  // namespace prepflow
