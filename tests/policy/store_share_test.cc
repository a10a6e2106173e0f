// One store or two, from hand-made read counters: both sides bound at once
// are taken as sharing one store (their together rate is its limit) until a
// side alone is seen to read well under it; a side alone that reads what both
// did confirms the store is shared. Short or quiet windows say nothing.
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

TEST(StoreShare, BothSidesBoundAtOnceShareOneStoreUntilOneAloneSaysOtherwise) {
  Feed f;
  f.Window(0, 0, 0, 0);  // opens the first window
  const std::string note = f.Window(3e6, 0.8, 3e6, 0.8);
  EXPECT_THAT(note, HasSubstr("together at 6.0 MB/s"));
  EXPECT_THAT(note, HasSubstr("no side seen alone yet"));
  EXPECT_DOUBLE_EQ(f.share.shared_limit(), 6e6);
  // All local: the trainer alone reads what both did. Still one store.
  EXPECT_EQ(f.Window(6e6, 0.8, 0, 0), "");
  EXPECT_DOUBLE_EQ(f.share.alone(), 6e6);
  EXPECT_DOUBLE_EQ(f.share.shared_limit(), 6e6);
}

TEST(StoreShare, ASideAloneReadingWellUnderBothTogetherHasStorageOfItsOwn) {
  Feed f;
  f.Window(0, 0, 0, 0);
  f.Window(3e6, 0.8, 3e6, 0.8);
  // All local: the trainer alone is held to its own 3 MB/s.
  EXPECT_THAT(f.Window(3e6, 0.8, 0, 0), HasSubstr("each reads storage of its own"));
  EXPECT_EQ(f.share.shared_limit(), 0);
  EXPECT_DOUBLE_EQ(f.share.together(), 6e6);
  // The workers alone, likewise (smoothed with the trainer's).
  f.Window(0, 0, 3e6, 0.8);
  EXPECT_EQ(f.share.shared_limit(), 0);
}

TEST(StoreShare, WindowsThatShowNoBindingOrTooLittleSayNothing) {
  Feed f;
  f.Window(0, 0, 0, 0);
  EXPECT_EQ(f.Window(3e6, 0.3, 3e6, 0.3), "");  // readers mostly busy: not storage
  EXPECT_EQ(f.Window(3e6, 0.8, 3e6, 0.2), "");  // one side bound, the other reading
  EXPECT_EQ(f.share.shared_limit(), 0);
  EXPECT_EQ(f.share.alone(), 0);
  EXPECT_EQ(f.share.together(), 0);
  // Under a second, or fewer than four reads: the window stays open.
  StoreShare s;
  s.Observe(1'000'000'000, {0, 0, 0, 2}, {0, 0, 0, 2});
  EXPECT_EQ(s.Observe(1'500'000'000, {0.8, 2e5, 2, 2}, {0.8, 1e5, 1, 2}), "");
  EXPECT_EQ(s.Observe(3'000'000'000, {3.2, 2e5, 2, 2}, {3.2, 1e5, 1, 2}), "");
  EXPECT_EQ(s.together(), 0);
}

}  // namespace
}  // namespace prepflow::policy
