// `prepflow profile`.
#include "client/cli/profile.h"

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/text.h"
#include "client/cli/commands.h"
#include "client/datasets.h"
#include "client/stats_json.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"
#include "storage/options.h"

namespace prepflow::cli {

absl::StatusOr<Profile> ProfileDataset(const ProfileFlags& pf) {
  proto::DatasetSpec dspec;
  dspec.set_path(pf.data);
  auto fmt = ParseDatasetFormat(pf.format);
  if (!fmt.ok())
    return absl::InvalidArgumentError(absl::StrCat("--format: ", fmt.status().message()));
  dspec.set_format(*fmt);
  if (absl::Status s = LoadPluginFlag(pf.plugins); !s.ok()) return s;
  auto spec = LoadPipelineSpec(pf.pipeline);
  if (!spec.ok()) return absl::InvalidArgumentError(spec.status().message());
  if (absl::Status s = ApplyFidelityFlag(pf.fidelity, &*spec); !s.ok()) return s;
  PipelineOptions popts;
  popts.seed = pf.seed;
  popts.decode.max_pixels = pf.max_pixels;
  popts.open_data = ClientOpDataOpener(RemoteReadOptions());
  popts.read_file = ClientOpFileReader(RemoteReadOptions());
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
    (*dataset)->Describe(order[i], s);
    const int64_t c0 = ThreadCpuNanos();
    size_t size = 0;
    absl::Status st = ReadRecord(**dataset, (*pipeline)->fields(), ws, s, &size);
    read_profiler.Record(0, ThreadCpuNanos() - c0, static_cast<int64_t>(size));
    if (st.ok()) {
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

int ProfileCommand(Console& console, int argc, char** argv) {
  ProfileFlags pf;
  pf.samples = 256;
  bool json = false;
  FlagSet flags("prepflow profile",
                "Runs a pipeline over a sample of the dataset on one thread and reports each "
                "stage's CPU time and output size per sample (what the offload planner reads).");
  pf.Register(flags, "dataset: as for prepflow run (a folder, shards, a pattern or a URL)",
              "samples to profile (a seeded random subset; 0: all)");
  flags.Bool("json", &json, "print JSON instead of a table");
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (pf.data.empty()) return console.UsageError("prepflow profile: --data is required", flags);
  if (pf.samples < 0) return console.UsageError("prepflow profile: --samples must be >= 0", flags);
  auto profile = ProfileDataset(pf);
  if (!profile.ok()) return console.Failure("profile", profile.status());
  const Profile& p = *profile;
  if (json) {
    Json j = {{"command", "profile"},          {"pipeline", p.pipeline}, {"dataset", p.dataset},
              {"samples", p.samples},          {"errors", p.errors},     {"seconds", p.seconds},
              {"stages", StagesJson(p.stages)}};
    console.PrintJson(j);
  } else {
    std::printf("prepflow profile: %s over %lld samples of %s (%lld errors), one thread\n",
                p.pipeline_debug.c_str(), static_cast<long long>(p.samples), p.dataset.c_str(),
                static_cast<long long>(p.errors));
    std::printf("%s", StagesTable(p.stages).c_str());
  }
  return kOk;
}

}  // namespace prepflow::cli
