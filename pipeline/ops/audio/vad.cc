// vad: torchaudio.functional.vad (sox's vad effect) — trims what comes
// before the first voice activity, and with both_ends what comes after the
// last.
//
// The detector is functional.vad's loop as torchaudio 0.13 writes it: a ring
// of the last samples per channel; every measure period, a windowed FFT of
// the latest measure_len samples, smoothed spectra, an adaptive noise
// estimate taken off, and the power of the cepstrum's lifted band as the
// measure; its exponential mean against trigger_level. Its float32 steps
// are torch's (Python scalars rounded to float32 where torch rounds them);
// the FFTs are LaneRealFft's, whose floats differ from pocketfft's by
// rounding only.
#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "pipeline/ops/audio/audio_family.h"
#include "pipeline/ops/audio/audio_op.h"
#include "pipeline/ops/audio/fft.h"
#include "pipeline/ops/audio/spectrogram.h"

namespace prepflow {
namespace {

using audio::ExpectAudio;
using audio::Samples;
using audio::SetAudio;
using proto::Stage;

// What functional.vad derives from its parameters at one sample rate.
struct VadSetup {
  int64_t measure_len = 0;  // samples in a measurement
  int64_t period = 0;       // samples between measurements
  int64_t ring = 0;         // samples kept: pre-trigger + search + measure_len
  int measures = 0;         // measurements searched back
  int gap = 0;              // measurements of allowed gap
  int dft = 0;              // the spectrum's FFT size; the cepstrum's is dft / 2
  int spectrum_start = 0, spectrum_end = 0, cepstrum_start = 0, cepstrum_end = 0;
  int boot_max = 0;
  float smooth_mult = 0, up_mult = 0, down_mult = 0, trigger_mult = 0;
  double trigger_mult_exact = 0;  // trigger_mult before rounding (Python's 1 - mult)
  std::vector<float> spectrum_window, cepstrum_window;
  std::shared_ptr<const LaneRealFft> spectrum_fft, cepstrum_fft;
};

// One channel's state in the loop.
struct VadChannel {
  std::vector<float> samples, spectrum, noise, measures;
  float mean = 0;
};

// A window of `n` constant 2 / sqrt(norm) times torch.hann_window(n), in
// float32, as functional.vad makes its two windows.
std::vector<float> ScaledHann(int n, double norm) {
  std::vector<float> w = HannWindow(n);
  const auto scale = static_cast<float>(2.0 / std::sqrt(norm));
  for (float& v : w) v = scale * v;
  return w;
}

class VadOp : public Op {
 public:
  static absl::StatusOr<std::unique_ptr<Op>> Create(const Stage& stage) {
    const proto::Vad& p = stage.vad();
    for (auto [name, v, lo, hi] :
         {std::tuple{"trigger_time", p.trigger_time(), 1e-3, 60.0},
          std::tuple{"search_time", p.search_time(), 0.0, 10.0},
          std::tuple{"allowed_gap", p.allowed_gap(), 0.0, 60.0},
          std::tuple{"pre_trigger_time", p.pre_trigger_time(), 0.0, 10.0},
          std::tuple{"boot_time", p.boot_time(), 0.0, 60.0},
          std::tuple{"noise_up_time", p.noise_up_time(), 1e-3, 60.0},
          std::tuple{"noise_down_time", p.noise_down_time(), 1e-3, 60.0},
          std::tuple{"noise_reduction_amount", p.noise_reduction_amount(), 0.0, 100.0},
          std::tuple{"measure_freq", p.measure_freq(), 0.1, 1000.0},
          std::tuple{"measure_duration", p.measure_duration(), 0.0, 1.0},
          std::tuple{"measure_smooth_time", p.measure_smooth_time(), 1e-3, 60.0},
          std::tuple{"trigger_level", p.trigger_level(), -1e6, 1e6}}) {
      if (!(v >= lo && v <= hi)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: must be %g to %g, got %g", name, lo, hi, v));
      }
    }
    // The work per second of audio grows with the measurements' overlap.
    const double overlap =
        (p.measure_duration() > 0 ? p.measure_duration() : 2 / p.measure_freq()) * p.measure_freq();
    if (overlap > kMaxOverlap) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "measure_duration: measurements overlap %g-fold at measure_freq %g; at most %g", overlap,
          p.measure_freq(), kMaxOverlap));
    }
    for (double f :
         {p.hp_filter_freq(), p.lp_filter_freq(), p.hp_lifter_freq(), p.lp_lifter_freq()}) {
      if (!(f > 0 && f <= kMaxAudioRate)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "hp_filter_freq, lp_filter_freq, hp_lifter_freq, lp_lifter_freq: must be above 0 "
            "Hz and at most %d, got %g",
            kMaxAudioRate, f));
      }
    }
    auto op = std::make_unique<VadOp>();
    op->params_ = p;
    return op;
  }

  absl::StatusOr<ValueType> OutputType(const ValueType& in) const override {
    if (absl::Status s = ExpectAudio(in); !s.ok()) return s;
    return ValueType{ValueKind::kAudio, {in.shape[0], -1}, in.sample_rate};
  }

  absl::Status Apply(const StageContext& ctx, Sample& s) const override {
    absl::StatusOr<std::shared_ptr<const VadSetup>> setup = setups_.Get(s.sample_rate);
    if (!setup.ok()) return setup.status();
    const int64_t channels = s.shape[0], frames = s.shape[1];
    const float* in = Samples(s);
    const int64_t first = FirstKept(**setup, in, channels, frames, 0, frames, false);
    const int64_t end = params_.both_ends()
                            ? frames - FirstKept(**setup, in, channels, frames, first, frames, true)
                            : frames;
    const int64_t kept = std::max<int64_t>(end - first, 0);
    if (kept == frames) return absl::OkStatus();
    auto* out = reinterpret_cast<float*>(ctx.Output(s.data, sizeof(float) * channels * kept + 1));
    for (int64_t c = 0; c < channels; ++c) {
      std::copy(in + c * frames + first, in + c * frames + first + kept, out + c * kept);
    }
    SetAudio(s, out, channels, kept, s.sample_rate);
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<VadSetup> Setup(int rate) const;
  int64_t FirstKept(const VadSetup& v, const float* x, int64_t channels, int64_t frames,
                    int64_t from, int64_t to, bool reversed) const;
  double Measure(const VadSetup& v, VadChannel& ch, int64_t index, int boot_count) const;
  int MeasuresToFlush(const VadSetup& v, const VadChannel& ch, int index) const;

  static constexpr double kMaxOverlap = 4;

  proto::Vad params_;
  audio::PerRate<VadSetup> setups_{[this](int rate) { return Setup(rate); }};
};

absl::StatusOr<VadSetup> VadOp::Setup(int rate) const {
  const proto::Vad& p = params_;
  VadSetup v;
  const double duration = p.measure_duration() > 0 ? p.measure_duration() : 2.0 / p.measure_freq();
  v.measure_len = static_cast<int64_t>(rate * duration + 0.5);
  v.dft = 16;
  while (v.dft < v.measure_len) v.dft *= 2;
  v.period = static_cast<int64_t>(rate / p.measure_freq() + 0.5);
  v.measures = static_cast<int>(std::ceil(p.search_time() * p.measure_freq()));
  v.gap = static_cast<int>(p.allowed_gap() * p.measure_freq() + 0.5);
  v.ring = static_cast<int64_t>(p.pre_trigger_time() * rate + 0.5) +
           int64_t{v.measures} * v.period + v.measure_len;
  v.spectrum_start = std::max(static_cast<int>(p.hp_filter_freq() / rate * v.dft + 0.5), 1);
  v.spectrum_end = std::min(static_cast<int>(p.lp_filter_freq() / rate * v.dft + 0.5), v.dft / 2);
  v.cepstrum_start = static_cast<int>(std::ceil(rate * 0.5 / p.lp_lifter_freq()));
  v.cepstrum_end =
      std::min(static_cast<int>(std::floor(rate * 0.5 / p.hp_lifter_freq())), v.dft / 4);
  if (v.measure_len < 1 || v.period < 1 || v.measures < 1 || v.spectrum_end <= v.spectrum_start ||
      v.cepstrum_end <= v.cepstrum_start) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vad: at %d Hz its bands are empty (spectrum bins [%d, %d), cepstrum [%d, %d), as "
        "torchaudio refuses them); lower hp_lifter_freq or measure_freq, or resample first",
        rate, v.spectrum_start, v.spectrum_end, v.cepstrum_start, v.cepstrum_end));
  }
  v.spectrum_window =
      ScaledHann(static_cast<int>(v.measure_len), static_cast<double>(v.measure_len));
  v.cepstrum_window = ScaledHann(v.spectrum_end - v.spectrum_start,
                                 static_cast<double>(v.spectrum_end) - v.spectrum_start);
  v.boot_max = static_cast<int>(p.boot_time() * p.measure_freq() - 0.5);
  auto mult = [&](double t) { return static_cast<float>(std::exp(-1.0 / (t * p.measure_freq()))); };
  v.smooth_mult = mult(p.measure_smooth_time());
  v.up_mult = mult(p.noise_up_time());
  v.down_mult = mult(p.noise_down_time());
  v.trigger_mult_exact = std::exp(-1.0 / (p.trigger_time() * p.measure_freq()));
  v.trigger_mult = static_cast<float>(v.trigger_mult_exact);
  v.spectrum_fft = std::make_shared<LaneRealFft>(v.dft);
  v.cepstrum_fft = std::make_shared<LaneRealFft>(v.dft / 2);
  return v;
}

// functional.vad's loop over x's frames [from, to) (backwards with
// `reversed`): how many of them come before what it keeps.
int64_t VadOp::FirstKept(const VadSetup& v, const float* x, int64_t channels, int64_t frames,
                         int64_t from, int64_t to, bool reversed) const {
  const int64_t length = to - from;
  std::vector<VadChannel> state(static_cast<size_t>(channels));
  for (VadChannel& ch : state) {
    ch.samples.assign(static_cast<size_t>(v.ring), 0.0f);
    ch.spectrum.assign(static_cast<size_t>(v.dft), 0.0f);
    ch.noise.assign(static_cast<size_t>(v.dft), 0.0f);
    ch.measures.assign(static_cast<size_t>(v.measures), 0.0f);
  }
  const auto trigger_level = static_cast<float>(params_.trigger_level());
  int64_t timer = v.measure_len, index = 0, pos = 0, flushed = 0;
  int boot_count = 0, measure_index = 0, flush = 0;
  bool triggered = false;
  while (pos < length && !triggered) {
    --timer;
    const int64_t t = reversed ? to - 1 - pos : from + pos;
    for (int64_t c = 0; c < channels; ++c) {
      VadChannel& ch = state[c];
      ch.samples[index] = x[c * frames + t];
      if (timer != 0) continue;
      const double meas = Measure(v, ch, (index + v.ring - v.measure_len) % v.ring, boot_count);
      ch.measures[measure_index] = static_cast<float>(meas);
      ch.mean = ch.mean * v.trigger_mult + static_cast<float>(meas * (1.0 - v.trigger_mult_exact));
      triggered = triggered || ch.mean >= trigger_level;
      if (triggered)
        flush = std::min(std::max(flush, MeasuresToFlush(v, ch, measure_index)), v.measures);
    }
    ++pos;
    if (++index == v.ring) index = 0;
    if (timer == 0) {
      timer = v.period;
      measure_index = (measure_index + 1) % v.measures;
      if (boot_count >= 0) boot_count = boot_count == v.boot_max ? -1 : boot_count + 1;
    }
    if (triggered) flushed = int64_t{v.measures - flush} * v.period;
  }
  return std::max<int64_t>(pos - v.ring + flushed, 0);
}

// The measurements back from the trigger to keep: the earliest at or over
// trigger_level within allowed_gap of the next, up to a silent one.
int VadOp::MeasuresToFlush(const VadSetup& v, const VadChannel& ch, int index) const {
  const int n = v.measures;
  const auto trigger_level = static_cast<float>(params_.trigger_level());
  int j_trigger = n, j_zero = n;
  for (int j = 0, k = index; j < n; ++j, k = (k + n - 1) % n) {
    if (ch.measures[k] >= trigger_level && j <= j_trigger + v.gap) {
      j_zero = j_trigger = j;
    } else if (ch.measures[k] == 0 && j_trigger >= j_zero) {
      j_zero = j;
    }
  }
  return std::min(n - 1, j_zero);  // Python's loop variable ends at n - 1
}

// functional.vad's _measure: the lifted cepstrum's mean power, in dB-ish
// units above -21, of the measure_len samples from ring index `index`.
double VadOp::Measure(const VadSetup& v, VadChannel& ch, int64_t index, int boot_count) const {
  thread_local std::vector<float> buf, power;
  buf.assign(static_cast<size_t>(v.dft), 0.0f);
  power.resize(static_cast<size_t>(v.dft / 2 + 1));
  for (int64_t i = 0; i < v.measure_len; ++i) {
    buf[i] = ch.samples[(index + i) % v.ring] * v.spectrum_window[i];
  }
  const float* frames[1] = {buf.data()};
  float* powers[1] = {power.data()};
  v.spectrum_fft->Power(frames, 1, powers);
  const double m = boot_count >= 0 ? boot_count / (1.0 + boot_count) : double{v.smooth_mult};
  const auto mult = static_cast<float>(m), rest = static_cast<float>(1 - m);
  const auto reduction = static_cast<float>(params_.noise_reduction_amount());
  std::vector<float>& lifted = buf;  // reused: the cepstrum's input, dft / 2 long
  std::fill(lifted.begin(), lifted.end(), 0.0f);
  for (int k = v.spectrum_start; k < v.spectrum_end; ++k) {
    ch.spectrum[k] = ch.spectrum[k] * mult + std::sqrt(power[k]) * rest;
    const float d = ch.spectrum[k] * ch.spectrum[k];
    const float up = boot_count >= 0 ? 0.0f : d > ch.noise[k] ? v.up_mult : v.down_mult;
    ch.noise[k] = ch.noise[k] * up + d * (1 - up);
    lifted[k] = std::sqrt(std::max(0.0f, d - reduction * ch.noise[k])) *
                v.cepstrum_window[k - v.spectrum_start];
  }
  v.cepstrum_fft->Power(frames, 1, powers);
  float sum = 0;
  for (int k = v.cepstrum_start; k < v.cepstrum_end; ++k) sum += power[k];
  const double result =
      sum > 0 ? std::log(double{sum} / (v.cepstrum_end - v.cepstrum_start)) : -HUGE_VAL;
  return std::max(0.0, 21 + result);
}

}  // namespace

void RegisterAudioVadOps(OpRegistry* registry) {
  registry->Register(Stage::kVad, FactoryOf<VadOp>());
}

}  // namespace prepflow
