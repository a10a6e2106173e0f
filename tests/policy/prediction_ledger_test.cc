// The planner's prediction against what each placement delivered while it
// ran, with hand-made counters: the error is the delivery's, time-weighted
// over spans; the switch's transient, short spans and a trainer that is
// itself the limit are not judged; a prediction revised mid-span is
// integrated over its own seconds.
#include "policy/prediction_ledger.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::policy {
namespace {

constexpr double kPeriod = 2;

// Snapshots every 0.1 s at `rate` samples/s, the trainer waiting `waited`
// of the time; each says what the placement in force is predicted to give
// from then on. Start and Revise speak at the last snapshot's time: a new
// placement, or a new prediction for the one in force.
struct Feed {
  PredictionLedger ledger{kPeriod};
  int64_t ticks = 0;  // of 0.1 s
  double delivered = 0, busy = 0, predicted = 0;
  void Start(double p) { Say(p, /*started=*/true); }
  void Revise(double p) { Say(p, /*started=*/false); }
  void Run(double seconds, double rate, double waited = 0.5) {
    for (int64_t end = ticks + std::llround(seconds * 10); ticks < end;) {
      ++ticks;
      delivered += 0.1 * rate;
      busy += 0.1 * (1 - waited);
      Say(predicted, /*started=*/false);
    }
  }
  void Say(double p, bool started) {
    predicted = p;
    ended = ledger.Observe(ticks * 100'000'000, delivered, busy, predicted, started);
  }
  std::optional<PredictionLedger::Span> ended;  // by the last snapshot
};

TEST(PredictionLedger, TheErrorIsWhatThePlacementDeliveredAgainstItsPrediction) {
  Feed f;
  f.Start(100);
  f.Run(10, 90);
  EXPECT_NEAR(f.ledger.current().rate(), 90, 1e-6);
  EXPECT_NEAR(f.ledger.current().predicted_rate(), 100, 1e-6);
  EXPECT_NEAR(f.ledger.error(), 0.10, 1e-6);
  EXPECT_NEAR(f.ledger.seconds(), 9, 1e-6);  // the first period/2 settles
}

// What "delivered" says: the span under way once it ran a period, before
// that the span before it. A span a moment old is not a rate: at a run's
// end one batch just after a switch read as 30,000 samples/s.
TEST(PredictionLedger, DeliveredIsThatOfTheLatestSpanOfAPeriod) {
  Feed f;
  EXPECT_EQ(f.ledger.delivered(), 0);
  f.Start(100);
  f.Run(1.5, 90);  // settled for 0.5 s: under a period
  EXPECT_EQ(f.ledger.delivered(), 0);
  f.Run(3, 90);
  EXPECT_NEAR(f.ledger.delivered(), 90, 1e-6);
  f.Start(200);
  f.Run(1.1, 0, 1.0);  // the switch settles
  f.delivered += 300;  // a batch lands
  f.Run(0.1, 0);
  EXPECT_NEAR(f.ledger.delivered(), 90, 1e-6);
  f.Run(2, 150);  // the span settled 1 s after the switch: 2.2 s now
  EXPECT_NEAR(f.ledger.delivered(), (300 + 2 * 150) / 2.2, 1e-6);
}

TEST(PredictionLedger, TheSwitchsTransientIsNotJudged) {
  Feed f;
  f.Start(100);
  f.Run(0.9, 0, 1.0);  // nothing arrives while the switch settles
  f.Run(9, 100);
  EXPECT_NEAR(f.ledger.error(), 0, 1e-9);
}

TEST(PredictionLedger, SpansAreWeightedByTheirTime) {
  Feed f;
  f.Start(100);
  f.Run(5, 80);  // 4 s judged at 20% under
  f.Start(100);
  f.Run(9, 100);  // 8 s judged exact
  // |320 - 400| / (400 + 800)
  EXPECT_NEAR(f.ledger.error(), 80.0 / 1200, 1e-6);
  EXPECT_NEAR(f.ledger.seconds(), 12, 1e-6);
}

TEST(PredictionLedger, ShortSpansAndATrainerThatIsTheLimitAreNotJudged) {
  Feed f;
  f.Start(100);
  f.Run(2.5, 50);  // 1.5 s judged: under a period
  f.Start(100);
  f.Run(10, 50, 0.01);  // the trainer took what it could
  EXPECT_EQ(f.ledger.seconds(), 0);
  EXPECT_EQ(f.ledger.error(), 0);
  f.Start(100);
  f.Run(10, 100);
  EXPECT_NEAR(f.ledger.error(), 0, 1e-9);
  EXPECT_NEAR(f.ledger.seconds(), 9, 1e-6);
}

TEST(PredictionLedger, APredictionRevisedMidSpanIsIntegratedOverItsOwnSeconds) {
  Feed f;
  f.Start(100);
  f.Run(5, 100);  // 4 s at 100 predicted
  f.Revise(150);
  f.Run(4, 100);  // 4 s at 150 predicted, 100 delivered
  EXPECT_NEAR(f.ledger.current().predicted_rate(), 125, 1e-6);
  EXPECT_NEAR(f.ledger.error(), 200.0 / 1000, 1e-6);
}

TEST(PredictionLedger, NoPredictionNoJudgement) {
  Feed f;
  f.Start(0);
  f.Run(10, 100);  // the warm-up: nothing predicted
  EXPECT_EQ(f.ledger.seconds(), 0);
  EXPECT_EQ(f.ledger.error(), 0);
}

// Each span that ended is handed back for the log: what it delivered
// against its prediction, and whether (and why not) it is judged.
TEST(PredictionLedger, ASpanThatEndsIsDescribed) {
  using ::testing::HasSubstr;
  Feed f;
  f.Start(100);
  f.Run(5, 90);
  EXPECT_FALSE(f.ended.has_value());
  f.Start(200);
  ASSERT_TRUE(f.ended.has_value());
  EXPECT_NEAR(f.ended->seconds, 4, 1e-6);
  EXPECT_THAT(f.ledger.Describe(*f.ended),
              HasSubstr("delivered 90.0 samples/s over 4.0 s against 100.0 predicted (-10.0%; "
                        "judged)"));
  f.Run(2, 100);
  f.Start(200);
  EXPECT_THAT(f.ledger.Describe(*f.ended), HasSubstr("(-50.0%; not judged: under a period)"));
  f.Run(5, 100, 0.01);
  f.Start(0);
  EXPECT_THAT(f.ledger.Describe(*f.ended),
              HasSubstr("not judged: the trainer waited for data 1% of it"));
  f.Run(5, 100);
  f.Start(100);
  EXPECT_THAT(f.ledger.Describe(*f.ended), HasSubstr("not judged: no prediction"));
  f.Start(100);  // at once: the span before never settled
  EXPECT_FALSE(f.ended.has_value());
}

// At a run's end the log gets the span under way and the run's error.
TEST(PredictionLedger, TheSummaryTellsTheLastSpanAndTheRunsError) {
  Feed f;
  EXPECT_EQ(f.ledger.Summary(), "over the run, 0.0% from the predictions over 0.0 s judged");
  f.Start(100);
  f.Run(5, 90);
  EXPECT_EQ(f.ledger.Summary(),
            "the last placement delivered 90.0 samples/s over 4.0 s against 100.0 predicted "
            "(-10.0%; judged); over the run, 10.0% from the predictions over 4.0 s judged");
}

}  // namespace
}  // namespace prepflow::policy
