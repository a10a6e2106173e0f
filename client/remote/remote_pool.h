// The workers of one job: membership, credits, dispatch, exactly-once
// bookkeeping, re-issue and hedging.
//
// The Loader hands the pool remote items (a batch's samples at one cut); the
// pool sends each to a worker with a free credit and hands the answer back
// exactly once, from the worker the item is assigned to at that moment.
//
// Credits: a worker takes at most `credits` items at a time (what it allows,
// scaled down to the share of it the scheduler granted). An item counts
// against its worker until answered; a hedged copy the other worker answered
// first still counts until its late answer arrives (the worker counts it too).
//
// Exactly once: when a worker's stream breaks, or it is silent for longer
// than `worker_timeout_seconds` while it owes answers, it is dropped and its
// items go back to the front of the queue (re-issued), or stay with the
// worker holding their hedged copy. Answers are only taken from a worker an
// item is assigned (or copied) to, and only the first: late answers from a
// dropped worker and the slower of a hedged pair are dropped. When no worker
// is left, queued items are handed back to run locally.
//
// Rejoining: a static worker (--workers) that was dropped, never opened the
// job (not up yet) or drained is dialled again on a new stream, backing off
// (RedialSchedule): a worker that boots late or restarts joins the run.
//
// Locality: when any worker caches samples (JobOpened.cache_bytes), each
// sample has one home worker, chosen by rendezvous hashing of its index over
// the usable workers weighted by their cores, and its items wait for that
// worker's credits rather than go to another: across epochs each sample is
// read from storage about once for the whole pool. A worker that joins or
// leaves moves only its share of the samples; a lost worker's items are
// re-homed among the rest.
//
// Hedging: while a worker sits idle and nothing is queued, it gets a copy of
// the oldest item that has waited `hedge_after` times the fastest worker's
// smoothed item latency (at least 20 ms).
//
// A worker's refusal (PERMISSION_DENIED, INVALID_ARGUMENT, UNAUTHENTICATED,
// FAILED_PRECONDITION) is not routed around: `failed` is called and the run
// must stop. A worker the scheduler granted that refuses is left out instead.
//
// Streams come from a StreamFactory and time from a Clock, so tests drive the
// pool with fake streams and a fake clock (tests/client/remote_pool_test.cc).
//
// Thread-safety: every method may be called from any thread. Callbacks are
// documented with the lock they run under; none may call back into the pool
// while the pool's lock is held. Lock order: the Loader's, then the pool's.
#ifndef PREPFLOW_CLIENT_REMOTE_REMOTE_POOL_H_
#define PREPFLOW_CLIENT_REMOTE_REMOTE_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/remote/redial_schedule.h"
#include "client/remote/worker_stream.h"
#include "pipeline/core/batch.h"
#include "pipeline/core/wire.h"
#include "policy/measurements.h"
#include "policy/replanner.h"
#include "proto/worker.pb.h"

namespace prepflow {

// Samples of one batch that run stages [0, cut) on a worker.
struct RemoteItem {
  Batch* batch = nullptr;
  std::vector<int64_t> slots;
  int cut = 0;
  // With locality: the worker (id) whose cache its samples belong to
  // (RemotePool::HomeOf); -1: any worker.
  int home = -1;
};

// How long the start waits for the link probes (JobOpen.probe_bytes) at
// most: 1 MiB takes 0.08 s at 100 Mbit/s.
inline constexpr double kProbeWaitSeconds = 1;

struct RemotePoolOptions {
  double worker_timeout_seconds = 30;   // silence while owing answers
  double connect_timeout_seconds = 10;  // for a worker to open the job
  double hedge_after = 3;               // 0: never hedge
  // A granted worker whose stream failed is not dialled again for this long,
  // even while the scheduler (which has not noticed yet) still grants it.
  double redial_after_seconds = 10;
  // A static worker (--workers) whose stream failed is dialled again after
  // static_redial_seconds, twice as long after each failure in a row, at
  // most static_redial_max_seconds apart (RedialSchedule). Each dial is a
  // stream (Members() lists it), so a worker gone for good adds one an
  // interval: 60 an hour at most.
  double static_redial_seconds = 1;
  double static_redial_max_seconds = 60;
  // The part of each static worker (--workers) this stream's planner counts
  // on: 1 / ranks for a job whose ranks all stream from the same workers
  // (the worker runs their items as one job's). Granted workers count their
  // grant instead.
  double static_share = 1;
  // Items waiting for a busy home worker (echoed copies, cached samples)
  // may run on one with nothing else to do, loading their value again there
  // (Steal): for data whose reads cost no remote store's requests and bytes.
  bool steal_from_busy_homes = false;
};

class RemotePool {
 public:
  struct Callbacks {
    // The answer to `item` from the worker at `address`; exactly once per
    // item. Runs on that stream's thread without the pool's lock.
    std::function<void(RemoteItem item, std::shared_ptr<const ReceivedMessage> answer,
                       const std::string& address)>
        result;
    // An item no worker is left to take: run it here. Runs under the pool's
    // lock.
    std::function<void(RemoteItem item)> run_locally;
    // A worker refused the job: the run must stop. Without the pool's lock.
    std::function<void(const absl::Status& refusal)> failed;
    // The usable remote capacity changed (a worker opened, left, retired or
    // its grant changed). Runs under the pool's lock.
    std::function<void()> changed;
  };
  using Clock = std::function<int64_t()>;  // monotonic nanoseconds

  // `open`: what every worker is sent to open the job.
  RemotePool(const RemotePoolOptions& options, proto::JobOpen open, StreamFactory factory,
             Callbacks callbacks, Clock clock);
  // Stop().
  ~RemotePool();
  RemotePool(const RemotePool&) = delete;
  RemotePool& operator=(const RemotePool&) = delete;

  // Opens the job on a worker; returns its id (ids are never reused). A
  // non-empty `worker_id` marks it granted by the scheduler with
  // `granted_cores`; `tls_name` is the certificate name to verify. The stream
  // opens asynchronously; its credits join when the worker answers. After
  // Stop(): -1, nothing opened.
  int Add(const std::string& address, const std::string& worker_id = "", double granted_cores = 0,
          const std::string& tls_name = "");
  // Waits until every worker added so far has opened the job or failed, or
  // until `deadline`; drops those still not open. Then, when the job asks
  // for link probes, until each open worker's probe has come, at most
  // kProbeWaitSeconds more; workers added after it are not asked for one.
  // Returns the refusal that stops the run, if one came.
  absl::Status AwaitOpened(absl::Time deadline);

  // Queues an item and dispatches what credits allow.
  void Submit(RemoteItem item);
  // Whether the job asked for link probes and every usable worker's has
  // come (false with no usable worker).
  bool Probed() const;
  // Hands every item still waiting for a worker's credit back to run here
  // (run_locally), except those waiting for their home worker (locality);
  // returns how many. For a new plan that sends fewer samples out: items
  // placed by the old one would otherwise hold the trainer's batches.
  int64_t ReclaimQueued();
  // Drops workers silent past the timeout or not open in time, and hedges.
  // The watchdog thread (StartWatchdog) runs it every 100 ms; tests call it.
  void Tick();
  void StartWatchdog();
  // The run is over: every stream is closed once its items are written, and
  // a clean end of stream is no longer a failure.
  void Finish();
  // Cancels every stream and joins the watchdog and the streams' threads.
  // Items still out are never answered. Idempotent.
  void Stop();

  // One stream, for the scheduler's grants and for stats.
  struct Member {
    int id = 0;
    std::string address;
    std::string worker_id;  // as the scheduler names it ("": a static worker)
    bool alive = false;     // not dropped or closed
    bool opened = false;
    bool retiring = false;  // no longer granted: no new items, closed when idle
    bool draining = false;  // it said it is leaving (DrainNotice): retiring for good
    bool refused = false;   // a granted worker that refused the job
    double granted_cores = 0;
    int64_t dropped_nanos = 0;    // when it failed; 0: it did not
    std::string dropped_because;  // why it was dropped, for messages
    int64_t samples = 0;          // returned, all time
    int64_t received_bytes = 0;
    bool usable() const { return alive && opened && !retiring; }
  };
  std::vector<Member> Members() const;
  // Whether a granted worker at `address` may be dialled now: not one that
  // refused, nor one that failed within redial_after_seconds.
  bool MayDial(const std::string& address) const;
  // The grant of a granted worker changed; its credits follow.
  void SetGrantedCores(int id, double cores);
  // No longer granted: closed now if idle, else once its items are in.
  void Retire(int id);
  // Granted again while retiring: it stays.
  void Keep(int id);

  // Credits of the usable workers.
  int UsableCredits() const;
  // Cores of the usable workers this job may count on.
  double UsableCores() const;
  // The last cut every usable worker can run (some lack a custom op's
  // plugin); INT_MAX when none is limited. Items cut past it run here.
  int StageLimit() const;
  // The most bytes one item may carry: the least any worker takes.
  int64_t item_bytes_limit() const;
  // With locality (a usable worker caches samples, or copies are echoed):
  // the id of the worker that is sample `index`'s home among those that can
  // run `cut`; else -1. An echoed copy's item waits for its home unless
  // another worker has nothing else to do; a cached sample's always waits.
  int HomeOf(int64_t index, int cut) const;
  // Per-worker counters and the transport's totals, for the re-planner.
  void FillSnapshot(policy::Snapshot* snapshot) const;

  struct Counters {
    int64_t reissued_items = 0;
    int64_t drained_workers = 0;  // workers that said they were leaving
    int64_t hedged_items = 0;
    int64_t hedge_wins = 0;
    // Echoed copies run away from their busy home by an idle worker.
    int64_t stolen_items = 0;
  };
  Counters counters() const;
  // Items held to be answered: queued, out at a live worker (a hedged one
  // counts at both), or being delivered to `result`. With the runner's
  // pending tasks, who holds a batch's unfinished samples: an item that is
  // none of these was lost.
  int64_t owed_items() const;

 private:
  struct Pending {
    RemoteItem item;
    int worker = -1;  // -1: queued
    int hedge = -1;   // a second worker given a copy; the first answer wins
    int64_t sent_nanos = 0;
    int64_t hedge_sent_nanos = 0;
  };
  struct Worker {
    Member member;
    std::unique_ptr<WorkerStream> stream;
    int64_t added_nanos = 0;
    int max_credits = 0;  // what the worker allows
    int credits = 0;      // what we use: max_credits, scaled down to a grant
    double cores = 0;     // as the worker reports it (its cgroup quota counts)
    int64_t last_heard_nanos = 0;
    std::vector<uint64_t> items;  // owed here
    // Hedged copies the other worker answered first: their answers will be
    // dropped, but until they come the worker still holds their credits.
    std::vector<uint64_t> abandoned;
    double latency = 0;  // smoothed seconds from sending an item to its answer
    // Stages it can run (JobOpened.num_stages): items sent to it are cut
    // there at most.
    int stages = std::numeric_limits<int>::max();
    std::string unavailable;  // why it stops there (JobOpened.unavailable)
    int64_t cache_bytes = 0;  // JobOpened.cache_bytes
    uint64_t key = 0;         // a hash of its address: its rendezvous key
    // What the re-planner reads its link from: every answer its stream
    // carried (taken, or a hedged copy's slower twin), their bytes, the CPU
    // the worker reported for them, and those that arrived with every
    // credit out (CountAnswer).
    double answer_bytes = 0;
    double cpu_seconds = 0;
    double run_seconds = 0;  // the answers' ItemResult.run_seconds, summed
    int64_t results = 0, saturated_results = 0;
    double worker_busy = 0;    // its latest report (ItemResult.worker_busy)
    policy::ProbeTimer probe;  // its link probe (JobOpen.probe_bytes)
  };

  double UsableCores(const Worker& w) const;
  bool ProbedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int CreditsFor(const Worker& w) const;
  static int FreeCredits(const Worker& w) {
    return w.credits - static_cast<int>(w.items.size() + w.abandoned.size());
  }
  void Dispatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker to send `item` to: its home under locality (chosen again
  // when the home can no longer take it), else the capable worker with the
  // most free credits. -1 with *capable false: no usable worker can run its
  // cut; -1 with *capable true: it must wait for credits.
  int TargetOf(RemoteItem& item, bool locality, bool* capable) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Locality() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 public:
  // Whether any usable worker keeps a sample cache for this job.
  bool AnyWorkerCaches() const ABSL_LOCKS_EXCLUDED(mu_);
  // Ends steal_from_busy_homes: storage was found binding, so an extra read
  // costs more than an idle worker.
  void StopStealing() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  int HomeLocked(int64_t index, int cut) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands a queued item to run_locally and forgets it.
  void RunHere(std::map<uint64_t, Pending>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(int w, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeHedge() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Dispatch's second pass with echo's locality: queued items go to workers
  // left with free credits.
  void Steal() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AnyCachesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int AddLocked(const std::string& address, const std::string& worker_id, double granted_cores,
                const std::string& tls_name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops worker `w` (its items re-issued); a static one is dialled again
  // (redial_).
  void Drop(int w, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retires worker `w` (no new items; closed once it owes none), logging
  // that it `why`.
  void RetireLocked(int w, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDraining(int w, double seconds);
  void OnOpened(int w, const proto::JobOpened& opened);
  void OnProbe(int w, int64_t bytes, int count);
  void OnResult(int w, std::shared_ptr<const ReceivedMessage> answer);
  void OnClosed(int w, const absl::Status& status);
  // Takes `answer` from worker `w` into `out` if it is the one to take;
  // false for an answer to drop (late, or the slower of a hedged pair).
  bool TakeAnswer(int w, const ReceivedMessage& answer, Pending* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts an answer that crossed worker `w`'s link (before its credit is
  // freed): a worker whose hedged copies all lose still shows its link.
  void CountAnswer(Worker& worker, const ReceivedMessage& answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RemotePoolOptions options_;
  const proto::JobOpen open_;
  const StreamFactory factory_;
  const Callbacks callbacks_;
  const Clock clock_;

  mutable absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);        // by id; never shrinks
  std::map<uint64_t, Pending> items_ ABSL_GUARDED_BY(mu_);  // not yet answered
  // Answers in `result` now: raised under mu_ as the item leaves items_,
  // lowered after (owed_items() reads it under mu_).
  std::atomic<int64_t> delivering_{0};
  std::deque<uint64_t> queued_ ABSL_GUARDED_BY(mu_);  // without a worker
  uint64_t next_item_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t item_bytes_limit_ ABSL_GUARDED_BY(mu_) = kMaxReplyBytes;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool probing_ ABSL_GUARDED_BY(mu_) = true;  // workers opened now are asked for probes
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool all_gone_logged_ ABSL_GUARDED_BY(mu_) = false;
  bool steal_ ABSL_GUARDED_BY(mu_);  // options.steal_from_busy_homes until StopStealing
  Counters counters_ ABSL_GUARDED_BY(mu_);
  RedialSchedule redial_ ABSL_GUARDED_BY(mu_);  // static workers that failed
  std::thread watchdog_;
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_REMOTE_POOL_H_
