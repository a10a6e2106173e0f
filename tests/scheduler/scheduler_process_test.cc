// prepflow-scheduler and prepflow-worker as real processes: a worker started
// with --scheduler is granted to a job that never named it, and after the
// scheduler is killed and restarted the worker's heartbeats register it again;
// a drain says why, and only a reclaimed one moves jobs off its class.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/worker_process.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;

using ::prepflow::testing::StartScheduler;

// One beat as job `job` wanting a core; false when it failed.
bool BeatAsJob(proto::Scheduler::Stub& stub, const std::string& job, proto::JobGrant* grant) {
  proto::JobBeat beat;
  beat.set_job_id(job);
  beat.set_wanted_cores(1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return stub.JobHeartbeat(&context, beat, grant).ok();
}

std::unique_ptr<proto::Scheduler::Stub> SchedulerStub(const std::string& scheduler) {
  return proto::Scheduler::NewStub(
      grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
}

bool Names(const proto::JobGrant& grant, const std::string& worker) {
  for (const proto::WorkerGrant& w : grant.workers()) {
    if (w.address() == worker) return true;
  }
  return false;
}

// Beats as job `job` until the grant names `worker` (true) or 30 s pass.
bool WaitForGrant(const std::string& scheduler, const std::string& job, const std::string& worker,
                  proto::JobGrant* grant) {
  auto stub = SchedulerStub(scheduler);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (BeatAsJob(*stub, job, grant) && Names(*grant, worker)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// With --lease-key-file (made on the first start, mode 0600, read on the
// second), the worker's lease from before the restart is its proof.
TEST(SchedulerProcess, WorkersRegisterAndComeBackAfterARestart) {
  TempDir root;
  const std::string key = root.Join("lease-key");
  const std::vector<std::string> flags = {"--lease-key-file", key};
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0, flags);
  ASSERT_NE(scheduler, nullptr);
  const std::string address = scheduler->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  testing::WorkerProcess worker(root.path(), {"--scheduler", address, "--labels", "zone=a"});

  proto::JobGrant grant;
  ASSERT_TRUE(WaitForGrant(address, "job-1", worker.address(), &grant))
      << "the worker never appeared in a grant";
  EXPECT_GT(grant.workers(0).cores(), 0);
  EXPECT_GT(grant.fair_share_cores(), 0);

  // The scheduler dies and comes back on the same port with no state; the
  // worker's next beats register it again and the job is granted it again.
  scheduler->Signal(SIGKILL);
  scheduler->Wait();
  struct stat st = {};
  ASSERT_EQ(stat(key.c_str(), &st), 0) << "no lease key was made";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  scheduler = StartScheduler(port, flags);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_TRUE(WaitForGrant(address, "job-1", worker.address(), &grant))
      << "the worker did not re-register with the restarted scheduler";
}

// Why a worker drains reaches the scheduler: a spot worker drained as a
// stop (a scale-down) leaves the job on the spot worker it holds; one
// drained with --drain-reason reclaimed (a spot VM's notice) marks the class,
// and the job moves to the dearer on-demand worker at once.
TEST(SchedulerProcess, OnlyAReclaimedDrainMovesJobsOffItsClass) {
  TempDir root;
  std::unique_ptr<WorkerProcess> scheduler = StartScheduler(0, {"--expire-after", "600"});
  ASSERT_NE(scheduler, nullptr);
  auto worker = [&](const std::string& id, const std::string& worker_class, const char* price) {
    return std::make_unique<testing::WorkerProcess>(
        root.path(),
        std::vector<std::string>{"--threads", "1", "--scheduler", scheduler->address(),
                                 "--worker-id", id, "--class", worker_class, "--cost-per-core-hour",
                                 price, "--pid-file", root.Join(id + ".pid")});
  };
  auto spot_a = worker("spot-a", "spot", "0.01"), spot_b = worker("spot-b", "spot", "0.01"),
       spot_c = worker("spot-c", "spot", "0.01"), dear = worker("dear", "on-demand", "0.04");
  proto::JobGrant grant;
  // Cheapest first, the first of equals.
  ASSERT_TRUE(WaitForGrant(scheduler->address(), "job-1", spot_a->address(), &grant));
  auto drain = [&](const std::string& id, const std::string& reason) {
    return std::system(absl::StrCat(PREPFLOW_BIN_DIR, "/prepflow-worker --drain --pid-file ",
                                    root.Join(id + ".pid"), " ", reason, " 2>/dev/null")
                           .c_str());
  };
  // The command returns once the worker has left, after its draining beat.
  ASSERT_EQ(drain("spot-b", ""), 0);
  EXPECT_EQ(spot_b->Wait(), 0);
  auto stub = SchedulerStub(scheduler->address());
  ASSERT_TRUE(BeatAsJob(*stub, "job-1", &grant));
  ASSERT_EQ(grant.workers_size(), 1);
  EXPECT_EQ(grant.workers(0).address(), spot_a->address()) << "a stop moved the job";
  ASSERT_EQ(drain("spot-c", "--drain-reason reclaimed"), 0);
  EXPECT_EQ(spot_c->Wait(), 0);
  EXPECT_TRUE(WaitForGrant(scheduler->address(), "job-1", dear->address(), &grant))
      << "the job stayed on spot while its class was being reclaimed";
  EXPECT_FALSE(Names(grant, spot_a->address()));
  EXPECT_NE(drain("spot-a", "--drain-reason preempted"), 0);  // refused by name
}

TEST(SchedulerProcess, BadFlagsAreRefused) {
  const std::string bin = PREPFLOW_BIN_DIR;
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--expire-after", "0.1"},
                                              {"--idle-connection-seconds", "0"},
                                              {"--max-job-weight", "0"},
                                              {"--max-job-weight", "inf"},
                                              {"--max-job-weight", "nan"},
                                              {"--max-jobs-per-credential", "0"},
                                              {"--reclaim-seconds", "-1"},
                                              {"--reclaim-seconds", "nan"},
                                              {"--reclaim-seconds", "1e9"},
                                              {"--cert-roles"} /* without --tls-client-ca */,
                                              {"--lease-key-file", "/dev/null"} /* too short */,
                                              {"--lease-key-file", "/nonexistent/dir/key"}}) {
    std::vector<std::string> args = {"--port", "0"};
    args.insert(args.end(), bad.begin(), bad.end());
    auto s = WorkerProcess::StartDaemon(bin + "/prepflow-scheduler", args, 5);
    ASSERT_FALSE(s.ok()) << bad[0];
    EXPECT_NE(std::string(s.status().message()).find("exit code 2"), std::string::npos)
        << s.status();
  }
  TempDir root;
  // A FIFO planted as the lease key must not hang the start (an open for
  // reading waits for a writer): refused as not a regular file.
  const std::string fifo = root.Join("lease-fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto hung = WorkerProcess::StartDaemon(bin + "/prepflow-scheduler",
                                         {"--port", "0", "--lease-key-file", fifo}, 5);
  ASSERT_FALSE(hung.ok());
  EXPECT_NE(std::string(hung.status().message()).find("exit code 2"), std::string::npos)
      << hung.status();
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--max-memory-bytes", "-1"},
                                              {"--max-jpeg-scans", "0"},
                                              {"--idle-connection-seconds", "0"},
                                              {"--reindex-seconds", "-1"},
                                              {"--max-file-bytes", "0"},
                                              {"--reply-timeout-seconds", "-1"},
                                              {"--reply-timeout-seconds", "nan"},
                                              {"--storage-outage-seconds", "-1"},
                                              {"--storage-outage-seconds", "1e9"},
                                              {"--cost-per-core-hour", "-0.01"},
                                              {"--cost-per-core-hour", "inf"},
                                              {"--grace-seconds", "-1"},
                                              {"--grace-seconds", "100000"},
                                              {"--drain-reason", "preempted"},
                                              {"--class", std::string(64, 'x')}}) {
    auto w = WorkerProcess::Start(bin + "/prepflow-worker", root.path(), bad, 5);
    ASSERT_FALSE(w.ok()) << bad[0];
    EXPECT_NE(std::string(w.status().message()).find("exit code 2"), std::string::npos)
        << w.status();
  }
}

// A second daemon on a port already in use must not start (gRPC's default
// SO_REUSEPORT would let it, and clients would reach either at random).
TEST(SchedulerProcess, APortInUseIsRefused) {
  const std::string bin = PREPFLOW_BIN_DIR;
  auto first = WorkerProcess::StartDaemon(bin + "/prepflow-scheduler", {"--port", "0"});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string port = (*first)->address().substr((*first)->address().rfind(':') + 1);
  auto second = WorkerProcess::StartDaemon(bin + "/prepflow-scheduler", {"--port", port}, 20);
  EXPECT_FALSE(second.ok()) << "a second scheduler started on port " << port;

  TempDir root;
  auto worker = WorkerProcess::Start(bin + "/prepflow-worker", root.path());
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string worker_port = (*worker)->address().substr((*worker)->address().rfind(':') + 1);
  auto twin = WorkerProcess::Start(bin + "/prepflow-worker", root.path(), {"--port", worker_port});
  EXPECT_FALSE(twin.ok()) << "a second worker started on port " << worker_port;
}

}  // namespace
}  // namespace prepflow
