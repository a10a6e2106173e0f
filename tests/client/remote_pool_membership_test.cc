// RemotePool's membership against fake streams and a fake clock: workers
// dying, going silent, refusing, not opening in time, ending cleanly, and
// static workers dialled again. No process, socket or sleep.
#include <algorithm>
#include <string>
#include <vector>

#include "client/remote/remote_pool.h"
#include "gtest/gtest.h"
#include "tests/client/remote_pool_fixture.h"

namespace prepflow {
namespace {

using ::prepflow::testing::FakeStream;
using ::prepflow::testing::RemotePoolTest;

TEST_F(RemotePoolTest, AWorkerDyingMidItemHasItsItemsReissuedExactlyOnce) {
  Make();
  FakeStream* a = Open("a:1", 2);
  FakeStream* b = Open("b:1", 2);
  for (int64_t i = 0; i < 6; ++i) Submit({i});  // 2 + 2 out, 2 queued
  ASSERT_EQ(a->sent.size(), 2u);
  ASSERT_EQ(b->sent.size(), 2u);
  EXPECT_EQ(pool_->owed_items(), 6);
  Answer(a, 0);  // a delivered one item, then dies owing one
  ASSERT_EQ(a->sent.size(), 3u);
  a->handlers.closed(absl::UnavailableError("connection reset"));
  EXPECT_TRUE(a->cancelled);
  EXPECT_EQ(pool_->counters().reissued_items, 2);
  // Every item not answered is still owed, re-issued or not: a loader that
  // finds nothing owed while a batch is short knows a sample was lost.
  EXPECT_EQ(pool_->owed_items(), 5);
  // A late answer from the dead worker is dropped.
  Answer(a, 1);
  EXPECT_EQ(pool_->owed_items(), 5);
  // b takes everything else, in order, as its credits allow.
  for (size_t k = 0; k < 6 && k < b->sent.size(); ++k) Answer(b, k);
  ExpectExactlyOnce({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(Delivered(), 6);
  EXPECT_TRUE(refusal_.ok());
  EXPECT_EQ(pool_->owed_items(), 0);
  // An answer is owed until its delivery returns.
  EXPECT_EQ(owed_while_delivering_, (std::vector<int64_t>{6, 5, 4, 3, 2, 1}));
}

TEST_F(RemotePoolTest, ASilentWorkerIsDroppedAfterTheTimeoutOnTheFakeClock) {
  RemotePoolOptions options;
  options.worker_timeout_seconds = 5;
  options.hedge_after = 0;
  Make(options);
  FakeStream* a = Open("a:1", 1);
  Submit({0});
  now_ += 4'000'000'000;
  pool_->Tick();
  EXPECT_FALSE(a->cancelled);  // 4 s: still within the timeout
  now_ += 2'000'000'000;
  pool_->Tick();
  EXPECT_TRUE(a->cancelled);
  const std::vector<RemotePool::Member> members = pool_->Members();
  EXPECT_NE(members[0].dropped_because.find("silent for 6.0 s"), std::string::npos)
      << members[0].dropped_because;
  // Nobody is left: the item runs here, once.
  ExpectExactlyOnce({0});
  EXPECT_EQ(local_.size(), 1u);
}

TEST_F(RemotePoolTest, AnIdleWorkerIsNotDroppedForSilence) {
  RemotePoolOptions options;
  options.worker_timeout_seconds = 5;
  Make(options);
  FakeStream* a = Open("a:1", 1);
  now_ += 60'000'000'000;
  pool_->Tick();
  EXPECT_FALSE(a->cancelled);  // it owes nothing
}

TEST_F(RemotePoolTest, ARefusalStopsTheRunButAGrantedWorkersRefusalIsLeftOut) {
  Make();
  FakeStream* granted = Open("g:1", 1, "w-granted", 2);
  granted->handlers.closed(absl::PermissionDeniedError("dataset not below the data root"));
  EXPECT_TRUE(refusal_.ok());
  EXPECT_FALSE(pool_->MayDial("g:1"));  // never again
  FakeStream* fixed = Open("f:1", 1);
  fixed->handlers.closed(absl::PermissionDeniedError("token mismatch"));
  EXPECT_EQ(refusal_.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(pool_->AwaitOpened(absl::Now()).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(RemotePoolTest, AFailedGrantedWorkerIsNotRedialledUntilTheDelayPasses) {
  RemotePoolOptions options;
  options.redial_after_seconds = 10;
  Make(options);
  FakeStream* g = Open("g:1", 1, "w-g", 2);
  g->handlers.closed(absl::UnavailableError("gone"));
  EXPECT_FALSE(pool_->MayDial("g:1"));
  now_ += 11'000'000'000;
  EXPECT_TRUE(pool_->MayDial("g:1"));
}

TEST_F(RemotePoolTest, WorkersThatDoNotOpenInTimeAreDropped) {
  RemotePoolOptions options;
  options.connect_timeout_seconds = 2;
  Make(options);
  pool_->Add("never:1");
  EXPECT_TRUE(pool_->AwaitOpened(absl::Now()).ok());
  const std::vector<RemotePool::Member> members = pool_->Members();
  ASSERT_EQ(members.size(), 1u);
  EXPECT_FALSE(members[0].alive);
  EXPECT_NE(members[0].dropped_because.find("did not open the job within 2 s"), std::string::npos);
  Submit({0});
  ExpectExactlyOnce({0});  // ran here
}

TEST_F(RemotePoolTest, ACleanEndAfterFinishIsNotAFailure) {
  Make();
  FakeStream* a = Open("a:1", 1);
  pool_->Finish();
  EXPECT_TRUE(a->closed);
  a->handlers.closed(absl::OkStatus());
  EXPECT_TRUE(pool_->Members()[0].alive);  // not dropped
  EXPECT_TRUE(pool_->Members()[0].dropped_because.empty());
}

// A static worker that was not up when the job started is dialled again,
// backing off (1 s, then 2 s), until it opens the job; once it opened, a
// failure starts the back-off over. Its items are answered exactly once
// whichever stream took them. A worker the scheduler granted is left to
// the scheduler's grants.
TEST_F(RemotePoolTest, AStaticWorkerThatFailedIsDialledAgainBackingOff) {
  Make();
  pool_->Add("late:1");
  pool_->Add("g:1", "w-g", 2);
  streams_[0]->handlers.closed(absl::UnavailableError("connection refused"));
  streams_[1]->handlers.closed(absl::UnavailableError("connection refused"));
  const auto tick_after = [this](int64_t millis) {
    now_ += millis * 1'000'000;
    pool_->Tick();
    return streams_.size();
  };
  EXPECT_EQ(tick_after(900), 2u);
  ASSERT_EQ(tick_after(100), 3u);  // 1 s on: dialled again
  EXPECT_EQ(streams_[2]->address, "late:1");
  streams_[2]->handlers.closed(absl::UnavailableError("connection refused"));
  EXPECT_EQ(tick_after(1900), 3u);
  ASSERT_EQ(tick_after(100), 4u);  // 2 s on
  // Up now: it opens the job and takes items.
  FakeStream* late = streams_[3];
  proto::JobOpened opened;
  opened.set_max_items_in_flight(2);
  opened.set_cores(2);
  late->handlers.opened(opened);
  Submit({0});
  Submit({1});
  ASSERT_EQ(late->sent.size(), 2u);
  Answer(late, 0);
  late->handlers.closed(absl::UnavailableError("connection reset"));  // restarted
  ExpectExactlyOnce({0, 1});        // item 1 ran here: no worker was left
  ASSERT_EQ(tick_after(1000), 5u);  // it had opened: 1 s again
  EXPECT_EQ(streams_[4]->address, "late:1");
  std::vector<std::string> dialled;
  for (const FakeStream* s : streams_) dialled.push_back(s->address);
  EXPECT_EQ(std::count(dialled.begin(), dialled.end(), "g:1"), 1);
  // After the run's end nothing is dialled.
  pool_->Finish();
  streams_[4]->handlers.closed(absl::UnavailableError("connection refused"));
  EXPECT_EQ(tick_after(60'000), 5u);
}

// A static worker that drained is a process leaving; one started again at
// its address (a rolling restart) rejoins: it is dialled once its stream is
// closed.
TEST_F(RemotePoolTest, AStaticWorkerThatDrainedIsDialledAgainOnceClosed) {
  Make();
  FakeStream* a = Open("a:1", 1);
  a->handlers.draining(30);
  EXPECT_TRUE(a->closed);  // it held nothing: closed at once
  now_ += 1'000'000'000;
  pool_->Tick();
  ASSERT_EQ(streams_.size(), 2u);
  EXPECT_EQ(streams_[1]->address, "a:1");
}

TEST(RedialSchedule, BacksOffDoublingToItsMostAndStartsOverAfterAnOpen) {
  RedialSchedule r(1, 4);
  const int64_t s = 1'000'000'000;
  EXPECT_EQ(r.Failed("a", false, 0), 1);
  EXPECT_TRUE(r.Due(s - 1).empty());
  EXPECT_EQ(r.Due(s), std::vector<std::string>{"a"});
  EXPECT_TRUE(r.Due(10 * s).empty());  // once until it fails again
  EXPECT_EQ(r.Failed("a", false, s), 2);
  EXPECT_EQ(r.Failed("a", false, 3 * s), 4);
  EXPECT_EQ(r.Failed("a", false, 7 * s), 4);  // at most 4
  EXPECT_EQ(r.Failed("a", true, 11 * s), 1);  // it had opened
  EXPECT_EQ(r.Failed("b", false, 11 * s), 1);
  EXPECT_EQ(r.Due(12 * s), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace prepflow
