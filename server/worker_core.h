// The worker's logic, with no transport in it: validating a job once,
// running stages [0, cut) of work items on a thread pool, and reporting
// per-sample results with the costs it measured.
//
// A stream adapter (worker_service.h) calls OpenJob() for the first message
// of a stream and Submit() for each work item; results come back through the
// callback, on a pool thread.
//
// Thread-safety: every public method may be called from any thread.
#ifndef PREPFLOW_SERVER_WORKER_CORE_H_
#define PREPFLOW_SERVER_WORKER_CORE_H_

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/core/byte_budget.h"
#include "pipeline/core/executor.h"
#include "pipeline/core/wire.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"
#include "pipeline/reuse/echo_store.h"
#include "pipeline/reuse/sample_cache.h"
#include "proto/worker.pb.h"
#include "server/dataset_cache.h"
#include "server/metrics.h"

namespace prepflow {

struct WorkerOptions {
  std::string data_root;  // required: nothing outside it is read
  // URLs a job may name (CheckUrlAllowed); none: no URL at all. Read
  // through `store`.
  std::vector<std::string> allow_url_prefixes;
  std::shared_ptr<const ObjectStore> store;
  ReadAheadOptions read_ahead;  // for each job's remote data
  std::string index_cache_dir;  // see DatasetOptions
  // Data echoing: values held for their later copies, per job.
  int64_t echo_bytes = int64_t{256} << 20;
  // Keeps samples' values at each job's cache boundary across epochs and
  // jobs (--cache-bytes, --cache-dir); null: no cache.
  std::shared_ptr<SampleCache> cache;
  int threads = 0;                  // 0: every available CPU
  int max_streams = 64;             // open job streams at once
  int max_streams_per_client = 32;  // of them, from one client host
  int max_items_per_stream = 0;     // credits per stream; 0: 2 x threads
  int max_item_samples = 4096;
  int64_t max_pixels_limit = 64'000'000;            // a job may ask for less, not more
  int max_jpeg_scans_limit = kDefaultMaxJpegScans;  // likewise
  double max_audio_seconds_limit = DecodeOptions().max_audio_seconds;  // likewise
  int max_audio_channels_limit = DecodeOptions().max_audio_channels;   // likewise
  double max_video_seconds_limit = DecodeOptions().max_video_seconds;  // likewise
  int max_video_frames_limit = DecodeOptions().max_video_frames;       // likewise
  int64_t max_file_bytes_limit = kDefaultMaxFileBytes;  // likewise: one sample's read
  // What the worker holds for jobs, in bytes; 0: half of the memory this
  // process may use. Half of it bounds finished results, counted from the
  // pipeline's types before items run (Pipeline::MaxBytesAt): an item waits
  // until it fits. A quarter bounds what reads ahead and echo stores hold
  // over all jobs (they do without past it). A quarter bounds the threads'
  // working memory (working_memory.h): a large image waits its turn, and
  // one over it is refused.
  int64_t max_memory_bytes = 0;
  std::string worker_id;           // for logs and JobOpened; default host:pid
  double min_reindex_seconds = 5;  // see DatasetCache
};

// A sample's payload, in a buffer of its own (malloc'd), so a transport can
// send it without copying and free it when sent.
struct Payload {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data;
  size_t size = 0;
};

// A finished work item: the result with every sample's value.data left empty,
// and one payload per sample (empty for a failed one), in order. The item's
// share of the memory budget is held until `reservation` is destroyed: keep
// it until the reply is written or dropped.
struct ItemOutput {
  proto::ItemResult result;
  std::vector<Payload> payloads;
  std::shared_ptr<void> reservation;
};

class WorkerJob;

// A work item on its way through a worker: validated, then admitted against
// its job's budget of items and the worker's memory budget.
struct WorkerAdmission {
  std::shared_ptr<WorkerJob> job;
  proto::WorkItem item;
  std::function<void(ItemOutput)> done;
  int64_t bytes = 0;  // its results' bound, held in the memory budget
};

// One training job, opened by the first stream that names its job_id and
// shared by every stream of the same job_id (its ranks): one pipeline, one
// dataset open, one cache view and echo store, one budget of items.
class WorkerJob {
 public:
  const proto::JobOpen& spec() const { return spec_; }
  const Pipeline& pipeline() const { return *pipeline_; }
  const Dataset& dataset() const { return *dataset_; }
  // Bound on one sample's bytes after stage cut - 1, by cut.
  int64_t max_sample_bytes(int cut) const { return max_sample_bytes_[cut]; }
  // The job's view of the worker's sample cache; null without one.
  BoundaryCache* cache() const { return cache_.get(); }
  // Whether an item cut at `cut` reads through the cache.
  bool Cached(int cut) const { return cache_ != nullptr && cut >= cache_->boundary(); }
  // The boundary the job's data starts at: its materialization's, else 0.
  int start_stage() const {
    return spec_.dataset().has_materialized() ? spec_.dataset().materialized().upto() : 0;
  }
  // Data echoing: the boundary up to which an item cut at `cut` loads each
  // sample once for all its copies (the echo boundary, or the cache's if
  // later); -1 when it does not (no echoing, or a cut before it).
  int EchoAt(int cut) const {
    if (echo_ == nullptr) return -1;
    const int at = std::max({spec_.echo_at(), Cached(cut) ? cache_->boundary() : 0, start_stage()});
    return cut >= at ? at : -1;
  }
  // Items held back for the job's budget (see admitted_).
  int held_items() const {
    absl::MutexLock lock(&admit_mu_);
    return static_cast<int>(held_.size());
  }

 private:
  friend class WorkerCore;
  proto::JobOpen spec_;  // as the first stream sent it
  std::shared_ptr<const Dataset> dataset_;
  std::unique_ptr<Pipeline> pipeline_;
  // Why the pipeline stops short of the job's (a custom op not loaded here), or "".
  std::string unavailable_;
  std::string identity_;  // the client certificate that opened it; "" without mutual TLS
  std::vector<prometheus::Histogram*> stage_histograms_;
  std::vector<int64_t> max_sample_bytes_;
  std::unique_ptr<BoundaryCache> cache_;
  std::unique_ptr<EchoStore> echo_;  // with echo > 1
  int streams_ = 0;                  // open streams of the job (WorkerCore::mu_)
  // The job's budget of items queued or running at once, over all its
  // streams (--max-items-per-stream): a job's ranks share the worker's
  // threads as one job does, however many streams they open.
  mutable absl::Mutex admit_mu_;
  int admitted_ ABSL_GUARDED_BY(admit_mu_) = 0;
  std::deque<WorkerAdmission> held_ ABSL_GUARDED_BY(admit_mu_);  // over it, in order
};

class WorkerCore {
 public:
  // REQUIRES: options.data_root names an existing folder.
  WorkerCore(const WorkerOptions& options, WorkerMetrics* metrics);
  ~WorkerCore();  // Stop()s the pool

  // Validates the first message of a stream. Errors: InvalidArgument (bad
  // pipeline or limits, naming the field), PermissionDenied (dataset outside
  // --data-root), FailedPrecondition (the worker's index of the dataset
  // differs from the client's), ResourceExhausted (too many streams),
  // NotFound/DataLoss (dataset unreadable). A job_id open here already
  // (another rank's stream) is joined, not built again, when the options
  // match; FailedPrecondition, naming the difference, when they do not. On
  // success the caller owns one stream slot until it calls CloseJob();
  // `opened->max_items_in_flight()` is its credits.
  // `client`: the client's host, for --max-streams-per-client.
  // `identity`: the client certificate's name (mutual TLS), else empty; a
  // job opened by one identity is joined by no other (PermissionDenied).
  absl::StatusOr<std::shared_ptr<WorkerJob>> OpenJob(const proto::JobOpen& open,
                                                     const std::string& client,
                                                     proto::JobOpened* opened,
                                                     const std::string& identity = "");
  // Counts and logs a stream refused before OpenJob (e.g. its token).
  void RefuseStream(const absl::Status& status, const std::string& peer);
  // Ends a stream OpenJob admitted (`client` as it was given); the job
  // closes with its last stream.
  void CloseJob(const std::shared_ptr<WorkerJob>& job, const std::string& client);

  // Checks `item` against `job` (InvalidArgument naming the field;
  // ResourceExhausted, with the numbers, for an item that could never fit the
  // memory budget) and queues it; it runs once its results fit the budget.
  // `done` runs once, on a pool thread, with the item's result; per-sample
  // failures are inside the result, not a Status. Never blocks: the stream's
  // credits bound what is queued.
  absl::Status Submit(std::shared_ptr<WorkerJob> job, proto::WorkItem item,
                      std::function<void(ItemOutput)> done);

  // Stops taking new jobs; running items finish. `reclaimed`: its capacity
  // is being taken back (worker_drain.h's DrainReason), told to the scheduler.
  void BeginDrain(bool reclaimed);
  bool draining() const;
  bool drain_reclaimed() const;
  int threads() const { return pool_->size(); }
  // Job streams open now.
  int active_streams() const;
  int active_jobs() const;  // training jobs open now (a job's ranks share one)
  int64_t max_memory_bytes() const { return options_.max_memory_bytes; }
  const std::string& worker_id() const { return options_.worker_id; }
  // Stops the pool; queued items are dropped. Call after every stream ended.
  void Stop() { pool_->Stop(); }

  // Counts `bytes` of results about to be sent and returns this process's
  // CPU outside what its samples report (read and stage costs), per byte of
  // results sent: measured over windows of 16 MB and at least 0.25 s and
  // smoothed; 0 before the first window closes. Every client's planner
  // charges it to the bytes it asks this worker for (t_r).
  double CountSent(int64_t bytes) ABSL_LOCKS_EXCLUDED(transport_mu_);
  // The share of this worker's cores its process kept busy over its latest
  // window of at least 0.5 s (every job's items, and everything else), 0
  // before the first window closes. Sent with every result.
  double BusyShare() ABSL_LOCKS_EXCLUDED(transport_mu_);

 private:
  // Counts a new stream from `client` against --max-streams and
  // --max-streams-per-client. Errors: Unavailable while draining,
  // ResourceExhausted over a limit.
  // `*job`: the job built for the stream, replaced by the open one of the
  // same job_id if another rank opened it meanwhile (FailedPrecondition
  // when that one has other options).
  absl::Status AdmitStream(const std::string& client, std::shared_ptr<WorkerJob>* job)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RunItem(int thread, const WorkerJob& job, const proto::WorkItem& item, ItemOutput* out);
  // One item as its samples run: where it is cut, how many copies of a
  // sample share one load, whether values may be kept in the job's cache
  // (not for an item sent away from its samples' home, WorkItem.away), and
  // what its samples cost, summed as they run: CPU reported in their stage
  // costs, and their reads' wall time and bytes.
  struct ItemRun {
    int cut = 0;
    int copies = 1;
    bool keep = true;
    int64_t reported_cpu_nanos = 0;
    int64_t read_wait_nanos = 0;
    int64_t read_bytes = 0;
  };
  // Puts sample `s`'s value at boundary `*from` into it for an item cut at
  // `run->cut`: from the job's cache, or read (and, at a cut past the
  // cache's boundary, run up to it and kept if `run->keep`). Fills the read
  // cost and cache_hit of `out`.
  absl::Status Load(const WorkerJob& job, Sample& s, Workspace& ws, proto::SampleResult* out,
                    int* from, ItemRun* run);
  // Puts sample `s` (its identity set) through stages [0, run->cut): loaded
  // (or taken from the cache or an earlier copy: `run->copies` of it share
  // one load), then run; costs go to `out`.
  absl::Status RunSample(const WorkerJob& job, Sample& s, Workspace& ws, proto::SampleResult* out,
                         ItemRun* run);
  // Runs stages [begin, end) on `s`, one at a time, adding each one's cost
  // to `out` (and keeping the value at the cache boundary when it passes it
  // and `run->keep`).
  absl::Status RunStages(const WorkerJob& job, int begin, int end, Sample& s, Workspace& ws,
                         proto::SampleResult* out, ItemRun* run);
  // Chooses the job's cache boundary (cache_at, else the pipeline's
  // default). InvalidArgument when the client named one that is not
  // deterministic.
  absl::Status OpenCache(WorkerJob* job) const;
  // Checks the job's echo and materialization fields, makes its echo store,
  // and opens its cache (OpenCache). InvalidArgument naming the field.
  absl::Status OpenReuse(WorkerJob* job) const;
  using Admission = WorkerAdmission;
  // Builds a new job for `open` (validated limits), without touching the
  // open jobs. `unavailable`: see RunnablePrefix.
  absl::StatusOr<std::shared_ptr<WorkerJob>> BuildJob(const proto::JobOpen& open);
  // InvalidArgument, naming the flag, where a job asks for more than this
  // worker's limits (--max-pixels, --max-video-frames, ...).
  absl::Status CheckJobLimits(const proto::JobOpen& open) const;
  // The open job `open.job_id()` names, or null; PermissionDenied when it
  // was opened by another `identity`, FailedPrecondition when it is open
  // with other options.
  absl::StatusOr<std::shared_ptr<WorkerJob>> FindJob(const proto::JobOpen& open,
                                                     const std::string& identity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admits the item against its job's budget of items (else holds it,
  // in order, until one of the job's items finishes), then the memory's.
  // False when the pool has stopped.
  bool AdmitToJob(Admission a);
  // One of `job`'s items finished running: the next it holds is admitted.
  void FinishedInJob(const std::shared_ptr<WorkerJob>& job);
  // Admits the item against the memory budget (or queues it there) and
  // launches it. False when the pool has stopped.
  bool AdmitToMemory(Admission a);
  // Queues the item on the pool, holding `bytes` of the budget until its
  // output's reservation is released.
  bool Launch(Admission a);
  // What finished items' results may hold: half of max_memory_bytes.
  int64_t ResultBytes() const { return options_.max_memory_bytes / 2; }
  // The most bytes one item may hold: it must fit the results' budget and
  // one reply.
  int64_t ItemCap() const { return std::min(ResultBytes(), kMaxReplyBytes); }
  void Release(int64_t bytes);
  WorkerOptions options_;
  WorkerMetrics* metrics_;  // may be null
  // What every dataset's reads ahead and every job's echo store hold, over
  // all of them: a quarter of max_memory_bytes, beside the results' budget.
  std::shared_ptr<ByteBudget> held_ahead_;
  // What the threads' workspaces hold while samples run: the last quarter.
  std::unique_ptr<WorkingMemory> working_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;
  std::unique_ptr<ThreadPool> pool_;

  mutable absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> streams_by_client_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<WorkerJob>> jobs_ ABSL_GUARDED_BY(mu_);  // by job_id
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_reclaimed_ ABSL_GUARDED_BY(mu_) = false;
  DatasetCache datasets_;  // shared by the jobs; locks of its own

  // CPU the items' samples report to clients, summed (see CountSent).
  std::atomic<int64_t> reported_cpu_nanos_{0};
  struct TransportWindow {
    int64_t start_nanos = 0, process_cpu = 0, reported_cpu = 0, sent_bytes = 0;
  };
  absl::Mutex transport_mu_;
  int64_t sent_bytes_ ABSL_GUARDED_BY(transport_mu_) = 0;
  TransportWindow window_ ABSL_GUARDED_BY(transport_mu_);
  double transport_cpu_per_byte_ ABSL_GUARDED_BY(transport_mu_) = 0;
  int64_t busy_start_nanos_ ABSL_GUARDED_BY(transport_mu_) = 0;
  int64_t busy_start_cpu_ ABSL_GUARDED_BY(transport_mu_) = 0;
  double busy_ ABSL_GUARDED_BY(transport_mu_) = 0;

  // The memory budget: admitted items in order, those waiting for room.
  absl::Mutex budget_mu_ ABSL_ACQUIRED_AFTER(mu_);
  int64_t reserved_bytes_ ABSL_GUARDED_BY(budget_mu_) = 0;
  std::deque<Admission> waiting_ ABSL_GUARDED_BY(budget_mu_);
  int64_t last_trim_nanos_ ABSL_GUARDED_BY(budget_mu_) = 0;
};

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_WORKER_CORE_H_
