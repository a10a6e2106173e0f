#include "pipeline/ops/per_frame.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace prepflow {
namespace {

ValueType FrameType(const ValueType& clip) {
  ValueType frame = clip;
  frame.shape.erase(frame.shape.begin());
  return frame;
}

// Frame t of clip `s`, a value of its own with the sample's identity (so
// that the op draws the sample's numbers for the stage).
Sample FrameOf(const Sample& s, int64_t t, size_t bytes) {
  Sample f;
  f.epoch = s.epoch;
  f.index = s.index;
  f.label = s.label;
  f.window = s.window;
  f.copy = s.copy;
  f.echo_at = s.echo_at;
  f.source_version = s.source_version;
  f.kind = s.kind;
  f.data = s.data + bytes * t;
  f.size = bytes;
  f.shape.assign(s.shape.begin() + 1, s.shape.end());
  if (s.kind == ValueKind::kImage) f.view = ImageView::Whole(f.width(), f.height());
  return f;
}

// ResourceExhausted when a clip's frames together are over --max-pixels (an
// op that enlarges each frame within the limit may not make a clip over it).
absl::Status CheckClipBytes(const StageContext& ctx, ValueKind kind, size_t bytes) {
  if (ctx.decode == nullptr) return absl::OkStatus();
  const double pixels = static_cast<double>(bytes) / (kind == ValueKind::kTensor ? 12 : 3);
  if (pixels <= static_cast<double>(ctx.decode->max_pixels)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrFormat("a clip of %.0f pixels is over the limit of %d (--max-pixels)", pixels,
                      ctx.decode->max_pixels));
}

class PerFrameOp : public Op {
 public:
  explicit PerFrameOp(std::unique_ptr<Op> op) : op_(std::move(op)) {}

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    return PerFrameOutputType(*op_, in);
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    const int64_t frames = s.shape[0];
    if (frames < 1) return absl::OkStatus();
    const size_t in_bytes = s.size / frames;
    StageContext frame_ctx = ctx;
    frame_ctx.last = false;  // the sink takes the clip, not a frame
    Buffer* gathered = ctx.ws->clips[0].Contains(s.data) ? &ctx.ws->clips[1] : &ctx.ws->clips[0];
    // Frames the op passes through unchanged are copied only once one of
    // them changes: a flip not drawn leaves the clip where it is.
    uint8_t* out = nullptr;
    Sample first;
    for (int64_t t = 0; t < frames; ++t) {
      Sample f = FrameOf(s, t, in_bytes);
      const uint8_t* in = f.data;
      if (absl::Status st = op_->Apply(frame_ctx, f); !st.ok()) return st;
      if (t == 0) first = f;
      if (f.size != first.size || f.shape != first.shape || f.kind != first.kind) {
        return absl::InternalError(
            absl::StrCat("the frames of a clip came out of different sizes: ",
                         ValueType{f.kind, f.shape}.DebugString(), " and ",
                         ValueType{first.kind, first.shape}.DebugString()));
      }
      if (out == nullptr && f.data == in && f.size == in_bytes) continue;
      if (out == nullptr) {
        const size_t bytes = f.size * frames;
        if (absl::Status st = CheckClipBytes(ctx, f.kind, bytes); !st.ok()) return st;
        out = ctx.last && ctx.sink != nullptr && ctx.sink_bytes == bytes ? ctx.sink
                                                                         : gathered->Reserve(bytes);
        for (int64_t u = 0; u < t; ++u)
          std::memcpy(out + f.size * u, s.data + in_bytes * u, f.size);
      }
      std::memcpy(out + f.size * t, f.data, f.size);
    }
    if (out == nullptr) return absl::OkStatus();
    s.kind = first.kind;
    s.data = out;
    s.size = first.size * frames;
    s.shape = first.shape;
    s.shape.insert(s.shape.begin(), frames);
    if (s.kind == ValueKind::kImage) s.view = ImageView::Whole(first.width(), first.height());
    return absl::OkStatus();
  }

  absl::Status Open(const OpEnvironment& env) override { return op_->Open(env); }

 private:
  std::unique_ptr<Op> op_;
};

}  // namespace

bool IsClip(const ValueType& type) {
  return type.shape.size() == 4 &&
         (type.kind == ValueKind::kImage || type.kind == ValueKind::kTensor);
}

absl::StatusOr<ValueType> PerFrameOutputType(const Op& op, const ValueType& in) {
  if (!IsClip(in)) {
    return absl::InvalidArgumentError(absl::StrCat("expects a clip but gets ", in.DebugString()));
  }
  auto frame = op.OutputType(FrameType(in));
  if (!frame.ok()) return frame.status();
  const bool image = frame->kind == ValueKind::kImage && frame->shape.size() == 3;
  const bool tensor = frame->kind == ValueKind::kTensor && frame->shape.size() == 3;
  if (!image && !tensor) {
    return absl::InvalidArgumentError(
        absl::StrCat("makes ", frame->DebugString(),
                     " of a frame; applied to a clip it must make an image or a "
                     "[C, H, W] tensor of each"));
  }
  ValueType out = *frame;
  out.shape.insert(out.shape.begin(), in.shape[0]);
  return out;
}

std::unique_ptr<Op> ApplyPerFrame(std::unique_ptr<Op> op) {
  return std::make_unique<PerFrameOp>(std::move(op));
}

}  // namespace prepflow
