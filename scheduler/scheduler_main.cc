// prepflow-scheduler: keeps the registry of prepflow-worker daemons (they
// register and heartbeat with --scheduler) and divides their cores among the
// training jobs that ask (weighted max-min fair share, locality first). See
// `prepflow-scheduler --help`, scheduler/allocator.h and docs/deploy.md.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "net/daemon.h"
#include "net/security.h"
#include "net/status.h"
#include "pipeline/flags.h"
#include "pipeline/profiler.h"
#include "pipeline/text.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/scheduler_core.h"
#include "spdlog/spdlog.h"

namespace prepflow::scheduler {
namespace {

class SchedulerService final : public proto::Scheduler::CallbackService {
 public:
  // The bearer tokens each role's calls must carry (security.h); empty: none.
  // `cert_roles`: each call's client certificate must carry its role (OU).
  SchedulerService(SchedulerCore* core, std::string worker_token, std::string job_token,
                   bool cert_roles, prometheus::Family<prometheus::Counter>& beats,
                   prometheus::Family<prometheus::Counter>& unauthenticated)
      : core_(core),
        cert_roles_(cert_roles),
        worker_token_(std::move(worker_token)),
        job_token_(std::move(job_token)),
        worker_beats_(beats.Add({{"kind", "worker"}})),
        job_beats_(beats.Add({{"kind", "job"}})),
        worker_unauthenticated_(unauthenticated.Add({{"kind", "worker"}})),
        job_unauthenticated_(unauthenticated.Add({{"kind", "job"}})) {}

  grpc::ServerUnaryReactor* WorkerHeartbeat(grpc::CallbackServerContext* context,
                                            const proto::WorkerBeat* beat,
                                            proto::WorkerBeatReply* reply) override {
    worker_beats_.Increment();
    const absl::Status auth =
        Authenticate(*context, worker_token_, kWorkerRole, worker_unauthenticated_);
    absl::StatusOr<proto::WorkerBeatReply> r =
        auth.ok() ? core_->WorkerBeat(*beat, WallNanos(), PeerIdentity(*context)) : auth;
    if (r.ok()) *reply = *std::move(r);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(r.ok() ? grpc::Status::OK : ToGrpcStatus(r.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* JobHeartbeat(grpc::CallbackServerContext* context,
                                         const proto::JobBeat* beat,
                                         proto::JobGrant* grant) override {
    job_beats_.Increment();
    const absl::Status auth = Authenticate(*context, job_token_, kJobRole, job_unauthenticated_);
    absl::StatusOr<proto::JobGrant> r = auth.ok() ? core_->JobBeat(*beat, WallNanos()) : auth;
    if (r.ok()) *grant = *std::move(r);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(r.ok() ? grpc::Status::OK : ToGrpcStatus(r.status()));
    return reactor;
  }

 private:
  // OK, or UNAUTHENTICATED (counted) for a missing or wrong token.
  // OK, or (counted) UNAUTHENTICATED for a missing or wrong token, or
  // PERMISSION_DENIED for a certificate without the call's role.
  absl::Status Authenticate(const grpc::CallbackServerContext& context, const std::string& token,
                            const char* role, prometheus::Counter& refused) const {
    absl::Status s = CheckToken(context.client_metadata(), token);
    if (s.ok() && cert_roles_) {
      const std::string subject = PeerSubject(context);
      if (!SubjectHasRole(subject, role)) {
        s = absl::PermissionDeniedError(
            absl::StrCat("the client certificate (", subject.empty() ? "none" : SafeText(subject),
                         ") does not carry the role OU=", role, " (--cert-roles)"));
      }
    }
    if (!s.ok()) refused.Increment();
    return s;
  }

  SchedulerCore* core_;
  const bool cert_roles_;
  const std::string worker_token_;
  const std::string job_token_;
  prometheus::Counter& worker_beats_;
  prometheus::Counter& job_beats_;
  prometheus::Counter& worker_unauthenticated_;
  prometheus::Counter& job_unauthenticated_;
};

int Main(int argc, char** argv) {
  std::string listen = "127.0.0.1", port_file;
  int port = 0, metrics_port = -1;
  SchedulerOptions options;
  cli::FlagSet flags("prepflow-scheduler",
                     "Keeps the registry of prepflow-worker daemons and divides their cores "
                     "among training jobs: weighted max-min fair share, workers sharing the "
                     "job's locality label first, earlier grants kept where possible.");
  flags.String("listen", &listen, "address to listen on");
  flags.Int("port", &port, "port (0: pick a free one; the bound port is printed and logged)");
  flags.String("port-file", &port_file, "write the bound port to this file once listening");
  flags.Int("metrics-port", &metrics_port,
            "serve Prometheus /metrics here (0: a free port; -1: off)");
  flags.Double("heartbeat-seconds", &options.heartbeat_seconds,
               "how often workers and jobs are told to beat");
  flags.Double("expire-after", &options.expire_after_seconds,
               "seconds of silence after which a worker or job is dropped");
  double idle_connection_seconds = 300;
  flags.Double("idle-connection-seconds", &idle_connection_seconds,
               "close a connection that has carried no call for this long (a connection that "
               "has not finished its handshake: after 10 s)");
  flags.String("locality-label", &options.locality_label,
               "the worker/job label whose equal values mean local (e.g. zone, rack)");
  SecurityOptions security_options;
  RegisterSecurityFlags(flags, &security_options, /*server=*/true);
  RegisterRoleTokenFlags(flags, &security_options, /*scheduler=*/true);
  bool cert_roles = false;
  flags.Bool("cert-roles", &cert_roles,
             "with --tls-client-ca: a worker's client certificate must carry OU=prepflow-worker "
             "to register, a job's OU=prepflow-job to ask for workers");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (port < 0 || !(options.heartbeat_seconds > 0) || !(idle_connection_seconds >= 1) ||
      !(options.expire_after_seconds > options.heartbeat_seconds)) {
    std::fprintf(stderr,
                 "prepflow-scheduler: --port must be >= 0, --heartbeat-seconds > 0 and "
                 "--expire-after > --heartbeat-seconds\n");
    return 2;
  }
  auto security = LoadServerSecurity(security_options, listen);
  if (!security.ok()) {
    std::fprintf(stderr, "prepflow-scheduler: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  daemon::StopSignals stop_signals;  // before any other thread starts

  auto registry = std::make_shared<prometheus::Registry>();
  auto& beats = prometheus::BuildCounter()
                    .Name("prepflow_scheduler_heartbeats_total")
                    .Help("Heartbeats received, by kind (worker or job).")
                    .Register(*registry);
  auto& gauges = prometheus::BuildGauge()
                     .Name("prepflow_scheduler_pool")
                     .Help("The pool now: workers, jobs, cores in the pool, cores granted.")
                     .Register(*registry);
  prometheus::Gauge& workers_gauge = gauges.Add({{"what", "workers"}});
  prometheus::Gauge& jobs_gauge = gauges.Add({{"what", "jobs"}});
  prometheus::Gauge& pool_cores = gauges.Add({{"what", "pool_cores"}});
  prometheus::Gauge& granted_cores = gauges.Add({{"what", "granted_cores"}});
  auto& expired = prometheus::BuildCounter()
                      .Name("prepflow_scheduler_expired_total")
                      .Help("Workers and jobs dropped for missing their heartbeats.")
                      .Register(*registry);
  prometheus::Counter& expired_workers = expired.Add({{"kind", "worker"}});
  prometheus::Counter& expired_jobs = expired.Add({{"kind", "job"}});
  prometheus::Histogram& rebalance_seconds =
      prometheus::BuildHistogram()
          .Name("prepflow_scheduler_rebalance_seconds")
          .Help("Time to recompute the allocation.")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries{1e-5, 1e-4, 1e-3, 0.01, 0.05, 0.1, 1});

  SchedulerCore core(options);
  core.set_on_rebalance([&](double seconds) { rebalance_seconds.Observe(seconds); });
  std::unique_ptr<prometheus::Exposer> exposer;
  if (metrics_port >= 0) {
    auto served = daemon::ServeMetrics(listen, metrics_port, registry);
    if (!served.ok()) {
      spdlog::error("{}", std::string(served.status().message()));
      return 1;
    }
    exposer = *std::move(served);
  }
  auto& unauthenticated = prometheus::BuildCounter()
                              .Name("prepflow_scheduler_unauthenticated_total")
                              .Help(
                                  "Calls refused for a missing or wrong bearer token, by the "
                                  "role's call (worker or job).")
                              .Register(*registry);
  prometheus::Counter& listener_restarts =
      prometheus::BuildCounter()
          .Name("prepflow_scheduler_listener_restarts_total")
          .Help(
              "Times the gRPC listener stopped accepting (e.g. the open-files limit was "
              "reached) and was restarted")
          .Register(*registry)
          .Add({});
  prometheus::Counter& refused_beats =
      prometheus::BuildCounter()
          .Name("prepflow_scheduler_refused_beats_total")
          .Help(
              "Worker beats refused for naming a worker_id registered to another lease or "
              "identity (an attempt to repoint a worker).")
          .Register(*registry)
          .Add({});
  if (cert_roles && security->client_ca.empty()) {
    std::fprintf(stderr, "prepflow-scheduler: --cert-roles needs --tls-client-ca (mutual TLS)\n");
    return 2;
  }
  if (!cert_roles && !security->token.empty() && security->worker_token == security->job_token) {
    spdlog::warn(
        "workers and jobs share one token: any job could register a worker; give "
        "--worker-token-file and --job-token-file (docs/security.md)");
  }
  const int64_t open_files = daemon::RaiseOpenFilesLimit();
  daemon::RouteGrpcLogs();
  // The server and its service; built again on the same port if the listener
  // dies (as the worker does: see prepflow-worker).
  struct Serving {
    std::unique_ptr<SchedulerService> service;
    std::unique_ptr<grpc::Server> server;
  };
  int bound_port = 0;
  auto serve = [&](int on_port) -> std::optional<Serving> {
    Serving s;
    s.service = std::make_unique<SchedulerService>(
        &core, security->worker_token, security->job_token, cert_roles, beats, unauthenticated);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(listen, ":", on_port), ServerCredentials(*security),
                             &bound_port);
    builder.RegisterService(s.service.get());
    // gRPC sets SO_REUSEPORT by default: a second daemon on a port in use
    // would then start too, and clients would land on either at random.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10'000);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(idle_connection_seconds * 1000));
    s.server = builder.BuildAndStart();
    if (s.server == nullptr || bound_port == 0) return std::nullopt;
    return s;
  };
  std::optional<Serving> serving = serve(port);
  if (!serving) {
    spdlog::error("cannot listen on {}:{}", listen, port);
    return 1;
  }
  spdlog::info(
      "prepflow-scheduler listening on {}:{} (heartbeat {} s, expiry {} s, {} open files, "
      "metrics {})",
      listen, bound_port, options.heartbeat_seconds, options.expire_after_seconds, open_files,
      daemon::MetricsAddress(listen, exposer.get()));
  daemon::AnnounceListening(listen, bound_port, port_file);

  // Expiry and the pool gauges, twice per heartbeat period.
  absl::Notification stop;
  std::thread ticker([&] {
    SchedulerCounts last;
    while (!stop.WaitForNotificationWithTimeout(absl::Seconds(options.heartbeat_seconds / 2))) {
      core.Expire(WallNanos());
      const SchedulerCounts c = core.counts();
      workers_gauge.Set(c.workers);
      jobs_gauge.Set(c.jobs);
      pool_cores.Set(c.pool_cores);
      granted_cores.Set(c.granted_cores);
      expired_workers.Increment(static_cast<double>(c.expired_workers - last.expired_workers));
      expired_jobs.Increment(static_cast<double>(c.expired_jobs - last.expired_jobs));
      refused_beats.Increment(static_cast<double>(c.refused_beats - last.refused_beats));
      last = c;
    }
  });
  const int signal_number = daemon::ServeUntilStopped(
      stop_signals, absl::StrCat(listen, ":", bound_port),
      [&] {
        serving->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        serving->server->Wait();
        serving.reset();
      },
      [&] { return (serving = serve(bound_port)).has_value(); },
      [&] { listener_restarts.Increment(); });
  spdlog::info("{}: stopping", strsignal(signal_number));
  stop.Notify();
  ticker.join();
  if (serving) {
    serving->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    serving->server->Wait();
  }
  return 0;
}

}  // namespace
}  // namespace prepflow::scheduler

int main(int argc, char** argv) {
  prepflow::daemon::SetUpLogging("prepflow-scheduler");
  return prepflow::scheduler::Main(argc, argv);
}
