// prepflow-worker: runs a prefix of training jobs' input pipelines for
// remote clients. See `prepflow-worker --help` and README.md.
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/text.h"
#include "net/daemon.h"
#include "net/daemon_server.h"
#include "net/registration.h"
#include "net/security.h"
#include "pipeline/core/executor.h"
#include "pipeline/ops/plugins.h"
#include "prometheus/exposer.h"
#include "server/metrics.h"
#include "server/worker_core.h"
#include "server/worker_drain.h"
#include "server/worker_service.h"
#include "spdlog/spdlog.h"
#include "storage/metrics.h"
#include "storage/object_store.h"
#include "storage/options.h"

namespace prepflow {
namespace {

// Everything the command line says, checked.
struct WorkerFlags {
  WorkerOptions options;
  daemon::DaemonServerOptions server;
  std::string data_root, scheduler, advertise, labels, worker_class;
  double cost_per_core_hour = 0;
  std::map<std::string, std::string> parsed_labels;
  int grace_seconds = 30;
  bool drain = false;
  std::string pid_file, drain_reason_text;
  DrainReason drain_reason = DrainReason::kUnsaid;
  int64_t max_pixels = 64'000'000;
  int max_message_bytes = 16 << 20;
  WorkerServiceOptions service;
  std::string plugins, allow_url_prefix;
  SecurityOptions security;
  RemoteReadOptions storage;
  SampleCacheOptions cache;

  void Register(cli::FlagSet& f) {
    daemon::RegisterServerFlags(f, &server);
    f.String("data-root", &data_root, "folder holding the datasets; nothing outside it is read");
    f.Int("threads", &options.threads, "preprocessing threads (0: every available CPU)");
    f.Int("max-streams", &options.max_streams, "job streams open at once");
    f.Int("max-streams-per-client", &options.max_streams_per_client,
          "job streams open at once from one client host");
    f.Double("open-timeout-seconds", &service.open_timeout_seconds,
             "end a stream that has not opened a job, and a connection that has not finished "
             "its handshake, within this (0: never; handshakes then get 120 s)");
    f.Double("reply-timeout-seconds", &service.reply_timeout_seconds,
             "cancel a stream whose client has taken no reply for this long, dropping its "
             "unsent results and freeing their memory for other jobs (its client sends the "
             "items elsewhere); 0: never");
    f.Int("max-probe-bytes", &service.max_probe_bytes,
          "most bytes of link probe a job stream gets right after it opens (the client asks "
          "for them to time its link before any item; 0: none)");
    f.Double("reindex-seconds", &options.min_reindex_seconds,
             "index a dataset again (a job brought a new fingerprint) at most this often; a "
             "refused open is answered from the cache for as long");
    f.Int("max-message-bytes", &max_message_bytes,
          "largest message a client may send (work items are small)");
    RegisterSecurityFlags(f, &security, /*server=*/true);
    RegisterRoleTokenFlags(f, &security, /*scheduler=*/false);
    f.Int("max-items-per-stream", &options.max_items_per_stream,
          "outstanding work items a stream may have, and a job's items queued or running at "
          "once over all its ranks' streams (0: 2 x threads)");
    f.Int("max-item-samples", &options.max_item_samples, "samples one work item may ask for");
    f.Int("max-pixels", &max_pixels, "largest image a job may decode, in pixels");
    f.Int("max-file-bytes", &options.max_file_bytes_limit,
          "largest sample file (or shard member) this worker reads into memory; a job may ask "
          "for less, not more");
    f.Int("max-memory-bytes", &options.max_memory_bytes,
          "memory held for jobs (0: half of this machine's or cgroup's memory): half for "
          "results (items are admitted against it from the pipeline's types before they "
          "run), a quarter for what reads ahead and echo stores hold over all jobs, a quarter "
          "for the threads' working memory (a large image waits its turn; one over it runs "
          "on the trainer)");
    f.Int("max-jpeg-scans", &options.max_jpeg_scans_limit,
          "most scans a progressive JPEG may have (each is a pass over the image); a job may "
          "ask for less");
    f.Double("max-audio-seconds", &options.max_audio_seconds_limit,
             "longest audio a job may decode, in seconds; a job may ask for less");
    f.Int("max-audio-channels", &options.max_audio_channels_limit,
          "most channels audio a job decodes may have; a job may ask for less");
    f.Double("max-video-seconds", &options.max_video_seconds_limit,
             "longest video a job may decode from, in seconds (its header's claim); a job may "
             "ask for less");
    f.Int("max-video-frames", &options.max_video_frames_limit,
          "most frames one clip may need decoded (from the keyframe before it); a job may "
          "ask for less");
    RegisterPoolFlags(f);
    f.String("allow-url-prefix", &allow_url_prefix,
             "URLs jobs may name as data, PREFIX[,PREFIX...] (e.g. s3://bucket/train/,"
             "https://data.example.com/shards/); a job naming any other URL is refused. Default: "
             "none, so a worker reads no URL. S3 credentials come from this process's "
             "environment (AWS_ACCESS_KEY_ID, ...; see docs/deploy.md)");
    RegisterOptionFlags(f, StorageOptionFields(), &storage);
    RegisterOptionFlags(f, CacheOptionFields(), &cache);
    f.Int("echo-bytes", &options.echo_bytes,
          "data echoing: a job's values held for their later copies, at most (per job stream)");
    f.String("plugin", &plugins,
             "plugin libraries of custom ops (pipeline/ops/plugin_api.h), FILE[,FILE...]; a job "
             "naming an op none provides runs here only up to that op");
  }

  // How it joins the pool and leaves it.
  void RegisterPoolFlags(cli::FlagSet& f) {
    f.Int("grace-seconds", &grace_seconds,
          "on SIGTERM (or --drain), time to finish in-flight items; with --drain, the command "
          "waits this plus 10 s for the worker to leave");
    f.String("pid-file", &pid_file,
             "write this process's id here once listening (removed on exit); with --drain, the "
             "worker to drain");
    f.Bool("drain", &drain,
           "instead of serving: make the running worker drain and leave (the one --pid-file "
           "names; without it, process 1, a container's), and wait for it: exit 0 once it has "
           "left, 1 if it is still running after --grace-seconds + 10 s, 2 if there is no such "
           "worker. For a preStop hook or a node's termination handler");
    f.String("drain-reason", &drain_reason_text,
             "why it drains, told to the scheduler: stop (scale-down, maintenance) or reclaimed "
             "(a spot or preemptible VM's notice: the scheduler grants the rest of its --class "
             "last for a while). With --drain, sent to the worker (default: none, the worker's "
             "own applies); on a worker, what a SIGTERM that carries none means (default stop)");
    f.String("worker-id", &options.worker_id, "name in logs and replies (default host:pid)");
    f.String("scheduler", &scheduler,
             "prepflow-scheduler host:port to register with and heartbeat to (empty: none)");
    f.String("advertise", &advertise,
             "host:port clients should dial, as told to the scheduler (default: --listen, or "
             "this host's name when listening on every address, with the bound port)");
    f.String("labels", &labels, "locality labels for the scheduler, k=v,... (e.g. zone=a)");
    f.String("class", &worker_class,
             "what kind of capacity this is, for the scheduler's grants and metrics (e.g. spot, "
             "on-demand)");
    f.Double("cost-per-core-hour", &cost_per_core_hour,
             "what a core of this worker costs an hour: the scheduler grants the cheapest cores "
             "first and reports each job's cost (0: free, or not known)");
  }

  // The flags --drain reads too.
  std::string CheckDrain() {
    if (grace_seconds < 0 || grace_seconds > 86400) return "--grace-seconds must be 0 to 86400";
    absl::StatusOr<DrainReason> reason = ParseDrainReason(drain_reason_text);
    if (!reason.ok()) return std::string(reason.status().message());
    drain_reason = *reason;
    return "";
  }

  // The error to print (exit 2), or "" when every flag is usable.
  std::string Check() {
    if (data_root.empty()) return "--data-root is required";
    if (const std::string e = CheckDrain(); !e.empty()) return e;
    char root_real[PATH_MAX];
    if (realpath(data_root.c_str(), root_real) == nullptr) {
      return absl::StrCat("--data-root ", data_root, ": ", std::strerror(errno));
    }
    options.data_root = root_real;
    if (!(cost_per_core_hour >= 0) || !std::isfinite(cost_per_core_hour)) {
      return absl::StrCat("--cost-per-core-hour must be finite and >= 0, got ", cost_per_core_hour);
    }
    if (worker_class.size() > 63 || SafeText(worker_class) != worker_class) {
      return "--class must be at most 63 printable characters";
    }
    auto parsed = cli::ParseKeyValues(labels, "--labels");
    if (!parsed.ok()) return std::string(parsed.status().message());
    parsed_labels = {parsed->begin(), parsed->end()};
    if (absl::Status s = LoadPlugins(cli::SplitList(plugins)); !s.ok()) {
      return std::string(s.message());
    }
    for (const std::string& prefix : cli::SplitList(allow_url_prefix)) {
      if (!absl::StartsWith(prefix, "http://") && !absl::StartsWith(prefix, "https://") &&
          !absl::StartsWith(prefix, "s3://")) {
        return absl::StrCat("--allow-url-prefix: '", prefix,
                            "' is not an http://, https:// or s3:// URL");
      }
      options.allow_url_prefixes.push_back(prefix);
    }
    options.read_ahead = storage.read_ahead;
    options.index_cache_dir = storage.index_cache_dir;
    absl::StatusOr<ObjectStoreOptions> store = StoreOptions(storage);
    if (!store.ok()) return std::string(store.status().message());
    options.store = CurlObjectStore::Create(*std::move(store));
    if (cache.enabled()) {
      auto opened = SampleCache::Open(cache);
      if (!opened.ok()) return std::string(opened.status().message());
      options.cache = *std::move(opened);
    }
    options.max_pixels_limit = max_pixels;
    if (options.max_streams < 1 || options.max_streams_per_client < 1 ||
        options.max_item_samples < 1 || max_pixels < 1 || options.max_jpeg_scans_limit < 1 ||
        !(options.max_audio_seconds_limit > 0 &&
          options.max_audio_seconds_limit <= kMaxAudioSeconds) ||
        options.max_audio_channels_limit < 1 || options.max_audio_channels_limit > 65535 ||
        !(options.max_video_seconds_limit > 0 &&
          options.max_video_seconds_limit <= kMaxVideoSeconds) ||
        options.max_video_frames_limit < 1 || options.max_file_bytes_limit < 1 ||
        options.max_memory_bytes < 0 || options.echo_bytes < 0 || max_message_bytes < 1024 ||
        server.port < 0 || !(server.idle_connection_seconds >= 1) ||
        !(options.min_reindex_seconds >= 0)) {
      return "--max-streams, --max-streams-per-client, --max-item-samples, --max-pixels, "
             "--max-jpeg-scans, --max-file-bytes, --max-video-frames must be positive, "
             "--max-audio-seconds and --max-video-seconds in (0, 86400], "
             "--max-audio-channels 1 to 65535, --max-memory-bytes and "
             "--echo-bytes >= 0, "
             "--max-message-bytes at least 1024, --idle-connection-seconds at least 1 and "
             "--port >= 0";
    }
    if (!(service.reply_timeout_seconds >= 0)) return "--reply-timeout-seconds must be >= 0";
    if (service.max_probe_bytes < 0 || service.max_probe_bytes > (int64_t{1} << 30)) {
      return "--max-probe-bytes must be 0 to 1 GiB";
    }
    server.handshake_timeout_seconds =
        service.open_timeout_seconds > 0 ? service.open_timeout_seconds : 120;
    server.max_receive_message_bytes = max_message_bytes;
    server.unlimited_send = true;
    server.tolerate_pings = true;
    return "";
  }
};

// Registers with the scheduler and keeps beating, advertising `port`.
std::unique_ptr<WorkerRegistration> RegisterWithScheduler(const WorkerFlags& f,
                                                          const Security& security,
                                                          const WorkerCore& core, int port) {
  if (f.scheduler.empty()) return nullptr;
  proto::WorkerBeat beat;
  beat.set_worker_id(core.worker_id());
  std::string advertise = f.advertise;
  if (advertise.empty()) {
    char host[256] = "localhost";
    gethostname(host, sizeof(host) - 1);
    const std::string& listen = f.server.listen;
    const bool any = listen == "0.0.0.0" || listen == "::" || listen == "[::]";
    advertise = absl::StrCat(any ? std::string(host) : listen, ":", port);
  }
  beat.set_address(advertise);
  beat.set_cores(std::min<double>(core.threads(), EffectiveCpus()));
  beat.set_version(PREPFLOW_VERSION);
  beat.set_worker_class(f.worker_class);
  beat.set_cost_per_core_hour(f.cost_per_core_hour);
  *beat.mutable_labels() = {f.parsed_labels.begin(), f.parsed_labels.end()};
  Security to_scheduler = security;
  to_scheduler.token = security.worker_token;  // this worker's role credential
  auto registration = std::make_unique<WorkerRegistration>(
      f.scheduler, to_scheduler, beat, [&core](proto::WorkerBeat* b) {
        b->set_active_streams(core.active_streams());
        b->set_draining(core.draining());
        b->set_reclaimed(core.drain_reclaimed());
      });
  registration->Start();
  return registration;
}

int Run(const WorkerFlags& f, const Security& security) {
  // Before any other thread starts, so that none of them takes the signals.
  daemon::StopSignals stop_signals;
  WorkerMetrics metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  if (f.server.metrics_port >= 0) {
    auto served = daemon::ServeMetrics(f.server.listen, f.server.metrics_port, metrics.registry());
    if (!served.ok()) {
      spdlog::error("{}", std::string(served.status().message()));
      return 1;
    }
    exposer = *std::move(served);
  }
  // Declared after the exposer, so it is unregistered (destroyed) first.
  std::shared_ptr<StorageCollector> storage_metrics;
  if (exposer) {
    storage_metrics = std::make_shared<StorageCollector>(f.options.store, "prepflow_worker");
    exposer->RegisterCollectable(storage_metrics);
  }
  std::shared_ptr<CacheCollector> cache_metrics;
  if (exposer && f.options.cache != nullptr) {
    cache_metrics = std::make_shared<CacheCollector>(f.options.cache, "prepflow_worker");
    exposer->RegisterCollectable(cache_metrics);
  }
  WorkerCore core(f.options, &metrics);
  const int64_t open_files = daemon::RaiseOpenFilesLimit();
  daemon::RouteGrpcLogs();
  daemon::DaemonServer server(f.server, security, [&] {
    WorkerServiceOptions service = f.service;
    service.token = security.token;
    return std::make_unique<WorkerService>(&core, std::move(service));
  });
  if (!server.Start()) return 1;
  spdlog::info(
      "prepflow-worker {} listening on {} ({} threads, data root {}, memory budget {} MB, "
      "{} open files, metrics {}, {}{})",
      core.worker_id(), server.address(), core.threads(), f.options.data_root,
      core.max_memory_bytes() / 1'000'000, open_files,
      daemon::MetricsAddress(f.server.listen, exposer.get()),
      security.server_tls() ? (security.client_ca.empty() ? "TLS" : "mutual TLS") : "plaintext",
      security.token.empty() ? "" : ", bearer token required");
  // The pid file before the port file: whoever waits for the port (a test,
  // a script) finds the pid file there too.
  if (!f.pid_file.empty()) WritePidFile(f.pid_file);
  daemon::AnnounceListening(f.server.listen, server.port(), f.server.port_file);
  std::unique_ptr<WorkerRegistration> registration =
      RegisterWithScheduler(f, security, core, server.port());
  const int signal_number =
      server.ServeUntilStopped(stop_signals, [&] { metrics.ListenerRestarted(); });
  const DrainReason reason =
      DrainReasonOf(stop_signals.queued_value(),
                    f.drain_reason == DrainReason::kUnsaid ? DrainReason::kStop : f.drain_reason);
  spdlog::info("{} (reason {}): draining: finishing in-flight items (up to {} s), then exiting",
               strsignal(signal_number), DrainReasonName(reason), f.grace_seconds);
  core.BeginDrain(reason == DrainReason::kReclaimed);
  // The scheduler grants it to no one from now on (the beat says draining),
  // and each stream's client stops sending it items (DrainNotice).
  if (registration) registration->Kick();
  if (auto* service = static_cast<WorkerService*>(server.service())) {
    service->Drain(f.grace_seconds);
  }
  server.Shutdown(f.grace_seconds);
  registration.reset();  // stop beating: the scheduler drops this worker
  core.Stop();
  if (!f.pid_file.empty()) RemovePidFile(f.pid_file);
  spdlog::info("stopped");
  return 0;
}

// --drain: the running worker drains and leaves; this waits for it.
int Drain(WorkerFlags& f) {
  const std::string error = f.CheckDrain();
  absl::StatusOr<pid_t> pid =
      error.empty() ? FindWorkerToDrain(f.pid_file) : absl::InvalidArgumentError(error);
  if (!pid.ok()) {
    std::fprintf(stderr, "prepflow-worker --drain: %s\n",
                 std::string(pid.status().message()).c_str());
    return 2;
  }
  const absl::Status drained = DrainAndWait(*pid, f.grace_seconds + 10.0, f.drain_reason);
  if (drained.ok()) return 0;
  std::fprintf(stderr, "prepflow-worker --drain: %s\n", std::string(drained.message()).c_str());
  return absl::IsPermissionDenied(drained) ? 2 : 1;
}

int Main(int argc, char** argv) {
  WorkerFlags f;
  cli::FlagSet flags("prepflow-worker",
                     "Serves work items of training jobs: reads samples below --data-root, runs "
                     "the first stages of each job's pipeline and streams the results back.");
  f.Register(flags);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (f.drain) return Drain(f);
  std::string error = f.Check();
  auto security = error.empty() ? LoadServerSecurity(f.security, f.server.listen)
                                : absl::StatusOr<Security>(absl::InvalidArgumentError(error));
  if (!security.ok()) {
    std::fprintf(stderr, "prepflow-worker: %s\n%s",
                 std::string(security.status().message()).c_str(),
                 f.data_root.empty() ? ("\n" + flags.Usage()).c_str() : "");
    return 2;
  }
  return Run(f, *security);
}

}  // namespace
}  // namespace prepflow

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("prepflow-worker %s\n", PREPFLOW_VERSION);
    return 0;
  }
  prepflow::TuneAllocatorForStreaming();
  prepflow::daemon::SetUpDaemon("prepflow-worker");
  return prepflow::Main(argc, argv);
}
