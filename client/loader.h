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
// (OnError::kSkip: the batch comes out smaller) or end the run (kFail).
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
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/measurements.h"
#include "client/remote_worker.h"
#include "net/registration.h"
#include "net/security.h"
#include "pipeline/batch.h"
#include "pipeline/checksum.h"
#include "pipeline/dataset.h"
#include "pipeline/executor.h"
#include "pipeline/pipeline.h"
#include "pipeline/profiler.h"
#include "pipeline/text.h"
#include "pipeline/wire.h"
#include "policy/planner.h"
#include "proto/pipeline.pb.h"
#include "proto/scheduler.pb.h"
#include "proto/worker.pb.h"

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

// What a job asks the scheduler for when it has no measure of what it
// would use: as much as its fair share gives.
inline constexpr double kWantAllCores = 1e6;

// Transport CPU per byte the planner charges before it has measured any: the
// client's receive cost on the wire benchmark (docs/benchmarks.md), and a
// worker's send cost, one copy into the kernel like iperf3's sender (0.12
// CPU-s/GB there; workers do not report theirs).
inline constexpr double kPriorReceiveCpuPerByte = 0.17e-9;
inline constexpr double kAssumedSendCpuPerByte = 0.12e-9;

struct LoaderOptions {
  proto::DatasetSpec dataset;
  proto::PipelineSpec pipeline;
  int batch_size = 64;
  int threads = 0;  // 0: every CPU this process may use
  int epochs = 1;
  // Resuming: the run covers epochs [first_epoch, first_epoch + epochs), and
  // its first epoch starts after its first `skip_batches` batches (the same
  // order and batches as an uninterrupted run, so exactly the rest arrive).
  int first_epoch = 0;
  int64_t skip_batches = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  int rank = 0;
  int world_size = 1;
  int prefetch_batches = 2;  // raised as needed to keep remote workers busy
  OnError on_error = OnError::kSkip;
  int64_t max_pixels = 64'000'000;
  int max_jpeg_scans = kDefaultMaxJpegScans;  // see DecodeOptions

  // Unset: the PREPFLOW_OFFLOAD environment variable, else off. This is what
  // lets offloading be switched on per job without code changes.
  std::optional<OffloadMode> offload;
  std::vector<std::string> workers;  // host:port
  // prepflow-scheduler host:port: workers from its grants, renewed every
  // heartbeat. The job asks for what its planner would use (kAuto) or for
  // as much as its fair share (kRemote, kCut). Empty, with no `workers`
  // either: the PREPFLOW_SCHEDULER environment variable, if set.
  std::string scheduler;
  double scheduler_weight = 1;                // this job's share weight
  std::map<std::string, std::string> labels;  // locality preference, e.g. zone=a
  double max_remote_cores = 0;                // most cores to ask for; 0: no cap
  double demand = 0;                          // samples/s the trainer consumes; 0: measured
  double bandwidth = 0;                       // bytes/s into this trainer, for kAuto; 0: unlimited
  double replan_seconds = 2;                  // kAuto: how often to re-plan
  double replan_drift = 0.25;          // kAuto: re-plan sooner when a measurement moves this much
  double replan_gain = 0.03;           // kAuto: switch plans only for this much more throughput
  double worker_timeout_seconds = 30;  // silence while owing results
  // Hedging: an item that has waited this many times the fastest worker's
  // item latency is copied to an idle worker; the first answer wins and the
  // other is dropped. 0: never.
  double hedge_after = 3;
  double connect_timeout_seconds = 10;  // for the job to open on each worker
  // kRemote and kCut with --workers: when no worker can be reached at the
  // start, run locally (with a warning) instead of failing. kAuto always may.
  bool fallback_local = false;
  int item_samples = 8;          // samples per work item
  int max_items_per_worker = 0;  // credits asked for; 0: the worker's choice
  // TLS to the workers and the scheduler, and the bearer token to send
  // (net/security.h: --tls-ca, --tls-cert/--tls-key for mutual TLS,
  // --auth-token-file). Files are read when the Loader is created.
  SecurityOptions security;
  // Where batches' sample memory comes from (default: malloc); e.g.
  // page-locked memory for asynchronous GPU copies (client/gpu).
  HostAllocator batch_allocator;
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
  int64_t hedged_items = 0;            // copies sent to a second worker
  int64_t hedge_wins = 0;              // of those, answered first by the copy
  std::string offload;                 // the mode in force
  std::string plan;                    // kAuto: the current plan's explanation
  std::vector<double> plan_fractions;  // share of samples: local, then remote cut 0..n
  int64_t plan_changes = 0;
  double plan_throughput = 0;  // kAuto: what the current plan predicts, samples/s
  double ingest_limit = 0;     // kAuto: bytes/s the links were measured to bind at; 0: none seen
  double receive_cpu_per_byte = 0;  // kAuto: measured transport CPU here, s/byte
  struct WorkerStats {
    std::string address;
    bool alive = false;        // open for this job and taking items
    double granted_cores = 0;  // by the scheduler; 0: a static worker
    int streams = 0;           // opened to it (more than 1: it was re-granted or re-dialled)
    int64_t received_bytes = 0;
    int64_t samples = 0;     // samples it returned
    double link_limit = 0;   // bytes/s its link was seen to bind at; 0: not seen
    double ingest_rate = 0;  // bytes/s received from it over the last window (kAuto)
  };
  std::vector<WorkerStats> workers;
  int workers_alive = 0;
  int workers_total = 0;  // distinct addresses ever used
  // With a scheduler: whether its last beat got through, what this job asked
  // for, its fair share, and the cores granted now.
  std::string scheduler;
  bool scheduler_reachable = false;
  double wanted_cores = 0;
  double fair_share_cores = 0;
  double granted_cores = 0;
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
  // A random id naming this job to workers, in logs and in metrics.
  const std::string& job_id() const { return job_id_; }
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
    int hedge = -1;   // a second worker given a copy (hedging); the first answer wins
    int64_t sent_nanos = 0;
    int64_t hedge_sent_nanos = 0;
  };
  struct Worker {
    std::string address;
    std::string worker_id;  // as the scheduler names it ("" for static workers)
    std::unique_ptr<RemoteWorker> stream;
    bool opened = false;
    bool alive = true;
    bool granted = false;   // from the scheduler (else from options.workers)
    bool retiring = false;  // no longer granted: no new items, closed when idle
    double granted_cores = 0;
    int64_t added_nanos = 0;
    int max_credits = 0;  // what the worker allows
    int credits = 0;      // what we use: max_credits, scaled down to a grant
    int threads = 0;
    double cores = 0;  // as the worker reports it (its cgroup quota counts)
    int64_t last_heard_nanos = 0;
    std::vector<uint64_t> items;  // outstanding here
    std::string dropped_because;  // why it was dropped, for messages
    // Hedged copies the other worker answered first: their answers will be
    // dropped, but until they come the worker still holds their credits.
    std::vector<uint64_t> abandoned;
    int64_t samples = 0;  // returned, all time
    // The current measurement window, for telling a busy link from a busy
    // worker: results while every credit was out, and the CPU they report.
    int64_t window_start_nanos = 0;
    int64_t window_bytes = 0;
    double window_cpu_seconds = 0;
    int window_results = 0;
    int window_saturated = 0;
    double link_limit = 0;   // bytes/s the link carried when it bound; 0: never seen binding
    double ingest_rate = 0;  // bytes/s received over the last window
    double latency = 0;      // smoothed seconds from sending an item to its answer
  };
  // kAuto's measurements, smoothed over windows (see measurements.h).
  struct Measured {
    std::vector<SmoothedRatio> local_cpu, local_bytes;    // per stage, per sample
    std::vector<SmoothedRatio> remote_cpu, remote_bytes;  // "read" + stages
    SmoothedRatio read_cpu{8};
    SmoothedRatio receive_cpu_per_byte{16e6};  // per 16 MB received
    SmoothedRatio demand{0.25};                // samples per busy second, per 0.25 s
  };

  Loader() = default;
  absl::Status ConnectWorkers();
  // Samples per remote item at `cut`: options.item_samples, fewer where
  // that many would not fit item_bytes_limit_.
  int ItemSamples(int cut) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens the job on a new worker; returns its index. The stream opens
  // asynchronously (the `opened` handler makes it usable). `tls_name`: the
  // certificate name the scheduler saw the worker register with ("": none).
  int AddWorker(const std::string& address, const std::string& worker_id, double granted_cores,
                const std::string& tls_name = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The scheduler's side (called on the registration's thread).
  void FillBeat(proto::JobBeat* beat);
  void ApplyGrant(const proto::JobGrant& grant);
  // A worker no longer granted: closed now if idle, else once its items are in.
  void Retire(int w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cores of a worker this job may count on: what it reports, capped by its grant.
  static double UsableCores(const Worker& w);
  // Credits to use on a worker: its own, scaled down to the grant's share.
  static int CreditsFor(const Worker& w);
  // Credits not taken by items it holds (owed or abandoned).
  static int FreeCredits(const Worker& w) {
    return w.credits - static_cast<int>(w.items.size() + w.abandoned.size());
  }
  // Remote cores to ask the scheduler for.
  double WantedRemoteCores() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Raises prefetch_ so that every credit can be busy (within the task queue's room).
  void UpdatePrefetch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts batches until prefetch_ are in flight or the run is planned out.
  void TopUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands waiting items to workers with free credits; runs them locally when
  // no worker is left.
  void Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropWorker(int w, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends item `id` to worker `w` (its first assignment or a hedge).
  void SendItem(int w, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hedging: while a worker sits idle, gives it a copy of the oldest item
  // that has waited `hedge_after` times the fastest worker's item latency.
  void MaybeHedge() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The remote cut sample `index` of `epoch` takes, or -1 to run it all
  // here; drawn from the placement distribution with the job seed.
  int PlacementOf(uint64_t epoch, int64_t index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kAuto: re-plans from the measurements when it is time, when they have
  // drifted, or when a worker came or went.
  void MaybeReplan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // kAuto, before anything is measured: all remote on the workers' share of
  // the cores, so both sides' stage costs get measured from the start.
  void StartWarmUp() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cores this process may spend on preprocessing: its threads, capped by
  // its cgroup quota.
  double LocalCores() const;
  void UpdateMeasurements(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The planner's input from the measurements; nullopt while a stage is
  // still unmeasured.
  std::optional<policy::PlanInput> CurrentPlanInput() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  proto::JobOpen open_;  // what every worker is sent
  Security security_;    // options_.security, loaded
  std::unique_ptr<JobRegistration> registration_;

  mutable absl::Mutex mu_;
  absl::CondVar batch_done_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Item> items_ ABSL_GUARDED_BY(mu_);  // remote items not yet answered
  std::deque<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);    // items without a worker
  uint64_t next_item_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool all_workers_gone_logged_ ABSL_GUARDED_BY(mu_) = false;
  // The scheduler's side: the first grant (or failure) seen, reachability,
  // the last want and share, and when a granted worker last failed (it is
  // not dialled again for a while even if still granted).
  bool scheduler_answered_ ABSL_GUARDED_BY(mu_) = false;
  bool scheduler_reachable_ ABSL_GUARDED_BY(mu_) = false;
  double wanted_cores_ ABSL_GUARDED_BY(mu_) = 0;
  double fair_share_cores_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> failed_nanos_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> refused_ ABSL_GUARDED_BY(mu_);  // granted workers that refused the job
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
  int64_t hedged_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hedge_wins_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SampleError> first_errors_ ABSL_GUARDED_BY(mu_);
  LogLimiter skip_log_ ABSL_GUARDED_BY(mu_);  // "skipping sample" lines
  // The most bytes one item may hold: the least any worker said it takes
  // (JobOpened.max_item_bytes).
  int64_t item_bytes_limit_ ABSL_GUARDED_BY(mu_) = kMaxReplyBytes;
  // Bound on one sample's bytes at each cut (Pipeline::MaxBytesAt), set once.
  std::vector<int64_t> max_sample_bytes_;
  // Cumulative share of samples: local, then remote cut 0..n (last is 1).
  std::vector<double> placement_cdf_ ABSL_GUARDED_BY(mu_);
  int64_t last_plan_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  Measured measured_ ABSL_GUARDED_BY(mu_);
  int64_t measure_window_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // the links' window (wall, process CPU)
  int64_t measure_window_cpu_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<policy::PlanInput> plan_input_ ABSL_GUARDED_BY(mu_);  // of the last plan
  double plan_throughput_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> wire_copy_cpu_nanos_{0};  // FromWire in RunSuffix
  int64_t plan_changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string plan_explanation_ ABSL_GUARDED_BY(mu_);
  std::thread watchdog_;
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_LOADER_H_
