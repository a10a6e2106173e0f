// The worker's open datasets, shared by the jobs that read them.
//
// Indexing a dataset (walking a folder of a million files, scanning every tar
// header) takes seconds, so it never runs under a lock other opens wait on:
// opens of other datasets go ahead, and concurrent opens of the same one wait
// for a single indexing ("single flight") instead of repeating it.
//
// An index is looked up by the dataset's path and format (what changes the
// index; not the job's file limit) and the fingerprint the client computed. A running job keeps the
// index it opened; when a new job brings another fingerprint (files were added since), the dataset
// is indexed again and the new job gets the new index. To bound the work a client can cause by
// naming bogus fingerprints, a dataset is indexed at most once per
// `min_reindex_seconds` (later opens wait for that), and an outcome that did
// not match (a failed index, or another fingerprint) is answered from the
// cache for that long.
//
// Thread-safety: every method may be called from any thread.
#ifndef PREPFLOW_SERVER_DATASET_CACHE_H_
#define PREPFLOW_SERVER_DATASET_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/data/dataset.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

struct DatasetCacheOptions {
  DatasetOptions dataset;  // confinement to the data root
  // How a dataset is indexed (tests stand in a slow one); null: OpenDataset.
  std::function<absl::StatusOr<std::unique_ptr<Dataset>>(const proto::DatasetSpec&,
                                                         const DatasetOptions&)>
      open;
  double min_reindex_seconds = 5;
  size_t max_entries = 64;  // datasets kept indexed; the least recently used go first
  // Every dataset is opened with this file limit, whatever the spec says:
  // jobs that share an index may each ask for less (and check it on their
  // reads), never for more; the index is kept once for all of them.
  int64_t max_file_bytes = kDefaultMaxFileBytes;
};

class DatasetCache {
 public:
  explicit DatasetCache(DatasetCacheOptions options) : options_(std::move(options)) {}

  // The index of `spec` with `fingerprint` and `size` samples, indexing the
  // dataset if needed. Errors: those of OpenDataset (each naming the path),
  // or FailedPrecondition when the dataset as this worker sees it has another
  // fingerprint.
  absl::StatusOr<std::shared_ptr<const Dataset>> Get(const proto::DatasetSpec& spec,
                                                     uint64_t fingerprint, int64_t size);

  // How many times a dataset was indexed, for tests and metrics.
  int64_t indexings() const;

 private:
  struct Entry {
    std::shared_ptr<const Dataset> dataset;  // the latest successful index
    absl::Status error;                      // of the latest attempt
    int64_t indexed_nanos = -1;              // when the latest attempt started
    bool indexing = false;
    int64_t used_nanos = 0;
    // Fingerprints asked for since the latest attempt started.
    std::set<uint64_t> tried_fingerprints;
  };
  // The answer from the cache, waiting for an indexing of `key` under way;
  // nullopt when the caller is to index it (marked as indexing).
  std::optional<absl::StatusOr<std::shared_ptr<const Dataset>>> Lookup(
      const std::string& key, const proto::DatasetSpec& spec, uint64_t fingerprint, int64_t size)
      ABSL_LOCKS_EXCLUDED(mu_);
  void EvictIfFull() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DatasetCacheOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // an indexing finished
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t indexings_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_DATASET_CACHE_H_
