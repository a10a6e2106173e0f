// RemotePool against fake streams and a fake clock: credits, dispatch,
// locality, hedging, grants' credits and retirement, and the snapshot the
// planner reads (membership: remote_pool_membership_test.cc). No process,
// socket or sleep.
#include "client/remote/remote_pool.h"

#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/remote_pool_fixture.h"

namespace prepflow {
namespace {

using ::prepflow::testing::FakeStream;
using ::prepflow::testing::RemotePoolTest;

TEST_F(RemotePoolTest, SendsNoMoreThanTheCreditsAndRefillsOnEachAnswer) {
  Make();
  FakeStream* w = Open("w:1", /*credits=*/2);
  for (int64_t i = 0; i < 5; ++i) Submit({i});
  ASSERT_EQ(w->sent.size(), 2u);  // two credits
  EXPECT_EQ(w->sent[0].epoch(), 3u);
  EXPECT_EQ(w->sent[0].cut(), 2);
  EXPECT_EQ(w->sent[0].indices(0), 1000);
  Answer(w, 0);
  EXPECT_EQ(w->sent.size(), 3u);  // its credit came back
  Answer(w, 1);
  Answer(w, 2);
  Answer(w, 3);
  Answer(w, 4);
  ExpectExactlyOnce({0, 1, 2, 3, 4});
  EXPECT_TRUE(local_.empty());
  EXPECT_EQ(pool_->counters().reissued_items, 0);
}

// A new plan that sends fewer samples out takes back what waits for a
// credit: those items run here, the ones out stay out, and every sample
// still arrives once. An item waiting for its home worker (whose cache
// holds its samples) stays.
TEST_F(RemotePoolTest, ItemsWaitingForACreditAreReclaimedToRunHere) {
  Make();
  FakeStream* w = Open("w:1", /*credits=*/2);
  for (int64_t i = 0; i < 5; ++i) Submit({i});
  ASSERT_EQ(w->sent.size(), 2u);
  EXPECT_EQ(pool_->ReclaimQueued(), 3);
  EXPECT_EQ(local_.size(), 3u);
  EXPECT_EQ(pool_->ReclaimQueued(), 0);
  Answer(w, 0);
  Answer(w, 1);
  EXPECT_EQ(w->sent.size(), 2u) << "nothing was left to send";
  ExpectExactlyOnce({0, 1, 2, 3, 4});
  EXPECT_EQ(pool_->owed_items(), 0);
  pool_->Submit(RemoteItem{&batch_, {5}, 2, /*home=*/0});
  pool_->Submit(RemoteItem{&batch_, {6}, 2, /*home=*/0});
  pool_->Submit(RemoteItem{&batch_, {7}, 2, /*home=*/0});
  EXPECT_EQ(pool_->ReclaimQueued(), 0);
}

// JobOpened.num_stages and .unavailable are the worker's word: one that
// says it stops short of an item's cut is never sent it (the item runs here
// when no other worker can take it), a negative count counts as 0, and its
// reason reaches the planner's input as printable text.
TEST_F(RemotePoolTest, AWorkerThatStopsShortGetsNoItemPastItsStages) {
  Make();
  pool_->Add("short:1", "", 0);
  FakeStream* s = streams_.back();
  proto::JobOpened opened;
  opened.set_max_items_in_flight(4);
  opened.set_threads(1);
  opened.set_cores(1);
  opened.set_num_stages(-7);
  opened.set_unavailable("stage 0: custom op '\xff\xfe' is not loaded here");
  s->handlers.opened(opened);
  EXPECT_EQ(pool_->StageLimit(), 0);
  Submit({0});
  Submit({1});  // cut 2
  EXPECT_TRUE(s->sent.empty());
  ExpectExactlyOnce({0, 1});
  EXPECT_EQ(local_.size(), 2u);
  policy::Snapshot snapshot;
  pool_->FillSnapshot(&snapshot);
  EXPECT_EQ(snapshot.max_cut, 0);
  EXPECT_THAT(snapshot.max_cut_why, ::testing::HasSubstr("short:1: stage 0: custom op"));
  EXPECT_EQ(snapshot.max_cut_why.find('\xff'), std::string::npos);
  // A worker that runs every stage takes them; the short one still gets none.
  FakeStream* full = Open("full:1", 2);
  Submit({2});
  ASSERT_EQ(full->sent.size(), 1u);
  EXPECT_EQ(full->sent[0].cut(), 2);
  EXPECT_TRUE(s->sent.empty());
  EXPECT_EQ(pool_->StageLimit(), 0);  // the least of the usable workers
}

TEST_F(RemotePoolTest, SpreadsItemsToTheWorkerWithTheMostFreeCredits) {
  Make();
  FakeStream* a = Open("a:1", 1);
  FakeStream* b = Open("b:1", 3);
  for (int64_t i = 0; i < 4; ++i) Submit({i});
  EXPECT_EQ(a->sent.size(), 1u);
  EXPECT_EQ(b->sent.size(), 3u);
  EXPECT_EQ(pool_->UsableCredits(), 4);
}

TEST_F(RemotePoolTest, WithCachingWorkersEachSampleHasOneHomeWeightedByCores) {
  Make();
  Open("a:1", 2, "", 0, 4, 1 << 30);
  Open("b:1", 2, "", 0, 4, 1 << 30);
  Open("c:1", 2, "", 0, 8, 1 << 30);
  std::map<int, int> share;
  std::vector<int> homes;
  for (int64_t i = 0; i < 20000; ++i) {
    homes.push_back(pool_->HomeOf(i, 2));
    ++share[homes.back()];
  }
  // By cores: a quarter, a quarter, a half (within 3%).
  EXPECT_NEAR(share[0], 5000, 600);
  EXPECT_NEAR(share[1], 5000, 600);
  EXPECT_NEAR(share[2], 10000, 600);
  // c leaves: only its samples move, split between a and b.
  streams_[2]->handlers.closed(absl::UnavailableError("gone"));
  for (int64_t i = 0; i < 20000; ++i) {
    const int home = pool_->HomeOf(i, 2);
    if (homes[i] != 2) {
      EXPECT_EQ(home, homes[i]) << i;
    } else {
      EXPECT_TRUE(home == 0 || home == 1) << i;
    }
  }
}

TEST_F(RemotePoolTest, WithoutACachingWorkerThereAreNoHomes) {
  Make();
  Open("a:1", 2);
  EXPECT_EQ(pool_->HomeOf(7, 2), -1);
}

TEST_F(RemotePoolTest, ItemsWaitForTheirHomeAndMoveWhenItGoes) {
  Make();
  FakeStream* a = Open("a:1", 1, "", 0, 4, 1 << 30);
  FakeStream* b = Open("b:1", 3, "", 0, 4, 1 << 30);
  std::vector<int64_t> on_a, on_b;
  for (int64_t slot = 0; slot < 64 && (on_a.size() < 3 || on_b.size() < 2); ++slot) {
    (pool_->HomeOf(batch_.index_at(slot), 2) == 0 ? on_a : on_b).push_back(slot);
  }
  on_a.resize(3);
  on_b.resize(2);
  for (int64_t slot : on_a) {
    pool_->Submit(RemoteItem{&batch_, {slot}, 2, pool_->HomeOf(batch_.index_at(slot), 2)});
  }
  for (int64_t slot : on_b) {
    pool_->Submit(RemoteItem{&batch_, {slot}, 2, pool_->HomeOf(batch_.index_at(slot), 2)});
  }
  // a has one credit: its other two items wait for it although b has room;
  // b's items pass them.
  ASSERT_EQ(a->sent.size(), 1u);
  EXPECT_EQ(a->sent[0].indices(0), batch_.index_at(on_a[0]));
  ASSERT_EQ(b->sent.size(), 2u);
  Answer(a, 0);
  ASSERT_EQ(a->sent.size(), 2u);
  EXPECT_EQ(a->sent[1].indices(0), batch_.index_at(on_a[1]));
  // a dies owing one and with one queued: both go to b, its new home.
  a->handlers.closed(absl::UnavailableError("connection reset"));
  Answer(b, 0);
  Answer(b, 1);
  ASSERT_EQ(b->sent.size(), 4u);
  Answer(b, 2);
  Answer(b, 3);
  std::vector<int64_t> all = on_a;
  all.insert(all.end(), on_b.begin(), on_b.end());
  ExpectExactlyOnce(all);
  EXPECT_EQ(Delivered(), 5);
}

// Echoed copies have homes too (their first copy's value is kept there),
// but a worker with free credits and nothing of its own queued takes the
// items waiting for a busy home: hashing deals unequal shares, and an idle
// worker costs more than loading a copy's value again. (Without
// steal_from_busy_homes, the test above, items wait for their home.)
TEST_F(RemotePoolTest, AnIdleWorkerTakesEchoedCopiesWaitingForTheirBusyHome) {
  RemotePoolOptions options;
  options.steal_from_busy_homes = true;
  Make(options, 0, /*echo=*/2);
  FakeStream* a = Open("a:1", 1);
  FakeStream* b = Open("b:1", 2);
  std::vector<int64_t> on_a, on_b;
  for (int64_t slot = 0; slot < 64 && (on_a.size() < 4 || on_b.size() < 1); ++slot) {
    (pool_->HomeOf(batch_.index_at(slot), 2) == 0 ? on_a : on_b).push_back(slot);
  }
  on_a.resize(4);
  on_b.resize(1);
  for (int64_t slot : on_a) {
    pool_->Submit(RemoteItem{&batch_, {slot}, 2, pool_->HomeOf(batch_.index_at(slot), 2)});
  }
  // a holds one, b (idle) takes two of a's others; one waits.
  ASSERT_EQ(a->sent.size(), 1u);
  ASSERT_EQ(b->sent.size(), 2u);
  EXPECT_EQ(pool_->counters().stolen_items, 2);
  // b's own sample, submitted while both are full, waits for b, and goes
  // before a's queued one when b frees a credit.
  pool_->Submit(RemoteItem{&batch_, {on_b[0]}, 2, pool_->HomeOf(batch_.index_at(on_b[0]), 2)});
  Answer(b, 0);
  ASSERT_EQ(b->sent.size(), 3u);
  EXPECT_EQ(b->sent[2].indices(0), batch_.index_at(on_b[0]));
  // a frees its credit and takes its own last one.
  Answer(a, 0);
  ASSERT_EQ(a->sent.size(), 2u);
  EXPECT_EQ(a->sent[1].indices(0), batch_.index_at(on_a[3]));
  Answer(a, 1);
  Answer(b, 1);
  Answer(b, 2);
  std::vector<int64_t> all = on_a;
  all.push_back(on_b[0]);
  ExpectExactlyOnce(all);
  EXPECT_EQ(Delivered(), 5);
  EXPECT_EQ(pool_->counters().stolen_items, 2);
}

// Cached samples too: an idle worker takes those waiting for their busy
// home, marked away so that its cache keeps none of them (it reads its cache
// all the same); those sent home are not marked.
TEST_F(RemotePoolTest, AnIdleWorkerTakesCachedSamplesWaitingForTheirBusyHomeMarkedAway) {
  RemotePoolOptions options;
  options.steal_from_busy_homes = true;
  Make(options);
  FakeStream* a = Open("a:1", 1, "", 0, 4, 1 << 30);
  FakeStream* b = Open("b:1", 2, "", 0, 4, 1 << 30);
  std::vector<int64_t> on_a;
  for (int64_t slot = 0; slot < 64 && on_a.size() < 4; ++slot) {
    if (pool_->HomeOf(batch_.index_at(slot), 2) == 0) on_a.push_back(slot);
  }
  ASSERT_EQ(on_a.size(), 4u);
  for (int64_t slot : on_a) pool_->Submit(RemoteItem{&batch_, {slot}, 2, 0});
  ASSERT_EQ(a->sent.size(), 1u);
  EXPECT_FALSE(a->sent[0].away());
  ASSERT_EQ(b->sent.size(), 2u);
  EXPECT_TRUE(b->sent[0].away());
  EXPECT_TRUE(b->sent[1].away());
  EXPECT_EQ(pool_->counters().stolen_items, 2);
  Answer(a, 0);
  ASSERT_EQ(a->sent.size(), 2u);
  EXPECT_FALSE(a->sent[1].away());
  Answer(a, 1);
  Answer(b, 0);
  Answer(b, 1);
  ExpectExactlyOnce(on_a);
  EXPECT_EQ(Delivered(), 4);
}

// Where a copy's extra read would cost a remote store (a URL dataset: no
// steal_from_busy_homes), or once storage was found binding (StopStealing), echoed
// copies wait for their home like cached samples.
TEST_F(RemotePoolTest, EchoedCopiesWaitForTheirHomeWhereReadsCostStorage) {
  for (const bool stopped : {false, true}) {
    RemotePoolOptions options;
    options.steal_from_busy_homes = stopped;
    Make(options, 0, /*echo=*/2);
    if (stopped) pool_->StopStealing();
    FakeStream* a = Open("a:1", 1);
    FakeStream* b = Open("b:1", 2);
    int submitted = 0;
    for (int64_t slot = 0; slot < 64 && submitted < 3; ++slot) {
      if (pool_->HomeOf(batch_.index_at(slot), 2) != 0) continue;
      pool_->Submit(RemoteItem{&batch_, {slot}, 2, 0});
      ++submitted;
    }
    EXPECT_EQ(a->sent.size(), 1u) << stopped;
    EXPECT_TRUE(b->sent.empty()) << stopped;
    EXPECT_EQ(pool_->counters().stolen_items, 0) << stopped;
  }
}

TEST_F(RemotePoolTest, ASlowItemIsHedgedAndTheFirstAnswerWins) {
  RemotePoolOptions options;
  options.hedge_after = 3;
  Make(options);
  FakeStream* fast = Open("fast:1", 1);
  FakeStream* slow = Open("slow:1", 1);
  // Teach the pool the typical latency: 100 ms on the fast worker.
  Submit({0});
  Submit({1});
  ASSERT_EQ(fast->sent.size(), 1u);
  ASSERT_EQ(slow->sent.size(), 1u);
  now_ += 100'000'000;
  Answer(fast, 0);
  // Item 1 has been on the slow worker 100 ms: not due yet (3 x 100 ms).
  pool_->Tick();
  EXPECT_EQ(fast->sent.size(), 1u);
  now_ += 250'000'000;
  pool_->Tick();  // 350 ms > 300 ms: copied to the idle fast worker
  ASSERT_EQ(fast->sent.size(), 2u);
  EXPECT_EQ(fast->sent[1].item_id(), slow->sent[0].item_id());
  EXPECT_EQ(pool_->counters().hedged_items, 1);
  Answer(fast, 1);  // the copy wins
  EXPECT_EQ(pool_->counters().hedge_wins, 1);
  // The slow worker still holds the credit until its late answer comes.
  Submit({2});  // to the fast one
  Submit({3});  // queued: nobody has a free credit
  EXPECT_EQ(fast->sent.size(), 3u);
  EXPECT_EQ(slow->sent.size(), 1u);
  Answer(slow, 0);  // dropped, and its credit is free again
  ASSERT_EQ(slow->sent.size(), 2u);
  Answer(slow, 1);
  Answer(fast, 2);
  ExpectExactlyOnce({0, 1, 2, 3});
  EXPECT_EQ(answered_by_.size(), 4u);
}

TEST_F(RemotePoolTest, AHedgedItemSurvivesItsFirstWorkerDying) {
  RemotePoolOptions options;
  options.hedge_after = 1;
  Make(options);
  FakeStream* a = Open("a:1", 1);
  FakeStream* b = Open("b:1", 1);
  Submit({0});
  Submit({1});
  now_ += 50'000'000;
  Answer(b, 0);  // b: typical latency 50 ms
  now_ += 100'000'000;
  pool_->Tick();  // a's item waited 150 ms: copied to b
  ASSERT_EQ(b->sent.size(), 2u);
  a->handlers.closed(absl::UnavailableError("gone"));
  EXPECT_EQ(pool_->counters().reissued_items, 0);  // the copy on b stands in
  Answer(b, 1);
  ExpectExactlyOnce({0, 1});
  EXPECT_TRUE(local_.empty());
}

TEST_F(RemotePoolTest, AGrantOfPartOfAWorkerScalesItsCredits) {
  Make();
  Open("g:1", /*credits=*/8, "w-g", /*granted=*/1, /*cores=*/4);
  EXPECT_EQ(pool_->UsableCredits(), 2);  // a quarter of its cores
  EXPECT_DOUBLE_EQ(pool_->UsableCores(), 1);
  const int before = changes_;
  pool_->SetGrantedCores(0, 4);
  EXPECT_EQ(pool_->UsableCredits(), 8);
  EXPECT_GT(changes_, before);
}

// A named job's ranks share their static workers: each plans with its part
// of them (the worker runs the ranks' items as one job's), and keeps every
// credit, so a rank alone on a worker can still fill it.
TEST_F(RemotePoolTest, ARankPlansWithItsShareOfStaticWorkers) {
  RemotePoolOptions options;
  options.static_share = 1.0 / 3;
  Make(options);
  Open("s:1", /*credits=*/6, "", 0, /*cores=*/3);
  Open("s:2", /*credits=*/6, "", 0, /*cores=*/6);
  EXPECT_DOUBLE_EQ(pool_->UsableCores(), 3);
  EXPECT_EQ(pool_->UsableCredits(), 12);
}

// A worker's report of how busy it is (ItemResult.worker_busy) reaches the
// planner only as a share in [0, 1]: a lying or broken worker cannot feed it
// NaN or infinities.
TEST_F(RemotePoolTest, AWorkersBusyReportIsKeptWithinZeroAndOne) {
  Make();
  FakeStream* s = Open("w:1", /*credits=*/4);
  const double reports[] = {0.7, std::nan(""), -3, 1e300, std::numeric_limits<double>::infinity()};
  const double kept[] = {0.7, 0, 0, 1, 0};
  for (size_t k = 0; k < std::size(reports); ++k) {
    Submit({static_cast<int64_t>(k)});
    const proto::WorkItem& item = s->sent.at(k);
    auto answer = std::make_shared<ReceivedMessage>();
    proto::ItemResult* r = answer->message.mutable_result();
    r->set_item_id(item.item_id());
    r->set_worker_busy(reports[k]);
    for (int64_t index : item.indices()) r->add_samples()->set_index(index);
    answer->payloads.resize(item.indices_size());
    s->handlers.result(answer);
    policy::Snapshot snapshot;
    pool_->FillSnapshot(&snapshot);
    ASSERT_EQ(snapshot.workers.size(), 1u);
    EXPECT_DOUBLE_EQ(snapshot.workers[0].worker_busy, kept[k]) << "report " << reports[k];
  }
}

TEST_F(RemotePoolTest, ARetiredWorkerFinishesItsItemsAndIsClosed) {
  Make();
  FakeStream* g = Open("g:1", 2, "w-g", 4);
  Submit({0});
  pool_->Retire(0);
  EXPECT_FALSE(g->closed);  // it still owes an item
  Submit({1});              // nothing new goes to it: runs here
  EXPECT_EQ(g->sent.size(), 1u);
  EXPECT_EQ(local_.count(1), 1u);
  Answer(g, 0);
  EXPECT_TRUE(g->closed);
  ExpectExactlyOnce({0, 1});
}

// A worker that says it is leaving (DrainNotice) gets no new items, answers
// the ones it holds, and is closed once it owes none; a grant that still
// names it does not bring it back.
TEST_F(RemotePoolTest, ADrainingWorkerFinishesItsItemsAndGetsNoMore) {
  Make();
  FakeStream* a = Open("a:1", 2);
  FakeStream* b = Open("b:1", 2, "w-b", 4);
  Submit({0});
  Submit({1});
  ASSERT_EQ(a->sent.size(), 1u);
  ASSERT_EQ(b->sent.size(), 1u);
  const int changes = changes_;
  b->handlers.draining(30);
  EXPECT_GT(changes_, changes);  // the planner re-plans without it
  EXPECT_EQ(pool_->counters().drained_workers, 1);
  Submit({2});
  Submit({3});
  EXPECT_EQ(b->sent.size(), 1u);  // nothing new for b
  pool_->Keep(1);                 // the scheduler, not yet told, grants it again
  Submit({4});
  EXPECT_EQ(b->sent.size(), 1u);
  EXPECT_FALSE(b->closed);  // it still owes item 1
  Answer(b, 0);
  EXPECT_TRUE(b->closed);
  for (size_t k = 0; k < a->sent.size(); ++k) Answer(a, k);  // the rest went to a
  ExpectExactlyOnce({0, 1, 2, 3, 4});
  EXPECT_EQ(pool_->counters().reissued_items, 0);
  // A notice is the worker's word on itself; what it says of its stay (not
  // a number, negative, endless, or a second notice) changes nothing more.
  a->handlers.draining(std::nan(""));
  a->handlers.draining(-1);
  FakeStream* c = Open("c:1", 1);
  c->handlers.draining(std::numeric_limits<double>::infinity());
  EXPECT_EQ(pool_->counters().drained_workers, 3);
  EXPECT_TRUE(a->closed);  // it owed nothing
  EXPECT_TRUE(c->closed);
}

TEST_F(RemotePoolTest, TheSnapshotCountsAnswersForTheLinkEstimate) {
  Make();
  FakeStream* a = Open("a:1", 1);
  Submit({0, 1});
  Answer(a, 0, /*wire_bytes=*/5000);
  policy::Snapshot s;
  pool_->FillSnapshot(&s);
  ASSERT_EQ(s.workers.size(), 1u);
  EXPECT_TRUE(s.workers[0].usable);
  EXPECT_EQ(s.workers[0].results, 1);
  EXPECT_EQ(s.workers[0].saturated_results, 1);  // it arrived with every credit out
  EXPECT_DOUBLE_EQ(s.workers[0].received_bytes, 5000);
  EXPECT_DOUBLE_EQ(s.workers[0].cpu_seconds, 0.002);
  EXPECT_EQ(s.workers[0].credits, 1);
}

// A link probe's chunks are timed on the pool's clock as they arrive: the
// bytes after the first over the time since it; evenly spaced, it is steady.
// A worker that sends the count wrong or more chunks than it said moves
// nothing.
TEST_F(RemotePoolTest, TheSnapshotCarriesEachWorkersLinkProbe) {
  Make();
  FakeStream* a = Open("a:1", 1);
  FakeStream* b = Open("b:1", 1);
  for (int i = 0; i < 4; ++i) {  // 100 kB every 10 ms: 10 MB/s
    a->handlers.probe(100'000, 4);
    now_ += 10'000'000;
  }
  a->handlers.probe(100'000, 4);                              // a fifth: ignored
  for (int64_t gap : {40'000'000, 20'000'000, 10'000'000}) {  // a window still opening
    b->handlers.probe(100'000, 4);
    now_ += gap;
  }
  policy::Snapshot s;
  pool_->FillSnapshot(&s);
  ASSERT_EQ(s.workers.size(), 2u);
  EXPECT_NEAR(s.workers[0].probe.rate(), 300'000 / 0.03, 1);
  EXPECT_TRUE(s.workers[0].probe.steady());
  EXPECT_EQ(s.workers[1].probe.rate(), 0) << "three of four chunks";
  b->handlers.probe(100'000, 5);  // the count changed: ignored
  b->handlers.probe(100'000, 4);
  s = {};
  pool_->FillSnapshot(&s);
  EXPECT_NEAR(s.workers[1].probe.rate(), 300'000 / 0.07, 1);
  EXPECT_FALSE(s.workers[1].probe.steady()) << "each gap shorter than the last: TCP's window";
}

// Workers there at the start are asked for a link probe, and the start
// waits for it; one that joins later is not asked (this process is busy
// then, and would time its chunks late and together).
TEST_F(RemotePoolTest, OnlyWorkersThereAtTheStartAreAskedForALinkProbe) {
  Make({}, /*probe_bytes=*/1 << 20);
  FakeStream* a = Open("a:1", 1);
  EXPECT_EQ(a->open.probe_bytes(), 1 << 20);
  EXPECT_FALSE(pool_->Probed());
  for (int i = 0; i < 4; ++i) {
    a->handlers.probe(1 << 18, 4);
    now_ += 10'000'000;
  }
  EXPECT_TRUE(pool_->Probed());
  ASSERT_TRUE(pool_->AwaitOpened(absl::Now() + absl::Seconds(60)).ok());
  FakeStream* b = Open("b:1", 1);
  EXPECT_EQ(b->open.probe_bytes(), 0);
  EXPECT_EQ(b->open.job_id(), "job-test");
}

// The wall time answers spent on the worker adds up; a worker's report that
// is not a number, negative or absurd does not move it past an hour each.
TEST_F(RemotePoolTest, TheSnapshotAddsTheAnswersTimeOnTheWorker) {
  Make();
  FakeStream* a = Open("a:1", 1);
  Submit({0});
  Submit({1});
  Submit({2});
  Submit({3});
  Answer(a, 0, 100, 0.25);
  Answer(a, 1, 100, std::nan(""));
  Answer(a, 2, 100, -5);
  Answer(a, 3, 100, 1e300);
  policy::Snapshot s;
  pool_->FillSnapshot(&s);
  EXPECT_DOUBLE_EQ(s.workers[0].run_seconds, 0.25 + 3600);
  ExpectExactlyOnce({0, 1, 2, 3});
}

// A far worker whose every item is copied to a faster one and lost there
// still carries its answers over its own link: the re-planner must see them,
// or it never finds that link binding and counts the worker's cores in full.
TEST_F(RemotePoolTest, AHedgedCopysSlowerTwinStillCountsForItsLink) {
  RemotePoolOptions options;
  options.hedge_after = 1;
  Make(options);
  FakeStream* fast = Open("fast:1", 1);
  FakeStream* far = Open("far:1", 1);
  Submit({0});
  Submit({1});
  now_ += 100'000'000;
  Answer(fast, 0);
  now_ += 250'000'000;
  pool_->Tick();  // item 1, 350 ms on the far worker, is copied to the fast one
  ASSERT_EQ(fast->sent.size(), 2u);
  Answer(fast, 1);       // the copy wins
  Answer(far, 0, 7000);  // the far worker's twin: dropped, but it crossed the link
  policy::Snapshot s;
  pool_->FillSnapshot(&s);
  ASSERT_EQ(s.workers.size(), 2u);
  EXPECT_EQ(s.workers[1].results, 1);
  EXPECT_EQ(s.workers[1].saturated_results, 1);  // its one credit was out
  EXPECT_DOUBLE_EQ(s.workers[1].received_bytes, 7000);
  EXPECT_EQ(pool_->Members()[1].samples, 0);  // nothing of it was delivered
  ExpectExactlyOnce({0, 1});
}

}  // namespace
}  // namespace prepflow
