#include "client/cli/run_flags.h"

#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/console.h"
#include "client/datasets.h"
#include "client/loader.h"
#include "client/metrics.h"
#include "client/stats_json.h"
#include "net/flags.h"
#include "nlohmann/json.hpp"
#include "pipeline/checksum.h"
#include "pipeline/dataset.h"
#include "pipeline/pipeline.h"
#include "pipeline/plugins.h"
#include "pipeline/text.h"
#include "prometheus/exposer.h"
#include "spdlog/spdlog.h"
#include "storage/flags.h"

namespace prepflow::cli {

void RunFlags::Register(FlagSet& f, bool data_required) {
  RegisterData(f, data_required);
  RegisterOffload(f);
  RegisterReuse(f);
  f.Int("metrics-port", &metrics_port,
        "serve Prometheus metrics on this port while running (0: any free port; -1: none)");
  f.Bool("json", &json, "print a JSON summary as the last line of stdout");
}

void RunFlags::RegisterData(FlagSet& f, bool data_required) {
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
}

void RunFlags::RegisterOffload(FlagSet& f) {
  f.String("offload", &offload,
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
}

void RunFlags::RegisterReuse(FlagSet& f) {
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
}

absl::StatusOr<LoaderOptions> RunFlags::ToOptions() const {
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

namespace {

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

}  // namespace

RunOutcome ExecuteRun(Console& console, const std::string& command, const LoaderOptions& options,
                      bool json, int metrics_port) {
  RunOutcome outcome;
  auto loader_or = Loader::Create(options);
  if (!loader_or.ok()) {
    outcome.exit_code = console.Failure(command, loader_or.status());
    return outcome;
  }
  Loader& loader = **loader_or;
  // Declared after the loader, so destroyed (and no longer scraping) first.
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<LoaderMetrics> metrics;
  if (metrics_port > 65535) {
    outcome.exit_code = console.Failure(
        command,
        absl::InvalidArgumentError(absl::StrCat("--metrics-port: must be 0 to 65535 (or -1: none), "
                                                "got ",
                                                metrics_port)));
    return outcome;
  }
  if (metrics_port >= 0) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(absl::StrCat("0.0.0.0:", metrics_port));
    } catch (const std::exception& e) {
      outcome.exit_code = console.Failure(
          command,
          absl::UnavailableError(absl::StrCat("--metrics-port ", metrics_port, ": ", e.what())));
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
  outcome.exit_code = status.ok() ? kOk : console.Failure(command, status);
  return outcome;
}

}  // namespace prepflow::cli
