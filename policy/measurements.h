// Smoothed measurements for the offload planner.
//
// The client's profilers count cumulatively (CPU, bytes, samples since the
// start). The planner needs current values that follow drift — a stage that
// gets slower, a trainer that speeds up — without jumping on every noisy
// batch. SmoothedRatio folds in the increments of two cumulative counters
// once the denominator has grown by at least `min_step` since the last fold,
// and keeps an exponentially weighted mean of the per-window ratios.
//
// Thread-safety: none; the Replanner (replanner.h) calls it under its mutex.
#ifndef PREPFLOW_POLICY_MEASUREMENTS_H_
#define PREPFLOW_POLICY_MEASUREMENTS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace prepflow::policy {

class SmoothedRatio {
 public:
  // weight: how much a new window counts (1: only the latest window);
  // first_step: the first window's size (default min_step), smaller when a
  // first estimate is wanted soon.
  explicit SmoothedRatio(double min_step, double weight = 0.5, double first_step = -1)
      : min_step_(min_step),
        weight_(weight),
        first_step_(first_step >= 0 ? first_step : min_step) {}

  // A mean over about the last `memory` units of the denominator, however
  // they came in windows: the mean of all of them until memory / 4 have come,
  // then each window counts by its share of the latter half of what was
  // folded so far (at least memory / 4), or of `memory` once that is less. For a
  // per-sample cost over samples that differ (photographs of 3 KB and
  // 350 KB), whose windows' means swing by the samples each happened to
  // hold: the noise falls with the samples seen, not with the windows. The
  // half forgets a run's first samples (cold caches, pages touched the first
  // time: twice as dear on the testbed) as the run goes on.
  static SmoothedRatio OverLast(double memory, double min_step, double first_step) {
    SmoothedRatio r(min_step, 0, first_step);
    r.memory_ = memory;
    return r;
  }

  // Cumulative numerator and denominator. Returns true when a window was
  // folded in.
  bool Update(double numerator, double denominator) {
    const double dn = numerator - numerator_, dd = denominator - denominator_;
    if (dd < (known_ ? min_step_ : first_step_) || dd <= 0) return false;
    const double ratio = dn / dd;
    folded_ += dd;
    const double span =
        std::min(memory_, std::max({folded_ / 2, std::min(folded_, memory_ / 4), dd}));
    const double weight = memory_ > 0 ? std::min(1.0, dd / span) : weight_;
    value_ = known_ ? (1 - weight) * value_ + weight * ratio : ratio;
    known_ = true;
    numerator_ = numerator;
    denominator_ = denominator;
    return true;
  }
  bool known() const { return known_; }
  double value() const { return value_; }
  double value_or(double fallback) const { return known_ ? value_ : fallback; }

 private:
  double min_step_, weight_, first_step_;
  double memory_ = 0;  // OverLast's; 0: each window weighs weight_
  double numerator_ = 0, denominator_ = 0;
  double folded_ = 0;  // the denominator's units folded in so far
  bool known_ = false;
  double value_ = 0;
};

// A link probe's chunks (proto LinkProbe) as they arrive, timed here. The
// rate is the bytes after the first chunk over the time from its arrival to
// the last's: a shaper's burst and the connection's first round trips pass
// within the first chunk. It is steady when no gap between arrivals is over
// three times another: a sender held by its link sends chunks evenly (two
// probes sharing a link, one ending first, speed the other's last up), while
// one held by TCP's window still opening halves each gap, and a receiver
// that stalled (a throttled process) leaves one long gap. A steady rate is the
// link's; any other is only what the link carried at least.
class ProbeTimer {
 public:
  // A chunk of `bytes` arrived at `now_nanos`, one of `count`. Chunks past
  // `count` (or after a count that changed) are ignored.
  void Arrived(int64_t now_nanos, double bytes, int count) {
    if (count < 2 || done() || (chunks_ > 0 && count != count_)) return;
    count_ = count;
    if (chunks_ > 0) {
      const double gap = static_cast<double>(now_nanos - last_nanos_);
      min_gap_ = chunks_ == 1 ? gap : std::min(min_gap_, gap);
      max_gap_ = std::max(max_gap_, gap);
      bytes_ += bytes;
    } else {
      first_nanos_ = now_nanos;
    }
    last_nanos_ = now_nanos;
    ++chunks_;
  }
  bool done() const { return chunks_ >= 2 && chunks_ == count_; }
  // Bytes/s once done (0 before, or when no time passed).
  double rate() const {
    const double seconds = (last_nanos_ - first_nanos_) * 1e-9;
    return done() && seconds > 0 ? bytes_ / seconds : 0;
  }
  // Needs two gaps at least (three chunks).
  bool steady() const { return done() && chunks_ >= 3 && max_gap_ <= 3 * min_gap_; }
  // The timed part: from the first chunk's arrival to the last's, and the
  // bytes after the first.
  int64_t first_nanos() const { return first_nanos_; }
  int64_t last_nanos() const { return last_nanos_; }
  double timed_bytes() const { return bytes_; }

 private:
  int chunks_ = 0, count_ = 0;
  int64_t first_nanos_ = 0, last_nanos_ = 0;
  double bytes_ = 0, min_gap_ = 0, max_gap_ = 0;
};

// The rate probes crossed at together: their timed bytes over the time any
// of them was arriving (the union of their timed spans), so probes that ran
// one after another are not counted as at once. 0 unless every one is done.
inline double TogetherRate(const std::vector<const ProbeTimer*>& probes) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  double bytes = 0;
  for (const ProbeTimer* p : probes) {
    if (!p->done()) return 0;
    spans.emplace_back(p->first_nanos(), p->last_nanos());
    bytes += p->timed_bytes();
  }
  std::sort(spans.begin(), spans.end());
  int64_t busy = 0, end = std::numeric_limits<int64_t>::min();
  for (const auto& [first, last] : spans) {
    busy += std::max<int64_t>(0, last - std::max(first, end));
    end = std::max(end, last);
  }
  return busy > 0 ? bytes / (busy * 1e-9) : 0;
}

// A transport cost a worker reported, in CPU-s per byte, when it is
// plausible (above 0, at most 1 us: a core moving 1 MB/s); 0 otherwise, so
// that a NaN, a negative or a huge figure never reaches the planner.
inline double PlausibleCpuPerByte(double v) { return v > 0 && v <= 1e-6 ? v : 0; }

// A trainer that waited for data at least this share of a window or span
// was held by its data, not by itself: only then does a delivered rate judge
// a plan (DeliveryTrial, PredictionLedger).
inline constexpr double kDataBound = 0.05;

// Whether readers (`readers`, at least one counted) that waited
// `wait_seconds` for bytes over a window of `seconds` were held by storage:
// half their time or more.
inline bool StorageBound(double wait_seconds, double seconds, double readers) {
  return wait_seconds / (seconds * std::max(readers, 1.0)) >= 0.5;
}

// A limit measured again: the mean with the last, or the rate itself the
// first time (`last` 0).
inline double MeanWithLast(double last, double rate) {
  return last > 0 ? 0.5 * (last + rate) : rate;
}

// How far apart two measurements are, relative to the larger: 0 when equal,
// 1 when one is zero and the other is not.
inline double RelativeChange(double a, double b) {
  const double m = std::max(std::abs(a), std::abs(b));
  return m > 0 ? std::abs(a - b) / m : 0;
}

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_MEASUREMENTS_H_
