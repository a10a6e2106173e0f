// The geometry ops that resample or pad: Pad, RandomCrop, RandomRotation,
// RandomAffine; and FiveCrop and TenCrop. Kernels are in geometry.h; the
// crops and resizes that plan the decode are in image_ops.cc.
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "pipeline/ops/image/geometry.h"
#include "pipeline/ops/image/image_op.h"

namespace prepflow::detail {

absl::StatusOr<Fill3> ReadFill(const google::protobuf::RepeatedField<int32_t>& fill) {
  if (fill.size() != 1 && fill.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fill: one value (gray) or three (R, G, B), got %d", fill.size()));
  }
  Fill3 out;
  for (int c = 0; c < 3; ++c) {
    const int v = fill[fill.size() == 1 ? 0 : c];
    if (v < 0 || v > 255) {
      return absl::InvalidArgumentError(absl::StrFormat("fill: must be 0 to 255, got %d", v));
    }
    out[c] = static_cast<uint8_t>(v);
  }
  return out;
}

absl::StatusOr<Resample> ReadResample(proto::Interpolation interp) {
  switch (interp) {
    case proto::INTERPOLATION_NEAREST:
      return Resample::kNearest;
    case proto::INTERPOLATION_BILINEAR:
      return Resample::kBilinear;
    case proto::INTERPOLATION_BICUBIC:
      return Resample::kBicubic;
    case proto::INTERPOLATION_BOX:
    case proto::INTERPOLATION_HAMMING:
    case proto::INTERPOLATION_LANCZOS:
      return absl::InvalidArgumentError(absl::StrCat(
          "interpolation: ", proto::Interpolation_Name(interp),
          " resamples only in resize and random_resized_crop, as in Pillow, whose transforms "
          "take INTERPOLATION_BILINEAR, INTERPOLATION_NEAREST or INTERPOLATION_BICUBIC"));
    default:  // a value of a newer proto, or a crafted job's: it has no name here
      return absl::InvalidArgumentError(
          absl::StrCat("interpolation: ", static_cast<int>(interp),
                       " is not supported (use INTERPOLATION_BILINEAR, INTERPOLATION_NEAREST or "
                       "INTERPOLATION_BICUBIC)"));
  }
}

namespace {

using google::protobuf::RepeatedField;
using proto::Stage;

// Left, top, right, bottom.
struct Padding {
  int left = 0, top = 0, right = 0, bottom = 0;
};

// The limit on one side's padding: enough for any real use, and it keeps
// every padded size far inside int.
constexpr int kMaxPadding = 1 << 16;

absl::StatusOr<Padding> ReadPadding(const RepeatedField<int32_t>& p) {
  Padding out;
  switch (p.size()) {
    case 1:
      out = {p[0], p[0], p[0], p[0]};
      break;
    case 2:
      out = {p[0], p[1], p[0], p[1]};
      break;
    case 4:
      out = {p[0], p[1], p[2], p[3]};
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "padding: one value, two ([left/right, top/bottom]) or four ([left, top, right, "
          "bottom]), got %d",
          p.size()));
  }
  for (int v : {out.left, out.top, out.right, out.bottom}) {
    if (v < 0 || v > kMaxPadding) {
      return absl::InvalidArgumentError(
          absl::StrFormat("padding: each side must be 0 to %d, got %d", kMaxPadding, v));
    }
  }
  return out;
}

PadMode ToPadMode(proto::PaddingMode mode) {
  switch (mode) {
    case proto::PADDING_EDGE:
      return PadMode::kEdge;
    case proto::PADDING_REFLECT:
      return PadMode::kReflect;
    case proto::PADDING_SYMMETRIC:
      return PadMode::kSymmetric;
    default:
      return PadMode::kConstant;
  }
}

// A [min, max] range from one value d (>= 0: [-d, d]) or two.
absl::StatusOr<std::pair<double, double>> ReadSymmetricRange(const char* field,
                                                             absl::Span<const double> v) {
  if (v.size() == 1 && v[0] >= 0 && std::isfinite(v[0])) return std::pair{-v[0], v[0]};
  if (v.size() == 2 && v[0] <= v[1] && std::isfinite(v[0]) && std::isfinite(v[1])) {
    return std::pair{v[0], v[1]};
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: one finite value d >= 0 (for [-d, d]) or two ([min, max], min <= max), got [%s]", field,
      absl::StrJoin(v, ", ")));
}

absl::StatusOr<std::optional<std::pair<double, double>>> ReadCenter(
    const RepeatedField<double>& v) {
  if (v.empty()) return std::nullopt;
  if (v.size() != 2 || !std::isfinite(v[0]) || !std::isfinite(v[1])) {
    return absl::InvalidArgumentError(
        absl::StrFormat("center: two finite values [x, y], got [%s]", absl::StrJoin(v, ", ")));
  }
  return std::pair{v[0], v[1]};
}

// Scratch for an index map of `n` ints that holds neither `a` nor `b`.
int* IndexMap(const StageContext& ctx, const void* a, const void* b, size_t n) {
  return reinterpret_cast<int*>(ctx.ws->ScratchFor(a, b)->Reserve(n * sizeof(int)));
}

// ------------------------------------------------------------------ pad

class PadOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Pad& p = stage.pad();
    auto op = std::make_unique<PadOp>();
    absl::StatusOr<Padding> padding = ReadPadding(p.padding());
    if (!padding.ok()) return padding.status();
    absl::StatusOr<Fill3> fill = ReadFill(p.fill());
    if (!fill.ok()) return fill.status();
    op->padding_ = *padding;
    op->fill_ = *fill;
    op->mode_ = ToPadMode(p.padding_mode());
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    ValueType out = in;
    if (out.shape[0] >= 0) out.shape[0] += padding_.top + padding_.bottom;
    if (out.shape[1] >= 0) out.shape[1] += padding_.left + padding_.right;
    return out;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int h = s.height(), w = s.width();
    const int out_h = h + padding_.top + padding_.bottom;
    const int out_w = w + padding_.left + padding_.right;
    if (absl::Status st = CheckOutputArea(ctx, "pad", out_w, out_h); !st.ok()) return st;
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(out_h) * out_w * 3);
    int* rows = IndexMap(ctx, s.data, out, static_cast<size_t>(out_h) + out_w);
    int* cols = rows + out_h;
    for (int y = 0; y < out_h; ++y) rows[y] = PadIndex(y, padding_.top, h, mode_);
    for (int x = 0; x < out_w; ++x) cols[x] = PadIndex(x, padding_.left, w, mode_);
    Remap(s.data, w, rows, out_h, cols, out_w, fill_, out);
    SetImage(s, out, out_h, out_w, ImageView::Whole(out_w, out_h));
    return absl::OkStatus();
  }

 private:
  Padding padding_;
  Fill3 fill_{};
  PadMode mode_ = PadMode::kConstant;
};

// ------------------------------------------------------- random_zoom_out

// v2's RandomZoomOut: with probability p, the image on a canvas r times its
// size (r uniform in [side_min, side_max]), at an offset drawn uniformly,
// the rest `fill`.
class RandomZoomOutOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomZoomOut& p = stage.random_zoom_out();
    auto op = std::make_unique<RandomZoomOutOp>();
    op->p_ = p.has_p() ? p.p() : 0.5;
    if (absl::Status s = CheckProbability("p", op->p_); !s.ok()) return s;
    op->lo_ = p.has_side_min() ? p.side_min() : 1.0;
    op->hi_ = p.has_side_max() ? p.side_max() : 4.0;
    if (!(1 <= op->lo_ && op->lo_ <= op->hi_ && op->hi_ <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("side_min, side_max: need 1 <= side_min <= side_max <= 100, got %g, %g",
                          op->lo_, op->hi_));
    }
    if (!p.fill().empty()) {  // else black, v2's default
      absl::StatusOr<Fill3> fill = ReadFill(p.fill());
      if (!fill.ok()) return fill.status();
      op->fill_ = *fill;
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    return ValueType{ValueKind::kImage, {-1, -1, 3}};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    if (!(rng.Uniform() < p_)) return absl::OkStatus();
    const int h = s.height(), w = s.width();
    const double r = rng.Uniform(lo_, hi_);
    const int64_t out_w = static_cast<int64_t>(w * r), out_h = static_cast<int64_t>(h * r);
    if (absl::Status st = CheckOutputArea(ctx, "random_zoom_out", out_w, out_h); !st.ok()) {
      return st;
    }
    const int left = static_cast<int>((out_w - w) * rng.Uniform());
    const int top = static_cast<int>((out_h - h) * rng.Uniform());
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(out_h * out_w * 3));
    int* rows = IndexMap(ctx, s.data, out, static_cast<size_t>(out_h + out_w));
    int* cols = rows + out_h;
    for (int y = 0; y < out_h; ++y) rows[y] = PadIndex(y, top, h, PadMode::kConstant);
    for (int x = 0; x < out_w; ++x) cols[x] = PadIndex(x, left, w, PadMode::kConstant);
    Remap(s.data, w, rows, static_cast<int>(out_h), cols, static_cast<int>(out_w), fill_, out);
    SetImage(s, out, static_cast<int>(out_h), static_cast<int>(out_w),
             ImageView::Whole(static_cast<int>(out_w), static_cast<int>(out_h)));
    return absl::OkStatus();
  }

 private:
  double p_ = 0.5, lo_ = 1, hi_ = 4;
  Fill3 fill_{};
};

// ----------------------------------------------------------- random_crop

class RandomCropOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomCrop& p = stage.random_crop();
    auto op = std::make_unique<RandomCropOp>();
    const int size = p.size();
    op->h_ = size != 0 ? size : p.height();
    op->w_ = size != 0 ? size : p.width();
    if ((size != 0 && (p.height() != 0 || p.width() != 0)) || op->h_ <= 0 || op->w_ <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "size: set a positive size, or height and width (got size %d, height %d, width %d)", size,
          p.height(), p.width()));
    }
    if (!p.padding().empty()) {
      absl::StatusOr<Padding> padding = ReadPadding(p.padding());
      if (!padding.ok()) return padding.status();
      op->padding_ = *padding;
    }
    absl::StatusOr<Fill3> fill = ReadFill(p.fill());
    if (!fill.ok()) return fill.status();
    op->fill_ = *fill;
    op->mode_ = ToPadMode(p.padding_mode());
    op->pad_if_needed_ = p.pad_if_needed();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    return ValueType{ValueKind::kImage, {h_, w_, 3}};
  }

  // RandomCrop.forward: the padding, then pad_if_needed's (the width first,
  // then the height, each by the full shortfall on both sides), then
  // get_params. The pads compose per axis into one index map.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    if (absl::Status st = CheckOutputArea(ctx, "random_crop", w_, h_); !st.ok()) return st;
    // With the crop within --max-pixels and each padding within kMaxPadding,
    // every size below fits an int.
    const int h = s.height(), w = s.width();
    const int h1 = h + padding_.top + padding_.bottom, w1 = w + padding_.left + padding_.right;
    const int pad_w = pad_if_needed_ && w1 < w_ ? w_ - w1 : 0;
    const int pad_h = pad_if_needed_ && h1 < h_ ? h_ - h1 : 0;
    const int h2 = h1 + 2 * pad_h, w2 = w1 + 2 * pad_w;
    if (h2 < h_ || w2 < w_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "random_crop: the image is %dx%d after padding, smaller than the %dx%d crop (set "
          "pad_if_needed to pad it)",
          w2, h2, w_, h_));
    }
    int top = 0, left = 0;
    if (h2 != h_ || w2 != w_) {  // get_params draws nothing for an exact fit
      SampleRng rng = ctx.Rng(s);
      top = static_cast<int>(rng.UniformInt(0, h2 - h_));
      left = static_cast<int>(rng.UniformInt(0, w2 - w_));
    }
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(h_) * w_ * 3);
    int* rows = IndexMap(ctx, s.data, out, static_cast<size_t>(h_) + w_);
    int* cols = rows + h_;
    for (int y = 0; y < h_; ++y) {
      const int r = PadIndex(top + y, pad_h, h1, mode_);
      rows[y] = r < 0 ? -1 : PadIndex(r, padding_.top, h, mode_);
    }
    for (int x = 0; x < w_; ++x) {
      const int c = PadIndex(left + x, pad_w, w1, mode_);
      cols[x] = c < 0 ? -1 : PadIndex(c, padding_.left, w, mode_);
    }
    Remap(s.data, w, rows, h_, cols, w_, fill_, out);
    SetImage(s, out, h_, w_, ImageView::Whole(w_, h_));
    return absl::OkStatus();
  }

 private:
  int h_ = 0, w_ = 0;
  Padding padding_;
  bool pad_if_needed_ = false;
  Fill3 fill_{};
  PadMode mode_ = PadMode::kConstant;
};

// ------------------------------------------------ rotation and affine

// What the two resampling ops share: interpolation, fill and center.
struct ResampleParams {
  Resample resample = Resample::kNearest;
  Fill3 fill{};
  std::optional<std::pair<double, double>> center;

  template <typename P>
  static absl::StatusOr<ResampleParams> Read(const P& p) {
    ResampleParams r;
    absl::StatusOr<Resample> resample = ReadResample(p.interpolation());
    if (!resample.ok()) return resample.status();
    absl::StatusOr<Fill3> fill = ReadFill(p.fill());
    if (!fill.ok()) return fill.status();
    absl::StatusOr<std::optional<std::pair<double, double>>> center = ReadCenter(p.center());
    if (!center.ok()) return center.status();
    r.resample = *resample;
    r.fill = *fill;
    r.center = *center;
    return r;
  }
};

class RandomRotationOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomRotation& p = stage.random_rotation();
    auto op = std::make_unique<RandomRotationOp>();
    absl::StatusOr<std::pair<double, double>> degrees =
        ReadSymmetricRange("degrees", absl::MakeConstSpan(p.degrees().data(), p.degrees().size()));
    if (!degrees.ok()) return degrees.status();
    absl::StatusOr<ResampleParams> params = ResampleParams::Read(p);
    if (!params.ok()) return params.status();
    op->degrees_ = *degrees;
    op->params_ = *params;
    op->expand_ = p.expand();
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    if (expand_) return ValueType{ValueKind::kImage, {-1, -1, 3}};
    return in;
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const double angle = DrawFloat32(rng, degrees_.first, degrees_.second);
    const int h = s.height(), w = s.width();
    const RotationPlan plan =
        PlanRotation(angle, w, h, expand_, params_.center ? &*params_.center : nullptr);
    const double area = static_cast<double>(plan.out_w) * plan.out_h;
    if (ctx.decode != nullptr && area > static_cast<double>(ctx.decode->max_pixels)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("random_rotation: expanding %dx%d to %dx%d is over --max-pixels (%d)", w,
                          h, plan.out_w, plan.out_h, ctx.decode->max_pixels));
    }
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(plan.out_w) * plan.out_h * 3);
    Rotate(plan, s.data, h, w, out, params_.resample, params_.fill);
    SetImage(s, out, plan.out_h, plan.out_w, ImageView::Whole(plan.out_w, plan.out_h));
    return absl::OkStatus();
  }

 private:
  std::pair<double, double> degrees_;
  ResampleParams params_;
  bool expand_ = false;
};

class RandomAffineOp : public SameShapeImageOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomAffine& p = stage.random_affine();
    auto op = std::make_unique<RandomAffineOp>();
    absl::StatusOr<std::pair<double, double>> degrees =
        ReadSymmetricRange("degrees", absl::MakeConstSpan(p.degrees().data(), p.degrees().size()));
    if (!degrees.ok()) return degrees.status();
    op->degrees_ = *degrees;
    if (absl::Status s = op->ReadRanges(p); !s.ok()) return s;
    absl::StatusOr<ResampleParams> params = ResampleParams::Read(p);
    if (!params.ok()) return params.status();
    op->params_ = *params;
    return op;
  }

  // RandomAffine.get_params: angle, then translation (x, y), scale, shear
  // (x, y), each drawn only when its range is given.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    const int h = s.height(), w = s.width();
    const double angle = DrawFloat32(rng, degrees_.first, degrees_.second);
    double tx = 0, ty = 0, scale = 1, shear_x = 0, shear_y = 0;
    if (translate_) {
      const double max_dx = translate_->first * w, max_dy = translate_->second * h;
      tx = std::nearbyint(DrawFloat32(rng, -max_dx, max_dx));  // round(): half to even
      ty = std::nearbyint(DrawFloat32(rng, -max_dy, max_dy));
    }
    if (scale_) scale = DrawFloat32(rng, scale_->first, scale_->second);
    if (shear_x_) shear_x = DrawFloat32(rng, shear_x_->first, shear_x_->second);
    if (shear_y_) shear_y = DrawFloat32(rng, shear_y_->first, shear_y_->second);
    const auto [cx, cy] = params_.center.value_or(std::pair{w * 0.5, h * 0.5});
    const AffineMatrix m = InverseAffineMatrix(cx, cy, angle, tx, ty, scale, shear_x, shear_y);
    uint8_t* out = ctx.Output(s.data, s.size);
    AffineTransform(s.data, h, w, out, h, w, m, params_.resample, params_.fill);
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  using Range = std::optional<std::pair<double, double>>;

  absl::Status ReadRanges(const proto::RandomAffine& p) {
    const auto& t = p.translate();
    if (!t.empty()) {
      if (t.size() != 2 || !(t[0] >= 0 && t[0] <= 1 && t[1] >= 0 && t[1] <= 1)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "translate: two values [a, b], each in [0, 1], got [%s]", absl::StrJoin(t, ", ")));
      }
      translate_ = std::pair{t[0], t[1]};
    }
    const auto& sc = p.scale();
    if (!sc.empty()) {
      // Drawn as float32: both ends must be positive and finite there.
      if (sc.size() != 2 || !(static_cast<float>(sc[0]) > 0 && sc[0] <= sc[1] &&
                              std::isfinite(static_cast<float>(sc[1])))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("scale: two values [min, max], 0 < min <= max, positive and finite as "
                            "float32, got [%s]",
                            absl::StrJoin(sc, ", ")));
      }
      scale_ = std::pair{sc[0], sc[1]};
    }
    const absl::Span<const double> sh(p.shear().data(), p.shear().size());
    if (sh.size() == 4) {
      absl::StatusOr<std::pair<double, double>> rx = ReadSymmetricRange("shear", sh.subspan(0, 2));
      absl::StatusOr<std::pair<double, double>> ry = ReadSymmetricRange("shear", sh.subspan(2, 2));
      if (!rx.ok()) return rx.status();
      if (!ry.ok()) return ry.status();
      shear_x_ = *rx;
      shear_y_ = *ry;
    } else if (!sh.empty()) {
      absl::StatusOr<std::pair<double, double>> rx = ReadSymmetricRange("shear", sh);
      if (!rx.ok()) return rx.status();
      shear_x_ = *rx;
    }
    return absl::OkStatus();
  }

  std::pair<double, double> degrees_;
  Range translate_, scale_, shear_x_, shear_y_;
  ResampleParams params_;
};

class RandomPerspectiveOp : public SameShapeImageOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomPerspective& p = stage.random_perspective();
    auto op = std::make_unique<RandomPerspectiveOp>();
    if (!(p.distortion_scale() >= 0 && p.distortion_scale() <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("distortion_scale: must be in [0, 1], got %g", p.distortion_scale()));
    }
    if (absl::Status s = CheckProbability("p", p.p()); !s.ok()) return s;
    absl::StatusOr<Resample> resample = ReadResample(p.interpolation());
    if (!resample.ok()) return resample.status();
    absl::StatusOr<Fill3> fill = ReadFill(p.fill());
    if (!fill.ok()) return fill.status();
    op->distortion_ = p.distortion_scale();
    op->p_ = p.p();
    op->resample_ = *resample;
    op->fill_ = *fill;
    return op;
  }

  // RandomPerspective.forward: torch.rand(1) < p, then get_params' eight
  // randint draws (top-left x, y; top-right; bottom-right; bottom-left).
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    SampleRng rng = ctx.Rng(s);
    if (!(rng.Uniform() < p_)) return absl::OkStatus();
    const int h = s.height(), w = s.width();
    const int dx = static_cast<int>(distortion_ * (w / 2));
    const int dy = static_cast<int>(distortion_ * (h / 2));
    auto draw = [&rng](int lo, int hi) { return static_cast<int>(rng.UniformInt(lo, hi)); };
    std::array<std::array<int, 2>, 4> end;
    end[0] = {draw(0, dx), draw(0, dy)};
    end[1] = {draw(w - dx - 1, w - 1), draw(0, dy)};
    end[2] = {draw(w - dx - 1, w - 1), draw(h - dy - 1, h - 1)};
    end[3] = {draw(0, dx), draw(h - dy - 1, h - 1)};
    const std::array<std::array<int, 2>, 4> start = {
        {{0, 0}, {w - 1, 0}, {w - 1, h - 1}, {0, h - 1}}};
    PerspectiveCoeffs c;
    if (!PerspectiveCoefficients(start, end, &c)) return absl::OkStatus();  // a 1-pixel side
    uint8_t* out = ctx.Output(s.data, s.size);
    PerspectiveTransform(s.data, h, w, out, c, resample_, fill_);
    Replace(s, out);
    return absl::OkStatus();
  }

 private:
  double distortion_ = 0.5, p_ = 0.5;
  Resample resample_ = Resample::kBilinear;
  Fill3 fill_{};
};

// FiveCrop and TenCrop: crops of one image, stacked [n, h, w, 3].
class MultiCropOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    auto op = std::make_unique<MultiCropOp>();
    absl::Status s;
    if (stage.has_ten_crop()) {
      const proto::TenCrop& p = stage.ten_crop();
      op->ten_ = true;
      op->vertical_ = p.vertical_flip();
      s = OutputSize(p.size(), p.height(), p.width(), &op->h_, &op->w_);
    } else {
      const proto::FiveCrop& p = stage.five_crop();
      s = OutputSize(p.size(), p.height(), p.width(), &op->h_, &op->w_);
    }
    if (!s.ok()) return s;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    if ((in.shape[0] >= 0 && in.shape[0] < h_) || (in.shape[1] >= 0 && in.shape[1] < w_)) {
      return TooSmall(static_cast<int>(in.shape[1]), static_cast<int>(in.shape[0]));
    }
    return ValueType{ValueKind::kImage, {ten_ ? 10 : 5, h_, w_, 3}};
  }

  // five_crop: top-left, top-right, bottom-left, bottom-right, then the centre
  // at CenterCrop's offsets; ten_crop adds the same five of the mirrored
  // image, each the mirror of the crop at the mirrored place.
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int h = s.height(), w = s.width(), n = ten_ ? 10 : 5;
    if (h_ > h || w_ > w) return TooSmall(w, h);
    if (absl::Status st = CheckOutputArea(ctx, name(), w_, int64_t{h_} * n); !st.ok()) return st;
    const size_t crop_bytes = static_cast<size_t>(h_) * w_ * 3;
    uint8_t* out = ctx.Output(s.data, crop_bytes * n);
    const cv::Mat src = ImageMat(s);
    const int top[5] = {0, 0, h - h_, h - h_, CenterOffset(h, h_)};
    const int left[5] = {0, w - w_, 0, w - w_, CenterOffset(w, w_)};
    for (int k = 0; k < n; ++k) {
      cv::Mat dst(h_, w_, CV_8UC3, out + k * crop_bytes);
      const int y = top[k % 5], x = left[k % 5];
      if (k < 5) {
        src(cv::Rect(x, y, w_, h_)).copyTo(dst);
      } else if (vertical_) {
        cv::flip(src(cv::Rect(x, h - y - h_, w_, h_)), dst, 0);
      } else {
        cv::flip(src(cv::Rect(w - x - w_, y, w_, h_)), dst, 1);
      }
    }
    s.data = out;
    s.size = crop_bytes * n;
    s.shape = {n, h_, w_, 3};
    s.view = ImageView::Whole(w_, h_);
    return absl::OkStatus();
  }

 private:
  const char* name() const { return ten_ ? "ten_crop" : "five_crop"; }
  // torchvision's center_crop offset: int(round((size - crop) / 2)).
  static int CenterOffset(int size, int crop) {
    return static_cast<int>(std::nearbyint((size - crop) / 2.0));
  }
  absl::Status TooSmall(int w, int h) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the %dx%d crop is bigger than the %dx%d image (torchvision refuses "
                        "it too: resize before the crop)",
                        name(), w_, h_, w, h));
  }

  int h_ = 0, w_ = 0;
  bool ten_ = false, vertical_ = false;
};

}  // namespace

void RegisterGeometryOps(OpRegistry* registry) {
  registry->Register(Stage::kPad, FactoryOf<PadOp>());
  registry->Register(Stage::kRandomZoomOut, FactoryOf<RandomZoomOutOp>());
  registry->Register(Stage::kRandomCrop, FactoryOf<RandomCropOp>());
  registry->Register(Stage::kRandomRotation, FactoryOf<RandomRotationOp>());
  registry->Register(Stage::kRandomAffine, FactoryOf<RandomAffineOp>());
  registry->Register(Stage::kRandomPerspective, FactoryOf<RandomPerspectiveOp>());
  registry->Register(Stage::kFiveCrop, FactoryOf<MultiCropOp>());
  registry->Register(Stage::kTenCrop, FactoryOf<MultiCropOp>());
}

}  // namespace prepflow::detail
