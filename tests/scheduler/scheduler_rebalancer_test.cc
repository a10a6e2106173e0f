// SchedulerCore's rebalancer: beats that change the allocation's inputs are
// answered from the rebalancer's thread with an allocation that includes
// them, others at once; beats still waiting when it stops are answered.
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler_core.h"

namespace prepflow::scheduler {
namespace {

proto::JobBeat Job(const std::string& id, double wanted) {
  proto::JobBeat b;
  b.set_job_id(id);
  b.set_wanted_cores(wanted);
  return b;
}

void AddWorkers(SchedulerCore& core, int n, double cores) {
  for (int w = 0; w < n; ++w) {
    proto::WorkerBeat b;
    b.set_worker_id("w" + std::to_string(w));
    b.set_address("w" + std::to_string(w) + ":7000");
    b.set_cores(cores);
    ASSERT_TRUE(core.WorkerBeat(b, 0).ok());
  }
}

double Granted(const proto::JobGrant& g) {
  double cores = 0;
  for (const proto::WorkerGrant& w : g.workers()) cores += w.cores();
  return cores;
}

// A reply kept for the test thread.
struct Answer {
  absl::Notification done;
  absl::StatusOr<proto::JobGrant> result;
  SchedulerCore::JobReply Reply() {
    return [this](absl::StatusOr<proto::JobGrant> r) {
      result = std::move(r);
      done.Notify();
    };
  }
};

TEST(SchedulerRebalancer, ChangedBeatsGetAnAllocationThatIncludesThem) {
  SchedulerCore core({});
  AddWorkers(core, 16, 4);
  core.StartRebalancer(10);  // a long gap: only waiting beats start rebalances
  constexpr int kJobs = 24;  // 64 cores, 24 jobs wanting 2 each
  std::vector<Answer> answers(kJobs);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int j = t; j < kJobs; j += 4) {
        core.JobBeatAsync(Job("j" + std::to_string(j), 2), 0, "", "h", answers[j].Reply());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int j = 0; j < kJobs; ++j) {
    answers[j].done.WaitForNotification();
    ASSERT_TRUE(answers[j].result.ok()) << answers[j].result.status();
    EXPECT_DOUBLE_EQ(answers[j].result->fair_share_cores(), 2) << "job " << j;
    EXPECT_DOUBLE_EQ(Granted(*answers[j].result), 2) << "job " << j;
  }
  // One job's want grows: its own beat sees it; a beat changing nothing is
  // answered before JobBeatAsync returns.
  Answer more, same;
  core.JobBeatAsync(Job("j0", 10), 0, "", "h", more.Reply());
  more.done.WaitForNotification();
  EXPECT_DOUBLE_EQ(Granted(*more.result), 10);
  core.JobBeatAsync(Job("j0", 10), 0, "", "h", same.Reply());
  EXPECT_TRUE(same.done.HasBeenNotified());
  EXPECT_DOUBLE_EQ(Granted(*same.result), 10);
  EXPECT_LE(core.counts().rebalances, kJobs + 1);
}

TEST(SchedulerRebalancer, BeatsWaitingWhenItStopsAreAnswered) {
  SchedulerCore core({});
  AddWorkers(core, 2, 4);
  absl::Notification in_rebalance, release;
  core.set_on_rebalance([&](double) {
    if (!in_rebalance.HasBeenNotified()) in_rebalance.Notify();
    release.WaitForNotification();
  });
  core.StartRebalancer(0);
  Answer first, second;
  core.JobBeatAsync(Job("a", 1), 0, "", "h", first.Reply());
  in_rebalance.WaitForNotification();                          // the rebalance covering "a" runs
  core.JobBeatAsync(Job("b", 1), 0, "", "h", second.Reply());  // waits for the next
  std::thread stopper([&] { core.StopRebalancer(); });
  // StopRebalancer has to wait for the rebalance to end; let it end.
  release.Notify();
  stopper.join();
  first.done.WaitForNotification();
  second.done.WaitForNotification();
  ASSERT_TRUE(first.result.ok());
  EXPECT_DOUBLE_EQ(Granted(*first.result), 1);
  // Answered either way: by a last rebalance that includes it (when the
  // rebalance ended before the stop was asked) or with Unavailable; never
  // left without an answer (the call would hang).
  if (second.result.ok()) {
    EXPECT_DOUBLE_EQ(Granted(*second.result), 1);
  } else {
    EXPECT_EQ(second.result.status().code(), absl::StatusCode::kUnavailable);
  }
  // After it, beats are answered on the caller's thread, as by JobBeat.
  Answer third;
  core.JobBeatAsync(Job("c", 1), 0, "", "h", third.Reply());
  ASSERT_TRUE(third.done.HasBeenNotified());
  EXPECT_DOUBLE_EQ(Granted(*third.result), 1);
}

}  // namespace
}  // namespace prepflow::scheduler
