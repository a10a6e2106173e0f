// prepflow-scheduler: keeps the registry of prepflow-worker daemons (they
// register and heartbeat with --scheduler) and divides their cores among the
// training jobs that ask (weighted max-min fair share, locality first). See
// `prepflow-scheduler --help`, scheduler/allocator.h and docs/deploy.md.
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "base/flags.h"
#include "base/small_file.h"
#include "base/text.h"
#include "net/daemon.h"
#include "net/daemon_server.h"
#include "net/security.h"
#include "prometheus/exposer.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/scheduler_metrics.h"
#include "scheduler/scheduler_service.h"
#include "spdlog/spdlog.h"

namespace prepflow::scheduler {
namespace {

constexpr size_t kMinLeaseKeyBytes = 16, kMaxLeaseKeyBytes = 4096;

// The lease key at `path`: read (16 bytes to 4 KiB), or, where there is no
// file, made (32 random bytes, mode 0600) so the next start finds it.
absl::StatusOr<std::string> LoadLeaseKey(const std::string& path) {
  const std::string flag = absl::StrCat("--lease-key-file ", SafeText(path));
  // A FIFO planted at the path must not hang the start: refused as not a
  // regular file.
  absl::StatusOr<std::string> read = ReadSmallRegularFile(path, kMaxLeaseKeyBytes);
  if (absl::IsNotFound(read.status())) {
    std::string key(32, '\0');
    for (size_t got = 0; got < key.size();) {
      const ssize_t n = getrandom(key.data() + got, key.size() - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
    }
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const bool written = fd >= 0 &&
                         write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size()) &&
                         fsync(fd) == 0;
    const int error = errno;
    if (fd >= 0) close(fd);
    if (!written) {
      return absl::FailedPreconditionError(
          absl::StrCat(flag, ": cannot create it: ", std::strerror(error)));
    }
    spdlog::info("{}: made a new lease key", flag);
    return key;
  }
  if (!read.ok() && !absl::IsFailedPrecondition(read.status())) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": ", read.status().message()));
  }
  if (!read.ok() || read->size() < kMinLeaseKeyBytes) {
    return absl::FailedPreconditionError(absl::StrCat(flag, ": not a key (a regular file of ",
                                                      kMinLeaseKeyBytes, " to ", kMaxLeaseKeyBytes,
                                                      " bytes)"));
  }
  struct stat st = {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    spdlog::warn("{}: readable by others (mode {:o}); whoever reads it can forge leases", flag,
                 st.st_mode & 0777);
  }
  return *std::move(read);
}

// Everything the command line says, checked.
struct SchedulerFlags {
  SchedulerOptions options;
  daemon::DaemonServerOptions server;
  bool cert_roles = false;
  std::string lease_key_file;
  SecurityOptions security;

  void Register(cli::FlagSet& f) {
    daemon::RegisterServerFlags(f, &server);
    f.Double("heartbeat-seconds", &options.heartbeat_seconds,
             "how often workers and jobs are told to beat");
    f.Double("expire-after", &options.expire_after_seconds,
             "seconds of silence after which a worker or job is dropped");
    f.Double("reclaim-seconds", &options.reclaim_seconds,
             "a worker of a class (--class) that drains because its capacity is taken back "
             "(prepflow-worker --drain-reason reclaimed; a stop marks nothing) marks the class "
             "as being reclaimed for this long: its other workers are granted after every "
             "other class's, and jobs move off them where other cores are free (0: never)");
    f.String("locality-label", &options.locality_label,
             "the worker/job label whose equal values mean local (e.g. zone, rack)");
    f.Double("max-job-weight", &options.max_job_weight,
             "a job's --weight above this counts as this (jobs choose their weights; shares "
             "above an equal one are the operator's to allow)");
    f.Int("max-jobs-per-credential", &options.max_jobs_per_credential,
          "training jobs one client certificate (without mutual TLS: one client host) may "
          "hold at once; a job's ranks count once");
    f.String("lease-key-file", &lease_key_file,
             "the secret workers' leases are signed with, so that after a restart a worker's "
             "lease proves its worker_id (made, 0600, where there is no file); without it a "
             "beat that names a worker_id first after a restart takes it");
    RegisterSecurityFlags(f, &security, /*server=*/true);
    RegisterRoleTokenFlags(f, &security, /*scheduler=*/true);
    f.Bool("cert-roles", &cert_roles,
           "with --tls-client-ca: a worker's client certificate must carry OU=prepflow-worker "
           "to register, a job's OU=prepflow-job to ask for workers");
  }

  // The error to print (exit 2), or "" when every flag is usable.
  std::string Check(const Security& security) const {
    if (server.port < 0 || !(options.heartbeat_seconds > 0) ||
        !(server.idle_connection_seconds >= 1) ||
        !(options.expire_after_seconds > options.heartbeat_seconds)) {
      return "--port must be >= 0, --heartbeat-seconds > 0 and --expire-after > "
             "--heartbeat-seconds";
    }
    if (!(options.max_job_weight > 0) || !std::isfinite(options.max_job_weight) ||
        options.max_jobs_per_credential < 1) {
      return "--max-job-weight must be positive and finite, --max-jobs-per-credential >= 1";
    }
    if (!(options.reclaim_seconds >= 0) || options.reclaim_seconds > 86400) {
      return "--reclaim-seconds must be 0 to 86400";
    }
    if (cert_roles && security.client_ca.empty()) {
      return "--cert-roles needs --tls-client-ca (mutual TLS)";
    }
    return "";
  }
};

int Run(const SchedulerFlags& f, const Security& security) {
  daemon::StopSignals stop_signals;  // before any other thread starts
  if (!f.cert_roles && !security.token.empty() && security.worker_token == security.job_token) {
    spdlog::warn(
        "workers and jobs share one token: any job could register a worker; give "
        "--worker-token-file and --job-token-file (docs/security.md)");
  }
  SchedulerMetrics metrics;
  SchedulerCore core(f.options);
  core.set_on_rebalance([&](double seconds) { metrics.Rebalanced(seconds); });
  core.StartRebalancer();
  std::unique_ptr<prometheus::Exposer> exposer;
  if (f.server.metrics_port >= 0) {
    auto served = daemon::ServeMetrics(f.server.listen, f.server.metrics_port, metrics.registry());
    if (!served.ok()) {
      spdlog::error("{}", std::string(served.status().message()));
      return 1;
    }
    exposer = *std::move(served);
  }
  const int64_t open_files = daemon::RaiseOpenFilesLimit();
  daemon::RouteGrpcLogs();
  daemon::DaemonServer server(f.server, security, [&] {
    return std::make_unique<SchedulerService>(&core, security.worker_token, security.job_token,
                                              f.cert_roles, &metrics);
  });
  if (!server.Start()) return 1;
  spdlog::info(
      "prepflow-scheduler listening on {} (heartbeat {} s, expiry {} s, {} open files, "
      "metrics {})",
      server.address(), f.options.heartbeat_seconds, f.options.expire_after_seconds, open_files,
      daemon::MetricsAddress(f.server.listen, exposer.get()));
  daemon::AnnounceListening(f.server.listen, server.port(), f.server.port_file);

  // Expiry and the pool gauges, twice per heartbeat period.
  absl::Notification stop;
  std::thread ticker([&] {
    while (!stop.WaitForNotificationWithTimeout(absl::Seconds(f.options.heartbeat_seconds / 2))) {
      core.Expire(WallNanos());
      metrics.Update(core.counts());
    }
  });
  const int signal_number =
      server.ServeUntilStopped(stop_signals, [&] { metrics.ListenerRestarted(); });
  spdlog::info("{}: stopping", strsignal(signal_number));
  stop.Notify();
  ticker.join();
  server.Shutdown(2);  // beats waiting for an allocation get it meanwhile
  core.StopRebalancer();
  return 0;
}

int Main(int argc, char** argv) {
  SchedulerFlags f;
  f.server.handshake_timeout_seconds = 10;
  cli::FlagSet flags("prepflow-scheduler",
                     "Keeps the registry of prepflow-worker daemons and divides their cores "
                     "among training jobs: weighted max-min fair share, workers sharing the "
                     "job's locality label first, earlier grants kept where possible.");
  f.Register(flags);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  auto security = LoadServerSecurity(f.security, f.server.listen);
  std::string error = security.ok() ? f.Check(*security) : std::string(security.status().message());
  if (error.empty() && !f.lease_key_file.empty()) {
    absl::StatusOr<std::string> key = LoadLeaseKey(f.lease_key_file);
    if (key.ok()) f.options.lease_key = *std::move(key);
    if (!key.ok()) error = std::string(key.status().message());
  }
  if (!error.empty()) {
    std::fprintf(stderr, "prepflow-scheduler: %s\n", error.c_str());
    return 2;
  }
  return Run(f, *security);
}

}  // namespace
}  // namespace prepflow::scheduler

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("prepflow-scheduler %s\n", PREPFLOW_VERSION);
    return 0;
  }
  prepflow::daemon::SetUpDaemon("prepflow-scheduler");
  return prepflow::scheduler::Main(argc, argv);
}
