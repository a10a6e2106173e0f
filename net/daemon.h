// What prepflow's daemons (prepflow-worker, prepflow-scheduler) share: log
// set-up, stop signals, the /metrics endpoint, and announcing the bound port.
//
// Thread-safety: call these from main() before starting other threads
// (StopSignals must be constructed first, so that every later thread
// inherits the blocked mask).
#ifndef PREPFLOW_NET_DAEMON_H_
#define PREPFLOW_NET_DAEMON_H_

#include <signal.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace prepflow::daemon {

// What a daemon's main does first: logs to stderr under `name`, at the level
// $PREPFLOW_LOG_LEVEL names (trace|debug|info|warn|error|off; default info),
// and turns off Abseil's mutex deadlock detection, which Debian's Abseil
// (built without NDEBUG) runs on every lock: a graph of lock orders kept
// per acquisition, ~3% of a busy scheduler's CPU. Tests keep it.
void SetUpDaemon(const std::string& name);

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and every thread
// started after it; WaitFor() returns the first SIGTERM or SIGINT, and logs
// and ignores SIGHUP (there is nothing to reload).
class StopSignals {
 public:
  StopSignals();
  // The signal's number, or 0 when none came within `seconds`.
  int WaitFor(double seconds);
  // The value the last signal WaitFor returned carried when it was sent with
  // sigqueue(3) (e.g. why a worker drains: server/worker_drain.h); 0 when it
  // was sent with kill(2), as by a shell, systemd or the kubelet.
  int queued_value() const { return queued_value_; }

 private:
  sigset_t set_;
  int queued_value_ = 0;
};

// Raises this process's soft limit on open files to its hard limit (every
// connection is a file) and returns the limit now in force.
int64_t RaiseOpenFilesLimit();

// Sends gRPC's own log lines to spdlog, and watches them for the one that
// means a listener has stopped for good: gRPC 1.51 gives up accepting after
// accept4 fails (EMFILE under a flood of connections) while the process
// stays up. ListenerFailed() then returns true, once per failure seen.
//
// It also holds `spare_files` descriptors open (on /dev/null) for that
// moment: they are closed as soon as the failure is seen, before anything is
// logged, so that logging, restarting the listener and closing its
// connections can open what they need. TakeSpareFiles() holds them again
// once the listener is back.
void RouteGrpcLogs(int spare_files = 16);
bool ListenerFailed();
void TakeSpareFiles();

// The daemon's main loop: waits for SIGTERM or SIGINT (returned) while the
// server at `address` serves. gRPC 1.51 stops accepting for good once
// accept4 fails (connections past the open-files limit) while the process
// stays up; when that is seen (ListenerFailed), `stop_serving` shuts the
// server down, which closes every one of its connections (the flood's too;
// open streams end and their clients send their items again), and
// `serve_again` builds it anew on the same port, retried every second until
// it can bind. `on_restart` runs first, e.g. to count the restart.
int ServeUntilStopped(StopSignals& signals, const std::string& address,
                      const std::function<void()>& stop_serving,
                      const std::function<bool()>& serve_again,
                      const std::function<void()>& on_restart = nullptr);

// Serves `metrics` at http://listen:port/metrics (port 0: a free one).
// Error: Unavailable naming the address (e.g. the port is taken).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> ServeMetrics(
    const std::string& listen, int port, std::shared_ptr<prometheus::Collectable> metrics);
// "host:port" of a ServeMetrics() result, or "off" for null.
std::string MetricsAddress(const std::string& listen, const prometheus::Exposer* exposer);

// Prints "listening HOST:PORT" on stdout, which scripts and tests read, and,
// given a `port_file`, writes the port there atomically (a rename).
void AnnounceListening(const std::string& listen, int port, const std::string& port_file);

// Writes `text` to `path` through `path`.tmp and a rename, so that a reader
// finds the whole of it or nothing (port and pid files). False when it
// cannot.
bool WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace prepflow::daemon

#endif  // PREPFLOW_NET_DAEMON_H_
