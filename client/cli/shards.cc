#include "client/cli/shards.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/cli/console.h"
#include "client/datasets.h"
#include "storage/options.h"

namespace prepflow::cli {

// Loads the plugins, the pipeline and the dataset. Errors: InvalidArgument
// naming the flag (a usage error), or the dataset's.
absl::StatusOr<DataAndPipeline> OpenDataAndPipeline(
    const std::string& data, const std::string& format, const std::string& pipeline,
    const std::string& plugins, const std::string& fidelity, const PipelineOptions& options) {
  DataAndPipeline out;
  if (absl::Status s = LoadPluginFlag(plugins); !s.ok()) return s;
  auto spec = LoadPipelineSpec(pipeline);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--pipeline: ", spec.status().message()));
  }
  out.spec = *std::move(spec);
  if (absl::Status s = ApplyFidelityFlag(fidelity, &out.spec); !s.ok()) return s;
  PipelineOptions with_data = options;
  with_data.open_data = ClientOpDataOpener(RemoteReadOptions());
  with_data.read_file = ClientOpFileReader(RemoteReadOptions());
  auto built = Pipeline::Create(out.spec, with_data);
  if (!built.ok()) return built.status();
  out.pipeline = *std::move(built);
  proto::DatasetSpec dspec;
  dspec.set_path(data);
  auto fmt = ParseDatasetFormat(format);
  if (!fmt.ok())
    return absl::InvalidArgumentError(absl::StrCat("--format: ", fmt.status().message()));
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

absl::Status ShardOutput::Prepare(const std::string& out, PackOptions* options) {
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

ShardOutput::~ShardOutput() {
  std::error_code ignored;
  if (staging.has_value()) std::filesystem::remove_all(*staging, ignored);
}

}  // namespace prepflow::cli
