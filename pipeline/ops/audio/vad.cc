// vad: torchaudio.functional.vad (sox's vad effect) — trims what comes
// before the first voice activity, and with both_ends what comes after the
// last.
//
// The detector is functional.vad's loop as torchaudio 0.13 writes it: every
// measure period, a windowed FFT of the measure_len samples before it (what
// its ring of samples holds), smoothed spectra, an adaptive noise estimate
// taken off, and the power of the cepstrum's lifted band as the measure;
// its exponential mean against trigger_level. Its float32 steps are
// torch's (Python scalars rounded to float32 where torch rounds them); the
// FFTs are LaneRealFft's, four measurements at a time, whose floats differ
// from pocketfft's by rounding only.
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
  std::vector<float> spectrum, noise, measures;
  float mean = 0;
};

// The frames an op reads: [from, to) of channel c, forwards or backwards.
struct VadInput {
  const float* x = nullptr;
  int64_t frames = 0;  // per channel in x
  int64_t from = 0, to = 0;
  bool reversed = false;
  int64_t length() const { return to - from; }
  // Frame p of channel c (p < length()); 0 before the first, as the ring
  // torchaudio keeps starts zeroed.
  float At(int64_t c, int64_t p) const {
    if (p < 0) return 0.0f;
    return x[c * frames + (reversed ? to - 1 - p : from + p)];
  }
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
    const int64_t first = FirstKept(**setup, channels, {in, frames, 0, frames, false});
    const int64_t end = params_.both_ends() ? frames - FirstKept(**setup, channels,
                                                                 {in, frames, first, frames, true})
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
  int64_t FirstKept(const VadSetup& v, int64_t channels, const VadInput& in) const;
  void Measure(const VadSetup& v, const VadInput& in, int64_t c, int64_t k0, int count,
               VadChannel& ch, double* meas) const;
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

// functional.vad's loop over the input's frames: how many of them come
// before what it keeps. Measurement k is taken at frame measure_len - 1 +
// k * period, of the measure_len frames before it; four of them at a time
// per channel (their spectra are independent of the state), then each in
// order across the channels, as torchaudio's loop takes them.
int64_t VadOp::FirstKept(const VadSetup& v, int64_t channels, const VadInput& in) const {
  thread_local std::vector<VadChannel> state;  // reused: no allocation per sample
  thread_local std::vector<double> meas;
  state.resize(static_cast<size_t>(channels));
  meas.resize(static_cast<size_t>(channels * LaneRealFft::kLanes));
  for (VadChannel& ch : state) {
    ch.mean = 0;
    ch.spectrum.assign(static_cast<size_t>(v.dft), 0.0f);
    ch.noise.assign(static_cast<size_t>(v.dft), 0.0f);
    ch.measures.assign(static_cast<size_t>(v.measures), 0.0f);
  }
  const auto trigger_level = static_cast<float>(params_.trigger_level());
  auto at = [&](int64_t k) { return v.measure_len - 1 + k * v.period; };
  int flush = 0;
  for (int64_t k0 = 0;; k0 += LaneRealFft::kLanes) {
    int count = 0;
    while (count < LaneRealFft::kLanes && at(k0 + count) < in.length()) ++count;
    if (count == 0) break;
    for (int64_t c = 0; c < channels; ++c) {
      Measure(v, in, c, k0, count, state[c], &meas[c * LaneRealFft::kLanes]);
    }
    for (int j = 0; j < count; ++j) {
      const int index = static_cast<int>((k0 + j) % v.measures);
      bool triggered = false;
      for (int64_t c = 0; c < channels; ++c) {
        VadChannel& ch = state[c];
        const double m = meas[c * LaneRealFft::kLanes + j];
        ch.measures[index] = static_cast<float>(m);
        ch.mean = ch.mean * v.trigger_mult + static_cast<float>(m * (1.0 - v.trigger_mult_exact));
        triggered = triggered || ch.mean >= trigger_level;
        if (triggered) flush = std::min(std::max(flush, MeasuresToFlush(v, ch, index)), v.measures);
      }
      if (triggered) {
        const int64_t flushed = int64_t{v.measures - flush} * v.period;
        return std::max<int64_t>(at(k0 + j) + 1 - v.ring + flushed, 0);
      }
    }
  }
  return std::max<int64_t>(in.length() - v.ring, 0);
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

// functional.vad's _measure for measurements [k0, k0 + count) of channel
// c, in order (each smooths the channel's spectra): the lifted cepstrum's
// mean power, as dB-ish units above -21, into meas[0, count).
void VadOp::Measure(const VadSetup& v, const VadInput& in, int64_t c, int64_t k0, int count,
                    VadChannel& ch, double* meas) const {
  constexpr int kLanes = LaneRealFft::kLanes;
  thread_local std::vector<float> bufs[kLanes], powers[kLanes];
  const float* frames[kLanes];
  float* power[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    bufs[j].assign(static_cast<size_t>(v.dft), 0.0f);
    powers[j].resize(static_cast<size_t>(v.dft / 2 + 1));
    frames[j] = bufs[j].data();
    power[j] = powers[j].data();
  }
  for (int j = 0; j < count; ++j) {
    const int64_t start = v.measure_len - 1 + (k0 + j) * v.period - v.measure_len;
    for (int64_t i = 0; i < v.measure_len; ++i) {
      bufs[j][i] = in.At(c, start + i) * v.spectrum_window[i];
    }
  }
  v.spectrum_fft->Power(frames, count, power);
  const auto reduction = static_cast<float>(params_.noise_reduction_amount());
  for (int j = 0; j < count; ++j) {
    const int64_t k = k0 + j;
    const int boot = k <= v.boot_max ? static_cast<int>(k) : -1;
    const double m = boot >= 0 ? boot / (1.0 + boot) : double{v.smooth_mult};
    const auto mult = static_cast<float>(m), rest = static_cast<float>(1 - m);
    std::vector<float>& lifted = bufs[j];  // reused: the cepstrum's input
    std::fill(lifted.begin(), lifted.end(), 0.0f);
    for (int b = v.spectrum_start; b < v.spectrum_end; ++b) {
      ch.spectrum[b] = ch.spectrum[b] * mult + std::sqrt(powers[j][b]) * rest;
      const float d = ch.spectrum[b] * ch.spectrum[b];
      const float up = boot >= 0 ? 0.0f : d > ch.noise[b] ? v.up_mult : v.down_mult;
      ch.noise[b] = ch.noise[b] * up + d * (1 - up);
      lifted[b] = std::sqrt(std::max(0.0f, d - reduction * ch.noise[b])) *
                  v.cepstrum_window[b - v.spectrum_start];
    }
  }
  v.cepstrum_fft->Power(frames, count, power);
  for (int j = 0; j < count; ++j) {
    float sum = 0;
    for (int b = v.cepstrum_start; b < v.cepstrum_end; ++b) sum += powers[j][b];
    const double result =
        sum > 0 ? std::log(double{sum} / (v.cepstrum_end - v.cepstrum_start)) : -HUGE_VAL;
    meas[j] = std::max(0.0, 21 + result);
  }
}

}  // namespace

void RegisterAudioVadOps(OpRegistry* registry) {
  registry->Register(Stage::kVad, FactoryOf<VadOp>());
}

}  // namespace prepflow
