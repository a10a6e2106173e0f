// `prepflow index`.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "client/cli/commands.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/pack.h"

namespace prepflow::cli {

int IndexCommand(Console& console, int argc, char** argv) {
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
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (data.empty()) return console.UsageError("prepflow index: --data is required", flags);
  Progress progress;
  const int64_t t0 = WallNanos();
  auto shards = IndexShards({data}, [&](int64_t done, int64_t total) {
    progress.Update(absl::StrFormat("indexed %d/%d shards", done, total));
  });
  progress.Done();
  if (!shards.ok()) return console.Failure("index", shards.status());
  const double seconds = (WallNanos() - t0) * 1e-9;
  if (json) {
    console.PrintJson(Json{{"command", "index"}, {"shards", *shards}, {"seconds", seconds}});
  } else {
    std::printf("indexed %lld shards in %.2f s\n", static_cast<long long>(*shards), seconds);
  }
  return kOk;
}

}  // namespace prepflow::cli
