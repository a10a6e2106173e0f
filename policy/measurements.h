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

  // Cumulative numerator and denominator. Returns true when a window was
  // folded in.
  bool Update(double numerator, double denominator) {
    const double dn = numerator - numerator_, dd = denominator - denominator_;
    if (dd < (known_ ? min_step_ : first_step_) || dd <= 0) return false;
    const double ratio = dn / dd;
    value_ = known_ ? (1 - weight_) * value_ + weight_ * ratio : ratio;
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
  double numerator_ = 0, denominator_ = 0;
  bool known_ = false;
  double value_ = 0;
};

// A transport cost a worker reported, in CPU-s per byte, when it is
// plausible (above 0, at most 1 us: a core moving 1 MB/s); 0 otherwise, so
// that a NaN, a negative or a huge figure never reaches the planner.
inline double PlausibleCpuPerByte(double v) { return v > 0 && v <= 1e-6 ? v : 0; }

// How far apart two measurements are, relative to the larger: 0 when equal,
// 1 when one is zero and the other is not.
inline double RelativeChange(double a, double b) {
  const double m = std::max(std::abs(a), std::abs(b));
  return m > 0 ? std::abs(a - b) / m : 0;
}

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_MEASUREMENTS_H_
