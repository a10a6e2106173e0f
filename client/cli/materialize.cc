// `prepflow materialize`.
#include "pipeline/reuse/materialize.h"

#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/cli/commands.h"
#include "client/cli/shards.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/executor.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/pack.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"

namespace prepflow::cli {

namespace {

// The summary: a JSON line, or a line for people.
void PrintMaterialized(Console& console, const proto::Materialized& made, uint64_t bytes,
                       double seconds, const std::string& out, bool json) {
  if (json) {
    console.PrintJson(Json{{"command", "materialize"},
                           {"samples", made.samples()},
                           {"upto", made.upto()},
                           {"encoding", made.encoding()},
                           {"bytes", bytes},
                           {"seconds", seconds},
                           {"out", SafeText(out)}});
  } else {
    std::printf("materialized %lld samples after stages [0, %d) as %s into %s in %.2f s\n",
                static_cast<long long>(made.samples()), made.upto(), made.encoding().c_str(),
                out.c_str(), seconds);
  }
}

}  // namespace

int MaterializeCommand(Console& console, int argc, char** argv) {
  std::string data, out, pipeline = "imagenet-train", plugins, upto = "auto", format = "auto",
                         fidelity = "exact";
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
  flags.String("fidelity", &fidelity, kFidelityHelp);
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
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (data.empty() || out.empty()) {
    return console.UsageError("prepflow materialize: --data and --out are required", flags);
  }
  if (upto != "auto" && (!absl::SimpleAtoi(upto, &options.upto) || options.upto < 0)) {
    return console.UsageError(
        absl::StrCat("--upto: '", upto, "' is neither auto nor a stage boundary"), flags);
  }
  if (absl::Status s = CheckEncoding(options.encoding); !s.ok()) {
    return console.UsageError(std::string(s.message()), flags);
  }
  if (options.pack.threads <= 0) options.pack.threads = AvailableCpus();
  PipelineOptions popts;
  popts.decode.max_pixels = max_pixels;
  popts.decode.max_jpeg_scans = max_jpeg_scans;
  auto opened = OpenDataAndPipeline(data, format, pipeline, plugins, fidelity, popts);
  if (!opened.ok()) return console.Failure("materialize", opened.status());
  ShardOutput output;
  if (absl::Status s = output.Prepare(out, &options.pack); !s.ok()) {
    return console.Failure("materialize", s);
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
  if (!made.ok()) return console.Failure("materialize", made.status());
  const double seconds = (WallNanos() - t0) * 1e-9;
  // Uploaded shards are gone from here: their size is not counted.
  const uint64_t bytes = output.staging ? 0 : FolderBytes(out);
  PrintMaterialized(console, *made, bytes, seconds, out, json);
  return kOk;
}

}  // namespace prepflow::cli
