#include "policy/delivery_trial.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "policy/measurements.h"

namespace prepflow::policy {

void DeliveryTrial::Reopen(int64_t now) {
  settle_until_ = now + static_cast<int64_t>(options_.period_seconds / 2 * 1e9);
  open_ = false;
}

bool DeliveryTrial::PlanStarted(int64_t now, double predicted, double local_predicted,
                                bool revises) {
  predicted_ = predicted;
  local_predicted_ = local_predicted;
  if (revises && step_ == Step::kPlan) return true;
  step_ = Step::kPlan;
  Reopen(now);
  return false;
}

bool DeliveryTrial::Closed(int64_t now, double delivered, double busy, double* rate,
                           double* waited) {
  if (!open_) {
    if (now < settle_until_) return false;
    open_ = true;
    from_ = now;
    from_delivered_ = delivered;
    from_busy_ = busy;
    return false;
  }
  const double seconds = (now - from_) * 1e-9;
  const double samples = delivered - from_delivered_;
  if (seconds < options_.period_seconds ||
      (samples < options_.min_samples && seconds < 10 * options_.period_seconds)) {
    return false;
  }
  *rate = samples / seconds;
  *waited = std::clamp(1 - (busy - from_busy_) / seconds, 0.0, 1.0);
  return true;
}

DeliveryTrial::Verdict DeliveryTrial::Observe(int64_t now, double delivered, double busy_seconds,
                                              std::string* why) {
  double rate = 0, waited = 0;
  if (step_ == Step::kNone || !Closed(now, delivered, busy_seconds, &rate, &waited)) {
    return Verdict::kNone;
  }
  if (step_ == Step::kPlan) {
    step_ = Step::kNone;
    if (waited < kDataBound || rate >= (1 - options_.tolerance) * predicted_ ||
        rate >= (1 + 2 * options_.tolerance) * local_predicted_) {
      return Verdict::kNone;  // it delivers, or the trainer is what limits
    }
    plan_rate_ = rate;
    step_ = Step::kLocal;
    Reopen(now);
    *why = absl::StrFormat(
        "the plan delivered %.1f samples/s against %.1f predicted, not clearly above all local's "
        "%.1f predicted: trying all local",
        rate, predicted_, local_predicted_);
    return Verdict::kTryLocal;
  }
  step_ = Step::kNone;
  if (rate >= (1 + options_.gain) * plan_rate_) {
    hold_until_ = now + static_cast<int64_t>(hold_ * 1e9);
    ++backoffs_;
    *why = absl::StrFormat(
        "all local: it delivered %.1f samples/s, the plan %.1f (predicted %.1f); no offload "
        "plan for %.0f s",
        rate, plan_rate_, predicted_, hold_);
    hold_ = std::min(2 * hold_, options_.max_hold_seconds);
    return Verdict::kKeepLocal;
  }
  *why = absl::StrFormat("the plan stays: it delivered %.1f samples/s, all local %.1f", plan_rate_,
                         rate);
  return Verdict::kBackToPlan;
}

}  // namespace prepflow::policy
