// The trainer-side Loader: turns a dataset and a pipeline into ready batches,
// running each sample on this machine's CPUs or, for a prefix of the
// pipeline, on remote workers.
//
// The Loader owns the epoch order (seeded shuffle, rank shard), keeps up to
// `prefetch_batches` batches in flight, and hands batches out strictly in
// order. Every sample is written straight into its batch slot: local samples
// run the whole pipeline here; remote ones run stages [0, cut) on a worker and
// the rest here.
//
// Exactly once: every remote work item is tracked with the worker it was given
// to. When a worker's stream breaks, or the worker is silent for longer than
// `worker_timeout_seconds` while it owes results, it is dropped and its items
// are handed to another worker, or run locally when none is left. Results are
// only taken from the worker an item is currently assigned to, so every sample
// is delivered exactly once per epoch whatever fails. A worker's refusal
// (PERMISSION_DENIED, INVALID_ARGUMENT, UNAUTHENTICATED, FAILED_PRECONDITION)
// is not routed around: the run stops with that message.
//
// Per-sample failures are reported with the sample's path and either skipped
// (OnError::kSkip: the batch comes out smaller) or end the run (kFail).
//
// Thread-safety: Next() is called from one thread at a time. Stats() may be
// called from any thread. Batches returned by Next() may outlive the Loader.
#ifndef PREPFLOW_CLIENT_LOADER_H_
#define PREPFLOW_CLIENT_LOADER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/remote_worker.h"
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

// Where samples run. kOff: all local. kRemote: every sample's whole pipeline
// on workers. kCut: stages [0, cut) on workers for a `remote_fraction` of the
// samples (chosen per sample from the seed), the rest fully local. kAuto: the
// planner (policy/planner.h) decides from measurements and keeps re-deciding.
struct OffloadMode {
  enum Kind { kOff, kRemote, kCut, kAuto };
  Kind kind = kOff;
  int cut = 0;
  double remote_fraction = 1.0;
};
// Parses "off" | "auto" | "remote" | "cut=K[,remote_fraction=F]".
absl::StatusOr<OffloadMode> ParseOffload(const std::string& text);
std::string OffloadModeString(const OffloadMode& mode);

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
  int prefetch_batches = 2;  // raised as needed to keep remote workers busy
  OnError on_error = OnError::kSkip;
  int64_t max_pixels = 64'000'000;

  // Unset: the PREPFLOW_OFFLOAD environment variable, else off. This is what
  // lets offloading be switched on per job without code changes.
  std::optional<OffloadMode> offload;
  std::vector<std::string> workers;     // host:port
  double demand = 0;                    // samples/s the trainer consumes; 0: measured
  double bandwidth = 0;                 // bytes/s into this trainer, for kAuto; 0: unlimited
  double replan_seconds = 2;            // kAuto: how often to re-plan
  double worker_timeout_seconds = 30;   // silence while owing results
  double connect_timeout_seconds = 10;  // for the job to open on each worker
  int item_samples = 8;                 // samples per work item
  int max_items_per_worker = 0;         // credits asked for; 0: the worker's choice
};

struct LoaderStats {
  int64_t images = 0;         // delivered
  int64_t remote_images = 0;  // of which stages ran on a worker
  int64_t local_images = 0;
  int64_t errors = 0;  // samples that failed (skipped or fatal)
  int64_t batches = 0;
  uint64_t bytes = 0;  // delivered output bytes
  uint64_t checksum = 0;
  double seconds = 0;       // since the first Next()
  double cpu_seconds = 0;   // process CPU time over the same span
  double wait_seconds = 0;  // time Next() spent waiting for data
  int64_t reissued_items = 0;
  std::string offload;                 // the mode in force
  std::string plan;                    // kAuto: the current plan's explanation
  std::vector<double> plan_fractions;  // share of samples: local, then remote cut 0..n
  int64_t plan_changes = 0;
  int workers_alive = 0;
  int workers_total = 0;
  // Measured here: "read" first, then one entry per pipeline stage.
  std::vector<StageStats> stages;
  // Measured on workers (as they report it), same layout.
  std::vector<StageStats> remote_stages;
  std::vector<SampleError> first_errors;  // up to 16
};

using BatchPtr = std::shared_ptr<const Batch>;

class Loader {
 public:
  // Opens the dataset, validates the pipeline and options, and opens the job
  // on every worker. Errors: InvalidArgument (bad option or pipeline, naming
  // it), NotFound / DataLoss (dataset), a worker's refusal. Workers that
  // cannot be reached are left out (logged); with none left the job runs
  // locally.
  static absl::StatusOr<std::unique_ptr<Loader>> Create(const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in order; nullptr after the last batch of the last epoch.
  // A fatal error (a sample under OnError::kFail, a worker's refusal) is
  // returned now and from every later call.
  absl::StatusOr<BatchPtr> Next();

  LoaderStats Stats() const;
  const Dataset& dataset() const { return *dataset_; }
  const Pipeline& pipeline() const { return *pipeline_; }
  const LoaderOptions& options() const { return options_; }
  int threads() const { return pool_->size(); }
  int prefetch_batches() const { return prefetch_; }
  // Samples and batches this rank sees per epoch.
  int64_t samples_per_epoch() const { return samples_per_epoch_; }
  int64_t batches_per_epoch() const;

 private:
  struct Pool;  // free batches, shared with delivered BatchPtrs
  struct Item {
    Batch* batch;
    std::vector<int64_t> slots;
    int cut;
    int worker = -1;  // -1: waiting for a worker
  };
  struct Worker {
    std::unique_ptr<RemoteWorker> stream;
    bool opened = false;
    bool alive = true;
    int credits = 0;
    int threads = 0;
    double cores = 0;  // as the worker reports it (its cgroup quota counts)
    int64_t last_heard_nanos = 0;
    std::vector<uint64_t> items;  // outstanding here
  };

  Loader() = default;
  absl::Status ConnectWorkers();
  // Starts batches until prefetch_ are in flight or the run is planned out.
  void TopUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands waiting items to workers with free credits; runs them locally when
  // no worker is left.
  void Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropWorker(int w, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The remote cut sample `index` of `epoch` takes, or -1 to run it all
  // here; drawn from the placement distribution with the job seed.
  int PlacementOf(uint64_t epoch, int64_t index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kAuto: re-plans from the measurements when it is time.
  void MaybeReplan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SubmitLocal(Batch* batch, int64_t slot);
  void RunSample(int thread, Batch* batch, int64_t slot);
  void RunSuffix(int thread, Batch* batch, int64_t slot, int cut,
                 std::shared_ptr<const ReceivedMessage> result, int sample);
  void OnResult(int w, std::shared_ptr<const ReceivedMessage> received);
  void OnClosed(int w, const absl::Status& status);
  void WatchdogLoop();

  LoaderOptions options_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<StageProfiler> read_profiler_;
  std::unique_ptr<StageProfiler> stage_profiler_;
  std::unique_ptr<StageProfiler> remote_profiler_;      // "read" + stages
  std::vector<std::unique_ptr<Workspace>> workspaces_;  // one per pool thread
  std::shared_ptr<Pool> pool_of_batches_;
  std::unique_ptr<ThreadPool> pool_;
  Checksum checksum_;
  int64_t samples_per_epoch_ = 0;
  int prefetch_ = 2;
  OffloadMode offload_;  // resolved
  std::string job_id_;

  mutable absl::Mutex mu_;
  absl::CondVar batch_done_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Item> items_ ABSL_GUARDED_BY(mu_);  // remote items not yet answered
  std::deque<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);    // items without a worker
  uint64_t next_item_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool all_workers_gone_logged_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
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
  int64_t remote_images_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reissued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SampleError> first_errors_ ABSL_GUARDED_BY(mu_);
  // Cumulative share of samples: local, then remote cut 0..n (last is 1).
  std::vector<double> placement_cdf_ ABSL_GUARDED_BY(mu_);
  int64_t last_plan_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t plan_changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string plan_explanation_ ABSL_GUARDED_BY(mu_);
  std::thread watchdog_;
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_LOADER_H_
