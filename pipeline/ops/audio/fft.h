// A real FFT of a power-of-two size that transforms four frames at once:
// one frame in each lane of a vector of four floats (GCC's vector
// extension: one SSE register, in the ABI of every x86-64 machine).
// Every lane runs the scalar algorithm's float operations in the same order,
// each one IEEE-rounded (no fused multiply-add: pipeline/ builds with
// -ffp-contract=off), so a frame's spectrum is the same floats in whichever
// lane it runs, beside whatever the other lanes hold, on every x86-64
// machine: the determinism KISS FFT gives, at a fraction of its cost
// (kaldi_fbank's 512-point transforms were most of its time).
//
// The algorithm: the n real samples as n / 2 complex ones (even samples
// real, odd imaginary), an iterative radix-2 decimation-in-time FFT of size
// n / 2 with twiddles rounded once from double, then the split that gives
// the n / 2 + 1 bins of the real transform.
//
// Thread-safety: immutable once made; Power is reentrant (thread-local
// scratch).
#ifndef PREPFLOW_PIPELINE_OPS_AUDIO_FFT_H_
#define PREPFLOW_PIPELINE_OPS_AUDIO_FFT_H_

#include <vector>

namespace prepflow {

class LaneRealFft {
 public:
  static constexpr int kLanes = 4;

  // REQUIRES: IsPowerOfTwo(n), n >= 4.
  explicit LaneRealFft(int n);
  static bool IsPowerOfTwo(int n) { return n >= 4 && (n & (n - 1)) == 0; }

  int size() const { return 2 * half_; }
  // For j < count <= kLanes: power[j][k] = |X_j[k]|^2 (re^2 + im^2, each
  // product rounded), k in [0, n / 2], of the n samples frames[j]. Lanes at
  // and past `count` run zeros.
  void Power(const float* const* frames, int count, float* const* power) const;

 private:
  int half_ = 0;                          // n / 2: the complex transform's size
  std::vector<int> reversed_;             // bit-reversed order of [0, half_)
  std::vector<float> tw_re_, tw_im_;      // exp(-2 pi i k / half_), k < half_ / 2
  std::vector<float> post_re_, post_im_;  // exp(-2 pi i k / n), k <= half_
  // tw_ per span 4, 8, ..., half_, kLanes copies of each value, re and im
  // interleaved (malloc's 16-byte alignment is the lanes').
  std::vector<float> lane_twiddles_;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_AUDIO_FFT_H_
