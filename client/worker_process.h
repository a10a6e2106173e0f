// Starts a prepflow-worker process on this machine (port 0) and learns its
// address: what `prepflow demo` uses to show offloading without any set-up,
// and what tests use to exercise real worker processes.
//
// Thread-safety: none; one owner.
#ifndef PREPFLOW_CLIENT_WORKER_PROCESS_H_
#define PREPFLOW_CLIENT_WORKER_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prepflow {

class WorkerProcess {
 public:
  // Runs `binary` --data-root `data_root` --port 0 plus `args`, and waits up
  // to `timeout_seconds` for it to listen. Errors: Unavailable (it exited or
  // never listened), naming the binary.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      const std::string& binary, const std::string& data_root,
      const std::vector<std::string>& args = {}, double timeout_seconds = 20);
  // Any daemon of ours that takes --port-file: runs `binary` --port-file F
  // plus `args` (which should give --port) and waits for the file. The
  // address is 127.0.0.1 with the bound port.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> StartDaemon(
      const std::string& binary, const std::vector<std::string>& args, double timeout_seconds = 20);
  // Kills (SIGKILL) and reaps the process if it still runs.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for the process to exit; returns its waitpid status.
  int Wait();
  // Peak resident set size (VmHWM) in bytes, or -1.
  long PeakRssBytes() const;

 private:
  WorkerProcess() = default;

  pid_t pid_ = -1;
  std::string address_;
  std::string port_file_;
  bool reaped_ = false;
};

// prepflow-worker next to the running executable (build/bin/).
std::string SiblingBinary(const std::string& name);

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_WORKER_PROCESS_H_
