// A job that takes its workers from prepflow-scheduler, all as real processes
// on loopback: it gets workers it never named, keeps them across a
// scheduler kill and restart, picks up a worker that registers mid-run, and
// runs locally when nothing is granted. Every run is checked for exactly-once
// delivery and the local checksum.
#include <signal.h>

#include <chrono>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/loader.h"
#include "client/metrics.h"
#include "client/worker_process.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;

// Generous: these bound waits for heartbeats (every 0.2 s here), so they only
// matter on a machine that is stalled, and then the test says what it waited for.
constexpr auto kPatience = std::chrono::seconds(30);

using ::prepflow::testing::StartScheduler;

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// Polls `done` every 20 ms for up to kPatience.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// Waits until `count` workers are registered: a probe job asks for the
// whole pool until its grant names that many, then releases it (wants 0).
bool WaitForWorkers(const std::string& scheduler, int count) {
  auto stub =
      proto::Scheduler::NewStub(grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
  auto beat = [&](double wanted, proto::JobGrant* grant) {
    proto::JobBeat b;
    b.set_job_id("probe");
    b.set_wanted_cores(wanted);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return stub->JobHeartbeat(&context, b, grant).ok();
  };
  const bool seen = WaitFor([&] {
    proto::JobGrant grant;
    return beat(1000, &grant) && grant.workers_size() >= count;
  });
  proto::JobGrant released;
  return beat(0, &released) && seen;
}

class ScheduledJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    testing::WriteRemoteTestSet(dir_->Join("root/data"));
    LoaderOptions local = Options("", "off");
    local_checksum_ = testing::Drain(local).stats.checksum;
  }
  static void TearDownTestSuite() { delete dir_; }

  static LoaderOptions Options(const std::string& scheduler, const std::string& mode) {
    LoaderOptions o;
    o.dataset.set_path(dir_->Join("root/data"));
    o.pipeline = *LoadPipelineSpec("imagenet-train");
    o.batch_size = 8;
    o.threads = 1;
    o.seed = 5;
    o.scheduler = scheduler;
    o.offload = *ParseOffload(mode);
    o.item_samples = 2;
    return o;
  }
  static testing::WorkerProcess Worker(const std::string& scheduler) {
    return testing::WorkerProcess(dir_->Join("root"), {"--threads", "1", "--scheduler", scheduler});
  }
  static void ExpectExactlyOnce(const testing::Drained& r) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.deliveries.size(), 96u);
    for (const auto& [index, count] : r.deliveries) ASSERT_EQ(count, 1) << "index " << index;
    EXPECT_EQ(r.stats.images, 96);
    EXPECT_EQ(r.stats.errors, 0);
    EXPECT_EQ(r.stats.checksum, local_checksum_);
  }

  static TempDir* dir_;
  static uint64_t local_checksum_;
};
TempDir* ScheduledJobTest::dir_ = nullptr;
uint64_t ScheduledJobTest::local_checksum_ = 0;

TEST_F(ScheduledJobTest, GetsWorkersItNeverNamed) {
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0);
  ASSERT_NE(scheduler, nullptr);
  testing::WorkerProcess a = Worker(scheduler->address());
  testing::WorkerProcess b = Worker(scheduler->address());
  ASSERT_TRUE(WaitForWorkers(scheduler->address(), 2)) << "the workers never registered";

  std::string metrics, job;
  const testing::Drained r =
      testing::Drain(Options(scheduler->address(), "remote"), [&](Loader& loader) {
        metrics = prometheus::TextSerializer().Serialize(LoaderMetrics(&loader).Collect());
        job = loader.job_id();
      });
  ExpectExactlyOnce(r);
  EXPECT_EQ(r.stats.remote_images, 96);
  EXPECT_TRUE(r.stats.scheduler_reachable);
  // What /metrics shows mid-run: the scheduler reachable, 2 cores granted,
  // both workers up.
  const std::string labels = absl::StrCat("{job_id=\"", job, "\",rank=\"0\",");
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("prepflow_client_scheduler_up", labels,
                                              "scheduler=\"", scheduler->address(), "\"} 1\n")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("prepflow_client_remote_cores", labels,
                                              "kind=\"granted\"} 2\n")));
  for (const std::string& w : {a.address(), b.address()}) {
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("prepflow_client_worker_up", labels, "worker=\"", w,
                                                "\"} 1\n")));
  }
  EXPECT_DOUBLE_EQ(r.stats.fair_share_cores, 2);  // the whole pool: 2 workers of 1 core
  ASSERT_EQ(r.stats.workers.size(), 2u);
  for (const LoaderStats::WorkerStats& w : r.stats.workers) {
    EXPECT_TRUE(w.address == a.address() || w.address == b.address()) << w.address;
    EXPECT_DOUBLE_EQ(w.granted_cores, 1) << w.address;
    EXPECT_GT(w.samples, 0) << w.address;
  }
}

// Two classes of worker: the job is granted what it asks of both here (it
// wants the pool), and its stats say what its grant costs an hour and what
// the run cost, from each worker's --cost-per-core-hour.
TEST_F(ScheduledJobTest, ReportsWhatItsGrantCosts) {
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0);
  ASSERT_NE(scheduler, nullptr);
  testing::WorkerProcess spot(
      dir_->Join("root"), {"--threads", "1", "--scheduler", scheduler->address(), "--class", "spot",
                           "--cost-per-core-hour", "0.01"});
  testing::WorkerProcess dear(dir_->Join("root"),
                              {"--threads", "1", "--scheduler", scheduler->address(), "--class",
                               "on-demand", "--cost-per-core-hour", "0.04"});
  ASSERT_TRUE(WaitForWorkers(scheduler->address(), 2)) << "the workers never registered";
  double rate_mid_run = 0;
  const testing::Drained r =
      testing::Drain(Options(scheduler->address(), "remote"),
                     [&](Loader& loader) { rate_mid_run = loader.Stats().grant_cost_per_hour; });
  ExpectExactlyOnce(r);
  EXPECT_NEAR(rate_mid_run, 0.05, 1e-9);  // one core of each
  EXPECT_GT(r.stats.grant_cost, 0);
  // At most the rate over the whole run.
  EXPECT_LE(r.stats.grant_cost, 0.05 * (r.stats.seconds + 30) / 3600);
}

TEST_F(ScheduledJobTest, KeepsItsWorkersAcrossASchedulerRestart) {
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0);
  ASSERT_NE(scheduler, nullptr);
  const std::string address = scheduler->address();
  testing::WorkerProcess a = Worker(address);
  testing::WorkerProcess b = Worker(address);
  ASSERT_TRUE(WaitForWorkers(address, 2));

  bool lost = false, back = false;
  const testing::Drained r = testing::Drain(
      Options(address, "remote"),
      [&](Loader& loader) {
        // SIGKILL: no goodbye. The job notices at its next beat and keeps
        // streaming; the restarted scheduler learns the job's workers from
        // its beats and, once settled, grants it the same ones.
        scheduler->Signal(SIGKILL);
        scheduler->Wait();
        lost = WaitFor([&] { return !loader.Stats().scheduler_reachable; });
        scheduler = StartScheduler(PortOf(address));
        if (scheduler == nullptr) return;
        back = WaitFor([&] { return loader.Stats().scheduler_reachable; });
        // Past the restarted scheduler's settling period (--expire-after 2),
        // so the job has had grants that may drop workers.
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      },
      [](const Loader& loader) { return loader.Stats().remote_images > 0; });
  EXPECT_TRUE(lost) << "the job never saw the scheduler go";
  EXPECT_TRUE(back) << "the job never reached the restarted scheduler";
  ExpectExactlyOnce(r);
  EXPECT_EQ(r.stats.remote_images, 96);
  ASSERT_EQ(r.stats.workers.size(), 2u);
  for (const LoaderStats::WorkerStats& w : r.stats.workers) {
    EXPECT_TRUE(w.alive) << w.address;
    EXPECT_EQ(w.streams, 1) << w.address << " was dropped and dialled again";
  }
}

TEST_F(ScheduledJobTest, PicksUpAWorkerThatRegistersMidRun) {
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0);
  ASSERT_NE(scheduler, nullptr);
  std::unique_ptr<testing::WorkerProcess> late;
  bool joined = false;
  LoaderOptions o = Options(scheduler->address(), "remote");
  o.fallback_local = true;  // locally until a worker is granted
  // A short run: 0.5 s of batches ahead would place it all here before the
  // worker comes.
  o.prefetch_seconds = 0;
  const testing::Drained r = testing::Drain(o, [&](Loader& loader) {
    EXPECT_EQ(loader.Stats().workers_alive, 0);  // nothing granted yet: all local
    late = std::make_unique<testing::WorkerProcess>(Worker(scheduler->address()));
    joined = WaitFor([&] { return loader.Stats().workers_alive == 1; });
  });
  ASSERT_TRUE(joined) << "the job never opened the worker that registered";
  ExpectExactlyOnce(r);
  EXPECT_GT(r.stats.local_images, 0);
  EXPECT_GT(r.stats.remote_images, 0);
  ASSERT_EQ(r.stats.workers.size(), 1u);
  EXPECT_EQ(r.stats.workers[0].address, late->address());
}

TEST_F(ScheduledJobTest, TwoJobsShareThePoolByWeight) {
  // Three 1-core workers. Job a (weight 1) has them all until job b (weight
  // 2) arrives; then a keeps one (its earlier grant), b gets the other two,
  // and a closes the streams it no longer holds once their items are in
  // (after the scheduler's settling period, --expire-after 2 s from its start,
  // during which grants only add).
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0, {"--max-job-weight", "2"});
  ASSERT_NE(scheduler, nullptr);
  testing::WorkerProcess w1 = Worker(scheduler->address());
  testing::WorkerProcess w2 = Worker(scheduler->address());
  testing::WorkerProcess w3 = Worker(scheduler->address());
  ASSERT_TRUE(WaitForWorkers(scheduler->address(), 3));

  LoaderOptions a_options = Options(scheduler->address(), "remote");
  LoaderOptions b_options = a_options;
  b_options.scheduler_weight = 2;
  testing::Drained b;
  LoaderStats a_shared;
  bool a_shrank = false;
  const testing::Drained a = testing::Drain(a_options, [&](Loader& a_loader) {
    EXPECT_EQ(a_loader.Stats().workers_alive, 3);
    b = testing::Drain(b_options, [&](Loader&) {
      a_shrank = WaitFor([&] {
        const LoaderStats st = a_loader.Stats();
        return st.fair_share_cores == 1 && st.workers_alive == 1;
      });
      a_shared = a_loader.Stats();
    });
  });
  ASSERT_TRUE(a_shrank) << "job a never gave up the workers job b was granted";
  EXPECT_DOUBLE_EQ(a_shared.granted_cores, 1);
  ExpectExactlyOnce(a);
  ExpectExactlyOnce(b);
  EXPECT_DOUBLE_EQ(b.stats.fair_share_cores, 2);
  ASSERT_EQ(b.stats.workers.size(), 2u);
  for (const LoaderStats::WorkerStats& w : b.stats.workers) {
    EXPECT_DOUBLE_EQ(w.granted_cores, 1) << w.address;
    EXPECT_GT(w.samples, 0) << w.address;
    for (const LoaderStats::WorkerStats& kept : a_shared.workers) {
      if (kept.alive) {
        EXPECT_NE(kept.address, w.address) << "a worker granted to both jobs";
      }
    }
  }
}

// A training job of two ranks (one --job, rank 0 and 1 of 2) and a job of
// one rank, equal weights, on four 1-core workers: each job's share is 2
// cores, the 2-rank job's split between its ranks (as separate jobs, the
// ranks would have taken 2 of every 3 cores). Together the ranks deliver
// every sample once, with the local checksum.
TEST_F(ScheduledJobTest, ATrainingJobsRanksShareOneFairShare) {
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0);
  ASSERT_NE(scheduler, nullptr);
  std::vector<testing::WorkerProcess> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(Worker(scheduler->address()));
  ASSERT_TRUE(WaitForWorkers(scheduler->address(), 4));

  LoaderOptions rank0 = Options(scheduler->address(), "remote");
  rank0.job = "train-7";
  rank0.world_size = 2;
  LoaderOptions rank1 = rank0;
  rank1.rank = 1;
  const LoaderOptions solo = Options(scheduler->address(), "remote");
  LoaderStats shared0, shared1, shared_solo;
  bool settled = false;
  testing::Drained r1, alone;
  const testing::Drained r0 = testing::Drain(rank0, [&](Loader& l0) {
    r1 = testing::Drain(rank1, [&](Loader& l1) {
      alone = testing::Drain(solo, [&](Loader& ls) {
        settled = WaitFor([&] {
          shared0 = l0.Stats();
          shared1 = l1.Stats();
          shared_solo = ls.Stats();
          return shared0.job_fair_share_cores == 2 && shared_solo.fair_share_cores == 2 &&
                 shared0.fair_share_cores + shared1.fair_share_cores == 2;
        });
      });
    });
  });
  ASSERT_TRUE(settled) << "shares: rank 0 " << shared0.fair_share_cores << " of its job's "
                       << shared0.job_fair_share_cores << ", rank 1 " << shared1.fair_share_cores
                       << ", the other job " << shared_solo.fair_share_cores;
  EXPECT_DOUBLE_EQ(shared1.job_fair_share_cores, 2);
  EXPECT_DOUBLE_EQ(shared_solo.job_fair_share_cores, 2);
  ExpectExactlyOnce(alone);
  ASSERT_TRUE(r0.status.ok() && r1.status.ok()) << r0.status << r1.status;
  EXPECT_EQ(r0.indices.size(), 48u);
  EXPECT_EQ(r1.indices.size(), 48u);
  std::map<int64_t, int> both = r0.deliveries;
  for (const auto& [index, count] : r1.deliveries) both[index] += count;
  EXPECT_EQ(both.size(), 96u);
  for (const auto& [index, count] : both) ASSERT_EQ(count, 1) << "index " << index;
  EXPECT_EQ(r0.stats.checksum + r1.stats.checksum, local_checksum_);
}

// With no grant (an empty pool, or no scheduler), --offload remote stops
// and says why, as it does for --workers: it ran locally with exit 0. Auto,
// and remote with --fallback-local, run locally until a grant comes.
TEST_F(ScheduledJobTest, RunsLocallyWithNoGrantOnlyWhenAllowed) {
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0);
  ASSERT_NE(scheduler, nullptr);
  LoaderOptions o = Options(scheduler->address(), "remote");
  o.connect_timeout_seconds = 2;
  auto refused = Loader::Create(o);
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("--offload remote: the scheduler " + scheduler->address() +
                        " granted no reachable worker"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--fallback-local"));
  o.fallback_local = true;
  const testing::Drained empty = testing::Drain(o);
  ExpectExactlyOnce(empty);
  EXPECT_EQ(empty.stats.local_images, 96);
  EXPECT_TRUE(empty.stats.scheduler_reachable);
  EXPECT_EQ(empty.stats.workers_total, 0);

  const std::string gone = scheduler->address();
  scheduler->Signal(SIGKILL);
  scheduler->Wait();
  o = Options(gone, "remote");
  o.connect_timeout_seconds = 2;
  refused = Loader::Create(o);
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("--offload remote: the scheduler " + gone + " gave no grant ("));
  const testing::Drained unreachable = testing::Drain(Options(gone, "auto"));
  ExpectExactlyOnce(unreachable);
  EXPECT_EQ(unreachable.stats.local_images, 96);
  EXPECT_FALSE(unreachable.stats.scheduler_reachable);
}

}  // namespace
}  // namespace prepflow
