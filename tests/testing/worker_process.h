// A real prepflow-worker process for a test (build/bin/prepflow-worker, port
// 0); the test fails if it cannot start. Killed and reaped on destruction.
#ifndef PREPFLOW_TESTS_TESTING_WORKER_PROCESS_H_
#define PREPFLOW_TESTS_TESTING_WORKER_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "client/worker_process.h"

namespace prepflow::testing {

class WorkerProcess {
 public:
  WorkerProcess(const std::string& data_root, const std::vector<std::string>& args = {});

  const std::string& address() const { return process_->address(); }
  pid_t pid() const { return process_->pid(); }
  void Signal(int sig) { process_->Signal(sig); }
  int Wait() { return process_->Wait(); }
  long PeakRssBytes() const { return process_->PeakRssBytes(); }

 private:
  std::unique_ptr<prepflow::WorkerProcess> process_;
};

// build/bin/prepflow-scheduler on `port` (0: a free one) with fast beats
// (every 0.2 s, expiry after 2 s), so tests see joins and restarts quickly;
// null (and the test fails) if it cannot start. `extra`: more flags.
std::unique_ptr<prepflow::WorkerProcess> StartScheduler(int port,
                                                        const std::vector<std::string>& extra = {});

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_WORKER_PROCESS_H_
