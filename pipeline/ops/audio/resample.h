// torchaudio's band-limited resampler (transforms.Resample): a windowed-sinc
// FIR kernel per output phase, computed as torchaudio computes it (in double,
// then float32), applied as its strided conv1d over the zero-padded signal.
//
// Thread-safety: a kernel is immutable once made; Apply is reentrant.
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_RESAMPLE_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_RESAMPLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace prepflow {

struct ResampleParams {
  int lowpass_filter_width = 6;
  double rolloff = 0.99;
  bool kaiser = false;  // else Hann ("sinc_interpolation")
  double beta = 14.769656459379492;
};

class ResampleKernel {
 public:
  // InvalidArgument naming the parameter for rates or parameters torchaudio
  // refuses, or a kernel over 64 MiB (rates whose ratio reduces to huge
  // integers: 44100 -> 44101 would need 44101 phases).
  static absl::StatusOr<ResampleKernel> Make(int from_rate, int to_rate,
                                             const ResampleParams& params);
  // InvalidArgument naming the parameter torchaudio (or a sane bound) refuses.
  static absl::Status CheckParams(const ResampleParams& params);

  // ceil(to * frames / from): the frames torchaudio keeps.
  int64_t OutputFrames(int64_t frames) const;
  // Resamples one channel of `frames` samples into OutputFrames(frames).
  void Apply(const float* in, int64_t frames, float* out) const;

  int from() const { return from_; }  // rates divided by their gcd
  int to() const { return to_; }

 private:
  int from_ = 1, to_ = 1;
  int width_ = 0;                  // zeros padded before the signal
  int taps_ = 0;                   // per phase: 2 * width + from
  std::vector<float> k_;           // [to][taps]
  std::vector<int> first_, last_;  // per phase: the taps that are not zero
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_RESAMPLE_H_
