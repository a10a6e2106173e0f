#include "client/worker_process.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/process_stats.h"

namespace prepflow {

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::string& binary, const std::string& data_root, const std::vector<std::string>& args,
    double timeout_seconds) {
  std::vector<std::string> all = {"--data-root", data_root, "--port", "0"};
  all.insert(all.end(), args.begin(), args.end());
  return StartDaemon(binary, all, timeout_seconds);
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::StartDaemon(
    const std::string& binary, const std::vector<std::string>& args, double timeout_seconds) {
  std::unique_ptr<WorkerProcess> p(new WorkerProcess);
  char tmpl[] = "/tmp/prepflow-worker-port-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  close(fd);
  unlink(tmpl);
  p->port_file_ = tmpl;
  std::vector<std::string> argv = {binary, "--port-file", p->port_file_};
  argv.insert(argv.end(), args.begin(), args.end());
  p->pid_ = fork();
  if (p->pid_ < 0) return absl::InternalError("fork failed");
  if (p->pid_ == 0) {
    // Ends with its parent, however that ends (a test that fails fast with
    // _Exit, a crash): no orphaned daemons.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    if (getenv("PREPFLOW_LOG_LEVEL") == nullptr) setenv("PREPFLOW_LOG_LEVEL", "warn", 1);
    // Its "listening" line is for scripts; the parent learns the port from the file.
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(p->port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      p->address_ = absl::StrCat("127.0.0.1:", port);
      return p;
    }
    int status;
    if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      p->reaped_ = true;
      return absl::UnavailableError(absl::StrCat(
          binary, " exited before listening (", WIFEXITED(status) ? "exit code " : "signal ",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::UnavailableError(
      absl::StrCat(binary, " did not start listening within ", timeout_seconds, " s"));
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!port_file_.empty()) unlink(port_file_.c_str());
}

void WorkerProcess::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int WorkerProcess::Wait() {
  int status = 0;
  if (!reaped_) waitpid(pid_, &status, 0);
  reaped_ = true;
  return status;
}

long WorkerProcess::PeakRssBytes() const {
  return static_cast<long>(ProcessResidentBytes(pid_, /*peak=*/true));
}

std::string SiblingBinary(const std::string& name) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  std::string dir(self, static_cast<size_t>(n));
  return dir.substr(0, dir.rfind('/') + 1) + name;
}

}  // namespace prepflow
