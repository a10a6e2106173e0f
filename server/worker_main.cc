// prepflow-worker: runs a prefix of training jobs' input pipelines for
// remote clients. See `prepflow-worker --help` and README.md.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "net/daemon.h"
#include "net/registration.h"
#include "net/security.h"
#include "pipeline/executor.h"
#include "pipeline/flags.h"
#include "prometheus/exposer.h"
#include "server/metrics.h"
#include "server/worker_core.h"
#include "server/worker_service.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

int Main(int argc, char** argv) {
  std::string listen = "127.0.0.1", data_root, port_file, scheduler, advertise, labels;
  int port = 0, metrics_port = -1, grace_seconds = 30;
  int64_t max_pixels = 64'000'000;
  WorkerOptions options;
  cli::FlagSet flags("prepflow-worker",
                     "Serves work items of training jobs: reads samples below --data-root, runs "
                     "the first stages of each job's pipeline and streams the results back.");
  flags.String("listen", &listen, "address to listen on");
  flags.Int("port", &port, "port (0: pick a free one; the bound port is printed and logged)");
  flags.String("data-root", &data_root, "folder holding the datasets; nothing outside it is read");
  flags.Int("threads", &options.threads, "preprocessing threads (0: every available CPU)");
  flags.Int("metrics-port", &metrics_port,
            "serve Prometheus /metrics here (0: a free port; -1: off)");
  flags.Int("max-streams", &options.max_streams, "job streams open at once");
  flags.Int("max-streams-per-client", &options.max_streams_per_client,
            "job streams open at once from one client host");
  int max_message_bytes = 16 << 20;
  double open_timeout_seconds = 10, idle_connection_seconds = 300;
  flags.Double("open-timeout-seconds", &open_timeout_seconds,
               "end a stream that has not opened a job, and a connection that has not finished "
               "its handshake, within this (0: never; handshakes then get 120 s)");
  flags.Double("idle-connection-seconds", &idle_connection_seconds,
               "close a connection that has carried no call for this long");
  flags.Double("reindex-seconds", &options.min_reindex_seconds,
               "index a dataset again (a job brought a new fingerprint) at most this often; a "
               "refused open is answered from the cache for as long");
  flags.Int("max-message-bytes", &max_message_bytes,
            "largest message a client may send (work items are small)");
  SecurityOptions security_options;
  RegisterSecurityFlags(flags, &security_options, /*server=*/true);
  RegisterRoleTokenFlags(flags, &security_options, /*scheduler=*/false);
  flags.Int("max-items-per-stream", &options.max_items_per_stream,
            "outstanding work items a stream may have (0: 2 x threads)");
  flags.Int("max-item-samples", &options.max_item_samples, "samples one work item may ask for");
  flags.Int("max-pixels", &max_pixels, "largest image a job may decode, in pixels");
  flags.Int("max-memory-bytes", &options.max_memory_bytes,
            "result memory held at once: items are admitted against it from the pipeline's "
            "types before they run (0: half of this machine's or cgroup's memory)");
  flags.Int("max-jpeg-scans", &options.max_jpeg_scans_limit,
            "most scans a progressive JPEG may have (each is a pass over the image); a job may "
            "ask for less");
  flags.Int("grace-seconds", &grace_seconds, "on SIGTERM, time to finish in-flight items");
  flags.String("port-file", &port_file, "write the bound port to this file once listening");
  flags.String("worker-id", &options.worker_id, "name in logs and replies (default host:pid)");
  flags.String("scheduler", &scheduler,
               "prepflow-scheduler host:port to register with and heartbeat to (empty: none)");
  flags.String("advertise", &advertise,
               "host:port clients should dial, as told to the scheduler (default: --listen, or "
               "this host's name when listening on every address, with the bound port)");
  flags.String("labels", &labels, "locality labels for the scheduler, k=v,... (e.g. zone=a)");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (data_root.empty()) {
    std::fprintf(stderr, "prepflow-worker: --data-root is required\n\n%s", flags.Usage().c_str());
    return 2;
  }
  char root_real[PATH_MAX];
  if (realpath(data_root.c_str(), root_real) == nullptr) {
    std::fprintf(stderr, "prepflow-worker: --data-root %s: %s\n", data_root.c_str(),
                 std::strerror(errno));
    return 2;
  }
  options.data_root = root_real;
  auto parsed_labels = cli::ParseKeyValues(labels, "labels");
  if (!parsed_labels.ok()) {
    std::fprintf(stderr, "prepflow-worker: %s\n",
                 std::string(parsed_labels.status().message()).c_str());
    return 2;
  }
  options.max_pixels_limit = max_pixels;
  if (options.max_streams < 1 || options.max_streams_per_client < 1 ||
      options.max_item_samples < 1 || max_pixels < 1 || options.max_jpeg_scans_limit < 1 ||
      options.max_memory_bytes < 0 || max_message_bytes < 1024 || port < 0 ||
      !(idle_connection_seconds >= 1) || !(options.min_reindex_seconds >= 0)) {
    std::fprintf(stderr,
                 "prepflow-worker: --max-streams, --max-streams-per-client, --max-item-samples, "
                 "--max-pixels, --max-jpeg-scans must be positive, --max-memory-bytes >= 0, "
                 "--max-message-bytes at least 1024, --idle-connection-seconds at least 1 and "
                 "--port >= 0\n");
    return 2;
  }
  auto security = LoadServerSecurity(security_options, listen);
  if (!security.ok()) {
    std::fprintf(stderr, "prepflow-worker: %s\n", std::string(security.status().message()).c_str());
    return 2;
  }

  // Before any other thread starts, so that none of them takes the signals.
  daemon::StopSignals stop_signals;
  WorkerMetrics metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  if (metrics_port >= 0) {
    auto served = daemon::ServeMetrics(listen, metrics_port, metrics.registry());
    if (!served.ok()) {
      spdlog::error("{}", std::string(served.status().message()));
      return 1;
    }
    exposer = *std::move(served);
  }
  WorkerCore core(options, &metrics);
  const int64_t open_files = daemon::RaiseOpenFilesLimit();
  daemon::RouteGrpcLogs();

  // The gRPC server and the service on it. Built again on the same port when
  // the listener dies (see below), so each build has a service of its own.
  struct Serving {
    std::unique_ptr<WorkerService> service;
    std::unique_ptr<grpc::Server> server;
  };
  int bound_port = 0;
  auto serve = [&](int on_port) -> std::optional<Serving> {
    Serving s;
    s.service = std::make_unique<WorkerService>(&core, security->token, open_timeout_seconds);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(listen, ":", on_port), ServerCredentials(*security),
                             &bound_port);
    builder.RegisterService(s.service.get());
    // gRPC sets SO_REUSEPORT by default: a second daemon on a port in use
    // would then start too, and clients would land on either at random.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(max_message_bytes);
    builder.SetMaxSendMessageSize(-1);
    // Clients' flow-control (BDP) pings arrive while this side is busy and has
    // sent nothing; the default policy would answer them with GOAWAY
    // (too_many_pings) and end every stream on the connection.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    // Connections that never finish their handshake, or carry no call, are
    // closed: idle connections cannot pile up to the open-files limit.
    builder.AddChannelArgument(
        GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
        static_cast<int>(open_timeout_seconds > 0 ? open_timeout_seconds * 1000 : 120'000));
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
      "prepflow-worker {} listening on {}:{} ({} threads, data root {}, memory budget {} MB, "
      "{} open files, metrics {}, {}{})",
      core.worker_id(), listen, bound_port, core.threads(), options.data_root,
      core.max_memory_bytes() / 1'000'000, open_files,
      daemon::MetricsAddress(listen, exposer.get()),
      security->server_tls() ? (security->client_ca.empty() ? "TLS" : "mutual TLS") : "plaintext",
      security->token.empty() ? "" : ", bearer token required");
  daemon::AnnounceListening(listen, bound_port, port_file);

  std::unique_ptr<WorkerRegistration> registration;
  if (!scheduler.empty()) {
    proto::WorkerBeat beat;
    beat.set_worker_id(core.worker_id());
    if (advertise.empty()) {
      char host[256] = "localhost";
      gethostname(host, sizeof(host) - 1);
      const bool any = listen == "0.0.0.0" || listen == "::" || listen == "[::]";
      advertise = absl::StrCat(any ? std::string(host) : listen, ":", bound_port);
    }
    beat.set_address(advertise);
    beat.set_cores(std::min<double>(core.threads(), EffectiveCpus()));
    beat.set_version(PREPFLOW_VERSION);
    *beat.mutable_labels() = {parsed_labels->begin(), parsed_labels->end()};
    Security to_scheduler = *security;
    to_scheduler.token = security->worker_token;  // this worker's role credential
    registration = std::make_unique<WorkerRegistration>(
        scheduler, to_scheduler, beat,
        [&core](proto::WorkerBeat* b) { b->set_active_streams(core.active_streams()); });
    registration->Start();
  }

  // Until SIGTERM, restarting the listener if it stops accepting (daemon.h).
  const int signal_number = daemon::ServeUntilStopped(
      stop_signals, absl::StrCat(listen, ":", bound_port),
      [&] {
        serving->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
        serving->server->Wait();
        serving.reset();
      },
      [&] { return (serving = serve(bound_port)).has_value(); },
      [&] { metrics.ListenerRestarted(); });
  registration.reset();  // stop beating: the scheduler drops this worker
  spdlog::info("{}: finishing in-flight items (up to {} s), then exiting", strsignal(signal_number),
               grace_seconds);
  core.BeginDrain();
  if (serving) {
    serving->service->Drain();
    serving->server->Shutdown(std::chrono::system_clock::now() +
                              std::chrono::seconds(grace_seconds));
    serving->server->Wait();
  }
  core.Stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace prepflow

int main(int argc, char** argv) {
  prepflow::TuneAllocatorForStreaming();
  prepflow::daemon::SetUpLogging("prepflow-worker");
  return prepflow::Main(argc, argv);
}
