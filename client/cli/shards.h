// What `prepflow pack`, `materialize` and `strategies` share: opening the
// data and pipeline their flags name, and writing shards to a folder or an
// s3:// prefix.
//
// Thread-safety: called from main's thread only.
#ifndef PREPFLOW_CLIENT_CLI_SHARDS_H_
#define PREPFLOW_CLIENT_CLI_SHARDS_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/pack.h"
#include "pipeline/pipeline.h"
#include "proto/pipeline.pb.h"

namespace prepflow::cli {

// What materialize and strategies open from their flags.
struct DataAndPipeline {
  proto::PipelineSpec spec;
  std::unique_ptr<Pipeline> pipeline;
  std::unique_ptr<Dataset> dataset;
};

// Loads the plugins, the pipeline and the dataset. Errors: InvalidArgument
// naming the flag (a usage error), or the dataset's.
absl::StatusOr<DataAndPipeline> OpenDataAndPipeline(
    const std::string& data, const std::string& format, const std::string& pipeline,
    const std::string& plugins, const std::string& fidelity, const PipelineOptions& options);

// The bytes of the files in `dir` (not below it).
uint64_t FolderBytes(const std::string& dir);

// Where pack and materialize write: a folder, or an s3:// prefix, to which
// each shard is uploaded from a staging folder (removed at the end).
struct ShardOutput {
  std::optional<std::filesystem::path> staging;

  // Points options->out_dir at `out`, or for an s3:// prefix at a staging
  // folder whose shards options->finished uploads.
  absl::Status Prepare(const std::string& out, PackOptions* options);
  // Removes the staging folder.
  ~ShardOutput();
};

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_SHARDS_H_
