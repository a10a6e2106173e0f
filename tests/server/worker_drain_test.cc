// prepflow-worker --drain finds the worker it signals by a pid file it must
// not trust: whatever the file holds, no process but a prepflow-worker is
// signalled, and nothing blocks or is read past a few bytes. (A real worker
// drained by the command: tests/client/worker_faults_test.cc, DrainCommand*.)
#include "server/worker_drain.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/daemon.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(FindWorkerToDrain, AMissingFileIsNotFoundByName) {
  testing::TempDir dir;
  const absl::StatusOr<pid_t> pid = FindWorkerToDrain(dir.Join("worker.pid"));
  EXPECT_TRUE(absl::IsNotFound(pid.status())) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr(dir.Join("worker.pid") + ": no such file"));
}

TEST(FindWorkerToDrain, AFileWithoutAProcessIdIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.Join("worker.pid");
  for (const std::string text : {"", "abc", "-5", "0", "12x", "99999999", "1 2"}) {
    Write(path, text);
    const absl::StatusOr<pid_t> pid = FindWorkerToDrain(path);
    EXPECT_TRUE(absl::IsInvalidArgument(pid.status())) << "'" << text << "': " << pid.status();
    EXPECT_THAT(pid.status().message(), HasSubstr("holds no process id")) << text;
  }
  Write(path, std::string(4096, '1'));  // a file too long to be one is not read
  EXPECT_THAT(FindWorkerToDrain(path).status().message(), HasSubstr("not a small regular file"));
}

// A FIFO would block a plain read until someone writes it.
TEST(FindWorkerToDrain, AFifoIsRefusedWithoutBlocking) {
  testing::TempDir dir;
  const std::string path = dir.Join("worker.pid");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  EXPECT_THAT(FindWorkerToDrain(path).status().message(), HasSubstr("not a small regular file"));
}

// A stale pid file whose number another program took: refused, not
// signalled (this test is that program, and it is still here to check).
TEST(FindWorkerToDrain, AProcessThatIsNoWorkerIsNotSignalled) {
  testing::TempDir dir;
  const std::string path = dir.Join("worker.pid");
  Write(path, std::to_string(getpid()) + "\n");
  const absl::StatusOr<pid_t> pid = FindWorkerToDrain(path);
  EXPECT_TRUE(absl::IsInvalidArgument(pid.status())) << pid.status();
  EXPECT_THAT(pid.status().message(), HasSubstr("not a prepflow-worker: not signalled"));
  // Without a pid file, process 1: here not a worker either (or not visible).
  EXPECT_THAT(FindWorkerToDrain("").status().message(), HasSubstr("process 1 (no --pid-file)"));
}

TEST(FindWorkerToDrain, AProcessThatHasExitedIsNotFound) {
  testing::TempDir dir;
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const std::string path = dir.Join("worker.pid");
  Write(path, std::to_string(child));
  EXPECT_THAT(FindWorkerToDrain(path).status().message(), HasSubstr("no such process"));
}

TEST(PidFile, IsWrittenAndRemovedOnlyWhileItIsThisProcesss) {
  testing::TempDir dir;
  const std::string path = dir.Join("worker.pid");
  ASSERT_TRUE(WritePidFile(path));
  std::ifstream in(path);
  pid_t written = 0;
  in >> written;
  EXPECT_EQ(written, getpid());
  RemovePidFile(path);
  EXPECT_FALSE(std::filesystem::exists(path));
  Write(path, "1\n");  // another process's by now: left alone
  RemovePidFile(path);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(WritePidFile(dir.Join("no/such/folder/worker.pid")));
}

TEST(DrainReason, IsStopOrReclaimedAndAnythingElseIsRefusedByName) {
  EXPECT_EQ(*ParseDrainReason(""), DrainReason::kUnsaid);
  EXPECT_EQ(*ParseDrainReason("stop"), DrainReason::kStop);
  EXPECT_EQ(*ParseDrainReason("reclaimed"), DrainReason::kReclaimed);
  const absl::StatusOr<DrainReason> bad = ParseDrainReason("preempted\n");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(bad.status().message(),
              HasSubstr("--drain-reason must be stop or reclaimed, got 'preempted"));
  // A value a SIGTERM carries: known ones, else what the worker says it means.
  EXPECT_EQ(DrainReasonOf(2, DrainReason::kStop), DrainReason::kReclaimed);
  EXPECT_EQ(DrainReasonOf(1, DrainReason::kReclaimed), DrainReason::kStop);
  EXPECT_EQ(DrainReasonOf(0, DrainReason::kReclaimed), DrainReason::kReclaimed);
  EXPECT_EQ(DrainReasonOf(77, DrainReason::kStop), DrainReason::kStop);
}

// The reason travels with the SIGTERM itself: a child that waits for its
// stop signals as a worker does exits with the value the signal carried.
int ValueADrainSends(DrainReason reason) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    daemon::StopSignals signals;  // blocks SIGTERM: it is waited for, not fatal
    const char go = 1;
    if (write(ready[1], &go, 1) != 1) _exit(100);
    const int number = signals.WaitFor(30);
    _exit(number == SIGTERM ? signals.queued_value() : 101);
  }
  close(ready[1]);
  char go = 0;
  const bool started = read(ready[0], &go, 1) == 1;
  close(ready[0]);
  // Not a prepflow-worker by name, so DrainAndWait finds it "gone" at once:
  // only the signal is tested here.
  const absl::Status sent = started ? DrainAndWait(child, 30, reason) : absl::UnknownError("");
  int status = 0;
  waitpid(child, &status, 0);
  return sent.ok() && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(DrainAndWait, SendsTheReasonAsTheSignalsValueAndNoneUnsaid) {
  EXPECT_EQ(ValueADrainSends(DrainReason::kReclaimed), 2);
  EXPECT_EQ(ValueADrainSends(DrainReason::kStop), 1);
  EXPECT_EQ(ValueADrainSends(DrainReason::kUnsaid), 0);  // a plain kill
}

}  // namespace
}  // namespace prepflow
