#include "pipeline/ops/audio/kaldi.h"

#include <kissfft/kiss_fftr.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "absl/strings/str_format.h"
#include "pipeline/ops/audio/spectrogram.h"

namespace prepflow {
namespace {

constexpr int kMaxWindow = 1 << 16;
constexpr float kEpsilon = FLT_EPSILON;  // torchaudio's EPSILON

// Kaldi's mel scale, in double (mel_scale_scalar) and as torchaudio's
// float32 tensor version computes it.
double MelScale(double f) { return 1127.0 * std::log(1.0 + f / 700.0); }
float MelScale(float f) { return 1127.0f * std::log(1.0f + f / 700.0f); }

// torch.hamming_window(n, periodic=False, alpha, beta) in float32: cos of
// k * (2 pi / (n - 1)), scaled by -beta, plus alpha.
std::vector<float> CosineWindow(int n, float alpha, float beta) {
  std::vector<float> w(n, 1.0f);
  if (n == 1) return w;
  const auto step = static_cast<float>(2 * M_PI / (n - 1));
  for (int k = 0; k < n; ++k) w[k] = std::cos(static_cast<float>(k) * step) * -beta + alpha;
  return w;
}

std::vector<float> Window(const proto::KaldiFbank& o, int n) {
  switch (o.window_type()) {
    case proto::KaldiFbank::WINDOW_HANNING:
      return CosineWindow(n, 0.5f, 0.5f);
    case proto::KaldiFbank::WINDOW_HAMMING:
      return CosineWindow(n, 0.54f, 0.46f);
    case proto::KaldiFbank::WINDOW_RECTANGULAR:
      return std::vector<float>(n, 1.0f);
    case proto::KaldiFbank::WINDOW_BLACKMAN: {
      const auto a = static_cast<float>(2 * M_PI / (n - 1));
      const auto c = static_cast<float>(o.blackman_coeff());
      const auto d = static_cast<float>(0.5 - o.blackman_coeff());
      std::vector<float> w(n);
      for (int k = 0; k < n; ++k) {
        const auto t = static_cast<float>(k);
        w[k] = c - 0.5f * std::cos(a * t) + d * std::cos(2.0f * a * t);
      }
      return w;
    }
    default: {  // Povey: Hann to the 0.85, zero at both ends
      std::vector<float> w = CosineWindow(n, 0.5f, 0.5f);
      for (float& v : w) v = std::pow(v, 0.85f);
      return w;
    }
  }
}

int NextPowerOfTwo(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

absl::StatusOr<KaldiFbank> KaldiFbank::Make(const proto::KaldiFbank& o, int sample_rate) {
  KaldiFbank k;
  k.opt_ = o;
  // int(sample_frequency * frame_shift * 0.001), left to right in double.
  const double rate = sample_rate;
  const double shift = rate * o.frame_shift() * 0.001, size = rate * o.frame_length() * 0.001;
  if (!(shift >= 1 && shift <= kMaxWindow) || !(size >= 2 && size <= kMaxWindow)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "frame_length, frame_shift: at %d Hz a frame must be 2 to %d samples and its shift at "
        "least 1 (got %g and %g ms)",
        sample_rate, kMaxWindow, o.frame_length(), o.frame_shift()));
  }
  k.shift_ = static_cast<int>(shift);
  k.size_ = static_cast<int>(size);
  k.padded_ = o.round_to_power_of_two() ? NextPowerOfTwo(k.size_) : k.size_;
  if (k.padded_ % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "frame_length: a window of %d samples is odd; set round_to_power_of_two or change it",
        k.size_));
  }
  if (!(o.preemphasis_coefficient() >= 0 && o.preemphasis_coefficient() <= 1)) {
    return absl::InvalidArgumentError("preemphasis_coefficient: must be in [0, 1]");
  }
  if (o.num_mel_bins() <= 3 || o.num_mel_bins() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_mel_bins: must be 4 to 4096, got %d", o.num_mel_bins()));
  }
  const double nyquist = 0.5 * rate;
  const double low = o.low_freq(),
               high = o.high_freq() <= 0 ? o.high_freq() + nyquist : o.high_freq();
  if (!(low >= 0 && low < nyquist && high > 0 && high <= nyquist && low < high)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "low_freq, high_freq: need 0 <= low < high <= %g (half of %d Hz), got %g and %g", nyquist,
        sample_rate, low, high));
  }
  k.window_ = Window(o, k.size_);
  if (LaneRealFft::IsPowerOfTwo(k.padded_)) k.lanes_ = std::make_shared<LaneRealFft>(k.padded_);
  k.bins_ = o.num_mel_bins();
  // get_mel_banks (no VTLN warp): the band edges in float32 from double
  // ends, the FFT bins' mels in float32.
  const int fft_bins = k.padded_ / 2, row = fft_bins + 1;
  const double mel_low = MelScale(low), delta = (MelScale(high) - mel_low) / (k.bins_ + 1);
  const auto low32 = static_cast<float>(mel_low), delta32 = static_cast<float>(delta);
  const auto width32 = static_cast<float>(rate / k.padded_);
  k.banks_.assign(static_cast<size_t>(k.bins_) * row, 0.0f);
  k.first_.assign(k.bins_, row);
  k.last_.assign(k.bins_, 0);
  for (int b = 0; b < k.bins_; ++b) {
    const auto fb = static_cast<float>(b);
    const float left = low32 + fb * delta32, center = low32 + (fb + 1.0f) * delta32,
                right = low32 + (fb + 2.0f) * delta32;
    for (int f = 0; f < fft_bins; ++f) {
      const float mel = MelScale(width32 * static_cast<float>(f));
      const float up = (mel - left) / (center - left), down = (right - mel) / (right - center);
      const float v = std::max(0.0f, std::min(up, down));
      if (v == 0) continue;
      k.banks_[static_cast<size_t>(b) * row + f] = v;
      k.first_[b] = std::min(k.first_[b], f);
      k.last_[b] = f + 1;
    }
  }
  return k;
}

absl::StatusOr<int64_t> KaldiFbank::Frames(int64_t length) const {
  if (length < size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("kaldi_fbank: %d samples are fewer than one window (%d)", length, size_));
  }
  if (opt_.snip_edges()) return 1 + (length - size_) / shift_;
  return (length + shift_ / 2) / shift_;
}

float KaldiFbank::Frame(const float* in, float* frame) const {
  std::copy(in, in + size_, frame);
  if (opt_.remove_dc_offset()) {
    double sum = 0;
    for (int k = 0; k < size_; ++k) sum += frame[k];
    const auto mean = static_cast<float>(sum / size_);
    for (int k = 0; k < size_; ++k) frame[k] -= mean;
  }
  auto log_energy = [&] {
    double e = 0;
    for (int k = 0; k < padded_; ++k) e += static_cast<double>(frame[k]) * frame[k];
    float v = std::log(std::max(static_cast<float>(e), kEpsilon));
    if (opt_.energy_floor() != 0)
      v = std::max(v, static_cast<float>(std::log(opt_.energy_floor())));
    return v;
  };
  std::fill(frame + size_, frame + padded_, 0.0f);
  float energy = opt_.use_energy() && opt_.raw_energy() ? log_energy() : 0;
  if (opt_.preemphasis_coefficient() != 0) {
    const auto c = static_cast<float>(opt_.preemphasis_coefficient());
    for (int k = size_ - 1; k > 0; --k) frame[k] -= c * frame[k - 1];
    frame[0] -= c * frame[0];
  }
  for (int k = 0; k < size_; ++k) frame[k] *= window_[k];
  if (opt_.use_energy() && !opt_.raw_energy()) energy = log_energy();
  return energy;
}

void KaldiFbank::Spectra(float* const* frames, int count, float* const* power) const {
  const int fft_bins = padded_ / 2 + 1;
  if (lanes_ != nullptr) {
    lanes_->Power(frames, count, power);
  } else {
    auto* fft = static_cast<kiss_fftr_cfg>(ThreadRealFft(padded_));
    thread_local std::vector<kiss_fft_cpx> spectrum;
    spectrum.resize(fft_bins);
    for (int j = 0; j < count; ++j) {
      kiss_fftr(fft, frames[j], spectrum.data());
      // |z|^2 as r^2 + i^2 (torch squares hypot's |z|: within an ulp or
      // two, and std::hypot cost more than the FFT).
      for (int f = 0; f < fft_bins; ++f) {
        power[j][f] = spectrum[f].r * spectrum[f].r + spectrum[f].i * spectrum[f].i;
      }
    }
  }
  if (!opt_.use_power()) {
    for (int j = 0; j < count; ++j) {
      for (int f = 0; f < fft_bins; ++f) power[j][f] = std::sqrt(power[j][f]);
    }
  }
}

void KaldiFbank::Row(const float* power, float energy, float* row) const {
  const int fft_bins = padded_ / 2 + 1;
  const int energy_col = opt_.use_energy() ? (opt_.htk_compat() ? bins_ : 0) : -1;
  const int first_band = energy_col == 0 ? 1 : 0;
  for (int b = 0; b < bins_; ++b) {
    double sum = 0;
    const float* bank = banks_.data() + static_cast<size_t>(b) * fft_bins;
    for (int f = first_[b]; f < last_[b]; ++f) sum += static_cast<double>(bank[f]) * power[f];
    auto v = static_cast<float>(sum);
    if (opt_.use_log_fbank()) v = std::log(std::max(v, kEpsilon));
    row[first_band + b] = v;
  }
  if (energy_col >= 0) row[energy_col] = energy;
}

void KaldiFbank::Apply(const float* x, int64_t length, float* out,
                       std::vector<float>* scratch) const {
  // The frames' source: the signal, or with !snip_edges the signal with
  // its ends reflected (Kaldi's: [2, 1, 0, 0, 1, 2]).
  const int64_t frames =
      opt_.snip_edges() ? 1 + (length - size_) / shift_ : (length + shift_ / 2) / shift_;
  const int64_t pad = opt_.snip_edges() ? 0 : size_ / 2 - shift_ / 2;
  const int64_t source = opt_.snip_edges() ? length : length + std::max<int64_t>(pad, 0) + length;
  const int fft_bins = padded_ / 2;
  scratch->resize(static_cast<size_t>(source) +
                  LaneRealFft::kLanes * static_cast<size_t>(padded_ + fft_bins + 1));
  float* src = scratch->data();
  if (opt_.snip_edges()) {
    std::copy(x, x + length, src);
  } else if (pad >= 0) {
    for (int64_t i = 0; i < pad; ++i) src[i] = x[pad - 1 - i];
    std::copy(x, x + length, src + pad);
    for (int64_t i = 0; i < length; ++i) src[pad + length + i] = x[length - 1 - i];
  } else {  // the first -pad samples left out
    std::copy(x - pad, x + length, src);
    for (int64_t i = 0; i < length; ++i) src[length + pad + i] = x[length - 1 - i];
  }
  // Frames go through the FFT four at a time (LaneRealFft's lanes).
  const int cols = columns();
  constexpr int kLanes = LaneRealFft::kLanes;
  float* buffers = src + source;  // kLanes frames, then kLanes spectra
  float* frame[kLanes];
  float* power[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    frame[j] = buffers + static_cast<size_t>(j) * padded_;
    power[j] =
        buffers + static_cast<size_t>(kLanes) * padded_ + static_cast<size_t>(j) * (fft_bins + 1);
  }
  for (int64_t t0 = 0; t0 < frames; t0 += kLanes) {
    const int count = static_cast<int>(std::min<int64_t>(kLanes, frames - t0));
    float energy[kLanes];
    for (int j = 0; j < count; ++j) energy[j] = Frame(src + (t0 + j) * shift_, frame[j]);
    Spectra(frame, count, power);
    for (int j = 0; j < count; ++j) Row(power[j], energy[j], out + (t0 + j) * cols);
  }
  if (opt_.subtract_mean() && frames > 0) {
    for (int c = 0; c < cols; ++c) {
      double sum = 0;
      for (int64_t t = 0; t < frames; ++t) sum += out[t * cols + c];
      const auto mean = static_cast<float>(sum / static_cast<double>(frames));
      for (int64_t t = 0; t < frames; ++t) out[t * cols + c] -= mean;
    }
  }
}

}  // namespace prepflow
