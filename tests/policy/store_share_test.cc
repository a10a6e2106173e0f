// What storage gives both sides together and each alone, from hand-made
// read counters: both bound at once give S, a limit where both read, and each
// side's limit is what it read alone, or S where never seen alone. Short or
// quiet windows, and readers that do not wait, say nothing.
#include "policy/store_share.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::policy {
namespace {

using ::testing::HasSubstr;

// Windows of 1.5 s: each side reads at its rate (bytes/s, 100 KB reads), its
// two readers waiting `waited` of their time.
struct Feed {
  StoreShare share;
  double t = 0;
  StoreShare::Side here{0, 0, 0, 2}, workers{0, 0, 0, 2};
  std::string Window(double here_rate, double here_waited, double workers_rate,
                     double workers_waited) {
    t += 1.5;
    const auto add = [](StoreShare::Side& s, double rate, double waited) {
      s.bytes += rate * 1.5;
      s.reads += rate * 1.5 / 100e3;
      s.wait_seconds += waited * 1.5 * s.readers;
    };
    add(here, here_rate, here_waited);
    add(workers, workers_rate, workers_waited);
    return share.Observe(static_cast<int64_t>(t * 1e9), here, workers);
  }
};

TEST(StoreShare, BothSidesBoundAtOnceGiveALimitOnAllReads) {
  Feed f;
  f.Window(0, 0, 0, 0);                // opens the first window
  EXPECT_EQ(f.share.here_limit(), 0);  // nothing seen: the per-side windows stand
  EXPECT_THAT(f.Window(3e6, 0.8, 3e6, 0.8), HasSubstr("together at 6.0 MB/s"));
  EXPECT_DOUBLE_EQ(f.share.together(), 6e6);
  // Neither side seen alone: either may read what both did.
  EXPECT_DOUBLE_EQ(f.share.here_limit(), 6e6);
  EXPECT_DOUBLE_EQ(f.share.workers_limit(), 6e6);
  // All local: the trainer alone reads what both did (one store).
  EXPECT_THAT(f.Window(6e6, 0.8, 0, 0), HasSubstr("reads here alone 6.0 MB/s"));
  EXPECT_DOUBLE_EQ(f.share.here_limit(), 6e6);
  EXPECT_EQ(f.Window(6e6, 0.8, 0, 0), "");  // said once
}

TEST(StoreShare, ASideAloneGetsWhatItReadsAlone) {
  Feed f;
  f.Window(0, 0, 0, 0);
  f.Window(3e6, 0.8, 3e6, 0.8);
  // All local: the trainer alone is held to its own 3 MB/s (storage of its
  // own); the workers' limit stays S until they are seen alone.
  f.Window(3e6, 0.8, 0, 0);
  EXPECT_DOUBLE_EQ(f.share.here_limit(), 3e6);
  EXPECT_DOUBLE_EQ(f.share.workers_limit(), 6e6);
  EXPECT_THAT(f.Window(0, 0, 2e6, 0.8), HasSubstr("workers' reads alone 2.0 MB/s"));
  EXPECT_DOUBLE_EQ(f.share.workers_limit(), 2e6);
  // Rates are smoothed over about their last 8 s: after 1.5 s at 2 MB/s,
  // 1.5 s at 4 counts three quarters (its share of the latter half of the
  // 3 s, at least 2), then the mean moves by each window's share of 8 s.
  f.Window(0, 0, 4e6, 0.8);
  EXPECT_DOUBLE_EQ(f.share.workers_limit(), 3.5e6);
  for (int i = 0; i < 20; ++i) f.Window(0, 0, 5e6, 0.8);
  EXPECT_NEAR(f.share.workers_limit(), 5e6, 0.01e6);
  // A window in which the trainer read under 5% of the bytes is the
  // workers' alone, even where the trainer's one read waited.
  f.Window(0.2e6, 0.8, 5e6, 0.8);
  EXPECT_NEAR(f.share.together(), 6e6, 1);
}

TEST(StoreShare, WindowsThatShowNoBindingOrTooLittleSayNothing) {
  Feed f;
  f.Window(0, 0, 0, 0);
  EXPECT_EQ(f.Window(3e6, 0.3, 3e6, 0.3), "");  // readers mostly busy: not storage
  EXPECT_EQ(f.Window(3e6, 0.8, 3e6, 0.2), "");  // one side bound, the other reading
  EXPECT_EQ(f.share.together(), 0);
  EXPECT_EQ(f.share.here_limit(), 0);
  EXPECT_EQ(f.share.workers_limit(), 0);
  // Under a second, or fewer than four reads: the window stays open.
  StoreShare s;
  s.Observe(1'000'000'000, {0, 0, 0, 2}, {0, 0, 0, 2});
  EXPECT_EQ(s.Observe(1'500'000'000, {0.8, 2e5, 2, 2}, {0.8, 1e5, 1, 2}), "");
  EXPECT_EQ(s.Observe(3'000'000'000, {3.2, 2e5, 2, 2}, {3.2, 1e5, 1, 2}), "");
  EXPECT_EQ(s.together(), 0);
}

// A probe ends once two windows that opened after it began saw its side
// alone (the window open when it began holds both sides' reads), or when
// its time is up; each side is probed once, and only once S is seen.
TEST(StoreShare, AProbeEndsAfterTwoWindowsOfItsSideAloneOrWhenItsTimeIsUp) {
  Feed f;
  f.Window(0, 0, 0, 0);
  EXPECT_FALSE(f.share.Unprobed(StoreShare::Reader::kWorkers));  // S not seen
  f.Window(3e6, 0.8, 3e6, 0.8);
  ASSERT_TRUE(f.share.Unprobed(StoreShare::Reader::kWorkers));
  f.share.StartProbe(StoreShare::Reader::kWorkers, static_cast<int64_t>((f.t + 0.1) * 1e9), 60);
  EXPECT_FALSE(f.share.Unprobed(StoreShare::Reader::kWorkers));
  f.Window(0, 0, 7e6, 0.8);  // opened before the probe began
  EXPECT_EQ(f.share.EndProbe(static_cast<int64_t>(f.t * 1e9)), "");
  f.Window(0, 0, 7e6, 0.8);
  EXPECT_EQ(f.share.EndProbe(static_cast<int64_t>(f.t * 1e9)), "");
  f.Window(0, 0, 7e6, 0.8);
  EXPECT_EQ(f.share.EndProbe(static_cast<int64_t>(f.t * 1e9)),
            "storage probe: storage gives the workers' reads alone 7.0 MB/s, both sides together "
            "6.0");
  EXPECT_FALSE(f.share.probing());
  EXPECT_DOUBLE_EQ(f.share.workers_limit(), 7e6);
  // The trainer never waits alone: the probe ends on time, nothing learnt.
  ASSERT_TRUE(f.share.Unprobed(StoreShare::Reader::kHere));
  f.share.StartProbe(StoreShare::Reader::kHere, static_cast<int64_t>(f.t * 1e9), 3);
  f.Window(5e6, 0.2, 0, 0);
  EXPECT_EQ(f.share.EndProbe(static_cast<int64_t>(f.t * 1e9)), "");
  f.Window(5e6, 0.2, 0, 0);
  EXPECT_THAT(f.share.EndProbe(static_cast<int64_t>(f.t * 1e9)),
              HasSubstr("the reads here alone were never held by storage"));
  EXPECT_DOUBLE_EQ(f.share.here_limit(), 6e6);
  EXPECT_FALSE(f.share.Unprobed(StoreShare::Reader::kHere));
}

}  // namespace
}  // namespace prepflow::policy
