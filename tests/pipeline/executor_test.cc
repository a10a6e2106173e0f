#include "pipeline/core/executor.h"

#include <atomic>
#include <set>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

TEST(ThreadPool, RunsEveryTaskOnAWorker) {
  std::atomic<int> ran{0};
  std::atomic<int> bad_worker{0};
  {
    ThreadPool pool(3, 4);
    for (int i = 0; i < 1000; ++i) {
      ASSERT_TRUE(pool.Submit([&](int worker) {
        if (worker < 0 || worker >= 3) bad_worker++;
        ran++;
      }));
    }
    while (ran.load() < 1000) std::this_thread::yield();
  }
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(bad_worker.load(), 0);
}

TEST(ThreadPool, QueueIsBounded) {
  ThreadPool pool(1, 2);
  absl::Notification release;
  absl::Notification started;
  pool.Submit([&](int) {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  pool.Submit([](int) {});
  pool.Submit([](int) {});
  EXPECT_EQ(pool.queue_depth(), 2u);
  // A third Submit blocks until the worker frees a place. Wait until the
  // producer is seen blocked (a Submit that did not block would finish
  // instead, and never be seen there).
  std::atomic<bool> third_done{false};
  std::thread producer([&] {
    pool.Submit([](int) {});
    third_done = true;
  });
  for (int i = 0; i < 60'000 && pool.blocked_producers() == 0 && !third_done; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(pool.blocked_producers(), 1) << "the third Submit did not wait for room";
  EXPECT_FALSE(third_done.load());
  EXPECT_EQ(pool.queue_depth(), 2u);
  release.Notify();
  producer.join();
  EXPECT_TRUE(third_done.load());
}

TEST(ThreadPool, StopDropsQueuedTasksAndRefusesNewOnes) {
  std::atomic<int> ran{0};
  ThreadPool pool(1, 100);
  absl::Notification release;
  absl::Notification started;
  pool.Submit([&](int) {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  for (int i = 0; i < 50; ++i) pool.Submit([&](int) { ran++; });
  EXPECT_EQ(pool.queue_depth(), 50u);
  std::thread stopper([&] { pool.Stop(); });
  // The worker is held, so only Stop() can empty the queue.
  while (pool.queue_depth() != 0) std::this_thread::yield();
  release.Notify();
  stopper.join();
  EXPECT_FALSE(pool.Submit([&](int) { ran++; }));
  EXPECT_EQ(ran.load(), 0);
}

TEST(EffectiveCpus, IsPositiveAndAtMostTheCpusWeMayRunOn) {
  const double cores = EffectiveCpus();
  EXPECT_GT(cores, 0);
  EXPECT_LE(cores, AvailableCpus());
}

}  // namespace
}  // namespace prepflow
