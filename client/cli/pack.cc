// `prepflow pack`.
#include "pipeline/data/pack.h"

#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/cli/commands.h"
#include "client/cli/shards.h"
#include "client/datasets.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "storage/options.h"

namespace prepflow::cli {

int PackCommand(Console& console, int argc, char** argv) {
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
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (data.empty() || out.empty())
    return console.UsageError("prepflow pack: --data and --out are required", flags);
  ShardOutput output;
  if (absl::Status s = output.Prepare(out, &options); !s.ok()) return console.Failure("pack", s);
  proto::DatasetSpec dspec;
  dspec.set_path(data);
  auto dataset = OpenClientDataset(dspec, RemoteReadOptions());
  if (!dataset.ok()) return console.Failure("pack", dataset.status());
  if (std::string((*dataset)->format()) == "wds") {
    return console.Failure(
        "pack", absl::InvalidArgumentError(absl::StrCat(
                    "--data ", SafeText(data),
                    " is WebDataset shards already; pack reads a folder or a manifest")));
  }
  Progress progress;
  const int64_t total = (*dataset)->size();
  const int64_t t0 = WallNanos();
  auto stats = PackWebDataset(**dataset, options, [&](const PackStats& s) {
    const double secs = (WallNanos() - t0) * 1e-9;
    progress.Update(absl::StrFormat("packed %d/%d samples into %d shards (%.0f samples/s)",
                                    s.samples, total, s.shards, secs > 0 ? s.samples / secs : 0));
  });
  progress.Done();
  if (!stats.ok()) return console.Failure("pack", stats.status());
  const double seconds = (WallNanos() - t0) * 1e-9;
  if (json) {
    Json j = {{"command", "pack"},     {"samples", stats->samples}, {"shards", stats->shards},
              {"bytes", stats->bytes}, {"seconds", seconds},        {"out", out}};
    console.PrintJson(j);
  } else {
    std::printf("packed %lld samples into %lld shards (%.1f MiB) in %s in %.2f s\n",
                static_cast<long long>(stats->samples), static_cast<long long>(stats->shards),
                stats->bytes / 1048576.0, out.c_str(), seconds);
  }
  return kOk;
}

}  // namespace prepflow::cli
