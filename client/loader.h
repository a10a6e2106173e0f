// The trainer-side Loader: turns a dataset and a pipeline into ready batches.
//
// The Loader owns the epoch order (seeded shuffle, rank shard), keeps up to
// `prefetch_batches` batches in flight on its thread pool, and hands batches
// out strictly in order. Each sample is written straight into its batch slot.
// Per-sample failures are reported with the sample's path and either skipped
// (OnError::kSkip: the batch comes out smaller) or end the run
// (OnError::kFail).
//
// This is the local-only path; remote workers plug in behind the same
// interface.
//
// Thread-safety: Next() is called from one thread at a time. Stats() may be
// called from any thread. Batches returned by Next() may outlive the Loader.
#ifndef PREPFLOW_CLIENT_LOADER_H_
#define PREPFLOW_CLIENT_LOADER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/batch.h"
#include "pipeline/checksum.h"
#include "pipeline/dataset.h"
#include "pipeline/executor.h"
#include "pipeline/pipeline.h"
#include "pipeline/profiler.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

enum class OnError { kSkip, kFail };
absl::StatusOr<OnError> ParseOnError(const std::string& name);

struct LoaderOptions {
  proto::DatasetSpec dataset;
  proto::PipelineSpec pipeline;
  int batch_size = 64;
  int threads = 0;  // 0: every CPU this process may use
  int epochs = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  int rank = 0;
  int world_size = 1;
  int prefetch_batches = 2;
  OnError on_error = OnError::kSkip;
  int64_t max_pixels = 64'000'000;
};

struct LoaderStats {
  int64_t images = 0;  // delivered
  int64_t errors = 0;  // samples that failed (skipped or fatal)
  int64_t batches = 0;
  uint64_t bytes = 0;  // delivered output bytes
  uint64_t checksum = 0;
  double seconds = 0;       // since the first Next()
  double cpu_seconds = 0;   // process CPU time over the same span
  double wait_seconds = 0;  // time Next() spent waiting for data
  // "read" first, then one entry per pipeline stage.
  std::vector<StageStats> stages;
  std::vector<SampleError> first_errors;  // up to 16
};

using BatchPtr = std::shared_ptr<const Batch>;

class Loader {
 public:
  // Opens the dataset and validates the pipeline. Errors: InvalidArgument
  // (bad option or pipeline, naming it), NotFound / DataLoss (dataset).
  static absl::StatusOr<std::unique_ptr<Loader>> Create(const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in order; nullptr after the last batch of the last epoch.
  // With OnError::kFail the first failed sample's error is returned, now and
  // from every later call.
  absl::StatusOr<BatchPtr> Next();

  LoaderStats Stats() const;
  const Dataset& dataset() const { return *dataset_; }
  const Pipeline& pipeline() const { return *pipeline_; }
  const LoaderOptions& options() const { return options_; }
  int threads() const { return pool_->size(); }
  // Samples and batches this rank sees per epoch.
  int64_t samples_per_epoch() const { return samples_per_epoch_; }
  int64_t batches_per_epoch() const;

 private:
  struct Pool;  // free batches, shared with delivered BatchPtrs

  Loader() = default;
  // Starts batches until prefetch_batches are in flight or the run is planned out.
  void TopUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunSample(int worker, Batch* batch, int64_t slot);

  LoaderOptions options_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<StageProfiler> read_profiler_;
  std::unique_ptr<StageProfiler> stage_profiler_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;  // one per pool thread
  std::shared_ptr<Pool> pool_of_batches_;
  std::unique_ptr<ThreadPool> pool_;
  Checksum checksum_;
  int64_t samples_per_epoch_ = 0;

  mutable absl::Mutex mu_;
  absl::CondVar batch_done_;
  std::deque<Batch*> in_flight_ ABSL_GUARDED_BY(mu_);
  int next_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // epoch of the next batch to start
  int64_t next_offset_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_number_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> order_ ABSL_GUARDED_BY(mu_);  // of next_epoch_
  bool order_ready_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int64_t start_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t end_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t start_cpu_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t end_cpu_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t wait_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t images_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SampleError> first_errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_LOADER_H_
