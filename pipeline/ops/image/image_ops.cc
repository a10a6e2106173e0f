// decode, random_resized_crop, resize, center_crop (the ops that plan the
// decode), the two flips and normalize: the ops every image pipeline has.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "opencv2/core.hpp"
#include "opencv2/imgproc.hpp"
#include "pipeline/core/clones.h"
#include "pipeline/core/op.h"
#include "pipeline/core/op_schema.h"
#include "pipeline/ops/image/geometry.h"
#include "pipeline/ops/image/image_family.h"
#include "pipeline/ops/image/image_op.h"

namespace prepflow {

// uint8 HWC RGB -> float32 CHW as torchvision computes it in float32:
// (x / 255 - mean) / std, each operation rounded once. With FP contraction off
// the AVX2 clone and the baseline produce identical bits, and both equal
// torchvision's ToTensor + Normalize on the same uint8 input.
PREPFLOW_CLONES void NormalizeHwcToChw(const uint8_t* __restrict in, size_t pixels,
                                       const float* mean, const float* std, float* __restrict out,
                                       size_t channel_stride) {
  float* __restrict r = out;
  float* __restrict g = out + channel_stride;
  float* __restrict b = out + 2 * channel_stride;
  const float m0 = mean[0], m1 = mean[1], m2 = mean[2];
  const float s0 = std[0], s1 = std[1], s2 = std[2];
  for (size_t i = 0; i < pixels; ++i) {
    r[i] = (static_cast<float>(in[3 * i]) / 255.0f - m0) / s0;
    g[i] = (static_cast<float>(in[3 * i + 1]) / 255.0f - m1) / s1;
    b[i] = (static_cast<float>(in[3 * i + 2]) / 255.0f - m2) / s2;
  }
}

namespace {

using proto::Stage;

using detail::ExpectImage;
using detail::ImageMat;
using detail::OutputSize;
using detail::RandomImageOp;
using detail::SetImage;

// The part of a (possibly partially decoded, scaled) image buffer that covers
// the source rectangle (x, y, w, h). Rounds to the nearest scaled pixel and
// keeps at least one pixel.
cv::Rect MapToBuffer(const ImageView& v, int x, int y, int w, int h, int buf_w, int buf_h) {
  const double d = v.scale_denom;
  auto edge = [d](int s, int origin) { return static_cast<int>(std::floor(s / d + 0.5)) - origin; };
  int x0 = edge(x, v.x0), x1 = edge(x + w, v.x0);
  int y0 = edge(y, v.y0), y1 = edge(y + h, v.y0);
  x0 = std::clamp(x0, 0, buf_w - 1);
  y0 = std::clamp(y0, 0, buf_h - 1);
  x1 = std::clamp(x1, x0 + 1, buf_w);
  y1 = std::clamp(y1, y0 + 1, buf_h);
  return cv::Rect(x0, y0, x1 - x0, y1 - y0);
}

absl::StatusOr<bool> ReadFast(proto::Fidelity fidelity) {
  switch (fidelity) {
    case proto::FIDELITY_DEFAULT:  // the loader resolves it; alone, exact
    case proto::FIDELITY_EXACT:
      return false;
    case proto::FIDELITY_FAST:
      return true;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "fidelity: ", static_cast<int>(fidelity),
          " is not supported (use FIDELITY_EXACT, FIDELITY_FAST or FIDELITY_DEFAULT)"));
  }
}

// The resampler of a resize's interpolation: every one of Pillow's filters.
absl::StatusOr<Resample> ReadResizeFilter(proto::Interpolation interp) {
  switch (interp) {
    case proto::INTERPOLATION_BOX:
      return Resample::kBox;
    case proto::INTERPOLATION_HAMMING:
      return Resample::kHamming;
    case proto::INTERPOLATION_LANCZOS:
      return Resample::kLanczos;
    default:
      return detail::ReadResample(interp);
  }
}

// How a resizing op (resize, random_resized_crop) samples its source.
struct ResizeMethod {
  Resample filter = Resample::kBilinear;
  bool fast = false;

  static absl::StatusOr<ResizeMethod> Read(proto::Interpolation interp, proto::Fidelity fidelity) {
    ResizeMethod m;
    absl::StatusOr<Resample> filter = ReadResizeFilter(interp);
    if (!filter.ok()) return filter.status();
    absl::StatusOr<bool> fast = ReadFast(fidelity);
    if (!fast.ok()) return fast.status();
    m.filter = *filter;
    // Only bilinear has a fast kernel; the others are Pillow's always.
    m.fast = *fast && m.filter == Resample::kBilinear;
    return m;
  }

  // The decode a `crop` (source coordinates) resized to out_w x out_h wants.
  DecodeHint Plan(const cv::Rect& crop, int out_w, int out_h, bool carries_crop) const {
    DecodeHint hint{crop.x, crop.y, crop.width, crop.height, crop.width, crop.height, carries_crop};
    if (fast) {  // 1/2, 1/4 or 1/8 scale, as long as it keeps the output's size
      hint.min_width = std::min(crop.width, out_w);
      hint.min_height = std::min(crop.height, out_h);
    }
    return hint;
  }
};

// fast bilinear: OpenCV's 8-bit fixed-point kernel (integer arithmetic, so
// its result does not depend on thread count or scheduling; cheaper than
// Pillow's filter, which widens with the scale), after halving with 2x2
// averaging while the source is 2x the output or more, which keeps it
// antialiased.
absl::Status OpenCvBilinear(cv::Mat src, cv::Mat& dst) {
  try {
    cv::Mat halved;
    while (src.cols >= 2 * dst.cols && src.rows >= 2 * dst.rows) {
      const cv::Mat even = src(cv::Rect(0, 0, src.cols & ~1, src.rows & ~1));
      cv::resize(even, halved, cv::Size(even.cols / 2, even.rows / 2), 0, 0, cv::INTER_AREA);
      src = halved.clone();
    }
    if (src.size() == dst.size()) {
      src.copyTo(dst);
    } else {
      cv::resize(src, dst, dst.size(), 0, 0, cv::INTER_LINEAR);
    }
  } catch (const cv::Exception& e) {
    return absl::InternalError(absl::StrCat("resize failed: ", e.what()));
  }
  return absl::OkStatus();
}

// Resizes the source rectangle `crop` of `s` (whose buffer may be a region of
// the source, decoded at a scale) into `dst`, preallocated. Exact, from the
// full-scale buffer exact resizing plans: what torchvision computes,
// img.crop(crop) then Image.resize, nearest Pillow's affine scale walk, the
// others Pillow's filters (geometry.h). Fast bilinear: OpenCV's kernel on
// the pixels of the (scaled) buffer nearest the region.
absl::Status ResizeRegion(const Sample& s, const cv::Rect& crop, const ResizeMethod& method,
                          cv::Mat& dst) {
  cv::Mat src = ImageMat(s)(
      MapToBuffer(s.view, crop.x, crop.y, crop.width, crop.height, s.width(), s.height()));
  if (method.fast) return OpenCvBilinear(src, dst);
  if (method.filter != Resample::kNearest) {
    PillowResize(src.data, src.rows, src.cols, src.step, dst.data, dst.rows, dst.cols,
                 method.filter);
    return absl::OkStatus();
  }
  if (!src.isContinuous()) src = src.clone();  // a crop's rows are strided
  const AffineMatrix scale = {static_cast<double>(src.cols) / dst.cols, 0, 0, 0,
                              static_cast<double>(src.rows) / dst.rows, 0};
  AffineTransform(src.data, src.rows, src.cols, dst.data, dst.rows, dst.cols, scale,
                  Resample::kNearest, {0, 0, 0});
  return absl::OkStatus();
}

// ---------------------------------------------------------------- decode

class DecodeOp : public Op {
 public:
  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kEncoded) {
      return absl::InvalidArgumentError(
          absl::StrCat("expects encoded bytes but gets ", in.DebugString()));
    }
    return ValueType{ValueKind::kImage, {-1, -1, 3}};
  }

  void SetConsumer(const Op* next, int next_stage) override {
    if (next != nullptr && next->PlansDecode()) {
      consumer_ = next;
      consumer_stage_ = next_stage;
    }
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    Buffer* out = ctx.ws->ScratchFor(s.data);
    DecodedImage image;
    absl::Status status;
    if (consumer_ != nullptr) {
      auto plan = [&](int w, int h) {
        SampleRng rng(ctx.seed, s.epoch, static_cast<uint64_t>(s.index),
                      static_cast<uint32_t>(consumer_stage_), s.copy_at(consumer_stage_));
        return consumer_->PlanDecode(w, h, rng);
      };
      const DecodePlanner planner(plan);
      status = ctx.ws->decoder.Decode(s.data, s.size, *ctx.decode, &planner, out, &image);
    } else {
      status = ctx.ws->decoder.Decode(s.data, s.size, *ctx.decode, nullptr, out, &image);
    }
    if (!status.ok()) return status;
    SetImage(s, image.data, image.height, image.width, image.view);
    return absl::OkStatus();
  }

 private:
  const Op* consumer_ = nullptr;
  int consumer_stage_ = 0;
};

// ---------------------------------------------------- random_resized_crop

class RandomResizedCropOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomResizedCrop& p = stage.random_resized_crop();
    auto op = std::make_unique<RandomResizedCropOp>();
    if (absl::Status s = OutputSize(p.size(), p.height(), p.width(), &op->h_, &op->w_); !s.ok()) {
      return s;
    }
    op->scale_min_ = p.scale_min();
    op->scale_max_ = p.scale_max();
    op->ratio_min_ = p.ratio_min();
    op->ratio_max_ = p.ratio_max();
    if (!(op->scale_min_ > 0 && op->scale_min_ <= op->scale_max_ && op->scale_max_ <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("scale_min, scale_max: need 0 < scale_min <= scale_max <= 1, got %g, %g",
                          op->scale_min_, op->scale_max_));
    }
    if (!(op->ratio_min_ > 0 && op->ratio_min_ <= op->ratio_max_ &&
          std::isfinite(op->ratio_max_))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ratio_min, ratio_max: need 0 < ratio_min <= ratio_max < infinity, got %g, %g",
          op->ratio_min_, op->ratio_max_));
    }
    absl::StatusOr<ResizeMethod> method = ResizeMethod::Read(p.interpolation(), p.fidelity());
    if (!method.ok()) return method.status();
    op->method_ = *method;
    op->log_ratio_min_ = std::log(op->ratio_min_);
    op->log_ratio_max_ = std::log(op->ratio_max_);
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    return ValueType{ValueKind::kImage, {h_, w_, 3}};
  }

  bool PlansDecode() const override { return true; }
  DecodeHint PlanDecode(int src_w, int src_h, SampleRng& rng) const override {
    return method_.Plan(Draw(src_w, src_h, rng), w_, h_, /*carries_crop=*/true);
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const ImageView& v = s.view;
    cv::Rect crop;
    if (v.has_crop) {
      crop = cv::Rect(v.crop_x, v.crop_y, v.crop_width, v.crop_height);
    } else {
      SampleRng rng = ctx.Rng(s);
      crop = Draw(v.source_width, v.source_height, rng);
    }
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(h_) * w_ * 3);
    cv::Mat dst(h_, w_, CV_8UC3, out);
    if (absl::Status st = ResizeRegion(s, crop, method_, dst); !st.ok()) return st;
    SetImage(s, out, h_, w_, ImageView::Whole(w_, h_));
    return absl::OkStatus();
  }

  // torchvision.transforms.RandomResizedCrop.get_params, with our generator.
  cv::Rect Draw(int width, int height, SampleRng& rng) const {
    const double area = static_cast<double>(width) * height;
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target_area = area * rng.Uniform(scale_min_, scale_max_);
      const double aspect = std::exp(rng.Uniform(log_ratio_min_, log_ratio_max_));
      // Python's round() rounds half to even, as nearbyint does by default.
      // Compared as doubles: an extreme aspect ratio gives sides no int holds
      // (found by tests/fuzz/job_fuzz).
      const double wd = std::nearbyint(std::sqrt(target_area * aspect));
      const double hd = std::nearbyint(std::sqrt(target_area / aspect));
      if (0 < wd && wd <= width && 0 < hd && hd <= height) {
        const int w = static_cast<int>(wd), h = static_cast<int>(hd);
        const int y = static_cast<int>(rng.UniformInt(0, height - h));
        const int x = static_cast<int>(rng.UniformInt(0, width - w));
        return cv::Rect(x, y, w, h);
      }
    }
    // Fallback to a central crop at the nearest allowed aspect ratio.
    const double in_ratio = static_cast<double>(width) / height;
    double wd = width, hd = height;
    if (in_ratio < ratio_min_) {
      hd = std::nearbyint(wd / ratio_min_);
    } else if (in_ratio > ratio_max_) {
      wd = std::nearbyint(hd * ratio_max_);
    }
    const int w = static_cast<int>(std::clamp(wd, 1.0, static_cast<double>(width)));
    const int h = static_cast<int>(std::clamp(hd, 1.0, static_cast<double>(height)));
    return cv::Rect((width - w) / 2, (height - h) / 2, w, h);
  }

 private:
  int h_ = 0, w_ = 0;
  double scale_min_ = 0, scale_max_ = 0, ratio_min_ = 0, ratio_max_ = 0;
  double log_ratio_min_ = 0, log_ratio_max_ = 0;
  ResizeMethod method_;
};

// ---------------------------------------------------------------- resize

class ResizeOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Resize& p = stage.resize();
    auto op = std::make_unique<ResizeOp>();
    if (p.shorter_side() != 0) {
      if (p.height() != 0 || p.width() != 0) {
        return absl::InvalidArgumentError("set either shorter_side or height and width, not both");
      }
      if (p.shorter_side() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("shorter_side: must be positive, got ", p.shorter_side()));
      }
      op->shorter_ = p.shorter_side();
      if (p.max_size() != 0 && p.max_size() <= p.shorter_side()) {
        return absl::InvalidArgumentError(
            absl::StrCat("max_size: must be greater than shorter_side (", p.shorter_side(),
                         "), got ", p.max_size()));
      }
      op->max_size_ = p.max_size();
    } else if (p.max_size() != 0) {
      return absl::InvalidArgumentError(
          "max_size: only with shorter_side (as torchvision's Resize, whose max_size needs an "
          "int size)");
    } else if (absl::Status s = OutputSize(0, p.height(), p.width(), &op->h_, &op->w_); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), " or shorter_side"));
    }
    absl::StatusOr<ResizeMethod> method = ResizeMethod::Read(p.interpolation(), p.fidelity());
    if (!method.ok()) return method.status();
    op->method_ = *method;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    if (shorter_ > 0) return ValueType{ValueKind::kImage, {-1, -1, 3}};
    return ValueType{ValueKind::kImage, {h_, w_, 3}};
  }

  // torchvision's Resize(int): the shorter side becomes `shorter`, the
  // longer one int(shorter * long / short); past max_size, both shrink.
  // The long side saturates at INT_MAX: a thin image resized up overflows
  // int (Apply then refuses it against --max-pixels).
  static cv::Size ShorterSide(int w, int h, int shorter, int max_size) {
    const int short_side = std::min(w, h), long_side = std::max(w, h);
    const double exact = static_cast<double>(shorter) * long_side / short_side;
    int new_short = shorter;
    int new_long = exact < INT_MAX ? static_cast<int>(exact) : INT_MAX;
    if (max_size > 0 && new_long > max_size) {  // _compute_resized_output_size
      new_short = static_cast<int>(static_cast<double>(max_size) * new_short / new_long);
      new_long = max_size;
    }
    return w <= h ? cv::Size(new_short, new_long) : cv::Size(new_long, new_short);
  }

  bool PlansDecode() const override { return true; }
  DecodeHint PlanDecode(int src_w, int src_h, SampleRng& rng) const override {
    const cv::Size t = Target(src_w, src_h, rng);
    return method_.Plan(cv::Rect(0, 0, src_w, src_h), t.width, t.height, /*carries_crop=*/false);
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const ImageView& v = s.view;
    SampleRng rng = ctx.Rng(s);  // the draws PlanDecode made (random_resize)
    const cv::Size t = Target(v.source_width, v.source_height, rng);
    const double area = static_cast<double>(t.width) * t.height;
    if (ctx.decode != nullptr && area > static_cast<double>(ctx.decode->max_pixels)) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "resizing %dx%d to %dx%d = %.0f pixels, over the limit of %d (--max-pixels)",
          v.source_width, v.source_height, t.width, t.height, area, ctx.decode->max_pixels));
    }
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(t.width) * t.height * 3);
    cv::Mat dst(t, CV_8UC3, out);
    const cv::Rect whole(0, 0, v.source_width, v.source_height);
    if (absl::Status st = ResizeRegion(s, whole, method_, dst); !st.ok()) return st;
    SetImage(s, out, t.height, t.width, ImageView::Whole(t.width, t.height));
    return absl::OkStatus();
  }

 protected:
  // The output size for a w x h source; `rng` is the sample's stream for
  // this stage (random_resize draws from it).
  virtual cv::Size Target(int w, int h, SampleRng&) const {
    return shorter_ == 0 ? cv::Size(w_, h_) : ShorterSide(w, h, shorter_, max_size_);
  }

  ResizeMethod method_;

 private:
  int shorter_ = 0, max_size_ = 0, h_ = 0, w_ = 0;
};

// torchvision.transforms.v2's multi-scale resizes, one size drawn per
// sample (as resize, with the exact fidelity): RandomResize, the shorter
// side uniform in [min_size, max_size); RandomShortestSize, the shorter side
// one of `sizes` with the longer at most max_size; ScaleJitter, the image
// fitted into target_height x target_width and scaled by a factor uniform
// in [scale_min, scale_max].
class RandomResizeOp : public ResizeOp {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::RandomResize& p = stage.random_resize();
    auto op = std::make_unique<RandomResizeOp>();
    op->p_ = p;
    const bool range = p.min_size() != 0, sizes = p.sizes_size() > 0,
               jitter = p.target_height() != 0 || p.target_width() != 0;
    if (range + sizes + jitter != 1) {
      return absl::InvalidArgumentError(
          "set one of min_size (RandomResize), sizes (RandomShortestSize) or target_height and "
          "target_width (ScaleJitter)");
    }
    if (range && !(p.min_size() > 0 && p.max_size() > p.min_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("min_size, max_size: need 0 < min_size < max_size, got ", p.min_size(), ", ",
                       p.max_size()));
    }
    for (const int32_t s : p.sizes()) {
      if (s <= 0)
        return absl::InvalidArgumentError(absl::StrCat("sizes: must be positive, got ", s));
    }
    if (p.max_size() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("max_size: must be >= 0, got ", p.max_size()));
    }
    const double lo = p.has_scale_min() ? p.scale_min() : 0.1;
    const double hi = p.has_scale_max() ? p.scale_max() : 2.0;
    if (jitter &&
        !(p.target_height() > 0 && p.target_width() > 0 && lo > 0 && lo <= hi && hi <= 1000)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target_height, target_width, scale_min, scale_max: need positive targets and 0 < "
          "scale_min <= scale_max <= 1000, got ",
          p.target_height(), ", ", p.target_width(), ", ", lo, ", ", hi));
    }
    op->scale_lo_ = lo;
    op->scale_hi_ = hi;
    absl::StatusOr<ResizeMethod> method =
        ResizeMethod::Read(p.interpolation(), proto::FIDELITY_EXACT);
    if (!method.ok()) return method.status();
    op->method_ = *method;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    return ValueType{ValueKind::kImage, {-1, -1, 3}};
  }

 protected:
  cv::Size Target(int w, int h, SampleRng& rng) const override {
    if (p_.min_size() != 0) {
      return ShorterSide(w, h, static_cast<int>(rng.UniformInt(p_.min_size(), p_.max_size() - 1)),
                         0);
    }
    double r;
    if (p_.sizes_size() > 0) {
      r = static_cast<double>(p_.sizes(static_cast<int>(rng.UniformInt(0, p_.sizes_size() - 1)))) /
          std::min(w, h);
      if (p_.max_size() > 0) r = std::min(r, static_cast<double>(p_.max_size()) / std::max(w, h));
    } else {
      r = std::min(static_cast<double>(p_.target_width()) / w,
                   static_cast<double>(p_.target_height()) / h) *
          rng.Uniform(scale_lo_, scale_hi_);
    }
    // int(orig * r), at least one pixel; saturated for --max-pixels to refuse.
    const auto side = [r](int n) {
      const double x = n * r;
      return x < 1 ? 1 : x < INT_MAX ? static_cast<int>(x) : INT_MAX;
    };
    return cv::Size(side(w), side(h));
  }

 private:
  proto::RandomResize p_;
  double scale_lo_ = 0.1, scale_hi_ = 2.0;
};

// ------------------------------------------------------------ center_crop

class CenterCropOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::CenterCrop& p = stage.center_crop();
    auto op = std::make_unique<CenterCropOp>();
    if (absl::Status s = OutputSize(p.size(), p.height(), p.width(), &op->h_, &op->w_); !s.ok()) {
      return s;
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in); !s.ok()) return s;
    return ValueType{ValueKind::kImage, {h_, w_, 3}};
  }

  // torchvision's CenterCrop offsets: int(round((size - crop) / 2)) along an
  // axis the crop fits in; along one it does not, the image is zero-padded
  // by (crop - size) // 2 before it (and the rest after), so the offset is
  // minus that.
  static int AxisOffset(int size, int crop) {
    if (crop > size) return -((crop - size) / 2);
    return static_cast<int>(std::nearbyint((size - crop) / 2.0));
  }
  cv::Point Offset(int w, int h) const { return cv::Point(AxisOffset(w, w_), AxisOffset(h, h_)); }

  bool PlansDecode() const override { return true; }
  DecodeHint PlanDecode(int src_w, int src_h, SampleRng&) const override {
    const cv::Point o = Offset(src_w, src_h);
    const cv::Rect r = cv::Rect(o.x, o.y, w_, h_) & cv::Rect(0, 0, src_w, src_h);
    // Decode the visible part at full scale; the crop is recomputed in Apply.
    return DecodeHint{r.x, r.y, r.width, r.height, r.width, r.height, false};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const ImageView& v = s.view;
    const cv::Point o = Offset(v.source_width, v.source_height);
    const cv::Rect want(o.x, o.y, w_, h_);
    const cv::Rect visible = want & cv::Rect(0, 0, v.source_width, v.source_height);
    uint8_t* out = ctx.Output(s.data, static_cast<size_t>(h_) * w_ * 3);
    cv::Mat dst(h_, w_, CV_8UC3, out);
    if (visible.size() != want.size()) dst.setTo(cv::Scalar::all(0));
    if (!visible.empty()) {
      // The region decoded for us is at scale 1 (see PlanDecode), or the image
      // is whole; either way v.x0/v.y0 give the buffer origin.
      const cv::Rect src(visible.x - v.x0, visible.y - v.y0, visible.width, visible.height);
      if (v.scale_denom != 1 || (src & cv::Rect(0, 0, s.width(), s.height())) != src) {
        return absl::InternalError("center_crop: decoded region does not cover the crop");
      }
      ImageMat(s)(src).copyTo(
          dst(cv::Rect(visible.x - want.x, visible.y - want.y, visible.width, visible.height)));
    }
    SetImage(s, out, h_, w_, ImageView::Whole(w_, h_));
    return absl::OkStatus();
  }

 private:
  int h_ = 0, w_ = 0;
};

// ----------------------------------------------------------------- flips

void FlipLeftRight(const cv::Mat& src, cv::Mat& dst) { cv::flip(src, dst, 1); }
void FlipTopBottom(const cv::Mat& src, cv::Mat& dst) { cv::flip(src, dst, 0); }

// -------------------------------------------------------------- normalize

class NormalizeOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Normalize& p = stage.normalize();
    if (p.mean_size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("mean: needs 3 values (R, G, B), got ", p.mean_size()));
    }
    if (p.std_size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("std: needs 3 values (R, G, B), got ", p.std_size()));
    }
    auto op = std::make_unique<NormalizeOp>();
    op->channels_first_ = p.layout() == proto::Normalize::LAYOUT_CNHW;
    for (int c = 0; c < 3; ++c) {
      if (!(p.std(c) > 0) || !std::isfinite(p.mean(c))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("std: channel %d must be positive and mean finite, got mean %g std %g",
                            c, p.mean(c), p.std(c)));
      }
      // torchvision holds mean and std as float32 tensors.
      op->mean_[c] = static_cast<float>(p.mean(c));
      op->std_[c] = static_cast<float>(p.std(c));
    }
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectImage(in, /*stacks=*/true); !s.ok()) return s;
    return ValueType{ValueKind::kTensor, TensorShape(in.shape)};
  }

  // One CHW tensor per image: [n, 3, h, w] for a stack of n, as torchvision's
  // Normalize takes [..., C, H, W]; or channels first, [3, n, h, w].
  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const size_t plane = static_cast<size_t>(s.height()) * s.width();
    const size_t n = s.images();
    const size_t bytes = plane * 3 * n * sizeof(float);
    float* out = reinterpret_cast<float*>(ctx.Output(s.data, bytes));
    for (size_t i = 0; i < n; ++i) {
      // The image's first channel, and the distance to its next.
      float* at = channels_first_ ? out + i * plane : out + i * plane * 3;
      NormalizeHwcToChw(s.data + i * plane * 3, plane, mean_, std_, at,
                        channels_first_ ? plane * n : plane);
    }
    s.kind = ValueKind::kTensor;
    s.data = reinterpret_cast<uint8_t*>(out);
    s.size = bytes;
    s.shape = TensorShape(s.shape);
    s.view = ImageView();
    return absl::OkStatus();
  }

 private:
  // [h, w, 3] -> [3, h, w]; [n, h, w, 3] -> [n, 3, h, w] (or [3, n, h, w]).
  Shape TensorShape(const Shape& image) const {
    const size_t r = image.size();
    if (channels_first_ && r == 4) return {3, image[0], image[1], image[2]};
    Shape out(image.begin(), image.end() - 3);
    out.insert(out.end(), {3, image[r - 3], image[r - 2]});
    return out;
  }

  bool channels_first_ = false;
  float mean_[3];
  float std_[3];
};

}  // namespace

namespace detail {

absl::Status OutputSize(int size, int height, int width, int* h, int* w) {
  if (size != 0 && (height != 0 || width != 0)) {
    return absl::InvalidArgumentError("set either size or height and width, not both");
  }
  *h = size != 0 ? size : height;
  *w = size != 0 ? size : width;
  if (*h <= 0 || *w <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "output size %dx%d must be positive (set size, or height and width)", *w, *h));
  }
  return absl::OkStatus();
}

void RegisterBasicImageOps(OpRegistry* registry) {
  registry->Register(Stage::kDecode, [](const Stage&) -> absl::StatusOr<std::unique_ptr<Op>> {
    return std::make_unique<DecodeOp>();
  });
  registry->Register(Stage::kRandomResizedCrop, FactoryOf<RandomResizedCropOp>());
  registry->Register(Stage::kResize, FactoryOf<ResizeOp>());
  registry->Register(Stage::kRandomResize, FactoryOf<RandomResizeOp>());
  registry->Register(Stage::kCenterCrop, FactoryOf<CenterCropOp>());
  registry->Register(Stage::kRandomHorizontalFlip, [](const Stage& stage) {
    return RandomImageOp::Create(stage.random_horizontal_flip().p(), FlipLeftRight);
  });
  registry->Register(Stage::kNormalize, FactoryOf<NormalizeOp>());
  registry->Register(Stage::kRandomVerticalFlip, [](const Stage& stage) {
    return RandomImageOp::Create(stage.random_vertical_flip().p(), FlipTopBottom);
  });
}

}  // namespace detail
}  // namespace prepflow
