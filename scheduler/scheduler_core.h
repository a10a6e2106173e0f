// The scheduler's state and decisions, without transport: who is in the
// pool, what each job wants, and the current allocation (allocator.h).
//
// Soft state: a worker or job exists while it keeps beating; one silent for
// `expire_after_seconds` is dropped. Any change in the pool or in a job's
// want marks the allocation stale; the next job beat (or Expire()) rebalances.
// Time is passed in, so tests drive the clock.
//
// Rebalances are coalesced and run outside the lock: one thread at a time
// computes the allocation from a snapshot while beats go on being answered
// from the current one. A job beat that changes what the allocation depends
// on (its first, its want, weight or locality, its leaving) returns once an
// allocation that includes it is installed, running it itself when no other
// thread is; changes that arrive meanwhile are covered together by the next.
// So a pool's load costs one rebalance per burst of changes, not one per
// beat, and a beat waits for at most two rebalances.
//
// After a restart: for one expiry period from the first beat it hears, the
// core answers jobs with `settling` set (workers may not have re-registered
// yet, so a job must not give up workers the grant leaves out), and it keeps
// the workers each job reports streaming from where it can, so running
// streams survive the restart.
//
// Thread-safety: every method may be called from any thread.
#ifndef PREPFLOW_SCHEDULER_SCHEDULER_CORE_H_
#define PREPFLOW_SCHEDULER_SCHEDULER_CORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/scheduler.pb.h"
#include "scheduler/allocator.h"

namespace prepflow::scheduler {

struct SchedulerOptions {
  double heartbeat_seconds = 2;         // what beats are told
  double expire_after_seconds = 6;      // silence after which a worker or job is dropped
  std::string locality_label = "zone";  // the label that makes a worker local to a job
  // A job's weight above this counts as this: the pool's shares are the
  // operator's to set, not a job's to claim.
  double max_job_weight = 1;
  // Training jobs one credential (a client certificate's name; without
  // mutual TLS, a client host) may hold at once: one client cannot take the
  // pool by naming many jobs.
  int max_jobs_per_credential = 32;
  // The secret leases are signed with (--lease-key-file): with the same key
  // after a restart, a worker's lease proves its worker_id, and a beat that
  // took the id first without one gives it back. Empty: a key of this
  // process's own (leases then prove nothing after a restart).
  std::string lease_key;
  // With the rebalancer (StartRebalancer): pool changes no beat waits for
  // are gathered for this long after the last rebalance.
  double rebalance_gap_seconds = 0.1;
  // A worker of a class (its worker_class, when it has one) that starts
  // draining because its capacity is being taken back (WorkerBeat.reclaimed:
  // a stop, e.g. a scale-down, marks nothing) marks the class as being
  // reclaimed for this long: spot
  // capacity is taken back in waves, so the class's other workers are
  // granted after every other class's, whatever they cost, and jobs move
  // off them where other cores are free. 0: never.
  double reclaim_seconds = 120;
};

struct SchedulerCounts {
  int workers = 0;
  int jobs = 0;           // training jobs
  int ranks = 0;          // their ranks (a job without ranks counts one)
  double pool_cores = 0;  // of the workers that are not draining
  double granted_cores = 0;
  // Demand, what an autoscaler sizes the pool by: the cores the ranks'
  // plans want, those they want and are not granted (the pool is short of
  // them), the pool's cores granted to no one, and the workers leaving.
  double wanted_cores = 0;
  double short_cores = 0;
  double idle_cores = 0;
  int draining_workers = 0;
  // The classes being reclaimed now (see SchedulerOptions::reclaim_seconds).
  std::set<std::string> reclaimed_classes;
  // Cost and classes: each training job's grants' cost an hour (its ranks'
  // together, where workers have a cost_per_core_hour), and per worker
  // class the cores in the pool and granted.
  std::map<std::string, double> job_cost_per_hour;
  std::map<std::string, std::pair<double, double>> class_cores;  // class -> (pool, granted)
  int64_t rebalances = 0;
  int64_t expired_workers = 0;
  int64_t expired_jobs = 0;
  int64_t refused_beats = 0;      // worker beats refused for another lease or identity
  int64_t refused_job_beats = 0;  // job beats for a rank another process holds
  double last_rebalance_seconds = 0;
  // The shares now: per training job, and per rank (job, rank).
  std::map<std::string, double> job_shares;
  std::map<std::pair<std::string, int>, double> rank_shares;
};

class SchedulerCore {
 public:
  explicit SchedulerCore(SchedulerOptions options);

  // `identity`: the certificate name the beat came with (mutual TLS), else
  // empty. The first beat of a worker_id registers it, bound to `identity`
  // and to a lease the reply carries; later beats must carry both until the
  // worker expires. A lease is a nonce and its MAC under the lease key for
  // the worker_id: a first beat bringing one this key signed (a worker that
  // registered before a restart) keeps it; one bringing none, or one the key
  // did not sign, gets a new lease, provisionally: until the settling period
  // after a restart ends, a beat with a signed lease for the id takes it
  // back. Errors: InvalidArgument naming the field (empty id or address,
  // non-positive or non-finite cores); PermissionDenied (counted in
  // refused_beats) for a beat of a worker_id bound to another lease or
  // identity.
  absl::StatusOr<proto::WorkerBeatReply> WorkerBeat(const proto::WorkerBeat& beat, int64_t now,
                                                    const std::string& identity = "");
  // One rank's beat (a job without ranks is rank 0 of 1), from `identity`
  // (the certificate name, with mutual TLS; else empty) at `host` (the
  // client's address without its port). The first beat of a (job_id, rank)
  // binds it to the beat's instance until a beat with `leaving` or an expiry
  // period of silence; with an identity, the job_id is bound to it while any
  // of its ranks beats. A weight over max_job_weight counts as that. Errors:
  // InvalidArgument naming the field (labels: at most 32, keys 63 bytes,
  // values 256); AlreadyExists (counted in refused_job_beats) for a rank
  // another instance holds; PermissionDenied for a job_id another identity
  // holds; ResourceExhausted for a new job over max_jobs_per_credential.
  absl::StatusOr<proto::JobGrant> JobBeat(const proto::JobBeat& beat, int64_t now,
                                          const std::string& identity = "",
                                          const std::string& host = "");
  // JobBeat for a server, which must not hold a thread while an allocation
  // is made: `reply` gets the answer at once (an error, a beat that changed
  // nothing, a leaving one), else, with the rebalancer started, from its
  // thread once an allocation including the beat is installed. Without the
  // rebalancer it is JobBeat.
  using JobReply = std::function<void(absl::StatusOr<proto::JobGrant>)>;
  void JobBeatAsync(const proto::JobBeat& beat, int64_t now, const std::string& identity,
                    const std::string& host, JobReply reply);
  // Drops workers and jobs silent for too long and rebalances if needed
  // (with the rebalancer: has it rebalance).
  void Expire(int64_t now);

  // Starts the rebalancer: a thread that makes every allocation from now
  // on. Beats waiting for one (JobBeatAsync) start it at once; changes no
  // beat waits for (workers joining or dropped) are gathered for
  // `min_gap_seconds` after the last, so a pool's churn costs a bounded
  // share of a core. StopRebalancer (or the destructor) stops it, answering
  // beats still waiting with Unavailable; beats after that are answered as
  // by JobBeat.
  void StartRebalancer(double min_gap_seconds);
  void StartRebalancer() { StartRebalancer(options_.rebalance_gap_seconds); }
  void StopRebalancer();
  ~SchedulerCore();

  SchedulerCounts counts() const;
  // Called after each rebalance with its duration, outside the lock (on the
  // thread that ran it). Set it before StartRebalancer.
  void set_on_rebalance(std::function<void(double seconds)> f) { on_rebalance_ = std::move(f); }

 private:
  struct WorkerEntry {
    proto::WorkerBeat beat;
    int64_t last_nanos = 0;
    std::string lease;     // bound at registration
    std::string identity;  // likewise; "" without mutual TLS
    // Registered without a signed lease while the scheduler settles: a beat
    // with one takes the id over.
    bool provisional = false;
    bool undrain_refused = false;  // logged once: a beat that took draining back
  };
  // Stores a beat of `w` (its lease checked): what changed the allocation,
  // a drain begun (and a class reclaimed). Draining is one way.
  void Keep(const proto::WorkerBeat& beat, bool added, int64_t now, WorkerEntry* w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new lease for `worker_id`: a random nonce and its MAC.
  std::string NewLease(const std::string& worker_id) const;
  // Whether `lease` is one this key signed for `worker_id`.
  bool Signed(const std::string& worker_id, const std::string& lease) const;
  struct JobEntry {
    proto::JobBeat beat;
    int64_t last_nanos = 0;
    std::string identity;    // bound at its first beat; "" without mutual TLS
    std::string credential;  // the identity, else the client's host
  };
  // Refuses a first beat of a rank whose job another identity holds, or that
  // opens a job past its credential's limit.
  absl::Status AdmitRank(const proto::JobBeat& beat, const std::string& identity,
                         const std::string& credential) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job beat's effect: its rank, and whether the allocation must follow.
  struct Recorded {
    std::pair<std::string, int> key;
    bool changed = false;
  };
  // Checks a job beat and records it (joining, leaving, its want).
  absl::StatusOr<Recorded> RecordJobBeat(const proto::JobBeat& beat, int64_t now,
                                         const std::string& identity, const std::string& host)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the scheduler is within its settling period at `now`.
  bool Settling(int64_t now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The grant for rank `key` from the installed allocation.
  proto::JobGrant Answer(const std::pair<std::string, int>& key, bool leaving, bool settling)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebalancerLoop(double min_gap_seconds);
  // Answers the beats whose change the installed allocation covers (all,
  // with Unavailable, when `stopping`), releasing mu_ to call the replies.
  void AnswerPending(bool stopping) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a change the allocation must follow (`pool`: in the workers).
  void Changed(bool pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With `wait`: returns once the installed allocation covers every change
  // counted so far, running rebalances while no other thread does. Without:
  // runs one if a change is uncovered and none is running, else returns.
  void Rebalance(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Computes and installs an allocation of the state now; releases mu_
  // while the allocator runs.
  void RunRebalance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The allocator's inputs: the pool (kept until the workers change), the
  // ranks' wants, and the grants jobs report that this scheduler has not
  // made (after a restart).
  std::shared_ptr<const std::vector<PoolWorker>> Pool() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker of `worker_class` started draining at `now`, its capacity
  // taken back: the class is being reclaimed (logged when it starts).
  void Reclaiming(const std::string& worker_class, const std::string& worker_id, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The demand figures of SchedulerCounts, from the ranks' wants and grants.
  void AddDemand(SchedulerCounts* c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<JobWant> Wants() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, std::vector<Grant>> ReportedGrants() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The current allocation's grant for rank `key`.
  void FillGrant(const std::pair<std::string, int>& key, proto::JobGrant* grant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  std::function<void(double)> on_rebalance_;
  mutable absl::Mutex mu_;
  std::map<std::string, WorkerEntry> workers_ ABSL_GUARDED_BY(mu_);
  // By (job_id, rank).
  std::map<std::pair<std::string, int>, JobEntry> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t first_beat_nanos_ ABSL_GUARDED_BY(mu_) = -1;
  // Worker class -> until when it is being reclaimed (nanoseconds).
  std::map<std::string, int64_t> reclaimed_until_ ABSL_GUARDED_BY(mu_);
  // The allocation installed, shared with a rebalance that keeps its grants.
  std::shared_ptr<const Allocation> allocation_ ABSL_GUARDED_BY(mu_);
  // Changes counted, and how many of them the installed allocation covers.
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
  bool rebalancing_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar allocated_cv_;  // signalled when an allocation is installed
  // The rebalancer: beats waiting for an allocation covering change
  // `change`, and the thread's wake-up.
  struct Pending {
    std::pair<std::string, int> key;
    uint64_t change = 0;
    bool settling = false;
    JobReply reply;
  };
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::CondVar work_cv_;
  bool rebalancer_started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread rebalancer_;  // started and joined by the owner's thread
  std::shared_ptr<const std::vector<PoolWorker>> pool_ ABSL_GUARDED_BY(mu_);  // null: rebuild
  SchedulerCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow::scheduler

#endif  // PREPFLOW_SCHEDULER_SCHEDULER_CORE_H_
