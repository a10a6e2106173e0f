#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/ops/video/video_decode.h"
#include "pipeline/ops/video/video_family.h"

namespace prepflow {
namespace {

using proto::Stage;

// The most frames a clip may be asked for (--max-video-frames bounds what a
// clip decodes; this bounds the spec).
constexpr int kMaxClipFrames = 4096;

// ------------------------------------------------------------ decode_video

class DecodeVideoOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::DecodeVideo& p = stage.decode_video();
    auto op = std::unique_ptr<DecodeVideoOp>(new DecodeVideoOp(p));
    if (op->frames_ < 1 || op->frames_ > kMaxClipFrames) {
      return absl::InvalidArgumentError(
          absl::StrFormat("frames: must be in [1, %d], got %d", kMaxClipFrames, op->frames_));
    }
    if (op->stride_ < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("stride: must be positive, got ", op->stride_));
    }
    // (Defaults are filled into a spec: a stride of 1 is no stride.)
    if (!(p.fps() >= 0 && p.fps() <= 1000) || (p.fps() > 0 && op->stride_ != 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fps: must be in [0, 1000] and not set with a stride, got %g", p.fps()));
    }
    if (p.max_stride() != 0 && (p.max_stride() < op->stride_ || p.fps() > 0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "max_stride: must be 0 or at least stride (%d), and not set with fps, got %d",
          op->stride_, p.max_stride()));
    }
    if (!(p.start() >= 0 && p.start() <= kMaxVideoSeconds) ||
        (p.start() > 0 && p.sampler() != proto::DecodeVideo::SAMPLER_START)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("start: must be in [0, %g] seconds, with sampler SAMPLER_START, got %g",
                          kMaxVideoSeconds, p.start()));
    }
    return std::unique_ptr<Op>(std::move(op));
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (in.kind != ValueKind::kEncoded) {
      return absl::InvalidArgumentError(
          absl::StrCat("expects encoded bytes but gets ", in.DebugString()));
    }
    return ValueType{ValueKind::kImage, {frames_, -1, -1, 3}};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    static const DecodeOptions kDefaults;
    const DecodeOptions& options = ctx.decode != nullptr ? *ctx.decode : kDefaults;
    VideoLimits limits;
    limits.max_pixels = options.max_pixels;
    limits.max_seconds = options.max_video_seconds;
    limits.max_frames = options.max_video_frames;
    auto reader = VideoReader::Open(s.data, s.size, limits);
    if (!reader.ok()) return reader.status();
    const VideoInfo& info = (*reader)->info();
    auto clip = Clip(info, s.window, ctx.Rng(s));
    if (!clip.ok()) return clip.status();
    const size_t frame = (*reader)->frame_bytes();
    // A clip is one value: its frames together within --max-pixels.
    const double pixels = static_cast<double>(info.width) * info.height * frames_;
    if (pixels > static_cast<double>(options.max_pixels)) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "video: a clip of %d frames of %dx%d is %.0f pixels, over the limit of %d "
          "(--max-pixels)",
          frames_, info.width, info.height, pixels, options.max_pixels));
    }
    uint8_t* out = ctx.Output(s.data, frame * frames_);
    // The padded rows in the third scratch buffer: counted, and kept.
    Buffer* rows = ctx.ws->ScratchFor(s.data, out);
    if (absl::Status st = (*reader)->DecodeClip(*clip, out, nullptr, rows); !st.ok()) return st;
    s.kind = ValueKind::kImage;
    s.data = out;
    s.size = frame * frames_;
    s.shape = {frames_, info.height, info.width, 3};
    s.view = ImageView::Whole(info.width, info.height);
    return absl::OkStatus();
  }

 private:
  explicit DecodeVideoOp(const proto::DecodeVideo& p)
      : frames_(p.has_frames() ? p.frames() : 16),
        stride_(p.has_stride() ? p.stride() : 1),
        max_stride_(p.max_stride()),
        fps_(p.fps()),
        sampler_(p.sampler()),
        start_(p.start()) {}

  // The clip's times in `info`'s video: its step from fps or the stride at
  // the header's rate (a stride drawn first for frame-rate jitter), its
  // start as the sampler says within the sample's window, among the starts
  // whose last frame is still shown (the window's start where the duration
  // is not given).
  absl::StatusOr<ClipTimes> Clip(const VideoInfo& info, const MediaWindow& window,
                                 SampleRng rng) const {
    ClipTimes clip;
    clip.frames = frames_;
    const int64_t stride = max_stride_ > stride_ ? rng.UniformInt(stride_, max_stride_) : stride_;
    if (fps_ > 0) {
      clip.step = 1 / fps_;
    } else if (info.fps > 0) {
      clip.step = static_cast<double>(stride) / info.fps;
    } else {
      return absl::InvalidArgumentError(
          "video: the header gives no frame rate to stride by; set decode_video's fps");
    }
    // The window, within the video where its duration is known.
    const double from = window.start;
    const bool known = info.seconds > 0;
    if (known && from > 0 && from >= info.seconds) {
      return absl::OutOfRangeError(
          absl::StrFormat("video: the sample's window starts at %g s, past the video's end (%g s)",
                          from, info.seconds));
    }
    double to = known ? info.seconds : from;
    if (window.end >= 0) to = known ? std::min(window.end, info.seconds) : window.end;
    const double shown = info.fps > 0 ? 1 / info.fps : 0;  // the last frame's time on screen
    const double last = from + std::max(0.0, to - from - shown - clip.step * (frames_ - 1));
    switch (sampler_) {
      case proto::DecodeVideo::SAMPLER_CENTER:
        clip.start = from + (last - from) / 2;
        break;
      case proto::DecodeVideo::SAMPLER_START:
        clip.start = from + start_;
        break;
      case proto::DecodeVideo::SAMPLER_UNIFORM:
        clip.start = from + (last - from) * window.clip / std::max(window.clips - 1, 1);
        break;
      default:
        clip.start = rng.Uniform(from, last);
        break;
    }
    return clip;
  }

  int frames_;
  int stride_;
  int max_stride_;
  double fps_;
  proto::DecodeVideo::Sampler sampler_;
  double start_;
};

// ---------------------------------------------- uniform_temporal_subsample

// A clip: a stack of frames [T, H, W, 3], or a tensor [T, ...].
absl::Status ExpectClip(const ValueType& in) {
  if ((in.kind == ValueKind::kImage && in.shape.size() == 4) ||
      (in.kind == ValueKind::kTensor && in.shape.size() >= 2)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "expects a clip (frames [T, H, W, 3] from decode_video, or a tensor [T, ...]) but gets ",
      in.DebugString()));
}

// A clip of `keep` frames: frame i is the input's frame source(T, i).
template <typename Source>
absl::Status KeepFrames(const StageContext& ctx, Sample& s, int keep, const char* op,
                        Source source) {
  const int64_t frames = s.shape[0];
  if (frames < 1) return absl::InvalidArgumentError(absl::StrCat(op, ": an empty clip"));
  const size_t per = s.size / frames;
  uint8_t* out = ctx.Output(s.data, per * keep);
  for (int i = 0; i < keep; ++i) {
    const int64_t from = source(frames, i);
    if (from < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: a clip of %d frames is shorter than frames: %d", op, frames, keep));
    }
    std::memcpy(out + per * i, s.data + per * from, per);
  }
  s.data = out;
  s.size = per * keep;
  s.shape[0] = keep;
  return absl::OkStatus();
}

// The base of ops that keep `frames` frames of a clip.
class TemporalOp : public Op {
 public:
  explicit TemporalOp(int keep) : keep_(keep) {}

  // A T of `keep` frames, checked.
  template <typename T>
  static absl::StatusOr<std::unique_ptr<Op>> Make(int keep) {
    if (keep < 1 || keep > kMaxClipFrames) {
      return absl::InvalidArgumentError(
          absl::StrFormat("frames: must be in [1, %d], got %d", kMaxClipFrames, keep));
    }
    return std::unique_ptr<Op>(new T(keep));
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectClip(in); !s.ok()) return s;
    ValueType out = in;
    out.shape[0] = keep_;
    return out;
  }

 protected:
  int keep_;
};

class UniformTemporalSubsampleOp : public TemporalOp {
 public:
  using TemporalOp::TemporalOp;
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    return Make<UniformTemporalSubsampleOp>(stage.uniform_temporal_subsample().frames());
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    return KeepFrames(ctx, s, keep_, "uniform_temporal_subsample", [this](int64_t frames, int i) {
      return UniformTemporalIndex(frames, keep_, i);
    });
  }
};

class RandomTemporalCropOp : public TemporalOp {
 public:
  using TemporalOp::TemporalOp;
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    return Make<RandomTemporalCropOp>(stage.random_temporal_crop().frames());
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int64_t frames = s.shape[0];
    const int64_t first = frames >= keep_ ? ctx.Rng(s).UniformInt(0, frames - keep_) : -1;
    return KeepFrames(ctx, s, keep_, "random_temporal_crop",
                      [first](int64_t, int i) { return first < 0 ? -1 : first + i; });
  }
};

}  // namespace

int64_t UniformTemporalIndex(int64_t frames, int64_t keep, int64_t i) {
  if (keep == 1) return 0;
  const float end = static_cast<float>(frames - 1);
  const float step = end / static_cast<float>(keep - 1);
  // torch's scalar kernel, built for AVX2 (so its a + b * c are fused).
  auto at = [&](int64_t k) {
    return k < keep / 2 ? std::fma(step, static_cast<float>(k), 0.0f)
                        : std::fma(-step, static_cast<float>(keep - k - 1), end);
  };
  // Its vector kernel takes two vectors of eight lanes at a time, each lane
  // base + k * step rounded twice; the rest goes to the scalar kernel.
  constexpr int64_t kLanes = 8;
  float v;
  if (i < keep / (2 * kLanes) * (2 * kLanes)) {
    const int64_t base = i / kLanes * kLanes;
    const volatile float offset = static_cast<float>(i - base) * step;
    v = at(base) + offset;
  } else {
    v = at(i);
  }
  return static_cast<int64_t>(std::clamp(v, 0.0f, end));
}

std::vector<int64_t> UniformTemporalIndices(int64_t frames, int64_t keep) {
  std::vector<int64_t> out(keep);
  for (int64_t i = 0; i < keep; ++i) out[i] = UniformTemporalIndex(frames, keep, i);
  return out;
}

void RegisterVideoOps(OpRegistry* registry) {
  registry->Register(Stage::kDecodeVideo, FactoryOf<DecodeVideoOp>());
  registry->Register(Stage::kUniformTemporalSubsample, FactoryOf<UniformTemporalSubsampleOp>());
  registry->Register(Stage::kRandomTemporalCrop, FactoryOf<RandomTemporalCropOp>());
}

}  // namespace prepflow
