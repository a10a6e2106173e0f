// Writing WebDataset shards: `prepflow pack` (an ImageFolder into shards)
// and `prepflow index` (sidecar indexes for existing shards).
//
// Thread-safety: each call stands alone; PackWebDataset reads `dataset`
// (concurrent reads are safe, dataset.h) from one thread.
#ifndef PREPFLOW_PIPELINE_DATA_PACK_H_
#define PREPFLOW_PIPELINE_DATA_PACK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/core/workspace.h"
#include "pipeline/data/dataset.h"

namespace prepflow {

struct PackOptions {
  std::string out_dir;
  std::string prefix = "shard";
  int64_t samples_per_shard = 1000;
  // A folder that holds anything is refused, unless this is set: then its
  // shards and sidecars (*.tar, *.tar.idx) are removed first, and nothing
  // else is touched.
  bool overwrite = false;
  // Called with each file's path when it is complete (a shard, then its
  // sidecar): e.g. to upload it elsewhere and remove it. An error stops the
  // pack with it.
  std::function<absl::Status(const std::string& path)> finished;
  // Makes sample i's member (its bytes and extension) instead of copying
  // the dataset's file (`prepflow materialize`'s stages), on `threads`
  // threads, each with its own Workspace; null: the file as it is. An
  // error stops the pack with it, naming the sample.
  std::function<absl::Status(int64_t i, Workspace& ws, std::string* bytes, std::string* ext)> make;
  int threads = 1;
};
struct PackStats {
  int64_t samples = 0;
  int64_t shards = 0;
  uint64_t bytes = 0;
};
// Writes `dataset` as WebDataset shards <out_dir>/<prefix>-NNNNNN.tar, sample
// i as members "%09d.<ext>", "%09d.cls" (its label) and "%09d.class" (its
// class's name, where the dataset has names), each shard with its sidecar
// index (<shard>.idx, shard_index.h). Each file is written to a temporary
// name and renamed when complete. `progress` (optional) is called after each
// sample with the stats so far.
absl::StatusOr<PackStats> PackWebDataset(const Dataset& dataset, const PackOptions& options,
                                         const std::function<void(const PackStats&)>& progress);

// Writes the sidecar index of each local shard in `shards` (files, folders
// of .tar files, or brace patterns), `progress` called after each shard with
// the shards done and the total. Returns the shards indexed. A shard whose
// archive is broken is an error naming it: a sidecar describes a whole
// shard.
absl::StatusOr<int64_t> IndexShards(const std::vector<std::string>& shards,
                                    const std::function<void(int64_t, int64_t)>& progress);

// Writes `text` to `path` through a temporary name and a rename.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_PACK_H_
