// What each placement delivered against what was predicted for it, while it
// ran: the measure of the planner's model (issue: steady-state delivery
// within 5% of the prediction).
//
//   span      from a placement's start (settled: period/2 later, so the
//             switch's own transient is not judged) until the next one
//             starts or the run ends
//   predicted the prediction in force, integrated over the span's time (a
//             running placement's prediction is revised each period as its
//             inputs move)
//   counted   spans of at least one period in which the trainer waited for
//             data (>= 5% of the span): a trainer that is itself the limit
//             takes less than any plan supplies, and says nothing of the model
//   error     sum over counted spans of |delivered - predicted| over the sum
//             of predicted: time-weighted, so short spans weigh little
//
// Comparing within the span, not the last plan's prediction against a rate
// taken over other seconds (a run's second half), keeps the machine's drift
// between plan and measurement out of the error.
//
// Thread-safety: not thread-safe (the Replanner holds it under its lock).
#ifndef PREPFLOW_POLICY_PREDICTION_LEDGER_H_
#define PREPFLOW_POLICY_PREDICTION_LEDGER_H_

#include <cstdint>
#include <optional>
#include <string>

namespace prepflow::policy {

class PredictionLedger {
 public:
  explicit PredictionLedger(double period_seconds) : period_seconds_(period_seconds) {}

  struct Span {
    double seconds = 0;
    double delivered = 0;     // samples
    double predicted = 0;     // samples: the prediction's integral
    double busy_seconds = 0;  // of the trainer
    double rate() const { return seconds > 0 ? delivered / seconds : 0; }
    double predicted_rate() const { return seconds > 0 ? predicted / seconds : 0; }
  };
  // At each snapshot (`now` in nanoseconds; the trainer's delivered samples
  // and busy seconds, cumulative): `predicted` samples/s is what the
  // placement in force from now on is predicted to give; `started` says it
  // is a new placement (the span before it ends). Returns the span that
  // ended, if it had settled.
  std::optional<Span> Observe(int64_t now, double delivered, double busy_seconds, double predicted,
                              bool started);
  // The span under way (settled; empty before it settles).
  const Span& current() const { return current_; }
  // Samples/s delivered by the latest span that ran at least a period: the
  // one under way once it has, else the one before (0: none yet). A span a
  // moment old says nothing: one batch in a millisecond is 30,000/s.
  double delivered() const;
  // The time-weighted error over counted spans, the one under way included
  // when it counts; 0 when none counts (see seconds()).
  double error() const;
  // Seconds of the counted spans.
  double seconds() const;
  // A line for the log: what a span delivered against its prediction, and
  // whether it is judged and if not, why; `which` names it.
  std::string Describe(const Span& s, const char* which = "the placement before") const;
  // At a run's end: the span under way (if it settled), and the error over
  // the run.
  std::string Summary() const;

 private:
  // Whether a span is judged (see above).
  bool Counts(const Span& s) const;

  const double period_seconds_;
  int64_t settle_until_ = 0;
  bool open_ = false;  // the span under way has settled and is measured
  int64_t last_ = 0;
  double last_delivered_ = 0, last_busy_ = 0, last_predicted_ = 0;
  Span current_;
  double closed_error_ = 0;  // |delivered - predicted| of closed counted spans
  double closed_predicted_ = 0, closed_seconds_ = 0;
  double last_full_rate_ = 0;  // of the latest closed span of a period or more
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_PREDICTION_LEDGER_H_
