// The trainer's own CPUs: runs samples straight into their batch slots on a
// thread pool, and measures every stage on each side.
//
// A local sample is read and runs the whole pipeline here (RunLocal). A
// remote one arrives as a worker's answer (TakeRemote): at the last cut its
// tensor is copied into the slot at once; at an earlier cut its value is
// checked against the bound its type allows and the suffix [cut, n) is queued
// here. Per-sample failures finish the slot with the sample's path and error;
// the Loader decides whether they are skipped or end the run.
//
// Measurements: the read, each stage here, and each stage on the workers as
// they report it, plus the CPU spent taking remote values off the wire: what
// the re-planner weighs (Measure) and what Stats shows.
//
// Thread-safety: every method may be called from any thread; `batch_done`
// runs on a pool thread or on the caller of TakeRemote, without a lock held
// here.
#ifndef PREPFLOW_CLIENT_SAMPLE_RUNNER_H_
#define PREPFLOW_CLIENT_SAMPLE_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/remote/received_message.h"
#include "client/remote/remote_pool.h"
#include "pipeline/core/batch.h"
#include "pipeline/core/executor.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"
#include "pipeline/reuse/echo_store.h"
#include "pipeline/reuse/sample_cache.h"
#include "policy/replanner.h"

namespace prepflow {

class SampleRunner {
 public:
  // `dataset` and `pipeline` outlive the runner. `queue_capacity`: tasks
  // that may wait (RunLocal and suffixes); Submit waits for room beyond it.
  // `batch_done` is called when a sample completes its batch.
  // Data echoing: the copies of a sample (as many as its batch's echo())
  // share one load up to boundary `at` (held within `bytes` while their
  // copies come).
  struct Echo {
    int at = 0;
    int64_t bytes = 0;
  };
  // Where local samples' values come from before their stages run.
  struct Sources {
    // Keeps values at its boundary across epochs; outlives the runner.
    BoundaryCache* cache = nullptr;
    // The data is materialized up to materialized->upto(); outlives the
    // runner.
    const proto::Materialized* materialized = nullptr;
    Echo echo;
  };
  SampleRunner(const Dataset* dataset, const Pipeline* pipeline, Sources sources, int threads,
               size_t queue_capacity, std::function<void()> batch_done);
  // Stop()s.
  ~SampleRunner();
  SampleRunner(const SampleRunner&) = delete;
  SampleRunner& operator=(const SampleRunner&) = delete;

  // Queues sample `slot` of `batch` to be read and run through every stage.
  void RunLocal(Batch* batch, int64_t slot);
  // A worker's answer to `item`, taken once and only from the worker the
  // item was assigned to: each sample finishes its slot now (cut n, or an
  // error) or has its suffix queued.
  void TakeRemote(const RemoteItem& item, const std::shared_ptr<const ReceivedMessage>& answer,
                  const std::string& address);
  // Drops queued work and waits for running tasks (they may be writing into
  // batches). Idempotent.
  void Stop();

  int threads() const { return threads_.size(); }
  // Tasks handed to the threads and not finished (queued or running): with
  // the remote pool's owed items, who holds a batch's unfinished samples.
  int64_t pending_tasks() const { return pending_tasks_.load(std::memory_order_acquire); }

 private:
  // Runs `task` (a callable taking the thread's index) on a thread, counted
  // in pending_tasks() until it returns.
  template <typename Task>
  void Submit(Task task) {
    pending_tasks_.fetch_add(1, std::memory_order_acq_rel);
    const bool queued = threads_.Submit([this, task = std::move(task)](int thread) {
      task(thread);
      pending_tasks_.fetch_sub(1, std::memory_order_acq_rel);
    });
    if (!queued) pending_tasks_.fetch_sub(1, std::memory_order_acq_rel);
  }

 public:
  // Why fewer threads than asked for started ("" when all did).
  const std::string& start_error() const { return threads_.start_error(); }
  size_t queue_capacity() const { return threads_.queue_capacity(); }
  // The bound on one sample's bytes at `cut` (Pipeline::MaxBytesAt with the
  // dataset's file limit): what a worker may send for it.
  int64_t max_sample_bytes(int cut) const { return max_sample_bytes_[cut]; }

  // Fills the snapshot's stage totals (read, here, on workers) and the
  // workers' transport cost, and adds the CPU spent taking remote values off
  // the wire to its receive cost.
  // Also the reads' waits and bytes, here and on the workers.
  void Measure(policy::Snapshot* snapshot) const;
  // "read", then each stage, as run here.
  std::vector<StageStats> LocalStages() const;
  // "read", then each stage, as the workers reported them.
  std::vector<StageStats> RemoteStages() const { return remote_profiler_.Snapshot(); }
  // What the workers' reads cost in remote storage, as their items report it
  // (counts only: no latency).
  StorageStats RemoteStorage() const;
  // Data echoing: `indices` without the samples of `epoch` an earlier copy
  // is loading or has loaded (what the read-ahead should not read again).
  std::vector<int64_t> NotLoaded(uint64_t epoch, const std::vector<int64_t>& indices) const;
  // Bytes read from remote storage for the samples of each epoch, here and
  // on the workers, by epoch.
  std::map<uint64_t, int64_t> StorageBytesByEpoch() const;
  // The workers' sample caches, for this job's items.
  int64_t remote_cache_hits() const { return remote_cache_hits_.load(std::memory_order_relaxed); }
  int64_t remote_cache_misses() const {
    return remote_cache_misses_.load(std::memory_order_relaxed);
  }

 private:
  void RunSample(int thread, Batch* batch, int64_t slot);
  // Runs `s` from boundary `from` to the output and keeps it in its slot.
  absl::Status RunToSlot(int from, Sample& s, Workspace& ws, Batch* batch, int64_t slot);
  // Puts sample `s`'s value at boundary `*from` into it: from the cache
  // (*from = its boundary), or read (*from = 0; with a cache, run up to its
  // boundary and kept there).
  absl::Status Load(Sample& s, Workspace& ws, int* from);
  // Load, then the stages up to `target` (from wherever Load left it).
  absl::Status LoadTo(Sample& s, Workspace& ws, int target, int* from);
  void CountStorage(uint64_t epoch, int64_t bytes);
  // Returns true when sample `i` of the answer finished its batch.
  bool TakeRemoteSample(const RemoteItem& item, size_t i,
                        const std::shared_ptr<const ReceivedMessage>& answer,
                        const std::string& address);
  void RunSuffix(int thread, Batch* batch, int64_t slot, int cut,
                 const std::shared_ptr<const ReceivedMessage>& answer, int sample);
  // Finishes `slot` with `status` (the sample's path attached on error);
  // true when that completed the batch.
  bool Finish(Batch* batch, int64_t slot, const absl::Status& status, const Sample& s, bool remote);

  const Dataset& dataset_;
  const Pipeline& pipeline_;
  BoundaryCache* const cache_;                     // may be null
  const proto::Materialized* const materialized_;  // may be null
  const Echo echo_;
  EchoStore echo_store_;
  const std::function<void()> batch_done_;
  std::vector<int64_t> max_sample_bytes_;  // by cut, 0..n
  StageProfiler read_profiler_;
  StageProfiler stage_profiler_;
  StageProfiler remote_profiler_;                       // "read" + stages
  std::vector<std::unique_ptr<Workspace>> workspaces_;  // one per thread
  std::atomic<int64_t> wire_copy_cpu_nanos_{0};         // FromWire in RunSuffix
  // Workers' transport CPU (ItemResult.transport_cpu_per_byte times the
  // message's bytes) and the bytes of the messages that carried one.
  std::atomic<int64_t> worker_transport_cpu_nanos_{0};
  std::atomic<int64_t> worker_transport_bytes_{0};
  mutable absl::Mutex storage_mu_;
  StorageStats remote_storage_ ABSL_GUARDED_BY(storage_mu_);
  std::map<uint64_t, int64_t> storage_by_epoch_ ABSL_GUARDED_BY(storage_mu_);
  std::atomic<int64_t> remote_cache_hits_{0};
  std::atomic<int64_t> remote_cache_misses_{0};
  // Wall time the reads here took (waiting for bytes, summed over threads);
  // what the workers reported of theirs, and the bytes those read.
  std::atomic<int64_t> read_wall_nanos_{0};
  std::atomic<int64_t> remote_read_wait_nanos_{0};
  std::atomic<int64_t> remote_read_bytes_{0};
  std::atomic<int64_t> pending_tasks_{0};
  ThreadPool threads_;  // last: stopped before the rest goes
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_SAMPLE_RUNNER_H_
