// What the image family's ops share (internal to pipeline/ops/image/; the
// family's interface is image_family.h, an op's is pipeline/core/op.h). Ops
// are split by kind: image_ops.cc holds decode, random_resized_crop, resize,
// center_crop (the ops that plan the decode), the flips and normalize;
// geometry_ops.cc the other geometry ops, color_ops.cc the colour ops,
// augment_ops.cc the automatic augmentations, tensor_ops.cc the ops on
// float tensors. Each registers its ops through its Register*Ops, which
// image_family.cc's RegisterImageOps calls. The kernels the ops are made of
// (geometry.h, color.h, augment.h) know nothing of ops.
//
// Thread-safety: as op.h: an op is built once, then Apply() runs from many
// threads at once and only reads the op; the helpers here are pure.
#ifndef PREPFLOW_PIPELINE_OPS_IMAGE_IMAGE_OP_H_
#define PREPFLOW_PIPELINE_OPS_IMAGE_IMAGE_OP_H_

#include <array>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "opencv2/core.hpp"
#include "pipeline/core/op.h"
#include "pipeline/ops/image/geometry.h"

namespace prepflow::detail {

// OK for one image or, where `stacks`, a stack of them (five_crop's crops).
inline absl::Status ExpectImage(const ValueType& in, bool stacks = false) {
  if (in.kind == ValueKind::kImage && (in.shape.size() == 3 || stacks)) return absl::OkStatus();
  if (in.kind == ValueKind::kImage) {
    return absl::InvalidArgumentError(
        absl::StrCat("expects one image but gets a stack of them, ", in.DebugString(),
                     " (five_crop and ten_crop make a stack of one image; they take no stack)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expects an image (put a decode stage before it) but gets ", in.DebugString()));
}

inline cv::Mat ImageMat(const Sample& s) { return cv::Mat(s.height(), s.width(), CV_8UC3, s.data); }

inline void SetImage(Sample& s, uint8_t* data, int h, int w, const ImageView& view) {
  s.kind = ValueKind::kImage;
  s.data = data;
  s.size = static_cast<size_t>(h) * w * 3;
  s.shape = {h, w, 3};
  s.view = view;
}

// ResourceExhausted when an op would make a w x h image over --max-pixels
// (an output size, a padding or an expansion from a hostile spec must not
// exhaust memory).
inline absl::Status CheckOutputArea(const StageContext& ctx, const char* op, int64_t w, int64_t h) {
  if (ctx.decode == nullptr || static_cast<double>(w) * h <= ctx.decode->max_pixels) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrFormat("%s: a %dx%d output is over the limit of %d pixels (--max-pixels)", op, w, h,
                      ctx.decode->max_pixels));
}

// An output size from `size` or (`height`, `width`): InvalidArgument unless
// exactly one is set and positive.
absl::Status OutputSize(int size, int height, int width, int* h, int* w);

// A uniform draw in [lo, hi) rounded to float32: torch draws its random
// parameters as float32 tensors (torch.empty(1).uniform_) and hands them on
// as Python floats.
inline double DrawFloat32(SampleRng& rng, double lo, double hi) {
  return static_cast<float>(rng.Uniform(lo, hi));
}

// InvalidArgument naming `field` unless 0 <= p <= 1 (NaN included).
inline absl::Status CheckProbability(const char* field, double p) {
  if (p >= 0 && p <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("%s: must be in [0, 1], got %g", field, p));
}

// An op whose output is an image of its input's shape.
class SameShapeImageOp : public Op {
 public:
  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    return in;
  }

 protected:
  // `s` is now the image at `out`, whole (no decoded region left to map).
  static void Replace(Sample& s, uint8_t* out) {
    s.data = out;
    s.view = ImageView::Whole(s.width(), s.height());
  }
};

// An op that changes an image, keeping its shape, with probability p: one
// draw from the sample's stream for this stage, as torchvision draws
// torch.rand(1) < p. The flips, grayscale, invert and the ImageOps-style
// colour ops.
class RandomImageOp : public SameShapeImageOp {
 public:
  // Writes the changed image into `dst` (same size; never the same memory).
  using Transform = std::function<void(const cv::Mat& src, cv::Mat& dst)>;

  // InvalidArgument unless 0 <= p <= 1 (NaN included).
  static absl::StatusOr<std::unique_ptr<Op>> Create(double p, Transform transform) {
    if (absl::Status s = CheckProbability("p", p); !s.ok()) return s;
    return std::unique_ptr<Op>(new RandomImageOp(p, std::move(transform)));
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    if (!(rng.Uniform() < p_)) return absl::OkStatus();
    uint8_t* out = ctx.Output(s.data, s.size);
    cv::Mat dst(s.height(), s.width(), CV_8UC3, out);
    transform_(ImageMat(s), dst);
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  RandomImageOp(double p, Transform transform) : p_(p), transform_(std::move(transform)) {}

  double p_;
  Transform transform_;
};

using Fill3 = std::array<uint8_t, 3>;

// A `fill` field (one gray value or R, G, B; each 0 to 255) as a colour.
absl::StatusOr<Fill3> ReadFill(const google::protobuf::RepeatedField<int32_t>& fill);
// An interpolation field as the resampler of Pillow's transforms.
absl::StatusOr<Resample> ReadResample(proto::Interpolation interp);

// Register image_ops.cc's, color_ops.cc's, geometry_ops.cc's,
// augment_ops.cc's and tensor_ops.cc's ops (image_family.cc calls them all).
void RegisterBasicImageOps(OpRegistry* registry);
void RegisterColorOps(OpRegistry* registry);
void RegisterGeometryOps(OpRegistry* registry);
void RegisterAugmentOps(OpRegistry* registry);
void RegisterTensorOps(OpRegistry* registry);

}  // namespace prepflow::detail

#endif  // PREPFLOW_PIPELINE_OPS_IMAGE_IMAGE_OP_H_
