#include "policy/prediction_ledger.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "policy/measurements.h"

namespace prepflow::policy {

bool PredictionLedger::Counts(const Span& s) const {
  return s.seconds >= period_seconds_ && s.predicted > 0 &&
         1 - s.busy_seconds / s.seconds >= kDataBound;
}

std::optional<PredictionLedger::Span> PredictionLedger::Observe(int64_t now, double delivered,
                                                                double busy_seconds,
                                                                double predicted, bool started) {
  std::optional<Span> ended;
  if (open_) {
    const double dt = (now - last_) * 1e-9;
    current_.seconds += dt;
    current_.delivered += delivered - last_delivered_;
    current_.busy_seconds += busy_seconds - last_busy_;
    current_.predicted += last_predicted_ * dt;
  }
  if (started) {
    if (current_.seconds >= period_seconds_) last_full_rate_ = current_.rate();
    if (Counts(current_)) {
      closed_error_ += std::abs(current_.delivered - current_.predicted);
      closed_predicted_ += current_.predicted;
      closed_seconds_ += current_.seconds;
    }
    if (open_) ended = current_;
    current_ = Span();
    open_ = false;
    settle_until_ = now + static_cast<int64_t>(period_seconds_ / 2 * 1e9);
  } else if (!open_ && now >= settle_until_) {
    open_ = true;
  }
  last_ = now;
  last_delivered_ = delivered;
  last_busy_ = busy_seconds;
  last_predicted_ = predicted;
  return ended;
}

double PredictionLedger::delivered() const {
  return current_.seconds >= period_seconds_ ? current_.rate() : last_full_rate_;
}

double PredictionLedger::error() const {
  double err = closed_error_, pred = closed_predicted_;
  if (Counts(current_)) {
    err += std::abs(current_.delivered - current_.predicted);
    pred += current_.predicted;
  }
  return pred > 0 ? err / pred : 0;
}

double PredictionLedger::seconds() const {
  return closed_seconds_ + (Counts(current_) ? current_.seconds : 0);
}

std::string PredictionLedger::Summary() const {
  std::string last;
  if (open_ && current_.seconds > 0)
    absl::StrAppend(&last, Describe(current_, "the last placement"), "; ");
  return absl::StrFormat("%sover the run, %.1f%% from the predictions over %.1f s judged", last,
                         100 * error(), seconds());
}

std::string PredictionLedger::Describe(const Span& s, const char* which) const {
  const double predicted = s.predicted_rate();
  std::string judged = "judged";
  if (s.predicted <= 0) {
    judged = "not judged: no prediction";
  } else if (s.seconds < period_seconds_) {
    judged = "not judged: under a period";
  } else if (!Counts(s)) {
    judged = absl::StrFormat("not judged: the trainer waited for data %.0f%% of it",
                             100 * (1 - s.busy_seconds / s.seconds));
  }
  return absl::StrFormat(
      "%s delivered %.1f samples/s over %.1f s against %.1f predicted (%+.1f%%; %s)", which,
      s.rate(), s.seconds, predicted, predicted > 0 ? 100 * (s.rate() / predicted - 1) : 0.0,
      judged);
}

}  // namespace prepflow::policy
