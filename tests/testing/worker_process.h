// Runs a real prepflow-worker process for a test: port 0, the bound port read
// back from --port-file, killed (SIGKILL) and reaped on destruction.
#ifndef PREPFLOW_TESTS_TESTING_WORKER_PROCESS_H_
#define PREPFLOW_TESTS_TESTING_WORKER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace prepflow::testing {

class WorkerProcess {
 public:
  // Starts build/bin/prepflow-worker --data-root `data_root` plus `args`;
  // waits up to 20 s for it to listen (fails the test otherwise).
  WorkerProcess(const std::string& data_root, const std::vector<std::string>& args = {});
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  // Sends `sig`; after SIGKILL/SIGTERM, Wait() reaps the process.
  void Signal(int sig);
  // Waits for the process to exit; returns its exit status as waitpid gives it.
  int Wait();
  // Peak resident set size (VmHWM) in bytes, from /proc.
  long PeakRssBytes() const;

 private:
  pid_t pid_ = -1;
  std::string address_;
  std::string port_file_;
  bool reaped_ = false;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_WORKER_PROCESS_H_
