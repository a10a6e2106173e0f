// What the audio ops share (internal to pipeline/ops/audio/): type checks,
// setting an audio or feature value, element-wise maps, the frame limit, and
// a per-rate cache of what an op makes for each sample rate.
//
// Thread-safety: the functions are pure; PerRate::Get may be called
// concurrently.
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_OP_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_OP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/core/op.h"
#include "pipeline/ops/audio/resample.h"

namespace prepflow::audio {

inline absl::Status ExpectAudio(const ValueType& in) {
  if (in.kind == ValueKind::kAudio) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "expects audio (put a decode_audio stage before it) but gets ", in.DebugString()));
}

inline void SetAudio(Sample& s, float* data, int64_t channels, int64_t frames, int rate) {
  s.kind = ValueKind::kAudio;
  s.data = reinterpret_cast<uint8_t*>(data);
  s.size = sizeof(float) * channels * frames;
  s.shape = {channels, frames};
  s.view = ImageView();
  s.sample_rate = rate;
}

inline const float* Samples(const Sample& s) { return reinterpret_cast<const float*>(s.data); }

inline absl::Status ExpectTensor(const ValueType& in, size_t min_rank, const char* what) {
  if (in.kind == ValueKind::kTensor && in.shape.size() >= min_rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expects ", what, " but gets ", in.DebugString()));
}

// Makes `data` (float32, `shape`) the sample's value: a feature tensor.
inline void SetTensor(Sample& s, float* data, Shape shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  s.kind = ValueKind::kTensor;
  s.data = reinterpret_cast<uint8_t*>(data);
  s.size = n * sizeof(float);
  s.shape = std::move(shape);
  s.view = ImageView();
  s.sample_rate = 0;
}

// out[t] = the mean of in's `channels` rows at frame t: a float32 sum in
// channel order divided by their number (waveform.mean(0)).
inline void ChannelMean(const float* in, int64_t channels, int64_t frames, float* out) {
  const auto n = static_cast<float>(channels);
  for (int64_t t = 0; t < frames; ++t) {
    float sum = 0;
    for (int64_t c = 0; c < channels; ++c) sum += in[c * frames + t];
    out[t] = sum / n;
  }
}

// out[i] = f(in[i]) over every float of the value, into the op's output;
// the value's kind and shape stay.
template <typename F>
void MapFloats(const StageContext& ctx, Sample& s, F f) {
  const size_t n = s.size / sizeof(float);
  auto* out = reinterpret_cast<float*>(ctx.Output(s.data, s.size));
  const float* in = Samples(s);
  for (size_t i = 0; i < n; ++i) out[i] = f(in[i]);
  s.data = reinterpret_cast<uint8_t*>(out);
}

// ResourceExhausted when an op would make audio longer than the limit.
inline absl::Status CheckFrames(const StageContext& ctx, const char* op, int64_t frames) {
  if (ctx.decode == nullptr || frames <= MaxAudioFrames(*ctx.decode)) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrFormat("%s: %d frames is over the limit (--max-audio-seconds %g at %d Hz)", op,
                      frames, ctx.decode->max_audio_seconds, kMaxAudioRate));
}

// Resamples every channel of `s` with `kernel` into the op's output, at
// `rate` from then on; `op` names the op in the frame limit's message.
inline absl::Status ResampleInto(const ResampleKernel& kernel, const StageContext& ctx,
                                 const char* op, int rate, Sample& s) {
  const int64_t channels = s.shape[0], frames = s.shape[1];
  const int64_t n = kernel.OutputFrames(frames);
  if (absl::Status st = CheckFrames(ctx, op, n); !st.ok()) return st;
  auto* out = reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * channels * n + 1));
  for (int64_t c = 0; c < channels; ++c) {
    kernel.Apply(Samples(s) + c * frames, frames, out + c * n);
  }
  SetAudio(s, out, channels, n, rate);
  return absl::OkStatus();
}

// What an op makes once per input sample rate (a resampling kernel, a mel
// filterbank): a dataset has few rates; past kMax distinct ones, the rest
// are made per sample.
template <typename T>
class PerRate {
 public:
  using Make = std::function<absl::StatusOr<T>(int rate)>;
  explicit PerRate(Make make) : make_(std::move(make)) {}

  absl::StatusOr<std::shared_ptr<const T>> Get(int rate) const {
    static constexpr size_t kMax = 32;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = made_.find(rate); it != made_.end()) return it->second;
    }
    absl::StatusOr<T> made = make_(rate);
    if (!made.ok()) return made.status();
    auto value = std::make_shared<const T>(*std::move(made));
    absl::MutexLock lock(&mu_);
    if (made_.size() < kMax) made_.emplace(rate, value);
    return value;
  }

 private:
  Make make_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<int, std::shared_ptr<const T>> made_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow::audio

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_AUDIO_OP_H_
