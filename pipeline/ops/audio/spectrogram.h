// Short-time Fourier features as torchaudio computes them: the power
// spectrogram of torch.stft (periodic Hann window, centred frames with
// reflect padding, one-sided) and the triangular mel filterbank of
// functional.melscale_fbanks (HTK or Slaney scale, optional Slaney norm).
//
// The FFT is prepflow's LaneRealFft (fft.h) for a power-of-two n_fft, else
// KISS FFT (Debian's libkissfft-float): both plain code, no planner and no
// CPU dispatch, so a transform gives the same floats on every x86-64 worker
// (FFTW's planner may pick different codelets per machine).
//
// Thread-safety: a Stft or MelFilterbank is immutable once made; their
// Apply methods are reentrant (each call brings its scratch).
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_SPECTROGRAM_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_SPECTROGRAM_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ops/audio/fft.h"

namespace prepflow {

// The calling thread's KISS FFT real-transform plan (a kiss_fftr_cfg) for
// even size n: a plan holds its transform's scratch, so each thread has its
// own, made once per size and freed when the thread ends.
void* ThreadRealFft(int n);

// torch.hann_window(n) (periodic): hamming_window(n + 1, alpha = beta = 0.5)
// without its last point, in float32: cos(k * 2pi / n) scaled.
std::vector<float> HannWindow(int n);

// torchaudio's sizes where a field is left 0 (or below): the window n_fft
// long, the hop half the window (at least 1).
inline int WindowLength(int n_fft, int win_length) { return win_length > 0 ? win_length : n_fft; }
inline int HopLength(int n_fft, int win_length, int hop_length) {
  return hop_length > 0 ? hop_length : std::max(WindowLength(n_fft, win_length) / 2, 1);
}

class Stft {
 public:
  // win_length and hop_length as WindowLength and HopLength read them.
  // InvalidArgument naming the field for sizes torch.stft refuses.
  static absl::StatusOr<std::shared_ptr<const Stft>> Make(int n_fft, int win_length, int hop_length,
                                                          double power);
  ~Stft();

  int bins() const { return n_fft_ / 2 + 1; }
  // Frames of a centred STFT of `length` samples: 1 + length / hop.
  int64_t Frames(int64_t length) const { return 1 + length / hop_; }
  // The power spectrogram of one channel, [bins, Frames(length)] row-major
  // (torchaudio's [freq, time]); `scratch` is resized as needed. InvalidArgument when reflect
  // padding cannot work (length <= n_fft / 2).
  absl::Status Apply(const float* x, int64_t length, float* out, std::vector<float>* scratch) const;
  // The complex spectrum instead, [bins, Frames(length), 2] (real,
  // imaginary; torch.view_as_real of torch.stft's), through KISS FFT at any
  // size. Errors as Apply's.
  absl::Status ApplyComplex(const float* x, int64_t length, float* out,
                            std::vector<float>* scratch) const;

 private:
  Stft() = default;
  // Reflect-pads `x` into scratch (room after it for the FFT's buffers);
  // the padded signal. InvalidArgument when it cannot be.
  absl::StatusOr<float*> Pad(const float* x, int64_t length, std::vector<float>* scratch) const;
  // The spectrum of the frame at `frame` (n_fft samples) into `spectrum`
  // (bins complex values, as kiss_fft_cpx), with `work` room for 3 n_fft + 2
  // floats.
  void FrameSpectrum(const float* frame, float* work, void* spectrum) const;
  // Calls f(t, z) for each frame t of x's STFT, z its bins as (real,
  // imaginary) float pairs, through KISS FFT.
  template <typename F>
  absl::Status ForEachSpectrum(const float* x, int64_t length, std::vector<float>* scratch,
                               F f) const {
    absl::StatusOr<float*> p = Pad(x, length, scratch);
    if (!p.ok()) return p.status();
    float* work = *p + length + 2 * (n_fft_ / 2);
    float* spectrum = work + 3 * n_fft_;
    for (int64_t t = 0; t < Frames(length); ++t) {
      FrameSpectrum(*p + t * hop_, work, spectrum);
      f(t, static_cast<const float*>(spectrum));
    }
    return absl::OkStatus();
  }
  // The frames' spectra four at a time (LaneRealFft), for a power-of-two
  // n_fft: `p` is the padded signal, `scratch` room for 4 x (n_fft + bins).
  void ApplyLanes(const float* p, int64_t frames, float* out, float* scratch) const;
  // |z| to power_ from |z|^2 (torch: spec.abs().pow(power)).
  float FromSquare(float square) const;

  int n_fft_ = 0, hop_ = 0;
  double power_ = 2;
  std::vector<float> window_;                 // n_fft long, the window centred in it
  void* cfg_ = nullptr;                       // kiss_fft_cfg, for an odd n_fft
  std::shared_ptr<const LaneRealFft> lanes_;  // a power-of-two n_fft
};

// torch.linspace(a, b, n)[i] in float32: from the start for the first half,
// from the end for the rest, as torch's kernel computes it.
float TorchLinspace(double a, double b, int n, int i);

// torchaudio.functional.melscale_fbanks: [bins, n_mels], row-major.
struct MelOptions {
  int n_mels = 128;
  double f_min = 0, f_max = 0;  // f_max 0: sample_rate / 2
  bool slaney_scale = false;    // else HTK
  bool slaney_norm = false;
};
absl::StatusOr<std::vector<float>> MelFilterbank(int bins, int sample_rate, const MelOptions& o);

// A filterbank and, per band, the bins where it is not zero (a band covers
// a few bins of the hundreds: projecting only those is ~100x less work).
class MelBank {
 public:
  static absl::StatusOr<MelBank> Make(int bins, int sample_rate, const MelOptions& o);
  // out[m, t] = sum_f fb[f, m] * spec[f, t] for spec [bins, frames] (sums in
  // double, each rounded once to float32). `acc` is scratch.
  void Project(const float* spec, int64_t frames, float* out, std::vector<double>* acc) const;

 private:
  int bins_ = 0, n_ = 0;
  std::vector<float> fb_;          // [bins, n_mels]
  std::vector<int> first_, last_;  // per band
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_SPECTROGRAM_H_
