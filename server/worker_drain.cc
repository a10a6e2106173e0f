#include "server/worker_drain.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/process_stats.h"
#include "base/small_file.h"
#include "base/text.h"
#include "net/daemon.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

constexpr char kWorkerName[] = "prepflow-worker";  // its comm (15 characters: all of it)
constexpr int64_t kMaxPid = int64_t{1} << 22;      // the kernel's PID_MAX_LIMIT

// At most a few bytes of a regular file: a pid file that is a FIFO, a device
// or a gigabyte is refused, not read.
absl::StatusOr<std::string> ReadPidFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallRegularFile(path, 31);
  if (text.ok()) return text;
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("--pid-file ", path, ": no such file"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--pid-file ", path, ": ",
      absl::IsFailedPrecondition(text.status()) ? "not a small regular file holding a process id"
                                                : text.status().message()));
}

bool Gone(pid_t pid, const std::string& name) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A zombie has exited (its parent has yet to reap it); another name is
  // another process that took the number.
  const std::optional<ProcessNameState> st = ProcessNameAndState(pid);
  return !st || st->state == 'Z' || st->state == 'X' || st->name != name;
}

}  // namespace

absl::StatusOr<pid_t> FindWorkerToDrain(const std::string& pid_file) {
  int64_t pid = 1;
  if (!pid_file.empty()) {
    absl::StatusOr<std::string> text = ReadPidFile(pid_file);
    if (!text.ok()) return text.status();
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) || pid < 1 || pid > kMaxPid) {
      return absl::InvalidArgumentError(
          absl::StrCat("--pid-file ", pid_file, ": holds no process id ('", SafeText(*text), "')"));
    }
  }
  const std::string which = pid_file.empty() ? "process 1 (no --pid-file)"
                                             : absl::StrCat("process ", pid, " (", pid_file, ")");
  const std::optional<ProcessNameState> st = ProcessNameAndState(static_cast<pid_t>(pid));
  if (!st || st->state == 'Z' || st->state == 'X') {
    return absl::NotFoundError(absl::StrCat(which, ": no such process"));
  }
  if (st->name != kWorkerName) {
    return absl::InvalidArgumentError(absl::StrCat(which, " is '", SafeText(st->name),
                                                   "', not a prepflow-worker: not signalled"));
  }
  return static_cast<pid_t>(pid);
}

absl::StatusOr<DrainReason> ParseDrainReason(const std::string& text) {
  if (text.empty()) return DrainReason::kUnsaid;
  if (text == "stop") return DrainReason::kStop;
  if (text == "reclaimed") return DrainReason::kReclaimed;
  return absl::InvalidArgumentError(
      absl::StrCat("--drain-reason must be stop or reclaimed, got '", SafeText(text), "'"));
}

const char* DrainReasonName(DrainReason reason) {
  switch (reason) {
    case DrainReason::kStop:
      return "stop";
    case DrainReason::kReclaimed:
      return "reclaimed";
    case DrainReason::kUnsaid:
      break;
  }
  return "";
}

DrainReason DrainReasonOf(int queued_value, DrainReason otherwise) {
  if (queued_value == static_cast<int>(DrainReason::kStop)) return DrainReason::kStop;
  if (queued_value == static_cast<int>(DrainReason::kReclaimed)) return DrainReason::kReclaimed;
  return otherwise;
}

absl::Status DrainAndWait(pid_t pid, double wait_seconds, DrainReason reason) {
  sigval value = {};
  value.sival_int = static_cast<int>(reason);
  const int sent =
      reason == DrainReason::kUnsaid ? kill(pid, SIGTERM) : sigqueue(pid, SIGTERM, value);
  if (sent != 0) {
    if (errno == ESRCH) return absl::OkStatus();  // gone already
    return absl::PermissionDeniedError(
        absl::StrCat("cannot signal worker ", pid, ": ", std::strerror(errno)));
  }
  spdlog::info("told worker {} to drain (SIGTERM{}{}); waiting up to {} s for it to leave", pid,
               reason == DrainReason::kUnsaid ? "" : ", reason ", DrainReasonName(reason),
               wait_seconds);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double next_note = 5;
  while (!Gone(pid, kWorkerName)) {
    if (seconds() >= wait_seconds) {
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", pid, " is still running after ", wait_seconds, " s"));
    }
    if (seconds() >= next_note) {
      spdlog::info("worker {} is still draining after {:.0f} s", pid, seconds());
      next_note += 5;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  spdlog::info("worker {} has left, {:.1f} s after it was told", pid, seconds());
  return absl::OkStatus();
}

bool WritePidFile(const std::string& path) {
  if (daemon::WriteFileAtomically(path, absl::StrCat(getpid(), "\n"))) return true;
  spdlog::error("--pid-file {}: cannot write it", path);
  return false;
}

void RemovePidFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadPidFile(path);
  int64_t pid = 0;
  if (text.ok() && absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) && pid == getpid()) {
    std::remove(path.c_str());
  }
}

}  // namespace prepflow
