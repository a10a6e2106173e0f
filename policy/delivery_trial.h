// Compare and correct: whether the plan in force delivers what the planner
// predicted, and where it does not, whether running everything locally does
// better. The planner's model can be wrong in ways no input shows (a
// half-core trainer's hand-off delays, a link that binds in bursts); this
// judges plans by the samples they deliver.
//
//   rule        what it does
//   settle      a window opens period/2 after a placement starts, and
//               closes after a period and min_samples delivered (or ten
//               periods); a plan that only revises the one watched (the
//               caller says so) keeps its window
//   judged      a plan (not all local) whose window delivered less than
//               (1 - tolerance) x its prediction, and not clearly more than
//               all local is predicted to (1 + 2 tolerance), while the trainer
//               waited for data (>= 5% of the window): all local is tried
//               for a window
//   verdict     all local delivering gain more than the plan did is kept,
//               and no new plan is made for hold_seconds (doubling at each
//               back-off, up to max_hold_seconds); otherwise the plan
//               comes back and stays
//
// Thread-safety: not thread-safe (the Replanner holds it under its lock).
#ifndef PREPFLOW_POLICY_DELIVERY_TRIAL_H_
#define PREPFLOW_POLICY_DELIVERY_TRIAL_H_

#include <cstdint>
#include <string>

namespace prepflow::policy {

struct DeliveryTrialOptions {
  double period_seconds = 2;
  double tolerance = 0.05;
  double gain = 0.03;
  double hold_seconds = 20;
  double max_hold_seconds = 300;
  double min_samples = 1024;
};

class DeliveryTrial {
 public:
  enum class Verdict {
    kNone,
    kTryLocal,    // switch to all local for a window
    kKeepLocal,   // all local did better: stay, and hold new plans off
    kBackToPlan,  // the plan did at least as well: back to it
  };

  explicit DeliveryTrial(const DeliveryTrialOptions& options)
      : options_(options), hold_(options.hold_seconds) {}

  // A plan that is not all local started at `now` (nanoseconds; the
  // trainer's delivered samples and busy seconds then), predicted to give
  // `predicted` samples/s where all local is predicted `local_predicted`.
  // With `revises` (it places samples as the plan being watched does, but
  // for a few percent), that plan's window goes on and is judged against
  // the new prediction: re-plans that only adjust do not put the
  // judgement off. Returns whether a window went on (else one starts).
  bool PlanStarted(int64_t now, double predicted, double local_predicted, bool revises = false);
  // The running plan was scored again on new measurements (no new plan): its
  // window, if one is watched, is judged against these predictions.
  void Rescored(double predicted, double local_predicted) {
    if (step_ != Step::kPlan) return;
    predicted_ = predicted;
    local_predicted_ = local_predicted;
  }
  // Each snapshot's counters (cumulative): a verdict, with `why` (one line)
  // set, when one is due.
  Verdict Observe(int64_t now, double delivered, double busy_seconds, std::string* why);
  // A worker came or went: the trial is void.
  void Abort() { step_ = Step::kNone; }
  // Trying all local, or holding after a back-off: no new plan meanwhile (a
  // plan being watched may be replaced as usual; the new one is watched).
  bool Blocks(int64_t now) const { return step_ == Step::kLocal || now < hold_until_; }
  int64_t backoffs() const { return backoffs_; }

 private:
  enum class Step { kNone, kPlan, kLocal };
  void Reopen(int64_t now);
  // The window's rate and the share of it the trainer waited, once closed.
  bool Closed(int64_t now, double delivered, double busy, double* rate, double* waited);

  const DeliveryTrialOptions options_;
  Step step_ = Step::kNone;
  int64_t settle_until_ = 0;
  bool open_ = false;
  int64_t from_ = 0;
  double from_delivered_ = 0, from_busy_ = 0;
  double predicted_ = 0, local_predicted_ = 0, plan_rate_ = 0;
  double hold_;  // the next back-off's hold, seconds
  int64_t hold_until_ = 0;
  int64_t backoffs_ = 0;
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_DELIVERY_TRIAL_H_
