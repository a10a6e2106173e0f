// `prepflow strategies`.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/cli/commands.h"
#include "client/cli/profile.h"
#include "client/cli/shards.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/executor.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"
#include "pipeline/reuse/materialize.h"
#include "storage/options.h"

namespace prepflow::cli {

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

int StrategiesCommand(Console& console, int argc, char** argv) {
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
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (pf.data.empty()) return console.UsageError("prepflow strategies: --data is required", flags);
  if (epochs < 1 || pf.samples < 0 || !(cores >= 0) || !(storage_mbps >= 0)) {
    return console.UsageError(
        "--epochs must be positive; --samples, --cores and --storage-mbps >= 0", flags);
  }
  const std::vector<std::string> encodings = SplitList(encodings_text);
  for (const std::string& e : encodings) {
    if (absl::Status s = CheckEncoding(e); !s.ok())
      return console.UsageError(std::string(s.message()), flags);
  }
  if (cores == 0) cores = AvailableCpus();
  PipelineOptions popts;
  popts.seed = pf.seed;
  popts.decode.max_pixels = pf.max_pixels;
  auto opened =
      OpenDataAndPipeline(pf.data, pf.format, pf.pipeline, pf.plugins, pf.fidelity, popts);
  if (!opened.ok()) return console.Failure("strategies", opened.status());
  const Pipeline& pipeline = *opened->pipeline;
  const Dataset& dataset = *opened->dataset;
  std::vector<int64_t> order = EpochOrder(dataset.size(), pf.seed, 0, true, 0, 1);
  if (pf.samples > 0 && pf.samples < static_cast<int64_t>(order.size())) order.resize(pf.samples);
  Progress progress;
  auto measured = MeasureStrategies(dataset, pipeline, order, encodings, [&](int64_t done) {
    progress.Update(absl::StrFormat("measured %d/%d samples", done, order.size()));
  });
  progress.Done();
  if (!measured.ok()) return console.Failure("strategies", measured.status());
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
    console.PrintJson(j);
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

}  // namespace prepflow::cli
