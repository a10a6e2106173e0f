#include "pipeline/ops/audio/resample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "pipeline/core/clones.h"

namespace prepflow {
namespace {

constexpr size_t kMaxKernelFloats = size_t{64} << 20 >> 2;  // 64 MiB

// torchaudio's _get_sinc_resample_kernel for one tap, in double as
// transforms.Resample computes it (dtype None), before the float32 cast.
double Tap(int phase, int tap, int from, int to, int width, double base, const ResampleParams& p) {
  const double lpw = p.lowpass_filter_width;
  const double idx = static_cast<double>(tap - width) / from;
  // torch.arange(0, -new_freq, -1)[:, None, None] / new_freq: an int64
  // tensor divided, in torch's default dtype, float32.
  double t = static_cast<double>(static_cast<float>(-phase) / static_cast<float>(to)) + idx;
  t *= base;
  t = std::clamp(t, -lpw, lpw);
  double window;
  if (p.kaiser) {
    const double r = t / lpw;
    window = std::cyl_bessel_i(0.0, p.beta * std::sqrt(1 - r * r)) / std::cyl_bessel_i(0.0, p.beta);
  } else {
    const double c = std::cos(t * M_PI / lpw / 2);
    window = c * c;
  }
  t *= M_PI;
  const double scale = base / from;
  const double sinc = t == 0 ? 1.0 : std::sin(t) / t;
  return sinc * (window * scale);
}

// sum k[i] * x[i] in double, in four interleaved partial sums (independent
// chains, so the adds overlap; one AVX2 vector where the CPU has it, the
// same bits either way), each product exact in double.
PREPFLOW_CLONES double Dot(const float* k, const float* x, int n) {
  double a[4] = {0, 0, 0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) a[j] += static_cast<double>(k[i + j]) * x[i + j];
  }
  for (; i < n; ++i) a[0] += static_cast<double>(k[i]) * x[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

}  // namespace

absl::Status ResampleKernel::CheckParams(const ResampleParams& p) {
  if (p.lowpass_filter_width <= 0 || p.lowpass_filter_width > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("lowpass_filter_width: must be 1 to 1024, got %d", p.lowpass_filter_width));
  }
  if (!(p.rolloff > 0 && p.rolloff <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rolloff: must be in (0, 1], got %g", p.rolloff));
  }
  if (p.kaiser && !(p.beta >= 0 && p.beta <= 100)) {
    return absl::InvalidArgumentError(absl::StrFormat("beta: must be 0 to 100, got %g", p.beta));
  }
  return absl::OkStatus();
}

absl::StatusOr<ResampleKernel> ResampleKernel::Make(int from_rate, int to_rate,
                                                    const ResampleParams& p) {
  if (from_rate <= 0 || to_rate <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rate: must be positive, got %d to %d", from_rate, to_rate));
  }
  if (absl::Status s = CheckParams(p); !s.ok()) return s;
  ResampleKernel k;
  const int gcd = std::gcd(from_rate, to_rate);
  k.from_ = from_rate / gcd;
  k.to_ = to_rate / gcd;
  const double base = std::min(k.from_, k.to_) * p.rolloff;
  k.width_ = static_cast<int>(std::ceil(p.lowpass_filter_width * k.from_ / base));
  k.taps_ = 2 * k.width_ + k.from_;
  if (static_cast<double>(k.taps_) * k.to_ > kMaxKernelFloats) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "rate: %d Hz to %d Hz reduces to %d:%d, whose kernel (%d x %d taps) is over 64 MiB; "
        "choose rates with a larger common divisor",
        from_rate, to_rate, k.from_, k.to_, k.to_, k.taps_));
  }
  k.k_.resize(static_cast<size_t>(k.to_) * k.taps_);
  k.first_.assign(k.to_, k.taps_);
  k.last_.assign(k.to_, 0);
  for (int j = 0; j < k.to_; ++j) {
    for (int i = 0; i < k.taps_; ++i) {
      const float v = static_cast<float>(Tap(j, i, k.from_, k.to_, k.width_, base, p));
      k.k_[static_cast<size_t>(j) * k.taps_ + i] = v;
      if (v != 0) {
        k.first_[j] = std::min(k.first_[j], i);
        k.last_[j] = i + 1;
      }
    }
  }
  return k;
}

int64_t ResampleKernel::OutputFrames(int64_t frames) const {
  // int(math.ceil(new_freq * length / orig_freq)): exact in integers.
  return (static_cast<int64_t>(to_) * frames + from_ - 1) / from_;
}

void ResampleKernel::Apply(const float* in, int64_t frames, float* out) const {
  const int64_t n = OutputFrames(frames);
  for (int64_t o = 0; o < n; ++o) {
    const int64_t block = o / to_;
    const int j = static_cast<int>(o % to_);
    const float* kj = &k_[static_cast<size_t>(j) * taps_];
    // Tap i reads the padded signal at block * from + i, the signal at that
    // minus width (zeros outside it).
    const int64_t origin = block * from_ - width_;
    const int lo = static_cast<int>(std::max<int64_t>(first_[j], -origin));
    const int hi = static_cast<int>(std::min<int64_t>(last_[j], frames - origin));
    out[o] = static_cast<float>(Dot(kj + lo, in + origin + lo, hi - lo));
  }
}

}  // namespace prepflow
