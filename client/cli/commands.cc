#include "client/cli/commands.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/datasets.h"
#include "client/loader.h"
#include "client/metrics.h"
#include "client/stats_json.h"
#include "client/worker_process.h"
#include "net/flags.h"
#include "nlohmann/json.hpp"
#include "pipeline/checksum.h"
#include "pipeline/dataset.h"
#include "pipeline/epoch_order.h"
#include "pipeline/executor.h"
#include "pipeline/materialize.h"
#include "pipeline/op_schema.h"
#include "pipeline/pack.h"
#include "pipeline/pipeline.h"
#include "pipeline/plugins.h"
#include "pipeline/profiler.h"
#include "pipeline/synthetic.h"
#include "pipeline/text.h"
#include "policy/planner.h"
#include "policy/replanner.h"
#include "prometheus/exposer.h"
#include "spdlog/spdlog.h"
#include "storage/flags.h"

namespace prepflow::cli {
namespace {

constexpr char kPipelineHelp[] =
    "imagenet-train | imagenet-eval | a pipeline text file | the text itself ('stages { ... }')";

using Json = nlohmann::ordered_json;

constexpr char kPluginHelp[] =
    "plugin libraries of custom ops (pipeline/plugin_api.h), FILE[,FILE...]";

// Loads the --plugin list.
absl::Status LoadPluginFlag(const std::string& list) { return LoadPlugins(SplitList(list)); }

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;

// The --json contract (RunWithJsonContract): whether this process printed
// its JSON line, and the last error it reported.
bool json_printed = false;
std::string last_error;

// Prints `j` as one line of valid UTF-8 JSON. Strings from outside go
// through SafeText first; the replacing handler is a second line of defence,
// so a stray byte can never abort the process.
void PrintJson(const Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  std::fflush(stdout);
  json_printed = true;
}

// Prints a usage error and returns the usage exit code.
int UsageError(const std::string& message, const FlagSet& flags) {
  last_error = SafeText(message);
  std::fprintf(stderr, "%s\n%s", last_error.c_str(), flags.UsageAfter(message).c_str());
  return kUsage;
}

int Failure(const std::string& command, const absl::Status& status) {
  last_error = SafeText(status.message());
  std::fprintf(stderr, "prepflow %s: error: %s\n", command.c_str(), last_error.c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? kUsage : kFailed;
}

// Parses the command's flags. Returns the exit code when the command should
// stop here (bad usage, or --help printed).
std::optional<int> ParseFlags(FlagSet& flags, int argc, char** argv) {
  if (absl::Status s = flags.Parse(argc, argv, 2); !s.ok()) {
    return UsageError(std::string(s.message()), flags);
  }
  if (flags.help()) {
    std::printf("%s", flags.Usage().c_str());
    return kOk;
  }
  return std::nullopt;
}

// A single status line on stderr, redrawn at most 4 times a second, and only
// when stderr is a terminal.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) == 1) {}
  void Update(const std::string& line, bool force = false) {
    if (!tty_) return;
    const int64_t now = WallNanos();
    if (!force && now - last_ < 250'000'000) return;
    last_ = now;
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void Done() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  bool tty_;
  bool shown_ = false;
  int64_t last_ = 0;
};

std::string StagesTable(const std::vector<StageStats>& stages) {
  double total = 0;
  for (const StageStats& s : stages) total += s.cpu_seconds_per_sample();
  std::string out = absl::StrFormat("  %-24s %14s %7s %16s\n", "stage", "cpu ms/sample", "share",
                                    "out KiB/sample");
  for (const StageStats& s : stages) {
    absl::StrAppendFormat(
        &out, "  %-24s %14.3f %6.1f%% %16.1f\n", s.name, s.cpu_seconds_per_sample() * 1e3,
        total > 0 ? 100 * s.cpu_seconds_per_sample() / total : 0, s.bytes_per_sample() / 1024);
  }
  absl::StrAppendFormat(&out, "  %-24s %14.3f\n", "total", total * 1e3);
  return out;
}

// The flags shared by run and demo: what LoaderOptions holds.
struct RunFlags {
  std::string data, format = "auto", pipeline = "imagenet-train", on_error = "skip";
  int batch = 64, threads = 0, epochs = 1, rank = 0, world_size = 1, prefetch = 2;
  int start_epoch = 0, start_batch = 0;
  uint64_t seed = 0;
  int64_t max_pixels = 64'000'000;
  int64_t max_file_bytes = kDefaultMaxFileBytes;
  int max_jpeg_scans = kDefaultMaxJpegScans;
  bool json = false, shuffle = true, drop_last = false, fallback_local = false;
  std::string offload, workers;  // offload unset: $PREPFLOW_OFFLOAD, else off
  std::string scheduler, labels, plugins, rank_split = "pad", job;
  int local_ranks = 0;
  double weight = 1, max_remote_cores = 0;
  double worker_timeout = 30, demand = 0, bandwidth_mbps = 0, hedge_after = 3;
  int item_samples = 8;
  int metrics_port = -1;
  SecurityOptions security;
  RemoteReadOptions storage;
  SampleCacheOptions cache;
  std::string cache_at = "auto", echo_at = "auto", echo = "1";
  int max_echo = 4, start_echo = 0;
  int64_t echo_window = 256, echo_bytes = int64_t{512} << 20;

  void Register(FlagSet& f, bool data_required) {
    f.String("data", &data,
             data_required
                 ? "dataset: an ImageFolder folder; WebDataset shards as a .tar file, a folder of "
                   "them or a brace pattern (shards/shard-{000000..000099}.tar); or the same "
                   "at a URL: https://host/shard-{000..099}.tar, s3://bucket/prefix (listed; "
                   "credentials from AWS_* in the environment)"
                 : "dataset to use instead of a generated one");
    f.String("format", &format, "auto | imagefolder | wds");
    f.String("pipeline", &pipeline, kPipelineHelp);
    f.String("plugin", &plugins, kPluginHelp);
    f.Int("batch", &batch, "samples per batch");
    f.Int("threads", &threads, "preprocessing threads (0: every available CPU)");
    f.Int("epochs", &epochs, "passes over the dataset");
    f.Int("start-epoch", &start_epoch, "resume: the first epoch to run (epochs counts from it)");
    f.Int("start-batch", &start_batch, "resume: batches of the first epoch already consumed");
    f.Uint("seed", &seed, "job seed: shuffle order and every random augmentation");
    f.String("on-error", &on_error, "skip (report, count and go on) | fail (stop, exit 1)");
    f.Int("max-pixels", &max_pixels, "refuse images whose header claims more pixels");
    f.Int("max-file-bytes", &max_file_bytes, "refuse sample files larger than this");
    f.Int("max-jpeg-scans", &max_jpeg_scans,
          "refuse progressive JPEGs with more scans than this (each is a pass over the image)");
    f.Bool("shuffle", &shuffle, "shuffle each epoch (--no-shuffle: dataset order)");
    f.Bool("drop-last", &drop_last, "drop each epoch's last short batch");
    f.Int("rank", &rank, "this trainer's rank (samples are sharded across ranks)");
    f.Int("world-size", &world_size, "number of ranks");
    f.String("job", &job,
             "the training job's name, the same on every rank, so that workers, the scheduler "
             "and metrics see one job (default: $PREPFLOW_JOB, else torchrun's run id, else a "
             "fresh one per process)");
    f.Int("local-ranks", &local_ranks,
          "ranks of this job on this machine, sharing its CPUs (each plans with its share; "
          "0: $LOCAL_WORLD_SIZE, set by torchrun, else 1)");
    f.String("rank-split", &rank_split,
             "when the dataset does not divide by --world-size: pad (every rank the same "
             "samples and batches, repeating a few, as DistributedSampler), drop (leave the "
             "rest out) or uneven (every sample once; ranks differ by one)");
    f.Int("prefetch", &prefetch, "batches prepared ahead of the trainer");
    f.String(
        "offload", &offload,
        "off | auto | remote | cut=K[,remote_fraction=F] (unset: $PREPFLOW_OFFLOAD, else off)");
    f.Double("demand", &demand,
             "samples/s the trainer consumes, for --offload auto and --echo auto (0: measured; "
             "unlimited here)");
    f.Double("bandwidth-mbps", &bandwidth_mbps,
             "network into this trainer machine in Mbit/s, for --offload auto (0: unlimited; "
             "ranks on one machine each count their share)");
    f.String("workers", &workers, "prepflow-worker addresses, host:port,...");
    f.String("scheduler", &scheduler,
             "prepflow-scheduler host:port: take workers from its grants (with or instead of "
             "--workers)");
    f.Double("weight", &weight, "this job's share weight at the scheduler");
    f.String("labels", &labels, "locality for the scheduler, k=v,... (e.g. zone=a)");
    f.Double("max-remote-cores", &max_remote_cores,
             "most worker cores to ask the scheduler for (0: what the planner would use, or "
             "the fair share)");
    f.Double("worker-timeout", &worker_timeout,
             "seconds a worker may stay silent while it owes results before its work moves");
    f.Double("hedge-after", &hedge_after,
             "copy an item to an idle worker once it has waited this many times the fastest "
             "worker's item latency; the first answer wins (0: never)");
    f.Int("item-samples", &item_samples, "samples per remote work item");
    f.Bool("fallback-local", &fallback_local,
           "with --offload remote or cut=K: run locally (with a warning) when no worker can be "
           "reached at the start, instead of failing");
    RegisterSecurityFlags(f, &security, /*server=*/false);
    RegisterStorageFlags(f, &storage);
    RegisterCacheFlags(f, &cache);
    f.String("cache-at", &cache_at,
             "the stage boundary whose values caches keep, here and on workers: K (after stage "
             "K-1; 0: the read bytes) or auto (the last deterministic one before the first "
             "random stage)");
    f.String("echo", &echo,
             "data echoing: each sample loaded (up to --echo-at) yields this many copies per "
             "epoch, each with its own random draws after it (1: none); or auto: the planner "
             "picks each epoch's factor, the fewest copies that meet the demand (--demand, else "
             "measured) when fresh samples cannot, up to --max-echo");
    f.Int("max-echo", &max_echo, "--echo auto: the most copies a sample may yield per epoch");
    f.Int("start-echo", &start_echo,
          "--echo auto: the first epoch's factor (0: 1, nothing measured yet); when resuming "
          "mid-epoch, the factor that epoch had (--json's echo_factor)");
    f.String("echo-at", &echo_at,
             "the boundary copies share: K, or auto (the cache boundary, --cache-at)");
    f.Int("echo-window", &echo_window,
          "copies are shuffled within blocks of this many samples, so they are not adjacent");
    f.Int("echo-bytes", &echo_bytes, "values held for their later copies, at most");
    f.Int("metrics-port", &metrics_port,
          "serve Prometheus metrics on this port while running (0: any free port; -1: none)");
    f.Bool("json", &json, "print a JSON summary as the last line of stdout");
  }

  absl::StatusOr<LoaderOptions> ToOptions() const {
    LoaderOptions o;
    o.dataset.set_path(data);
    if (absl::Status s = CheckStorageOptions(storage); !s.ok()) return s;
    o.storage = storage;
    auto fmt = ParseDatasetFormat(format);
    if (!fmt.ok()) return fmt.status();
    o.dataset.set_format(*fmt);
    o.dataset.set_max_file_bytes(max_file_bytes);
    if (absl::Status s = LoadPluginFlag(plugins); !s.ok()) return s;
    auto spec = LoadPipelineSpec(pipeline);
    if (!spec.ok())
      return absl::InvalidArgumentError(absl::StrCat("--pipeline: ", spec.status().message()));
    o.pipeline = *spec;
    auto oe = ParseOnError(on_error);
    if (!oe.ok()) return oe.status();
    o.on_error = *oe;
    o.batch_size = batch;
    o.threads = threads;
    o.epochs = epochs;
    o.first_epoch = start_epoch;
    o.skip_batches = start_batch;
    o.seed = seed;
    o.max_pixels = max_pixels;
    o.max_jpeg_scans = max_jpeg_scans;
    o.shuffle = shuffle;
    o.drop_last = drop_last;
    o.rank = rank;
    o.world_size = world_size;
    o.job = job;
    auto split = ParseRankSplit(rank_split);
    if (!split.ok()) return split.status();
    o.rank_split = *split;
    o.local_ranks = local_ranks;
    o.prefetch_batches = prefetch;
    if (!offload.empty()) {
      auto mode = ParseOffload(offload);
      if (!mode.ok()) return mode.status();
      o.offload = *mode;
    }
    o.demand = demand;
    o.bandwidth = bandwidth_mbps * 1e6 / 8;
    o.workers = SplitList(workers);
    o.scheduler = scheduler;
    o.scheduler_weight = weight;
    o.security = security;
    auto parsed_labels = ParseKeyValues(labels, "labels");
    if (!parsed_labels.ok()) return parsed_labels.status();
    o.labels = *std::move(parsed_labels);
    o.max_remote_cores = max_remote_cores;
    o.worker_timeout_seconds = worker_timeout;
    o.hedge_after = hedge_after;
    o.item_samples = item_samples;
    o.fallback_local = fallback_local;
    o.cache = cache;
    o.echo_auto = echo == "auto";
    if (!o.echo_auto && !absl::SimpleAtoi(echo, &o.echo)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--echo: '", echo, "' is neither auto nor a number of copies (1, 2, ...)"));
    }
    o.max_echo = max_echo;
    o.start_echo = start_echo;
    o.echo_window = echo_window;
    o.echo_bytes = echo_bytes;
    if (echo_at != "auto" && (!absl::SimpleAtoi(echo_at, &o.echo_at) || o.echo_at < 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--echo-at: '", echo_at, "' is neither auto nor a stage boundary (0, 1, ...)"));
    }
    if (cache_at != "auto" && (!absl::SimpleAtoi(cache_at, &o.cache_at) || o.cache_at < 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cache-at: '", cache_at, "' is neither auto nor a stage boundary (0, 1, ...)"));
    }
    return o;
  }
};

struct RunOutcome {
  int exit_code = kFailed;
  Json summary;  // the --json object (null if the loader could not start)
  uint64_t checksum = 0;
};

// The --json summary: the stats (one field table: loader_stats.h), then the
// run's context.
Json RunJson(const std::string& command, const LoaderOptions& options, const Loader& loader,
             const LoaderStats& st, const absl::Status& status) {
  Json j = StatsJson(st);
  j["command"] = command;
  j["epochs"] = options.epochs;
  j["batch"] = options.batch_size;
  j["threads"] = loader.threads();
  j["pipeline"] = loader.pipeline().name();
  j["dataset"] = SafeText(loader.dataset().root());
  j["format"] = loader.dataset().format();
  j["samples_per_epoch"] = loader.samples_per_epoch();
  j["job_id"] = loader.job_id();
  j["rank"] = options.rank;
  j["world_size"] = options.world_size;
  if (!status.ok()) j["error"] = SafeText(status.message());
  return j;
}

void PrintRunSummary(const LoaderStats& st, const absl::Status& status) {
  const double rate = st.seconds > 0 ? st.images / st.seconds : 0;
  std::printf("%s: %lld images, %lld errors in %.2f s = %.1f images/s; checksum %s\n",
              status.ok() ? "done" : "stopped", static_cast<long long>(st.images),
              static_cast<long long>(st.errors), st.seconds, rate,
              ChecksumHex(st.checksum).c_str());
  if (!st.plan.empty())
    std::printf("plan (%lld changes): %s\n", static_cast<long long>(st.plan_changes),
                st.plan.c_str());
  if (st.remote_images > 0 || st.workers_total > 0) {
    std::printf(
        "offload %s: %lld local, %lld remote images; %d of %d workers alive, %lld items "
        "reissued\n",
        st.offload.c_str(), static_cast<long long>(st.local_images),
        static_cast<long long>(st.remote_images), st.workers_alive, st.workers_total,
        static_cast<long long>(st.reissued_items));
  }
  if (st.remote_images > 0) {
    // Both sides: a remote run's stages here are mostly zeros.
    std::printf("stages here:\n%sstages on the workers:\n%s", StagesTable(st.stages).c_str(),
                StagesTable(st.remote_stages).c_str());
  } else {
    std::printf("%s", StagesTable(st.stages).c_str());
  }
  std::fflush(stdout);  // before the next run's log lines on stderr
}

// Runs `options` to the end. Prints progress and, unless `json`, a human
// summary; the JSON summary is returned for the caller to print.
RunOutcome ExecuteRun(const std::string& command, const LoaderOptions& options, bool json,
                      int metrics_port = -1) {
  RunOutcome outcome;
  auto loader_or = Loader::Create(options);
  if (!loader_or.ok()) {
    outcome.exit_code = Failure(command, loader_or.status());
    return outcome;
  }
  Loader& loader = **loader_or;
  // Declared after the loader, so destroyed (and no longer scraping) first.
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<LoaderMetrics> metrics;
  if (metrics_port > 65535) {
    outcome.exit_code = Failure(command, absl::InvalidArgumentError(absl::StrCat(
                                             "--metrics-port: must be 0 to 65535 (or -1: none), "
                                             "got ",
                                             metrics_port)));
    return outcome;
  }
  if (metrics_port >= 0) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(absl::StrCat("0.0.0.0:", metrics_port));
    } catch (const std::exception& e) {
      outcome.exit_code = Failure(command, absl::UnavailableError(absl::StrCat(
                                               "--metrics-port ", metrics_port, ": ", e.what())));
      return outcome;
    }
    metrics = std::make_shared<LoaderMetrics>(&loader);
    exposer->RegisterCollectable(metrics);
    spdlog::info("serving metrics on port {} (/metrics), job {}", exposer->GetListeningPorts()[0],
                 loader.job_id());
  }
  const int64_t total =
      std::max<int64_t>(0, loader.batches_per_epoch() * options.epochs - options.skip_batches);
  if (!json) {
    std::printf("prepflow %s: %s %s (%lld samples%s), %s, %d threads, batch %d\n", command.c_str(),
                loader.dataset().format(), loader.dataset().root().c_str(),
                static_cast<long long>(loader.samples_per_epoch()),
                loader.dataset().classes().empty()
                    ? ""
                    : absl::StrCat(", ", loader.dataset().classes().size(), " classes").c_str(),
                loader.pipeline().DebugString().c_str(), loader.threads(), options.batch_size);
    std::fflush(stdout);
  }
  Progress progress;
  absl::Status status;
  int64_t done = 0;
  while (true) {
    auto batch = loader.Next();
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
    if (*batch == nullptr) break;
    ++done;
    const LoaderStats st = loader.Stats();
    progress.Update(absl::StrFormat("epoch %d/%d  batch %d/%d  %d images  %.1f images/s  %d errors",
                                    (*batch)->epoch() + 1, options.epochs, done, total, st.images,
                                    st.seconds > 0 ? st.images / st.seconds : 0, st.errors));
  }
  progress.Done();
  const LoaderStats st = loader.Stats();
  if (json) {
    outcome.summary = RunJson(command, options, loader, st, status);
  } else {
    PrintRunSummary(st, status);
  }
  outcome.checksum = st.checksum;
  outcome.exit_code = status.ok() ? kOk : Failure(command, status);
  return outcome;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  RunFlags rf;
  FlagSet flags("prepflow run",
                "Runs a pipeline over a dataset on this machine's CPUs and reports "
                "throughput and the order-independent checksum.");
  rf.Register(flags, true);
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (rf.data.empty()) return UsageError("prepflow run: --data is required", flags);
  auto options = rf.ToOptions();
  if (!options.ok()) return Failure("run", options.status());
  RunOutcome outcome = ExecuteRun("run", *options, rf.json, rf.metrics_port);
  if (rf.json && !outcome.summary.is_null()) PrintJson(outcome.summary);
  return outcome.exit_code;
}

namespace {

// One thread's profile of a seeded subset of a dataset: each stage's CPU
// time and output size per sample ("read" first).
struct Profile {
  std::string pipeline, pipeline_debug, dataset;
  int64_t samples = 0, errors = 0;
  double seconds = 0;
  std::vector<StageStats> stages;
};

// What `prepflow profile` and `prepflow plan --data` profile.
struct ProfileFlags {
  std::string data, format = "auto", pipeline = "imagenet-train", plugins;
  int64_t samples = 0;
  uint64_t seed = 0;
  int64_t max_pixels = DecodeOptions().max_pixels;

  void Register(FlagSet& f, const char* data_help, const char* samples_help) {
    f.String("data", &data, data_help);
    f.String("format", &format, "auto | imagefolder | wds");
    f.String("pipeline", &pipeline, kPipelineHelp);
    f.String("plugin", &plugins, kPluginHelp);
    f.Int("samples", &samples, samples_help);
    f.Uint("seed", &seed, "job seed");
    f.Int("max-pixels", &max_pixels, "refuse images whose header claims more pixels");
  }
};

absl::StatusOr<Profile> ProfileDataset(const ProfileFlags& pf) {
  proto::DatasetSpec dspec;
  dspec.set_path(pf.data);
  auto fmt = ParseDatasetFormat(pf.format);
  if (!fmt.ok()) return fmt.status();
  dspec.set_format(*fmt);
  if (absl::Status s = LoadPluginFlag(pf.plugins); !s.ok()) return s;
  auto spec = LoadPipelineSpec(pf.pipeline);
  if (!spec.ok()) return absl::InvalidArgumentError(spec.status().message());
  PipelineOptions popts;
  popts.seed = pf.seed;
  popts.decode.max_pixels = pf.max_pixels;
  auto pipeline = Pipeline::Create(*spec, popts);
  if (!pipeline.ok()) return pipeline.status();
  auto dataset = OpenClientDataset(dspec, RemoteReadOptions());
  if (!dataset.ok()) return dataset.status();
  std::vector<int64_t> order = EpochOrder((*dataset)->size(), pf.seed, 0, true, 0, 1);
  if (pf.samples > 0 && pf.samples < static_cast<int64_t>(order.size())) order.resize(pf.samples);
  StageProfiler read_profiler({"read"});
  StageProfiler stage_profiler((*pipeline)->stage_names());
  Workspace ws;
  Progress progress;
  Profile out;
  const int64_t t0 = WallNanos();
  for (size_t i = 0; i < order.size(); ++i) {
    Sample s;
    s.index = order[i];
    s.label = (*dataset)->label(s.index);
    const int64_t c0 = ThreadCpuNanos();
    size_t size = 0;
    absl::Status st = (*dataset)->Read(s.index, &ws.encoded, &size);
    read_profiler.Record(0, ThreadCpuNanos() - c0, static_cast<int64_t>(size));
    if (st.ok()) {
      s.data = ws.encoded.data();
      s.size = size;
      s.shape = {static_cast<int64_t>(size)};
      st = (*pipeline)->Run(0, (*pipeline)->num_stages(), s, ws, &stage_profiler);
    }
    if (!st.ok()) {
      ++out.errors;
      std::fprintf(stderr, "skipping %s: %s\n", SafeText((*dataset)->SamplePath(s.index)).c_str(),
                   SafeText(st.message()).c_str());
    }
    progress.Update(absl::StrFormat("profiled %d/%d samples", i + 1, order.size()));
  }
  progress.Done();
  out.seconds = (WallNanos() - t0) * 1e-9;
  out.pipeline = (*pipeline)->name();
  out.pipeline_debug = (*pipeline)->DebugString();
  out.dataset = (*dataset)->root();
  out.samples = static_cast<int64_t>(order.size());
  out.stages = read_profiler.Snapshot();
  for (StageStats& st : stage_profiler.Snapshot()) out.stages.push_back(std::move(st));
  return out;
}

}  // namespace

int ProfileCommand(int argc, char** argv) {
  ProfileFlags pf;
  pf.samples = 256;
  bool json = false;
  FlagSet flags("prepflow profile",
                "Runs a pipeline over a sample of the dataset on one thread and reports each "
                "stage's CPU time and output size per sample (what the offload planner reads).");
  pf.Register(flags, "dataset: as for prepflow run (a folder, shards, a pattern or a URL)",
              "samples to profile (a seeded random subset; 0: all)");
  flags.Bool("json", &json, "print JSON instead of a table");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (pf.data.empty()) return UsageError("prepflow profile: --data is required", flags);
  if (pf.samples < 0) return UsageError("prepflow profile: --samples must be >= 0", flags);
  auto profile = ProfileDataset(pf);
  if (!profile.ok()) return Failure("profile", profile.status());
  const Profile& p = *profile;
  if (json) {
    Json j = {{"command", "profile"},          {"pipeline", p.pipeline}, {"dataset", p.dataset},
              {"samples", p.samples},          {"errors", p.errors},     {"seconds", p.seconds},
              {"stages", StagesJson(p.stages)}};
    PrintJson(j);
  } else {
    std::printf("prepflow profile: %s over %lld samples of %s (%lld errors), one thread\n",
                p.pipeline_debug.c_str(), static_cast<long long>(p.samples), p.dataset.c_str(),
                static_cast<long long>(p.errors));
    std::printf("%s", StagesTable(p.stages).c_str());
  }
  return kOk;
}

namespace {

// "8,2,1" -> {8, 2, 1}; InvalidArgument naming the flag.
absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &v) || !(v >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a non-negative number"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

namespace {

void PrintPlan(const policy::PlanInput& in, const std::vector<std::string>& names,
               const policy::Plan& plan, bool json) {
  if (json) {
    Json stages = Json::array();
    for (size_t i = 0; i < names.size(); ++i) {
      stages.push_back({{"name", names[i]},
                        {"cpu_ms_per_sample", in.local_cost[i] * 1e3},
                        {"bytes_per_sample", in.boundary_bytes[i]}});
    }
    Json binding = Json::array();
    for (policy::Binding b : plan.binding) binding.push_back(policy::BindingName(b));
    Json j = {{"command", "plan"},
              {"stages", stages},
              {"throughput", plan.throughput},
              {"rate_per_cut", plan.rate},
              {"remote_fraction", plan.remote_fraction},
              {"local_cores", plan.local_cores_used},
              {"remote_cores", plan.remote_cores_used},
              {"workers", plan.workers},
              {"network_bytes_per_s", plan.network_bytes_per_s},
              {"binding", binding},
              {"explanation", plan.explanation}};
    PrintJson(j);
    return;
  }
  std::printf("  %-24s %14s %16s\n", "stage", "cpu ms/sample", "out KiB/sample");
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("  %-24s %14.3f %16.1f\n", names[i].c_str(), in.local_cost[i] * 1e3,
                in.boundary_bytes[i] / 1024);
  }
  std::printf("\nplan: %s\n", plan.explanation.c_str());
  for (size_t k = 0; k < plan.rate.size(); ++k) {
    if (plan.rate[k] <= 0) continue;
    std::printf("  cut=%zu  %.1f samples/s\n", k, plan.rate[k]);
  }
}

}  // namespace

namespace {

// prepflow plan's reuse terms (policy/planner.h: K, h, E, s, S_l, S_r).
struct ReuseFlags {
  int reuse_at = 0, max_echo = 4;
  double cache_hit = 0, read_bytes = -1, storage_mbps = 0, worker_storage_mbps = 0;
  std::string echo = "1";

  void Register(FlagSet& flags) {
    flags.Int("reuse-at", &reuse_at,
              "reuse: the boundary a load reaches (the cache or echo boundary; 0: the read)");
    flags.Double("cache-hit", &cache_hit, "reuse: the share of loads caches answer (0 to 1)");
    flags.String("echo", &echo,
                 "reuse: copies per load, or auto (the fewest that meet --demand, up to "
                 "--max-echo)");
    flags.Int("max-echo", &max_echo, "with --echo auto: the most copies per load");
    flags.Double("read-bytes", &read_bytes,
                 "bytes a load reads from storage (default: with --data, the files' mean size; "
                 "else 0)");
    flags.Double("storage-mbps", &storage_mbps,
                 "storage read bandwidth of this trainer in Mbit/s (0: unlimited)");
    flags.Double("worker-storage-mbps", &worker_storage_mbps,
                 "storage read bandwidth of the workers together in Mbit/s (0: unlimited)");
  }

  // Sets the terms in `in` and plans, choosing the echo factor for --echo
  // auto. InvalidArgument naming the flag.
  absl::StatusOr<policy::Plan> Plan(policy::PlanInput* in) const {
    in->reuse_at = reuse_at;
    in->cache_hit = cache_hit;
    in->read_bytes = std::max(0.0, read_bytes);
    if (storage_mbps > 0) in->local_storage_bandwidth = storage_mbps * 1e6 / 8;
    if (worker_storage_mbps > 0) in->remote_storage_bandwidth = worker_storage_mbps * 1e6 / 8;
    if (echo == "auto") {
      policy::Plan chosen;
      absl::StatusOr<int> factor = policy::ChooseEcho(*in, max_echo, &chosen);
      if (!factor.ok()) return factor.status();
      in->echo = *factor;
      return chosen;
    }
    if (!absl::SimpleAtod(echo, &in->echo) || !(in->echo >= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--echo: '", echo, "' is neither auto nor a number >= 1"));
    }
    return policy::MakePlan(*in);
  }
};

}  // namespace

int PlanCommand(int argc, char** argv) {
  ProfileFlags pf;
  pf.samples = 64;
  std::string stage_ms, remote_ms, stage_bytes;
  double local_cores = 1, remote_cores = 0, cores_per_worker = 1, bandwidth_mbps = 0, demand = 0;
  double receive_ns_per_byte = policy::kPriorReceiveCpuPerByte * 1e9,
         send_ns_per_byte = policy::kAssumedSendCpuPerByte * 1e9;
  bool json = false;
  FlagSet flags("prepflow plan",
                "Prints what the offload planner decides for given measurements, or for a short "
                "profile of a dataset: how many samples take each cut, the remote cores and "
                "workers to ask for, and which resource binds.");
  pf.Register(flags, "profile this dataset for the stage costs and sizes",
              "samples to profile with --data");
  flags.String("stage-ms", &stage_ms, "instead of --data: CPU ms per sample of each stage, a,b,c");
  flags.String("remote-ms", &remote_ms,
               "CPU ms per sample of each stage on a worker (default: as here)");
  flags.String("stage-bytes", &stage_bytes, "with --stage-ms: bytes per sample after each stage");
  flags.Double("local-cores", &local_cores, "cores this trainer may spend on preprocessing");
  flags.Double("remote-cores", &remote_cores, "remote cores available");
  flags.Double("cores-per-worker", &cores_per_worker, "cores of one worker");
  flags.Double("bandwidth-mbps", &bandwidth_mbps, "ingest bandwidth in Mbit/s (0: unlimited)");
  flags.Double("demand", &demand, "samples/s the training loop consumes (0: unlimited)");
  flags.Double("receive-ns-per-byte", &receive_ns_per_byte,
               "CPU ns this trainer spends per byte it receives");
  flags.Double("send-ns-per-byte", &send_ns_per_byte, "CPU ns a worker spends per byte it sends");
  int max_cut = -1;
  flags.Int("max-cut", &max_cut,
            "the last cut workers can take: stages from it on run here (e.g. a custom op the "
            "workers lack); -1: any");
  ReuseFlags reuse;
  reuse.Register(flags);
  flags.Bool("json", &json, "print JSON");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;

  policy::PlanInput in;
  std::vector<std::string> names;
  if (!stage_ms.empty()) {
    auto ms = ParseList("stage-ms", stage_ms);
    if (!ms.ok()) return Failure("plan", ms.status());
    auto bytes = ParseList("stage-bytes", stage_bytes);
    if (!bytes.ok()) return Failure("plan", bytes.status());
    for (double v : *ms) in.local_cost.push_back(v / 1e3);
    in.boundary_bytes = *bytes;
    for (size_t i = 0; i < in.local_cost.size(); ++i) names.push_back(absl::StrCat("stage ", i));
  } else if (!pf.data.empty()) {
    auto profile = ProfileDataset(pf);
    if (!profile.ok()) return Failure("plan", profile.status());
    // "read" first, then the stages; whoever runs stage 0 reads the file.
    const std::vector<StageStats>& stages = profile->stages;
    for (size_t i = 1; i < stages.size(); ++i) {
      names.push_back(stages[i].name);
      in.local_cost.push_back(stages[i].cpu_seconds_per_sample());
      in.boundary_bytes.push_back(stages[i].bytes_per_sample());
    }
    if (!in.local_cost.empty()) in.local_cost[0] += stages[0].cpu_seconds_per_sample();
    if (reuse.read_bytes < 0) reuse.read_bytes = stages[0].bytes_per_sample();
  } else {
    return UsageError("prepflow plan: give --data, or --stage-ms with --stage-bytes", flags);
  }
  if (!remote_ms.empty()) {
    auto ms = ParseList("remote-ms", remote_ms);
    if (!ms.ok()) return Failure("plan", ms.status());
    for (double v : *ms) in.remote_cost.push_back(v / 1e3);
  }
  in.local_cores = local_cores;
  in.remote_cores = remote_cores;
  in.cores_per_worker = cores_per_worker;
  in.local_cost_per_byte = receive_ns_per_byte * 1e-9;
  in.remote_cost_per_byte = send_ns_per_byte * 1e-9;
  if (bandwidth_mbps > 0) in.bandwidth = bandwidth_mbps * 1e6 / 8;
  if (demand > 0) in.demand = demand;
  in.max_cut = max_cut;
  if (max_cut >= 0 && max_cut < static_cast<int>(names.size())) {
    in.max_cut_why = absl::StrCat("--max-cut: ", names[max_cut], " and after run here");
  }
  absl::StatusOr<policy::Plan> plan = reuse.Plan(&in);
  if (!plan.ok()) return Failure("plan", plan.status());
  PrintPlan(in, names, *plan, json);
  return kOk;
}

namespace {

// What materialize and strategies open from their flags.
struct DataAndPipeline {
  proto::PipelineSpec spec;
  std::unique_ptr<Pipeline> pipeline;
  std::unique_ptr<Dataset> dataset;
};

// Loads the plugins, the pipeline and the dataset. Errors: InvalidArgument
// naming the flag (a usage error), or the dataset's.
absl::StatusOr<DataAndPipeline> OpenDataAndPipeline(const std::string& data,
                                                    const std::string& format,
                                                    const std::string& pipeline,
                                                    const std::string& plugins,
                                                    const PipelineOptions& options) {
  DataAndPipeline out;
  if (absl::Status s = LoadPluginFlag(plugins); !s.ok()) return s;
  auto spec = LoadPipelineSpec(pipeline);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--pipeline: ", spec.status().message()));
  }
  out.spec = *std::move(spec);
  auto built = Pipeline::Create(out.spec, options);
  if (!built.ok()) return built.status();
  out.pipeline = *std::move(built);
  proto::DatasetSpec dspec;
  dspec.set_path(data);
  auto fmt = ParseDatasetFormat(format);
  if (!fmt.ok()) return fmt.status();
  dspec.set_format(*fmt);
  auto dataset = OpenClientDataset(dspec, RemoteReadOptions());
  if (!dataset.ok()) return dataset.status();
  out.dataset = *std::move(dataset);
  return out;
}

// The bytes of the files in `dir` (not below it).
uint64_t FolderBytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ignored;
  for (const auto& e : std::filesystem::directory_iterator(dir, ignored)) {
    bytes += e.is_regular_file(ignored) ? e.file_size(ignored) : 0;
  }
  return bytes;
}

// Where pack and materialize write: a folder, or an s3:// prefix, to which
// each shard is uploaded from a staging folder (removed at the end).
struct ShardOutput {
  std::optional<std::filesystem::path> staging;

  absl::Status Prepare(const std::string& out, PackOptions* options) {
    options->out_dir = out;
    if (!IsUrl(out)) return absl::OkStatus();
    auto upload = RemotePackOutput(out, options->overwrite);
    if (!upload.ok()) return upload.status();
    char dir[] = "/tmp/prepflow-pack.XXXXXX";
    if (mkdtemp(dir) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    staging = dir;
    options->out_dir = dir;
    options->overwrite = false;
    options->finished = *std::move(upload);
    return absl::OkStatus();
  }
  ~ShardOutput() {
    std::error_code ignored;
    if (staging.has_value()) std::filesystem::remove_all(*staging, ignored);
  }
};

}  // namespace

int PackCommand(int argc, char** argv) {
  std::string data, out;
  PackOptions options;
  bool json = false;
  FlagSet flags("prepflow pack",
                "Writes an ImageFolder as WebDataset shards (key.<ext> + key.cls), keeping "
                "sample order and labels, each with its index (<shard>.idx) for reading it "
                "remotely with one range request per sample.");
  flags.String("data", &data, "ImageFolder to pack (a folder or a URL prefix)");
  flags.String("out", &out,
               "output folder for the shards (must be empty, or see --overwrite), or an "
               "s3://bucket/prefix to upload them to (credentials from AWS_*)");
  flags.Bool("overwrite", &options.overwrite,
             "write into a folder (or prefix) that is not empty, removing its .tar shards and "
             ".tar.idx indexes first (nothing else)");
  flags.Int("shard-samples", &options.samples_per_shard, "samples per shard");
  flags.String("prefix", &options.prefix, "shard file name prefix");
  flags.Bool("json", &json, "print a JSON summary as the last line");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (data.empty() || out.empty())
    return UsageError("prepflow pack: --data and --out are required", flags);
  ShardOutput output;
  if (absl::Status s = output.Prepare(out, &options); !s.ok()) return Failure("pack", s);
  proto::DatasetSpec dspec;
  dspec.set_path(data);
  dspec.set_format(proto::DatasetSpec::FORMAT_IMAGEFOLDER);
  auto dataset = OpenClientDataset(dspec, RemoteReadOptions());
  if (!dataset.ok()) return Failure("pack", dataset.status());
  Progress progress;
  const int64_t total = (*dataset)->size();
  const int64_t t0 = WallNanos();
  auto stats = PackWebDataset(**dataset, options, [&](const PackStats& s) {
    const double secs = (WallNanos() - t0) * 1e-9;
    progress.Update(absl::StrFormat("packed %d/%d samples into %d shards (%.0f samples/s)",
                                    s.samples, total, s.shards, secs > 0 ? s.samples / secs : 0));
  });
  progress.Done();
  if (!stats.ok()) return Failure("pack", stats.status());
  const double seconds = (WallNanos() - t0) * 1e-9;
  if (json) {
    Json j = {{"command", "pack"},     {"samples", stats->samples}, {"shards", stats->shards},
              {"bytes", stats->bytes}, {"seconds", seconds},        {"out", out}};
    PrintJson(j);
  } else {
    std::printf("packed %lld samples into %lld shards (%.1f MiB) in %s in %.2f s\n",
                static_cast<long long>(stats->samples), static_cast<long long>(stats->shards),
                stats->bytes / 1048576.0, out.c_str(), seconds);
  }
  return kOk;
}

int MaterializeCommand(int argc, char** argv) {
  std::string data, out, pipeline = "imagenet-train", plugins, upto = "auto", format = "auto";
  MaterializeOptions options;
  int64_t max_pixels = 64'000'000;
  int max_jpeg_scans = kDefaultMaxJpegScans;
  bool json = false;
  FlagSet flags("prepflow materialize",
                "Runs the deterministic prefix of a pipeline once over a dataset and writes the "
                "values as WebDataset shards with a manifest (materialized.pbtxt): a job given "
                "them and the whole pipeline runs only the stages after (PRESTO's offline step; "
                "prepflow strategies says which prefix pays).");
  flags.String("data", &data, "the dataset to materialize (any --data prepflow run takes)");
  flags.String("format", &format, "auto | imagefolder | wds");
  flags.String("pipeline", &pipeline, kPipelineHelp);
  flags.String("plugin", &plugins, kPluginHelp);
  flags.String("upto", &upto,
               "run stages [0, K) and keep their output: K, or auto (the last deterministic "
               "boundary before the first random stage)");
  flags.String("encoding", &options.encoding,
               "raw (each value's wire form: exact) | png (images, lossless) | jpeg:Q (images, "
               "lossy, quality Q)");
  flags.String("out", &out,
               "output folder (must be empty, or see --overwrite), or an s3://bucket/prefix");
  flags.Bool("overwrite", &options.pack.overwrite,
             "write into a folder (or prefix) that is not empty, removing its shards first");
  flags.Int("shard-samples", &options.pack.samples_per_shard, "samples per shard");
  flags.Int("threads", &options.pack.threads, "threads running the stages (0: every CPU)");
  flags.Int("max-pixels", &max_pixels, "as prepflow run's: jobs must use the same");
  flags.Int("max-jpeg-scans", &max_jpeg_scans, "as prepflow run's: jobs must use the same");
  flags.Bool("json", &json, "print a JSON summary as the last line");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (data.empty() || out.empty()) {
    return UsageError("prepflow materialize: --data and --out are required", flags);
  }
  if (upto != "auto" && (!absl::SimpleAtoi(upto, &options.upto) || options.upto < 0)) {
    return UsageError(absl::StrCat("--upto: '", upto, "' is neither auto nor a stage boundary"),
                      flags);
  }
  if (absl::Status s = CheckEncoding(options.encoding); !s.ok()) {
    return UsageError(std::string(s.message()), flags);
  }
  if (options.pack.threads <= 0) options.pack.threads = AvailableCpus();
  PipelineOptions popts;
  popts.decode.max_pixels = max_pixels;
  popts.decode.max_jpeg_scans = max_jpeg_scans;
  auto opened = OpenDataAndPipeline(data, format, pipeline, plugins, popts);
  if (!opened.ok()) return Failure("materialize", opened.status());
  ShardOutput output;
  if (absl::Status s = output.Prepare(out, &options.pack); !s.ok()) {
    return Failure("materialize", s);
  }
  Progress progress;
  const int64_t total = opened->dataset->size();
  const int64_t t0 = WallNanos();
  auto made = Materialize(
      *opened->dataset, *opened->pipeline, opened->spec, options, [&](const PackStats& s) {
        const double secs = (WallNanos() - t0) * 1e-9;
        progress.Update(
            absl::StrFormat("materialized %d/%d samples into %d shards (%.0f samples/s)", s.samples,
                            total, s.shards, secs > 0 ? s.samples / secs : 0));
      });
  progress.Done();
  if (!made.ok()) return Failure("materialize", made.status());
  const double seconds = (WallNanos() - t0) * 1e-9;
  // Uploaded shards are gone from here: their size is not counted.
  const uint64_t bytes = output.staging ? 0 : FolderBytes(out);
  if (json) {
    PrintJson(Json{{"command", "materialize"},
                   {"samples", made->samples()},
                   {"upto", made->upto()},
                   {"encoding", made->encoding()},
                   {"bytes", bytes},
                   {"seconds", seconds},
                   {"out", SafeText(out)}});
  } else {
    std::printf("materialized %lld samples after stages [0, %d) as %s into %s in %.2f s\n",
                static_cast<long long>(made->samples()), made->upto(), made->encoding().c_str(),
                out.c_str(), seconds);
  }
  return kOk;
}

namespace {

// Each strategy's figures for `n` samples over `epochs` on `cores`, as JSON
// rows and table lines, and the best (least total time; -1: none usable).
struct Ranking {
  Json rows = Json::array();
  std::vector<std::string> lines;
  int best = -1;

  // The table and the recommendation, as text.
  void Print(const std::vector<Strategy>& measured) const {
    std::printf("%-14s  %13s  %12s  %12s  %12s\n", "upto encoding", "stored", "one-off", "online",
                "total");
    for (const std::string& line : lines) std::printf("%s\n", line.c_str());
    if (best < 0) return;
    const Strategy& st = measured[best];
    std::printf("recommended: %s\n",
                st.upto == 0 ? "run from the source (materializing does not pay)"
                             : absl::StrFormat("prepflow materialize --upto %d --encoding %s",
                                               st.upto, st.encoding)
                                   .c_str());
  }
};

Ranking Rank(const std::vector<Strategy>& measured, double n, int epochs, double cores,
             double storage_bps) {
  Ranking out;
  Json& rows = out.rows;
  std::vector<std::string>& lines = out.lines;
  int& best = out.best;
  double best_total = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    const Strategy& st = measured[i];
    const std::string name = st.upto == 0 ? "source" : absl::StrCat(st.upto, " ", st.encoding);
    Json row = {{"upto", st.upto}, {"encoding", st.upto == 0 ? "source" : st.encoding}};
    if (!st.unusable.empty() || st.samples == 0 || !(st.online_cpu > 0)) {
      row["unusable"] = SafeText(st.unusable);
      lines.push_back(absl::StrFormat("%-14s  cannot: %s", name, SafeText(st.unusable)));
      rows.push_back(row);
      continue;
    }
    double rate = cores / st.online_cpu;
    if (storage_bps > 0 && st.bytes > 0) rate = std::min(rate, storage_bps / st.bytes);
    const double oneoff = n * st.oneoff_cpu / cores;
    const double total = oneoff + epochs * n / rate;
    row["stored_bytes"] = n * st.bytes;
    row["oneoff_seconds"] = oneoff;
    row["online_samples_per_s"] = rate;
    row["online_samples_per_s_per_core"] = 1 / st.online_cpu;
    row["total_seconds"] = total;
    rows.push_back(row);
    lines.push_back(absl::StrFormat("%-14s  %10.1f MB  %10.1f s  %10.0f/s  %10.1f s", name,
                                    n * st.bytes / 1e6, oneoff, rate, total));
    if (best < 0 || total < best_total) {
      best = static_cast<int>(i);
      best_total = total;
    }
  }
  return out;
}

}  // namespace

int StrategiesCommand(int argc, char** argv) {
  ProfileFlags pf;
  pf.samples = 128;
  int epochs = 10;
  std::string encodings_text = "raw,png,jpeg:90";
  double cores = 0, storage_mbps = 0;
  bool json = false;
  FlagSet flags("prepflow strategies",
                "Measures, for each point where a pipeline could be materialized (prepflow "
                "materialize) and each encoding, the storage it takes, the one-off time to make "
                "it, the online throughput, and the total for --epochs; and recommends one "
                "(PRESTO's table, from a sample of the data on one thread).");
  pf.Register(flags, "dataset: as for prepflow run",
              "samples to measure (a seeded random subset; 0: all)");
  flags.Int("epochs", &epochs, "epochs the job will run");
  flags.String("encodings", &encodings_text, "encodings to weigh: raw, png, jpeg:Q, ...");
  flags.Double("cores", &cores, "cores the job preprocesses with (0: this machine's)");
  flags.Double("storage-mbps", &storage_mbps,
               "read bandwidth from storage in Mbit/s, which bounds each strategy's throughput by "
               "its bytes (0: unbounded)");
  flags.Bool("json", &json, "print JSON instead of a table");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (pf.data.empty()) return UsageError("prepflow strategies: --data is required", flags);
  if (epochs < 1 || pf.samples < 0 || !(cores >= 0) || !(storage_mbps >= 0)) {
    return UsageError("--epochs must be positive; --samples, --cores and --storage-mbps >= 0",
                      flags);
  }
  const std::vector<std::string> encodings = SplitList(encodings_text);
  for (const std::string& e : encodings) {
    if (absl::Status s = CheckEncoding(e); !s.ok())
      return UsageError(std::string(s.message()), flags);
  }
  if (cores == 0) cores = AvailableCpus();
  PipelineOptions popts;
  popts.seed = pf.seed;
  popts.decode.max_pixels = pf.max_pixels;
  auto opened = OpenDataAndPipeline(pf.data, pf.format, pf.pipeline, pf.plugins, popts);
  if (!opened.ok()) return Failure("strategies", opened.status());
  const Pipeline& pipeline = *opened->pipeline;
  const Dataset& dataset = *opened->dataset;
  std::vector<int64_t> order = EpochOrder(dataset.size(), pf.seed, 0, true, 0, 1);
  if (pf.samples > 0 && pf.samples < static_cast<int64_t>(order.size())) order.resize(pf.samples);
  Progress progress;
  auto measured = MeasureStrategies(dataset, pipeline, order, encodings, [&](int64_t done) {
    progress.Update(absl::StrFormat("measured %d/%d samples", done, order.size()));
  });
  progress.Done();
  if (!measured.ok()) return Failure("strategies", measured.status());
  const auto n = static_cast<double>(dataset.size());
  const Ranking ranked = Rank(*measured, n, epochs, cores, storage_mbps * 1e6 / 8);
  const Json& rows = ranked.rows;
  const int best = ranked.best;
  if (json) {
    Json j = {{"command", "strategies"},
              {"pipeline", pipeline.name()},
              {"samples", (*measured)[0].samples},
              {"dataset_samples", dataset.size()},
              {"epochs", epochs},
              {"cores", cores},
              {"strategies", rows},
              {"recommended", best >= 0 ? rows[best] : Json()}};
    PrintJson(j);
    return kOk;
  }
  std::printf(
      "prepflow strategies: %s on %lld samples of %s (measured on %lld), %d epochs, %.0f "
      "cores%s\n",
      pipeline.DebugString().c_str(), static_cast<long long>(n), pf.data.c_str(),
      static_cast<long long>((*measured)[0].samples), epochs, cores,
      storage_mbps > 0 ? absl::StrFormat(", storage %.0f Mbit/s", storage_mbps).c_str() : "");
  ranked.Print(*measured);
  return kOk;
}

int IndexCommand(int argc, char** argv) {
  std::string data;
  bool json = false;
  FlagSet flags("prepflow index",
                "Writes the index of existing WebDataset shards beside them (<shard>.idx: "
                "member offsets, sizes and labels), so that reading them remotely (over "
                "HTTP or S3) costs one range request per sample and no pass over each shard.");
  flags.String("data", &data,
               "the shards: a .tar file, a folder of them, or a brace pattern "
               "(shards/shard-{000000..000099}.tar)");
  flags.Bool("json", &json, "print a JSON summary as the last line");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (data.empty()) return UsageError("prepflow index: --data is required", flags);
  Progress progress;
  const int64_t t0 = WallNanos();
  auto shards = IndexShards({data}, [&](int64_t done, int64_t total) {
    progress.Update(absl::StrFormat("indexed %d/%d shards", done, total));
  });
  progress.Done();
  if (!shards.ok()) return Failure("index", shards.status());
  const double seconds = (WallNanos() - t0) * 1e-9;
  if (json) {
    PrintJson(Json{{"command", "index"}, {"shards", *shards}, {"seconds", seconds}});
  } else {
    std::printf("indexed %lld shards in %.2f s\n", static_cast<long long>(*shards), seconds);
  }
  return kOk;
}

int ProbeCommand(int argc, char** argv) {
  std::string address;
  double timeout_seconds = 5;
  SecurityOptions security_options;
  FlagSet flags("prepflow probe",
                "Checks that a prepflow-worker or prepflow-scheduler accepts connections: dials "
                "it and waits for the connection (TLS handshake included) to be ready. Exit 0 "
                "if it is, 1 if not: a liveness probe that notices a listener that has stopped "
                "accepting while its process stays up.");
  flags.String("address", &address, "host:port of the daemon");
  flags.Double("timeout-seconds", &timeout_seconds, "how long to wait for the connection");
  RegisterSecurityFlags(flags, &security_options, /*server=*/false);
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (address.empty()) return UsageError("prepflow probe: --address is required", flags);
  if (!(timeout_seconds > 0))
    return UsageError("prepflow probe: --timeout-seconds must be > 0", flags);
  auto security = LoadSecurity(security_options);
  if (!security.ok()) return Failure("probe", security.status());
  auto channel = SecureChannel(address, *security);
  const bool ready = channel->WaitForConnected(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  if (!ready) {
    return Failure("probe", absl::UnavailableError(
                                absl::StrCat(address, " did not accept a connection within ",
                                             timeout_seconds, " s (--timeout-seconds)")));
  }
  std::printf("%s accepts connections\n", address.c_str());
  return kOk;
}

Json OpsJson() {
  Json ops = Json::array();
  for (const OpSchema& op : OpSchemas()) {
    Json fields = Json::array();
    for (const FieldSchema& f : op.fields) {
      fields.push_back(Json{{"name", f.name},
                            {"type", f.type},
                            {"default", f.default_value},
                            {"summary", f.summary},
                            {"choices", f.choices}});
    }
    ops.push_back(Json{{"name", op.name},
                       {"summary", op.summary},
                       {"torchvision", op.torchvision},
                       {"random", op.random},
                       {"input", op.input},
                       {"output", op.output},
                       {"parity", op.parity},
                       {"fields", std::move(fields)}});
  }
  Json plugin_ops = Json::array();
  for (const PluginOpInfo& op : LoadedPluginOps()) {
    plugin_ops.push_back(Json{{"name", op.name},
                              {"summary", SafeText(op.summary)},
                              {"random", op.random},
                              {"plugin", SafeText(op.file)}});
  }
  return Json{{"command", "ops"}, {"ops", std::move(ops)}, {"plugin_ops", std::move(plugin_ops)}};
}

// The loaded plugins' ops, as `prepflow ops` lists them after the built-in ones.
std::string PluginOpsText() {
  const std::vector<PluginOpInfo> ops = LoadedPluginOps();
  if (ops.empty()) return "";
  std::string out =
      "\nplugin ops (stages { custom { name: \"...\" params { key: ... value: ... } } }):\n";
  for (const PluginOpInfo& op : ops) {
    absl::StrAppend(&out, "\n", op.name, op.random ? "  (random)" : "", "  from ",
                    SafeText(op.file), "\n    ", SafeText(op.summary), "\n");
  }
  return out;
}

int OpsCommand(int argc, char** argv) {
  bool markdown = false, json = false;
  FlagSet flags("prepflow ops",
                "Lists every op a pipeline may use, with its fields, their defaults and docs, and "
                "what it matches in torchvision.");
  std::string plugins;
  flags.Bool("markdown", &markdown, "print docs/ops.md instead");
  flags.Bool("json", &json, "print one JSON object instead");
  flags.String("plugin", &plugins, "also list these plugins' ops (FILE[,FILE...])");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (absl::Status s = LoadPluginFlag(plugins); !s.ok()) return Failure("ops", s);
  if (json) {
    PrintJson(OpsJson());
  } else {
    std::fputs((markdown ? OpsMarkdown() : OpsText()).c_str(), stdout);
    if (!markdown) std::fputs(PluginOpsText().c_str(), stdout);
  }
  return kOk;
}

// The demo's second run: `local_workers` prepflow-worker processes on
// loopback, the same job offloaded to them, and its checksum against the
// local run's. Returns the exit code; `result` gets the --json summary.
int RunDemoOffloaded(RunFlags& rf, const std::string& offload_mode, int local_workers,
                     int worker_threads, const RunOutcome& local, Json* result) {
  int code = kOk;
  // Workers read the dataset themselves: their data root is its folder.
  char real[PATH_MAX];
  const std::string root = realpath(rf.data.c_str(), real) != nullptr ? real : rf.data;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  std::vector<std::string> addresses;
  for (int i = 0; i < local_workers && code == kOk; ++i) {
    std::vector<std::string> args = {"--threads", absl::StrCat(worker_threads)};
    if (!rf.plugins.empty()) args.insert(args.end(), {"--plugin", rf.plugins});
    auto w = WorkerProcess::Start(SiblingBinary("prepflow-worker"), root, args);
    if (!w.ok()) {
      code = Failure("demo", w.status());
      break;
    }
    addresses.push_back((*w)->address());
    workers.push_back(*std::move(w));
  }
  if (code == kOk) {
    rf.offload = offload_mode;
    rf.workers = absl::StrJoin(addresses, ",");
    auto remote_options = rf.ToOptions();
    if (!remote_options.ok()) {
      code = Failure("demo", remote_options.status());
    } else {
      if (!rf.json) {
        std::printf("\n== offloaded (%s) to %d prepflow-worker processes: %s ==\n",
                    offload_mode.c_str(), local_workers, rf.workers.c_str());
      }
      RunOutcome remote = ExecuteRun("demo", *remote_options, rf.json);
      code = remote.exit_code;
      const bool equal = remote.checksum == local.checksum;
      if (code == kOk && !equal) {
        code = Failure("demo", absl::InternalError(absl::StrCat(
                                   "checksums differ: local ", ChecksumHex(local.checksum),
                                   ", offloaded ", ChecksumHex(remote.checksum))));
      }
      if (rf.json && !remote.summary.is_null()) {
        *result = remote.summary;
        (*result)["local"] = local.summary;
        (*result)["checksums_equal"] = equal;
      } else if (!rf.json && code == kOk) {
        std::printf("\nchecksums equal: %s both ways, wherever each sample ran\n",
                    ChecksumHex(local.checksum).c_str());
      }
    }
  }
  return code;
}

int DemoCommand(int argc, char** argv) {
  RunFlags rf;
  rf.offload = "remote";
  int images = 256, local_workers = 2, worker_threads = 1;
  bool keep = false;
  FlagSet flags("prepflow demo",
                "Generates a small photo-like ImageFolder in a temporary folder (or uses --data), "
                "runs the imagenet-train pipeline over it on this machine, then again offloaded to "
                "prepflow-worker processes it starts on loopback, and compares the checksums.");
  rf.Register(flags, false);
  flags.Int("images", &images, "images to generate when --data is not given");
  flags.Int("local-workers", &local_workers,
            "prepflow-worker processes to start for the offloaded run (0: local run only)");
  flags.Int("worker-threads", &worker_threads, "threads of each started worker");
  flags.Bool("keep", &keep, "keep the generated dataset");
  if (std::optional<int> exit = ParseFlags(flags, argc, argv)) return *exit;
  if (local_workers < 0 || worker_threads < 1) {
    return UsageError("prepflow demo: --local-workers must be >= 0 and --worker-threads >= 1",
                      flags);
  }
  std::string generated;
  if (rf.data.empty()) {
    if (images < 1) return UsageError("prepflow demo: --images must be at least 1", flags);
    char tmpl[] = "/tmp/prepflow-demo-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return Failure("demo", absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno))));
    }
    generated = tmpl;
    SyntheticFolderOptions so;
    so.classes = 8;
    so.images_per_class = (images + so.classes - 1) / so.classes;
    if (!rf.json) {
      std::printf("generating %d photo-like images in %s ...\n", so.classes * so.images_per_class,
                  generated.c_str());
    }
    auto n = WriteSyntheticImageFolder(generated + "/data", so);
    if (!n.ok()) return Failure("demo", n.status());
    rf.data = generated + "/data";
  }
  auto cleanup = [&] {
    if (generated.empty()) return;
    if (keep) {
      if (!rf.json) std::printf("kept the generated dataset in %s\n", rf.data.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(generated, ec);
    }
  };
  const std::string offload_mode = rf.offload;
  rf.offload = "off";
  rf.workers.clear();
  auto local_options = rf.ToOptions();
  if (!local_options.ok()) {
    cleanup();
    return Failure("demo", local_options.status());
  }
  if (!rf.json) std::printf("\n== on this machine only ==\n");
  RunOutcome local = ExecuteRun("demo", *local_options, rf.json);
  Json result = local.summary;
  int code = local.exit_code;
  if (code == kOk && local_workers > 0) {
    code = RunDemoOffloaded(rf, offload_mode, local_workers, worker_threads, local, &result);
  }
  if (rf.json && !result.is_null()) PrintJson(result);
  cleanup();
  return code;
}

int RunWithJsonContract(const std::string& command, int (*f)(int, char**), int argc, char** argv) {
  // --json, read with the commands' own rules even when their flags are wrong.
  bool json = false;
  FlagSet json_flag(absl::StrCat("prepflow ", command), "");
  json_flag.Bool("json", &json, "");
  json_flag.ParseKnown(argc, argv, 2);
  const int code = f(argc, argv);
  if (json && !json_printed && !(code == kOk && last_error.empty())) {
    PrintJson(Json{{"command", command},
                   {"error", last_error.empty() ? "failed" : last_error},
                   {"exit_code", code}});
  }
  return code;
}

}  // namespace prepflow::cli
