#include "tests/testing/worker_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace prepflow::testing {

WorkerProcess::WorkerProcess(const std::string& data_root, const std::vector<std::string>& args) {
  char tmpl[] = "/tmp/prepflow-worker-port-XXXXXX";
  const int fd = mkstemp(tmpl);
  close(fd);
  unlink(tmpl);
  port_file_ = tmpl;
  std::vector<std::string> argv = {std::string(PREPFLOW_BIN_DIR) + "/prepflow-worker",
                                   "--data-root",
                                   data_root,
                                   "--port",
                                   "0",
                                   "--port-file",
                                   port_file_};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    setenv("PREPFLOW_LOG_LEVEL", "warn", 1);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  for (int i = 0; i < 2000; ++i) {
    std::ifstream in(port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      address_ = "127.0.0.1:" + std::to_string(port);
      return;
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      ADD_FAILURE() << "prepflow-worker exited before listening (status " << status << ")";
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "prepflow-worker did not start listening within 20 s";
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(port_file_.c_str());
}

void WorkerProcess::Signal(int sig) { kill(pid_, sig); }

int WorkerProcess::Wait() {
  int status = 0;
  if (!reaped_) waitpid(pid_, &status, 0);
  reaped_ = true;
  return status;
}

long WorkerProcess::PeakRssBytes() const {
  std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      long kb = 0;
      fields >> kb;
      return kb * 1024;
    }
  }
  return -1;
}

}  // namespace prepflow::testing
