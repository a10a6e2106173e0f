#include "client/cli/run_flags.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/cli/console.h"
#include "client/datasets.h"
#include "client/loader.h"
#include "client/metrics.h"
#include "client/packed_loader.h"
#include "client/stats_json.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/checksum.h"
#include "pipeline/data/dataset.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"
#include "prometheus/exposer.h"
#include "spdlog/spdlog.h"

namespace prepflow::cli {

void RunFlags::Register(FlagSet& f, bool data_required) {
  f.String("data", &data,
           data_required
               ? "dataset: an ImageFolder folder; WebDataset shards as a .tar file, a folder of "
                 "them or a brace pattern (shards/shard-{000000..000099}.tar); or the same "
                 "at a URL: https://host/shard-{000..099}.tar, s3://bucket/prefix (listed; "
                 "credentials from AWS_* in the environment)"
               : "dataset to use instead of a generated one");
  f.String("pipeline", &pipeline, kPipelineHelp);
  f.String("plugin", &plugins, kPluginHelp);
  RegisterOptionFlags(f, LoaderOptionFields(), &options);
  f.Int("metrics-port", &metrics_port,
        "serve Prometheus metrics on this port while running (0: any free port; -1: none)");
  f.Bool("json", &json, "print a JSON summary as the last line of stdout");
}

absl::StatusOr<LoaderOptions> RunFlags::ToOptions() const {
  LoaderOptions o = options;
  o.dataset.set_path(data);
  if (absl::Status s = LoadPluginFlag(plugins); !s.ok()) return s;
  auto spec = LoadPipelineSpec(pipeline);
  if (!spec.ok())
    return absl::InvalidArgumentError(absl::StrCat("--pipeline: ", spec.status().message()));
  o.pipeline = *spec;
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
    std::printf("plan (%lld changes%s): %s\n", static_cast<long long>(st.plan_changes),
                st.plan_backoffs > 0
                    ? absl::StrCat(", ", st.plan_backoffs, " back-offs to all local").c_str()
                    : "",
                st.plan.c_str());
  if (!st.plan_reason.empty()) std::printf("  why: %s\n", st.plan_reason.c_str());
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

namespace {

// /metrics while the run lasts. Declared after the loader, so destroyed (and
// no longer scraping) first.
struct MetricsServer {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<LoaderMetrics> metrics;

  absl::Status Start(Loader& loader, int port) {
    if (port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-port: must be 0 to 65535 (or -1: none), got ", port));
    }
    if (port < 0) return absl::OkStatus();
    try {
      exposer = std::make_unique<prometheus::Exposer>(absl::StrCat("0.0.0.0:", port));
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("--metrics-port ", port, ": ", e.what()));
    }
    metrics = std::make_shared<LoaderMetrics>(&loader);
    exposer->RegisterCollectable(metrics);
    spdlog::info("serving metrics on port {} (/metrics), job {}", exposer->GetListeningPorts()[0],
                 loader.job_id());
    return absl::OkStatus();
  }
};

// A packed run's rows, for its summary.
struct PackedTotals {
  int64_t rows = 0, tokens = 0, padding = 0;
  int64_t length = 0;
  uint64_t checksum = 0;

  void Add(const PackedBatch& b) {
    rows += b.rows;
    length = b.length;
    tokens += b.rows * b.length;
    padding += b.padding_tokens;
    checksum += b.checksum;
  }
  double TokensPerSecond(const LoaderStats& st) const {
    return st.seconds > 0 ? static_cast<double>(tokens - padding) / st.seconds : 0;
  }
  void ToJson(const LoaderStats& st, Json* j) const {
    (*j)["documents_checksum"] = (*j)["checksum"];
    (*j)["checksum"] = ChecksumHex(checksum);
    (*j)["rows"] = rows;
    (*j)["pack_length"] = length;
    (*j)["tokens"] = tokens;
    (*j)["padding_tokens"] = padding;
    (*j)["tokens_per_second"] = TokensPerSecond(st);
  }
  void Print(const LoaderStats& st) const {
    std::printf(
        "packed: %lld rows of %lld tokens, %.1f%% padding, %.0f tokens/s; checksum %s\n",
        static_cast<long long>(rows), static_cast<long long>(length),
        tokens > 0 ? 100.0 * static_cast<double>(padding) / static_cast<double>(tokens) : 0.0,
        TokensPerSecond(st), ChecksumHex(checksum).c_str());
  }
};

// The run's loader: batches of samples, or of packed rows.
struct RunSource {
  AnyLoader any;
  PackedTotals totals;

  // The next batch's epoch; nullopt after the last.
  absl::StatusOr<std::optional<uint64_t>> Next() {
    if (any.packed != nullptr) {
      auto b = any.packed->Next();
      if (!b.ok()) return b.status();
      if (*b == nullptr) return std::nullopt;
      totals.Add(**b);
      return (*b)->epoch;
    }
    auto b = any.loader->Next();
    if (!b.ok()) return b.status();
    if (*b == nullptr) return std::nullopt;
    return (*b)->epoch();
  }
};

void PrintRunHeader(const std::string& command, const LoaderOptions& options,
                    const Loader& loader) {
  std::printf("prepflow %s: %s %s (%lld samples%s), %s, %d threads, batch %d%s\n", command.c_str(),
              loader.dataset().format(), loader.dataset().root().c_str(),
              static_cast<long long>(loader.samples_per_epoch()),
              loader.dataset().classes().empty()
                  ? ""
                  : absl::StrCat(", ", loader.dataset().classes().size(), " classes").c_str(),
              loader.pipeline().DebugString().c_str(), loader.threads(), options.batch_size,
              options.pack_length > 0 ? absl::StrCat(" rows of ", options.pack_length, " tokens (",
                                                     PackModeName(options.pack_mode), ")")
                                            .c_str()
                                      : "");
  std::fflush(stdout);
}

}  // namespace

RunOutcome ExecuteRun(Console& console, const std::string& command, const LoaderOptions& options,
                      bool json, int metrics_port) {
  RunOutcome outcome;
  RunSource source;
  if (auto any = OpenAnyLoader(options); any.ok()) {
    source.any = *std::move(any);
  } else {
    outcome.exit_code = console.Failure(command, any.status());
    return outcome;
  }
  Loader& loader = *source.any.loader;
  MetricsServer server;
  if (absl::Status s = server.Start(loader, metrics_port); !s.ok()) {
    outcome.exit_code = console.Failure(command, s);
    return outcome;
  }
  const int64_t total = source.any.packed != nullptr
                            ? -1
                            : std::max<int64_t>(0, loader.batches_per_epoch() * options.epochs -
                                                       options.skip_batches);
  if (!json) PrintRunHeader(command, options, loader);
  Progress progress;
  absl::Status status;
  for (int64_t done = 1;; ++done) {
    absl::StatusOr<std::optional<uint64_t>> epoch = source.Next();
    if (!epoch.ok()) status = epoch.status();
    if (!epoch.ok() || !epoch->has_value()) break;
    const LoaderStats st = loader.Stats();
    progress.Update(absl::StrFormat("epoch %d/%d  batch %d/%s  %d images  %.1f images/s  %d errors",
                                    **epoch + 1, options.epochs, done,
                                    total < 0 ? "?" : absl::StrCat(total), st.images,
                                    st.seconds > 0 ? st.images / st.seconds : 0, st.errors));
  }
  progress.Done();
  const LoaderStats st = loader.Stats();
  if (json) {
    outcome.summary = RunJson(command, options, loader, st, status);
    if (source.any.packed != nullptr) {
      source.totals.ToJson(st, &outcome.summary);
      outcome.summary["documents"] = source.any.packed->documents();
      outcome.summary["remote_documents"] = source.any.packed->remote_documents();
    }
  } else {
    PrintRunSummary(st, status);
    if (source.any.packed != nullptr) source.totals.Print(st);
  }
  outcome.checksum = source.any.packed != nullptr ? source.totals.checksum : st.checksum;
  outcome.exit_code = status.ok() ? kOk : console.Failure(command, status);
  return outcome;
}

}  // namespace prepflow::cli
