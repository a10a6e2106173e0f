#include "server/runnable_prefix.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/text.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/plugins.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

// The first stage whose ops' data (a noise set) cannot be opened here, or
// -1; `*why` says which and why.
int FirstUnreadableData(const proto::PipelineSpec& spec, const OpDataOpener& open_data,
                        const OpFileReader& read_file, std::string* why) {
  for (int i = 0; i < spec.stages_size(); ++i) {
    for (const std::string& path : FilePaths(spec.stages(i))) {
      absl::StatusOr<std::string> file = read_file(path, /*max_bytes=*/-1);
      if (file.ok()) continue;
      *why = absl::StrCat("stage ", i, ": its file cannot be read here (", file.status().message(),
                          ")");
      return i;
    }
    for (const std::string& path : DataPaths(spec.stages(i))) {
      absl::StatusOr<std::unique_ptr<OpData>> data = open_data(path);
      if (data.ok()) continue;
      *why = absl::StrCat("stage ", i, ": its data cannot be read here (", data.status().message(),
                          ")");
      return i;
    }
  }
  return -1;
}

// The stages before the first that cannot run here: a plugin's op not
// loaded, or data not readable.
int FirstUnrunnableStage(const proto::PipelineSpec& spec, const OpDataOpener& open_data,
                         const OpFileReader& read_file, std::string* why) {
  std::string data_why;
  const int missing = FirstMissingOp(spec, why);
  const int unreadable = FirstUnreadableData(spec, open_data, read_file, &data_why);
  if (unreadable < 0 || (missing >= 0 && missing <= unreadable)) return missing;
  *why = data_why;
  return unreadable;
}

}  // namespace

proto::PipelineSpec RunnablePrefix(const proto::JobOpen& open, const OpDataOpener& open_data,
                                   const OpFileReader& read_file, std::string* unavailable) {
  proto::PipelineSpec runnable = open.pipeline();
  if (const int missing = FirstUnrunnableStage(runnable, open_data, read_file, unavailable);
      missing >= 0) {
    // A record keeps its fields: those only the dropped stages work on
    // ride along encoded, as they would up to the cut.
    std::vector<std::string> kept;
    for (int i = 0; i < missing; ++i) kept.push_back(runnable.stages(i).field());
    kept.insert(kept.end(), runnable.carry().begin(), runnable.carry().end());
    for (int i = missing; i < runnable.stages_size(); ++i) {
      const std::string& field = runnable.stages(i).field();
      if (field.empty() || std::find(kept.begin(), kept.end(), field) != kept.end()) continue;
      kept.push_back(field);
      runnable.add_carry(field);
    }
    runnable.mutable_stages()->DeleteSubrange(missing, runnable.stages_size() - missing);
    runnable.clear_batch_stages();  // the trainer's, never run here
    spdlog::info("job {}: {}; running stages [0, {}) only", SafeText(open.job_id()),
                 SafeText(*unavailable), missing);
  }
  return runnable;
}

}  // namespace prepflow
