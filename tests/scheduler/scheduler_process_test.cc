// prepflow-scheduler and prepflow-worker as real processes: a worker started
// with --scheduler is granted to a job that never named it, and after the
// scheduler is killed and restarted the worker's heartbeats register it again.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
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

// Beats as job `job` until the grant names `worker` (true) or 30 s pass.
bool WaitForGrant(const std::string& scheduler, const std::string& job, const std::string& worker,
                  proto::JobGrant* grant) {
  auto stub =
      proto::Scheduler::NewStub(grpc::CreateChannel(scheduler, grpc::InsecureChannelCredentials()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    proto::JobBeat beat;
    beat.set_job_id(job);
    beat.set_wanted_cores(1);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (stub->JobHeartbeat(&context, beat, grant).ok()) {
      for (const proto::WorkerGrant& w : grant->workers()) {
        if (w.address() == worker) return true;
      }
    }
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
