#include "pipeline/ops/audio/spectrogram.h"

#include <kissfft/kiss_fft.h>
#include <kissfft/kiss_fftr.h>

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"

namespace prepflow {
namespace {

constexpr int kMaxFft = 1 << 16;

double HzToMel(double f, bool slaney) {
  if (!slaney) return 2595.0 * std::log10(1.0 + f / 700.0);
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return f >= min_log_hz ? min_log_mel + std::log(f / min_log_hz) / logstep : f / f_sp;
}

double MelToHz(double m, bool slaney) {
  if (!slaney) return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0);
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return m >= min_log_mel ? min_log_hz * std::exp(logstep * (m - min_log_mel)) : f_sp * m;
}

}  // namespace

std::vector<float> HannWindow(int n) {
  std::vector<float> w(n);
  const auto step = static_cast<float>(2 * M_PI / n);
  for (int k = 0; k < n; ++k) w[k] = 0.5f - 0.5f * std::cos(static_cast<float>(k) * step);
  return w;
}

float TorchLinspace(double a, double b, int n, int i) {
  if (n == 1) return static_cast<float>(a);
  const auto fa = static_cast<float>(a), fb = static_cast<float>(b);
  const float step = (fb - fa) / static_cast<float>(n - 1);
  return i < n / 2 ? fa + step * static_cast<float>(i) : fb - step * static_cast<float>(n - 1 - i);
}

void* ThreadRealFft(int n) {
  struct Free {
    void operator()(void* p) const { kiss_fftr_free(p); }
  };
  thread_local absl::flat_hash_map<int, std::unique_ptr<void, Free>> plans;
  std::unique_ptr<void, Free>& plan = plans[n];
  if (plan == nullptr) plan.reset(kiss_fftr_alloc(n, 0, nullptr, nullptr));
  return plan.get();
}

absl::StatusOr<std::shared_ptr<const Stft>> Stft::Make(int n_fft, int given_win, int given_hop,
                                                       double power) {
  const int win_length = WindowLength(n_fft, given_win);
  const int hop_length = HopLength(n_fft, given_win, given_hop);
  if (n_fft < 2 || n_fft > kMaxFft) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n_fft: must be 2 to %d, got %d", kMaxFft, n_fft));
  }
  if (win_length < 1 || win_length > n_fft) {
    return absl::InvalidArgumentError(
        absl::StrFormat("win_length: must be 1 to n_fft (%d), got %d", n_fft, win_length));
  }
  if (hop_length < 1 || hop_length > kMaxFft) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hop_length: must be 1 to %d, got %d", kMaxFft, hop_length));
  }
  if (!(power > 0 && power <= 16)) {
    return absl::InvalidArgumentError(absl::StrFormat("power: must be in (0, 16], got %g", power));
  }
  std::shared_ptr<Stft> s(new Stft);
  s->n_fft_ = n_fft;
  s->hop_ = hop_length;
  s->power_ = power;
  // torch.stft pads a shorter window with zeros on both sides to n_fft.
  s->window_.assign(n_fft, 0.0f);
  const std::vector<float> w = HannWindow(win_length);
  std::copy(w.begin(), w.end(), s->window_.begin() + (n_fft - win_length) / 2);
  // Odd sizes take the complex FFT, whose plan is read-only (shared by the
  // threads); even ones the real FFT (RealFft: half the work).
  if (n_fft % 2 != 0) {
    s->cfg_ = kiss_fft_alloc(n_fft, 0, nullptr, nullptr);
    if (s->cfg_ == nullptr) return absl::ResourceExhaustedError("n_fft: cannot plan the FFT");
  }
  if (LaneRealFft::IsPowerOfTwo(n_fft)) s->lanes_ = std::make_shared<LaneRealFft>(n_fft);
  return std::shared_ptr<const Stft>(std::move(s));
}

Stft::~Stft() { kiss_fft_free(cfg_); }

absl::StatusOr<float*> Stft::Pad(const float* x, int64_t length,
                                 std::vector<float>* scratch) const {
  const int half = n_fft_ / 2;
  if (length <= half) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spectrogram: %d samples are too few for reflect padding of %d (n_fft / 2)", length, half));
  }
  // Reflect-padded signal, then room for the complex FFT's input and output
  // (5 n_fft + 2), or for four windowed frames and their spectra
  // (4 (n_fft + bins) = 6 n_fft + 4).
  const int64_t padded = length + 2 * half;
  scratch->resize(static_cast<size_t>(padded) + 6 * static_cast<size_t>(n_fft_) + 4);
  float* p = scratch->data();
  for (int64_t i = 0; i < padded; ++i) {
    int64_t j = i - half;
    if (j < 0) j = -j;
    if (j >= length) j = 2 * (length - 1) - j;
    p[i] = x[j];
  }
  return p;
}

void Stft::FrameSpectrum(const float* frame, float* work, void* out) const {
  auto* spectrum = static_cast<kiss_fft_cpx*>(out);
  if (n_fft_ % 2 == 0) {
    for (int k = 0; k < n_fft_; ++k) work[k] = frame[k] * window_[k];
    kiss_fftr(static_cast<kiss_fftr_cfg>(ThreadRealFft(n_fft_)), work, spectrum);
  } else {
    auto* in = reinterpret_cast<kiss_fft_cpx*>(work);
    for (int k = 0; k < n_fft_; ++k) in[k] = {frame[k] * window_[k], 0.0f};
    kiss_fft(static_cast<kiss_fft_cfg>(cfg_), in, spectrum);
  }
}

absl::Status Stft::Apply(const float* x, int64_t length, float* out,
                         std::vector<float>* scratch) const {
  const int64_t frames = Frames(length);
  if (lanes_ != nullptr) {
    absl::StatusOr<float*> p = Pad(x, length, scratch);
    if (!p.ok()) return p.status();
    ApplyLanes(*p, frames, out, *p + length + 2 * (n_fft_ / 2));
    return absl::OkStatus();
  }
  return ForEachSpectrum(x, length, scratch, [&](int64_t t, const float* z) {
    for (int b = 0; b < bins(); ++b) {
      // spec.abs().pow(power): |z| as hypot, then the power (2: a square).
      const float mag = std::hypot(z[2 * b], z[2 * b + 1]);
      out[b * frames + t] = power_ == 2   ? mag * mag
                            : power_ == 1 ? mag
                                          : std::pow(mag, static_cast<float>(power_));
    }
  });
}

absl::Status Stft::ApplyComplex(const float* x, int64_t length, float* out,
                                std::vector<float>* scratch) const {
  const int64_t frames = Frames(length);
  return ForEachSpectrum(x, length, scratch, [&](int64_t t, const float* z) {
    for (int b = 0; b < bins(); ++b) {
      out[2 * (b * frames + t)] = z[2 * b];
      out[2 * (b * frames + t) + 1] = z[2 * b + 1];
    }
  });
}

float Stft::FromSquare(float square) const {
  if (power_ == 2) return square;
  const float mag = std::sqrt(square);
  return power_ == 1 ? mag : std::pow(mag, static_cast<float>(power_));
}

void Stft::ApplyLanes(const float* p, int64_t frames, float* out, float* scratch) const {
  constexpr int kLanes = LaneRealFft::kLanes;
  const int bins = this->bins();
  float* windowed[kLanes];
  float* power[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    windowed[j] = scratch + static_cast<size_t>(j) * n_fft_;
    power[j] = scratch + static_cast<size_t>(kLanes) * n_fft_ + static_cast<size_t>(j) * bins;
  }
  for (int64_t t0 = 0; t0 < frames; t0 += kLanes) {
    const int count = static_cast<int>(std::min<int64_t>(kLanes, frames - t0));
    for (int j = 0; j < count; ++j) {
      const float* frame = p + (t0 + j) * hop_;
      for (int k = 0; k < n_fft_; ++k) windowed[j][k] = frame[k] * window_[k];
    }
    lanes_->Power(windowed, count, power);
    for (int j = 0; j < count; ++j) {
      for (int b = 0; b < bins; ++b) out[b * frames + t0 + j] = FromSquare(power[j][b]);
    }
  }
}

absl::StatusOr<std::vector<float>> MelFilterbank(int bins, int sample_rate, const MelOptions& o) {
  const double f_max = o.f_max > 0 ? o.f_max : sample_rate / 2.0;
  if (o.n_mels < 1 || o.n_mels > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("n_mels: must be 1 to 4096, got %d", o.n_mels));
  }
  if (!(o.f_min >= 0 && o.f_min < f_max && f_max <= sample_rate / 2.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("f_min, f_max: need 0 <= f_min < f_max <= %g (half of %d Hz), got %g, %g",
                        sample_rate / 2.0, sample_rate, o.f_min, f_max));
  }
  // all_freqs = linspace(0, sample_rate // 2, bins); the mel points evenly
  // spaced from f_min to f_max, back in Hz.
  const int n = o.n_mels;
  const double m_min = HzToMel(o.f_min, o.slaney_scale), m_max = HzToMel(f_max, o.slaney_scale);
  std::vector<float> f_pts(n + 2);
  for (int i = 0; i < n + 2; ++i) {
    f_pts[i] = static_cast<float>(MelToHz(TorchLinspace(m_min, m_max, n + 2, i), o.slaney_scale));
  }
  std::vector<float> fb(static_cast<size_t>(bins) * n);
  for (int f = 0; f < bins; ++f) {
    const float freq = TorchLinspace(0, sample_rate / 2, bins, f);
    for (int m = 0; m < n; ++m) {
      const float down = (-1.0f * (f_pts[m] - freq)) / (f_pts[m + 1] - f_pts[m]);
      const float up = (f_pts[m + 2] - freq) / (f_pts[m + 2] - f_pts[m + 1]);
      float v = std::max(0.0f, std::min(down, up));
      if (o.slaney_norm) v *= 2.0f / (f_pts[m + 2] - f_pts[m]);
      fb[static_cast<size_t>(f) * n + m] = v;
    }
  }
  return fb;
}

absl::StatusOr<MelBank> MelBank::Make(int bins, int sample_rate, const MelOptions& o) {
  absl::StatusOr<std::vector<float>> fb = MelFilterbank(bins, sample_rate, o);
  if (!fb.ok()) return fb.status();
  MelBank bank;
  bank.bins_ = bins;
  bank.n_ = o.n_mels;
  bank.fb_ = *std::move(fb);
  bank.first_.assign(o.n_mels, bins);
  bank.last_.assign(o.n_mels, 0);
  for (int f = 0; f < bins; ++f) {
    for (int m = 0; m < o.n_mels; ++m) {
      if (bank.fb_[static_cast<size_t>(f) * o.n_mels + m] == 0) continue;
      bank.first_[m] = std::min(bank.first_[m], f);
      bank.last_[m] = f + 1;
    }
  }
  return bank;
}

void MelBank::Project(const float* spec, int64_t frames, float* out,
                      std::vector<double>* acc) const {
  acc->resize(static_cast<size_t>(frames));
  double* sum = acc->data();
  for (int m = 0; m < n_; ++m) {
    std::fill(sum, sum + frames, 0.0);
    for (int f = first_[m]; f < last_[m]; ++f) {
      const double w = fb_[static_cast<size_t>(f) * n_ + m];
      const float* row = spec + f * frames;
      for (int64_t t = 0; t < frames; ++t) sum[t] += w * row[t];
    }
    for (int64_t t = 0; t < frames; ++t) out[m * frames + t] = static_cast<float>(sum[t]);
  }
}

}  // namespace prepflow
