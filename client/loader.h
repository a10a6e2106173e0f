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
// is not routed around: the run stops with that message. (A worker the
// scheduler granted that refuses is left out instead, and the job goes on.)
//
// Workers come from a static list (`workers`), from prepflow-scheduler's
// grants (`scheduler`), or both. Granted workers may come and go mid-run: a
// new grant opens the job on the worker and its credits join at once; a
// worker the grant no longer names gets no new items, finishes what it has
// and is closed. While the scheduler is unreachable the job keeps the
// workers it has. With no grant at all, the job runs locally.
//
// Per-sample failures are reported with the sample's path and either skipped
// (OnError::kSkip) or end the run (kFail). A batch that lost samples is
// filled from the front of the batches after it in its epoch (a batch taken
// whole is not handed out; the epoch's last keeps one sample), so every
// batch but an epoch's last is full and, unless too many failed, the epoch
// has as many batches as planned; which samples a batch holds depends only
// on which failed, never on timing. Batches by length are not filled (their
// seconds budget is their plan).
//
// Thread-safety: Next() is called from one thread at a time. Stats() may be
// called from any thread. Batches returned by Next() may outlive the Loader.
#ifndef PREPFLOW_CLIENT_LOADER_H_
#define PREPFLOW_CLIENT_LOADER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/text.h"
#include "client/loader_options.h"
#include "client/loader_stats.h"
#include "net/security.h"
#include "pipeline/core/batch.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"
#include "pipeline/reuse/sample_cache.h"
#include "policy/replanner.h"
#include "proto/worker.pb.h"

namespace prepflow {

class MixupCutmix;
class RemotePool;
class SampleRunner;
class SchedulerGrants;

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

  // CPU this machine spent on delivered samples outside the pipeline (a
  // Python tail's, in its processes or threads): the planner charges it to
  // every path, as it does the batch ops', so that --offload auto leaves
  // room for it.
  void AddTrainerWork(double cpu_seconds);
  double trainer_cpu_seconds() const;

  LoaderStats Stats() const;
  const Dataset& dataset() const { return *dataset_; }
  const Pipeline& pipeline() const { return *pipeline_; }
  // As resolved (ResolveOptions): `offload` is always set.
  const LoaderOptions& options() const { return options_; }
  int threads() const;
  // A random id naming this job to workers, in logs and in metrics.
  const std::string& job_id() const { return job_id_; }
  int prefetch_batches() const;
  // Samples and batches this rank sees per epoch: the latest epoch begun
  // (with --echo auto each epoch's echo factor multiplies its samples).
  int64_t samples_per_epoch() const {
    return samples_per_rank_ * echo_now_.load(std::memory_order_relaxed);
  }
  int64_t batches_per_epoch() const { return BatchesInEpoch(options_.first_epoch); }
  // Batches of `epoch` on this rank: the same in every epoch, unless
  // batching by length (--max-batch-seconds) cuts each epoch anew.
  int64_t BatchesInEpoch(int64_t epoch) const;

 private:
  // Batches not in use. Delivered BatchPtrs hold a reference so that a batch
  // kept past the Loader's life is still freed safely.
  struct FreeBatches {
    absl::Mutex mu;
    std::vector<std::unique_ptr<Batch>> free ABSL_GUARDED_BY(mu);
  };

  Loader() = default;
  absl::Status Init(const LoaderOptions& options);
  absl::Status OpenPipeline();
  // The field whose audio batching by length measures: "" the media, or a
  // record's first field that decodes audio; InvalidArgument where none does
  // or the records were materialized.
  absl::StatusOr<std::string> LengthField(bool materialized) const;
  // The data's materialization (from its manifest), or null.
  const proto::Materialized* Materialized() const {
    return options_.dataset.has_materialized() ? &options_.dataset.materialized() : nullptr;
  }
  // Checks --cache-at and --echo-at against the pipeline and opens the
  // cache, if any.
  absl::Status OpenCache();
  // Starts reading the samples at `indices` that will be read here (remote
  // data; those the cache holds are not read).
  void PrefetchLocal(uint64_t epoch, absl::Span<const int64_t> indices) const;
  // storage_bytes_read_per_epoch, for the epochs begun.
  std::vector<int64_t> StorageBytesPerEpoch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the pool (and the scheduler's grants) and waits for the workers to
  // open the job. Errors: a refusal; Unavailable when remote placement was
  // asked for, no worker is reachable and --fallback-local is not given.
  // The pipeline, the (materialized) dataset, the batch ops and the cache,
  // from options_.
  absl::Status OpenData();
  // The mixture's plan from the opened sources and --mix's weights, checked.
  absl::Status PlanMix();
  absl::Status StartRemote();
  // Unavailable for a job that asked for workers and has none usable after
  // StartRemote's wait, saying why (the workers', or the scheduler's).
  absl::Status NoWorkerError() const;
  // The re-planner: with --offload auto, or with --echo auto (for its echo
  // factor alone).
  void MakeReplanner() ABSL_LOCKS_EXCLUDED(mu_);
  // With caches (here or on workers): whether one of `indices` (the next
  // batch's) is in its first run, unfinished in a batch in flight from an
  // earlier epoch (StartBatch then holds the batch back).
  bool StillLoading(absl::Span<const int64_t> indices) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that `batch`'s samples (complete) have each run once.
  void NoteFinished(const Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The echo factor of `epoch`, chosen when its order is made.
  int ChooseEpochEcho(int epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::JobOpen JobOpenMessage() const;
  // Remote cores to ask the scheduler for; nullopt when there is no measure
  // of them (no plan yet, or a fixed placement: as much as the share gives).
  std::optional<double> WantedRemoteCores() const;
  // Cores this process may spend on preprocessing: its threads, capped by
  // its cgroup quota (re-read each time: a quota may change while it runs).
  double LocalCores() const;
  // Samples per remote item at `cut`: options.item_samples, fewer where
  // that many would not fit `item_bytes_limit`.
  int ItemSamples(int cut, int64_t item_bytes_limit) const;
  // Makes the batches that can be in flight plus the one the trainer holds.
  void MakeBatches() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Raises prefetch_ so that every credit can be busy (within the task
  // queue's room).
  void UpdatePrefetch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts batches until prefetch_ are in flight or the run is planned out.
  void TopUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `batch` is complete or the run fails; fails it (Internal)
  // when its unfinished samples are held by no thread and no worker.
  void AwaitBatch(const Batch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next batch of the epoch order, or null when the run is planned out.
  Batch* StartBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Batching by length: this rank's order of `epoch`, and where each of its
  // batches starts (with the end last).
  void PlanByLength(int64_t epoch, std::vector<int64_t>* order, std::vector<int64_t>* bounds) const;
  // Sends each sample of `batch` its way: local, or in remote items by cut.
  void Place(Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a sample placed at `cut` goes when one sample there may be more
  // than an item of `limit` bytes holds: here (-1), said once per cut.
  int Oversize(int cut, int64_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The remote cut sample `index` of `epoch` takes, or -1 to run it all
  // here; drawn from the placement with the job seed.
  int PlacementOf(uint64_t epoch, int64_t index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kAuto, before anything is measured (policy::WarmUp).
  void StartWarmUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LoaderStats::epoch_seconds.
  std::vector<double> EpochSeconds() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the re-planner a snapshot; under kAuto applies a new placement.
  // `waiting_since`: when the wait for a batch under way began (0: none).
  void MaybeReplan(int64_t waiting_since = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and reports the failed samples of a finished batch; under
  // OnError::kFail the first one ends the run (returned).
  absl::Status TakeErrors(Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills the room `batch`'s failed samples left from the batches in flight
  // after it (waiting for them), within its epoch; a failure ends the run.
  absl::Status FillFromNext(Batch* batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Batches of batch_size (the last short, or dropped) that `samples` make.
  int64_t FixedBatches(int64_t samples) const;
  // A resumed first epoch: its next batch starts at `position` of the
  // order (LoaderOptions::skip_samples).
  void ResumeAt(int64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndRun() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRefusal(const absl::Status& status);
  // The pool's counters and workers (merged per address), with their links
  // from `plan`.
  void AddRemoteStats(const policy::ReplanState& plan, LoaderStats* st) const;
  void SignalBatchDone();

  LoaderOptions options_;
  OffloadMode offload_;  // *options_.offload
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<MixupCutmix> batch_ops_;  // null without batch stages
  std::shared_ptr<FreeBatches> free_batches_;
  // The values at cache_at_ kept across epochs here (null without a cache).
  std::unique_ptr<BoundaryCache> cache_;
  int cache_at_ = 0;
  int echo_at_ = 0;                       // stages from here on draw each echoed copy's numbers
  std::unique_ptr<SampleRunner> runner_;  // local samples and remote suffixes
  Checksum checksum_;
  int64_t samples_per_rank_ = 0;  // an epoch's samples without echoing
  int64_t epoch_samples_ = 0;     // an epoch's samples, all ranks': the dataset's, or a mixture's
  // A mixture (--mix): its plan; sizes empty when the data is one dataset.
  MixPlan mix_;
  // Batching by length: each sample's seconds (empty: not by length), and
  // the batch counts of the epochs asked about.
  std::vector<double> seconds_;
  mutable absl::Mutex counts_mu_;
  mutable std::map<int64_t, int64_t> batches_by_epoch_ ABSL_GUARDED_BY(counts_mu_);
  // Data echoing: the most copies a sample may have in any epoch (--echo,
  // or --max-echo with --echo auto: what workers are told), and the factor
  // of the latest epoch begun.
  int echo_cap_ = 1;
  std::atomic<int> echo_now_{1};
  std::string job_id_;
  Security security_;                             // options_.security, loaded
  std::unique_ptr<policy::Replanner> replanner_;  // kAuto with workers; --echo auto
  std::unique_ptr<RemotePool> remote_;            // with workers or a scheduler
  std::unique_ptr<SchedulerGrants> grants_;       // with a scheduler

  mutable absl::Mutex mu_;
  absl::CondVar batch_done_;
  int prefetch_ ABSL_GUARDED_BY(mu_) = 2;
  policy::Placement placement_ ABSL_GUARDED_BY(mu_);
  std::deque<Batch*> in_flight_ ABSL_GUARDED_BY(mu_);
  // With caches: by dataset index, whether a run of the sample finished
  // (StillLoading); empty until a cache is in use.
  std::vector<bool> finished_once_ ABSL_GUARDED_BY(mu_);
  int next_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // epoch of the next batch to start
  int64_t next_number_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> order_ ABSL_GUARDED_BY(mu_);  // of next_epoch_
  // Where each batch of order_ starts, with the end last: batches of
  // batch_size, or by length the plan's.
  std::vector<int64_t> bounds_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> order_copies_ ABSL_GUARDED_BY(mu_);  // echoed copies; empty: none
  bool order_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool planned_ ABSL_GUARDED_BY(mu_) = false;  // kAuto: a plan replaced the warm-up
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  int64_t start_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t end_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t start_cpu_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t end_cpu_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t wait_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t images_ ABSL_GUARDED_BY(mu_) = 0;
  // CPU spent here outside the pipeline (batch ops, AddTrainerWork), which
  // the planner charges to every delivered sample.
  int64_t trainer_cpu_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t remote_images_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t echoed_images_ ABSL_GUARDED_BY(mu_) = 0;  // copies 1 and up
  // A mixture: where each source starts among the samples, and the samples
  // delivered from each.
  std::vector<int64_t> mix_offsets_;
  std::vector<int64_t> mix_delivered_ ABSL_GUARDED_BY(mu_);
  std::map<int, int> epoch_echo_ ABSL_GUARDED_BY(mu_);  // each epoch begun: its echo factor
  int delivered_echo_ ABSL_GUARDED_BY(mu_) = 1;         // of the last batch delivered
  int64_t errors_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t filled_samples_ ABSL_GUARDED_BY(mu_) = 0;  // moved up into a batch short of failures
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  // When each epoch's last batch was delivered (the epochs before the one
  // delivering now), and the latest batch's epoch and time.
  std::vector<int64_t> epoch_end_nanos_ ABSL_GUARDED_BY(mu_);
  uint64_t last_batch_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_batch_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t padding_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SampleError> first_errors_ ABSL_GUARDED_BY(mu_);
  LogLimiter skip_log_ ABSL_GUARDED_BY(mu_);            // "skipping sample" lines
  std::set<int> oversize_warned_ ABSL_GUARDED_BY(mu_);  // cuts Oversize() named
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_LOADER_H_
