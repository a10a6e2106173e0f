// Reading ahead: reads run concurrently on the I/O threads, within the byte
// budget, hand their bytes, errors and request counts to whoever takes them,
// and a read still queued is done by its taker rather than waited for. A read
// someone waits for is theirs: neither a second taker nor the budget's
// eviction takes it from under them.
#include "pipeline/data/read_ahead.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace prepflow {
namespace {

// Lets fetches through when opened; each waits (up to a minute, so that a
// bug fails the test instead of hanging it).
class Gate {
 public:
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(60), [this] { return open_; });
  }
  bool AwaitWaiting(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return waiting_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

ReadAhead::Fetch Fill(uint8_t value, Gate* gate = nullptr) {
  return [value, gate](uint8_t* dst, size_t n) {
    if (gate != nullptr && !gate->Wait()) return absl::DeadlineExceededError("gate never opened");
    std::fill(dst, dst + n, value);
    ThreadStorageStats().requests += 1;  // as a store counts its request
    return absl::OkStatus();
  };
}

TEST(ReadAheadTest, ReadsRunAtOnceAndTheirBytesAndCostsGoToTheTaker) {
  ReadAhead ahead({/*requests=*/8, /*max_bytes=*/1 << 20, /*shared=*/nullptr});
  Gate gate;
  for (int i = 0; i < 8; ++i) ahead.Start(i, 100, Fill(static_cast<uint8_t>(i), &gate));
  ASSERT_TRUE(gate.AwaitWaiting(8)) << "the eight reads did not all start at once";
  gate.Open();
  const StorageStats before = ThreadStorageStats();
  for (int i = 7; i >= 0; --i) {
    Buffer out;
    size_t size = 0;
    absl::Status status;
    ASSERT_TRUE(ahead.Take(i, &out, &size, &status));
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(size, 100u);
    EXPECT_EQ(out.data()[0], i);
    EXPECT_EQ(out.data()[99], i);
  }
  EXPECT_EQ(ThreadStorageStats().Minus(before).requests, 8);
  Buffer out;
  size_t size = 0;
  absl::Status status;
  EXPECT_FALSE(ahead.Take(3, &out, &size, &status)) << "taken once only";
  EXPECT_FALSE(ahead.Take(99, &out, &size, &status)) << "never started";
  EXPECT_EQ(ahead.counters().taken, 8);
}

TEST(ReadAheadTest, ErrorsReachTheTaker) {
  ReadAhead ahead({2, 1 << 20, nullptr});
  ahead.Start(1, 10, [](uint8_t*, size_t) { return absl::NotFoundError("x.tar: HTTP 404"); });
  Buffer out;
  size_t size = 0;
  absl::Status status;
  ASSERT_TRUE(ahead.Take(1, &out, &size, &status));
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
}

TEST(ReadAheadTest, TheBudgetRefusesWhatDoesNotFitAndEvictsWhatWasNeverTaken) {
  ReadAhead ahead({4, 1000, nullptr});
  Gate gate;
  ahead.Start(0, 400, Fill(0, &gate));
  ahead.Start(1, 400, Fill(1, &gate));
  ASSERT_TRUE(gate.AwaitWaiting(2));
  ahead.Start(2, 400, Fill(2));  // in flight: nothing to drop
  EXPECT_EQ(ahead.counters().refused, 1);
  ahead.Start(3, 5000, Fill(3));  // over the whole budget
  EXPECT_EQ(ahead.counters().refused, 2);
  gate.Open();
  ahead.AwaitReads();  // 0 and 1 held, finished
  Buffer out;
  size_t size = 0;
  absl::Status status;
  ASSERT_TRUE(ahead.Take(1, &out, &size, &status));  // 0 stays, held and never taken
  ahead.Start(4, 400, Fill(4));
  ahead.Start(5, 400, Fill(5));  // room only when 0 goes
  EXPECT_EQ(ahead.counters().evicted, 1);
  EXPECT_FALSE(ahead.Take(0, &out, &size, &status));
  ASSERT_TRUE(ahead.Take(5, &out, &size, &status));
  EXPECT_EQ(out.data()[0], 5);
}

// Reads ahead of many datasets share one budget (a worker's): 6 jobs' read
// ahead reached 1.5 GB at a 100 MB --max-memory-bytes. A read that does not
// fit is not started; every byte comes back when taken, evicted or dropped.
TEST(ReadAheadTest, ReadsAheadSharingABudgetHoldNoMoreThanItTogether) {
  auto shared = std::make_shared<ByteBudget>(1000);
  auto a = std::make_unique<ReadAhead>(ReadAheadOptions{2, 1000, shared});
  auto b = std::make_unique<ReadAhead>(ReadAheadOptions{2, 1000, shared});
  a->Start(0, 600, Fill(0));
  b->Start(0, 600, Fill(0));  // fits b's own budget, not the shared one
  EXPECT_EQ(b->counters().refused, 1);
  EXPECT_EQ(shared->held(), 600);
  Buffer out;
  size_t size = 0;
  absl::Status status;
  ASSERT_TRUE(a->Take(0, &out, &size, &status));
  EXPECT_EQ(shared->held(), 0);
  b->Start(1, 600, Fill(1));
  a->Start(1, 300, Fill(1));
  a->AwaitReads();
  b->AwaitReads();
  EXPECT_EQ(shared->held(), 900);
  a.reset();  // held, never taken: given back
  b.reset();
  EXPECT_EQ(shared->held(), 0);
}

// A read that fails gives its bytes back too: budgets were checked on the
// way that succeeds only, and one not released on failure would shrink the
// read ahead for good after a few failures.
TEST(ReadAheadTest, AFailedReadGivesItsBytesBack) {
  auto shared = std::make_shared<ByteBudget>(1000);
  ReadAhead ahead({2, 1000, shared});
  for (int64_t i = 0; i < 5; ++i) {
    ahead.Start(i, 900, [](uint8_t*, size_t) { return absl::UnavailableError("HTTP 503"); });
    ahead.AwaitReads();  // failed on an I/O thread, held until taken
    Buffer out;
    size_t size = 0;
    absl::Status status;
    ASSERT_TRUE(ahead.Take(i, &out, &size, &status)) << "not started: the budget leaked";
    EXPECT_TRUE(absl::IsUnavailable(status)) << status;
    EXPECT_EQ(shared->held(), 0);
  }
  EXPECT_EQ(ahead.counters().refused, 0);
}

TEST(ReadAheadTest, AReadStillQueuedIsDoneByItsTaker) {
  ReadAhead ahead({1, 1 << 20, nullptr});
  Gate gate;
  ahead.Start(0, 10, Fill(0, &gate));  // holds the one I/O thread
  ASSERT_TRUE(gate.AwaitWaiting(1));
  std::atomic<bool> here{false};
  const std::thread::id me = std::this_thread::get_id();
  ahead.Start(1, 10, [&](uint8_t* dst, size_t n) {
    here = std::this_thread::get_id() == me;
    std::fill(dst, dst + n, 1);
    return absl::OkStatus();
  });
  Buffer out;
  size_t size = 0;
  absl::Status status;
  ASSERT_TRUE(ahead.Take(1, &out, &size, &status));
  EXPECT_TRUE(here) << "waited behind the queue instead";
  EXPECT_EQ(out.data()[9], 1);
  gate.Open();
}

// Waits (up to a minute) until `done` holds, polling: for states the
// ReadAhead shows only through its counters.
template <typename Done>
bool Eventually(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// One sample in two batches in flight at once (the last batch of an epoch and
// the first of the next) is taken by two threads. Both used to wait for its
// read, and the second to wake used the entry the first had erased: heap
// corruption ("double free or corruption") in trainers and workers reading
// shards from a slow store, where takers wait for reads.
TEST(ReadAheadTest, OfTwoTakersOfOneReadInFlightOneGetsItAndTheOtherReadsItself) {
  ReadAhead ahead({2, 1 << 20, nullptr});
  Gate gate;
  ahead.Start(7, 100, Fill(7, &gate));
  ASSERT_TRUE(gate.AwaitWaiting(1));
  struct Taker {
    Buffer out;
    size_t size = 0;
    absl::Status status;
    std::atomic<bool> took{false}, returned{false};
  } first, second;
  const auto take = [&](Taker* t) {
    t->took = ahead.Take(7, &t->out, &t->size, &t->status);
    t->returned = true;
  };
  std::thread a(take, &first);
  ASSERT_TRUE(Eventually([&] { return ahead.counters().taken == 1; }));  // a waits for the read
  std::thread b(take, &second);
  // The second taker is answered at once (it reads the sample itself); a
  // build without the fix waits beside the first instead.
  ASSERT_TRUE(Eventually([&] { return second.returned || ahead.counters().taken == 2; }));
  gate.Open();
  a.join();
  b.join();
  EXPECT_TRUE(first.took);
  EXPECT_FALSE(second.took) << "both takers were handed one read";
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_EQ(first.size, 100u);
  EXPECT_EQ(first.out.data()[99], 7);
  EXPECT_EQ(ahead.counters().taken, 1);
}

// A read that finished while its taker was still waking is not evicted to make
// room for a new one (the taker would use an entry no longer there). The
// window is between the read's end and the taker's wake, so it is tried
// many times.
TEST(ReadAheadTest, AReadSomeoneWaitsForIsNotEvictedForRoom) {
  for (int round = 0; round < 200; ++round) {
    ReadAhead ahead({2, 100, nullptr});
    Gate gate;
    ahead.Start(1, 60, Fill(1, &gate));
    ASSERT_TRUE(gate.AwaitWaiting(1));
    Buffer out;
    size_t size = 0;
    absl::Status status;
    bool took = false;
    std::thread taker([&] { took = ahead.Take(1, &out, &size, &status); });
    ASSERT_TRUE(Eventually([&] { return ahead.counters().taken == 1; }));
    gate.Open();
    ahead.Start(2, 60, Fill(2));  // room only if 1 were dropped
    taker.join();
    ASSERT_TRUE(took);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(size, 60u);
    ASSERT_EQ(out.data()[59], 1) << "round " << round;
    ASSERT_EQ(ahead.counters().evicted, 0) << "round " << round;
  }
}

}  // namespace
}  // namespace prepflow
