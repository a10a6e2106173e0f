// Compare and correct with hand-made counters: plans that deliver stay, a
// plan short of its prediction and of all local's is tried against all
// local, the better is kept, back-offs hold and double, and a trainer that
// does not wait for data never triggers a trial.
#include "policy/delivery_trial.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::policy {
namespace {

using ::testing::HasSubstr;
using Verdict = DeliveryTrial::Verdict;

constexpr int64_t kSecond = 1'000'000'000;

// Feeds snapshots every 0.1 s from `*t` for `seconds` at `rate` samples/s,
// the trainer waiting `waited` of the time; the first verdict, if any.
struct Feed {
  double t = 0, delivered = 0, busy = 0;
  Verdict Run(DeliveryTrial& trial, double seconds, double rate, double waited, std::string* why) {
    for (double end = t + seconds; t < end - 1e-9;) {
      t += 0.1;
      delivered += 0.1 * rate;
      busy += 0.1 * (1 - waited);
      const Verdict v = trial.Observe(static_cast<int64_t>(t * kSecond), delivered, busy, why);
      if (v != Verdict::kNone) return v;
    }
    return Verdict::kNone;
  }
  int64_t now() const { return static_cast<int64_t>(t * kSecond); }
};

DeliveryTrialOptions Options() {
  DeliveryTrialOptions o;
  o.period_seconds = 2;
  o.min_samples = 100;
  o.hold_seconds = 20;
  return o;
}

TEST(DeliveryTrial, APlanThatDeliversStays) {
  DeliveryTrial trial(Options());
  Feed f;
  trial.PlanStarted(f.now(), /*predicted=*/800, /*local_predicted=*/400);
  std::string why;
  EXPECT_EQ(f.Run(trial, 10, 790, 0.3, &why), Verdict::kNone);
  EXPECT_FALSE(trial.Blocks(f.now()));
}

TEST(DeliveryTrial, APlanShortOfItsPredictionAndOfLocalsIsTriedAndLocalKept) {
  DeliveryTrial trial(Options());
  Feed f;
  trial.PlanStarted(f.now(), 820, 700);
  std::string why;
  ASSERT_EQ(f.Run(trial, 10, 650, 0.3, &why), Verdict::kTryLocal);
  EXPECT_THAT(why, HasSubstr("delivered 650.0 samples/s against 820.0 predicted"));
  // The window: settled a second, then two seconds measured.
  EXPECT_NEAR(f.t, 3.0, 0.15);
  EXPECT_TRUE(trial.Blocks(f.now()));
  ASSERT_EQ(f.Run(trial, 10, 690, 0.3, &why), Verdict::kKeepLocal);
  EXPECT_THAT(why, HasSubstr("all local: it delivered 690.0 samples/s, the plan 650.0"));
  EXPECT_THAT(why, HasSubstr("no offload plan for 20 s"));
  EXPECT_EQ(trial.backoffs(), 1);
  EXPECT_TRUE(trial.Blocks(f.now() + 19 * kSecond));
  EXPECT_FALSE(trial.Blocks(f.now() + 21 * kSecond));
  // The next back-off holds twice as long.
  f.t += 21;
  trial.PlanStarted(f.now(), 820, 700);
  ASSERT_EQ(f.Run(trial, 10, 650, 0.3, &why), Verdict::kTryLocal);
  ASSERT_EQ(f.Run(trial, 10, 690, 0.3, &why), Verdict::kKeepLocal);
  EXPECT_THAT(why, HasSubstr("no offload plan for 40 s"));
}

TEST(DeliveryTrial, ThePlanComesBackWhenLocalIsNoBetter) {
  DeliveryTrial trial(Options());
  Feed f;
  trial.PlanStarted(f.now(), 820, 700);
  std::string why;
  ASSERT_EQ(f.Run(trial, 10, 650, 0.3, &why), Verdict::kTryLocal);
  ASSERT_EQ(f.Run(trial, 10, 660, 0.3, &why), Verdict::kBackToPlan);  // within the gain
  EXPECT_THAT(why, HasSubstr("the plan stays: it delivered 650.0 samples/s, all local 660.0"));
  EXPECT_FALSE(trial.Blocks(f.now()));
  EXPECT_EQ(f.Run(trial, 10, 650, 0.3, &why), Verdict::kNone);  // judged once
}

// Re-plans that only adjust the watched plan (the link scenario: 16%, then
// 14%, then 13% remote, a couple of seconds apart) keep its window: the
// verdict comes a window after the first, judged against the latest
// prediction. A plan that is not a revision starts a window of its own.
TEST(DeliveryTrial, RevisionsKeepTheWindowAndANewPlanStartsOne) {
  DeliveryTrial trial(Options());
  Feed f;
  EXPECT_FALSE(trial.PlanStarted(f.now(), 820, 700));
  std::string why;
  ASSERT_EQ(f.Run(trial, 1.5, 650, 0.3, &why), Verdict::kNone);
  EXPECT_TRUE(trial.PlanStarted(f.now(), 800, 690, /*revises=*/true));
  ASSERT_EQ(f.Run(trial, 1.0, 650, 0.3, &why), Verdict::kNone);
  EXPECT_TRUE(trial.PlanStarted(f.now(), 780, 700, /*revises=*/true));
  ASSERT_EQ(f.Run(trial, 10, 650, 0.3, &why), Verdict::kTryLocal);
  EXPECT_NEAR(f.t, 3.0, 0.15);
  EXPECT_THAT(why, HasSubstr("against 780.0 predicted, not clearly above all local's 700.0"));
  ASSERT_EQ(f.Run(trial, 10, 660, 0.3, &why), Verdict::kBackToPlan);

  trial.PlanStarted(f.now(), 820, 700);
  const double start = f.t;
  ASSERT_EQ(f.Run(trial, 1.5, 650, 0.3, &why), Verdict::kNone);
  EXPECT_FALSE(trial.PlanStarted(f.now(), 820, 700, /*revises=*/false));
  ASSERT_EQ(f.Run(trial, 10, 650, 0.3, &why), Verdict::kTryLocal);
  EXPECT_NEAR(f.t - start, 4.5, 0.15);
}

// The running plan scored again on new measurements (storage found binding
// after the plan was made) is judged against that score: plan 1 of a
// storage run predicted 1323 samples/s before storage was seen, then 180
// once it was; judged against 1323 its 175 looked a miss. Only a window
// being watched takes the new score.
TEST(DeliveryTrial, ARescoredPlanIsJudgedAgainstItsNewScore) {
  DeliveryTrial trial(Options());
  Feed f;
  trial.PlanStarted(f.now(), 1323, 560);
  trial.Rescored(180, 150);
  std::string why;
  EXPECT_EQ(f.Run(trial, 10, 175, 0.3, &why), Verdict::kNone) << why;
  DeliveryTrial stale(Options());
  Feed g;
  stale.PlanStarted(g.now(), 1323, 560);
  EXPECT_EQ(g.Run(stale, 10, 175, 0.3, &why), Verdict::kTryLocal);
  DeliveryTrial idle(Options());
  idle.Rescored(180, 150);  // no plan watched: nothing to judge
  EXPECT_EQ(g.Run(idle, 10, 175, 0.3, &why), Verdict::kNone);
}

TEST(DeliveryTrial, NoTrialWhereTheTrainerIsWhatLimits) {
  DeliveryTrial trial(Options());
  Feed f;
  trial.PlanStarted(f.now(), 820, 700);
  std::string why;
  EXPECT_EQ(f.Run(trial, 10, 500, /*waited=*/0.01, &why), Verdict::kNone);
}

TEST(DeliveryTrial, NoTrialWhereThePlanClearlyBeatsLocalsPrediction) {
  DeliveryTrial trial(Options());
  Feed f;
  trial.PlanStarted(f.now(), 816, 367);  // the CLIP recipe's: 757 delivered
  std::string why;
  EXPECT_EQ(f.Run(trial, 10, 757, 0.3, &why), Verdict::kNone);
}

TEST(DeliveryTrial, AWindowWaitsForEnoughSamples) {
  DeliveryTrialOptions o = Options();
  o.min_samples = 1000;
  DeliveryTrial trial(o);
  Feed f;
  trial.PlanStarted(f.now(), 100, 90);
  std::string why;
  // 50 samples/s: 1000 samples take 20 s, over the 10 periods that close it.
  EXPECT_EQ(f.Run(trial, 20, 50, 0.5, &why), Verdict::kNone);
  EXPECT_EQ(f.Run(trial, 2, 50, 0.5, &why), Verdict::kTryLocal);
}

}  // namespace
}  // namespace prepflow::policy
