// Kaldi's filterbank features as torchaudio.compliance.kaldi.fbank computes
// them (ESPnet's and WeNet's front end): framing, DC removal, pre-emphasis,
// a window, the power spectrum and Kaldi's mel banks, in float32 in the
// order torchaudio takes. The FFT: LaneRealFft, four frames at a time, for
// a power-of-two padded window (the default); else KISS FFT (fft.h and
// spectrogram.h say why each gives the same floats on every machine).
//
// Thread-safety: a KaldiFbank is immutable once made; Apply is reentrant.
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_KALDI_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_KALDI_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/ops/audio/fft.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

class KaldiFbank {
 public:
  // The plan for audio at `sample_rate`: InvalidArgument naming the field
  // for options torchaudio refuses (a window under 2 samples, an odd padded
  // window, mel banks outside (0, Nyquist]).
  static absl::StatusOr<KaldiFbank> Make(const proto::KaldiFbank& options, int sample_rate);

  // Columns per frame: the bands, plus the energy with use_energy.
  int columns() const { return bins_ + (opt_.use_energy() ? 1 : 0); }
  // Frames of `length` samples; InvalidArgument (as torchaudio's assert)
  // when the signal is shorter than a window.
  absl::StatusOr<int64_t> Frames(int64_t length) const;
  // Features of one channel of `length` samples into out [Frames, columns()],
  // row-major; `scratch` is resized as needed.
  void Apply(const float* x, int64_t length, float* out, std::vector<float>* scratch) const;

 private:
  // One frame's windowed, padded samples into `frame` (padded_ long), and
  // its log energy.
  float Frame(const float* in, float* frame) const;
  // The power spectra (or magnitudes) of `count` <= LaneRealFft::kLanes
  // frames, each padded_ long, into power[j] (padded_ / 2 + 1 each).
  void Spectra(float* const* frames, int count, float* const* power) const;
  // Frame t's row of `out` from its power spectrum and energy.
  void Row(const float* power, float energy, float* row) const;

  proto::KaldiFbank opt_;
  int shift_ = 0, size_ = 0, padded_ = 0, bins_ = 0;
  std::vector<float> window_;                 // size_
  std::vector<float> banks_;                  // [bins_][padded_ / 2 + 1]
  std::vector<int> first_, last_;             // per band: the FFT bins it covers
  std::shared_ptr<const LaneRealFft> lanes_;  // null: padded_ is no power of two
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_KALDI_H_
