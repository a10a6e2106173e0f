#include "net/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpc/support/log.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace prepflow::daemon {

void SetUpDaemon(const std::string& name) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  spdlog::set_default_logger(spdlog::stderr_color_mt(name));
  spdlog::set_pattern("%^[%Y-%m-%d %H:%M:%S.%e %L]%$ %v");
  if (const char* level = std::getenv("PREPFLOW_LOG_LEVEL")) {
    spdlog::set_level(spdlog::level::from_str(level));
  }
}

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::WaitFor(double seconds) {
  while (true) {
    timespec timeout;
    timeout.tv_sec = static_cast<time_t>(seconds);
    timeout.tv_nsec = static_cast<long>((seconds - static_cast<double>(timeout.tv_sec)) * 1e9);
    siginfo_t info = {};
    const int signal_number = sigtimedwait(&set_, &info, &timeout);
    if (signal_number < 0) return 0;  // timed out (or EINTR: the caller asks again)
    if (signal_number != SIGHUP) {
      queued_value_ = info.si_code == SI_QUEUE ? info.si_value.sival_int : 0;
      return signal_number;
    }
    // What a closed terminal or `systemctl reload` sends. Every setting is a
    // flag read at start, so there is nothing to reload: say so and go on.
    spdlog::warn(
        "SIGHUP: nothing to reload (flags are read at start; restart to change them); "
        "ignored");
  }
}

int64_t RaiseOpenFilesLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) limit.rlim_cur = before;
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

namespace {

std::atomic<int> listener_failures{0};

// The spare descriptors (RouteGrpcLogs).
absl::Mutex spare_mu(absl::kConstInit);
int spare_wanted ABSL_GUARDED_BY(spare_mu) = 0;
std::vector<int>* spare_fds ABSL_GUARDED_BY(spare_mu) = nullptr;

void ReleaseSpareFiles() {
  absl::MutexLock lock(&spare_mu);
  if (spare_fds == nullptr) return;
  for (int fd : *spare_fds) close(fd);
  spare_fds->clear();
}

void GrpcLog(gpr_log_func_args* args) {
  const char* message = args->message != nullptr ? args->message : "";
  if (std::strncmp(message, "Failed accept4", 14) == 0) {
    ReleaseSpareFiles();  // before anything below needs a descriptor
    listener_failures.fetch_add(1);
  }
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  spdlog::log(level, "grpc {}:{}: {}", args->file != nullptr ? args->file : "?", args->line,
              message);
}

}  // namespace

void RouteGrpcLogs(int spare_files) {
  {
    absl::MutexLock lock(&spare_mu);
    spare_wanted = spare_files;
    if (spare_fds == nullptr) spare_fds = new std::vector<int>;
  }
  TakeSpareFiles();
  gpr_set_log_function(GrpcLog);
}

void TakeSpareFiles() {
  absl::MutexLock lock(&spare_mu);
  if (spare_fds == nullptr) return;
  while (static_cast<int>(spare_fds->size()) < spare_wanted) {
    const int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // taken again after the next restart
    spare_fds->push_back(fd);
  }
}

bool ListenerFailed() {
  int seen = listener_failures.load();
  while (seen > 0) {
    if (listener_failures.compare_exchange_weak(seen, 0)) return true;
  }
  return false;
}

int ServeUntilStopped(StopSignals& signals, const std::string& address,
                      const std::function<void()>& stop_serving,
                      const std::function<bool()>& serve_again,
                      const std::function<void()>& on_restart) {
  int signal_number = 0;
  while ((signal_number = signals.WaitFor(1.0)) == 0) {
    if (!ListenerFailed()) continue;
    if (on_restart) on_restart();
    spdlog::error(
        "the listener on {} stopped accepting connections (open-files limit {} reached?); "
        "restarting it",
        address, RaiseOpenFilesLimit());
    stop_serving();
    while (!serve_again()) {
      spdlog::warn("cannot listen on {} yet; trying again", address);
      if ((signal_number = signals.WaitFor(1.0)) != 0) return signal_number;
    }
    spdlog::info("listening again on {}", address);
    TakeSpareFiles();
  }
  return signal_number;
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> ServeMetrics(
    const std::string& listen, int port, std::shared_ptr<prometheus::Collectable> metrics) {
  const std::string address = absl::StrCat(listen, ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  exposer->RegisterCollectable(metrics);
  return exposer;
}

std::string MetricsAddress(const std::string& listen, const prometheus::Exposer* exposer) {
  if (exposer == nullptr) return "off";
  return absl::StrCat(listen, ":", exposer->GetListeningPorts().front());
}

void AnnounceListening(const std::string& listen, int port, const std::string& port_file) {
  std::printf("listening %s:%d\n", listen.c_str(), port);
  std::fflush(stdout);
  if (port_file.empty()) return;
  if (!WriteFileAtomically(port_file, absl::StrCat(port, "\n"))) {
    spdlog::error("--port-file {}: cannot write it", port_file);
  }
}

bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp);
  out << text;
  out.close();
  return out.good() && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace prepflow::daemon
