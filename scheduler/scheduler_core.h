// The scheduler's state and decisions, without transport: who is in the
// pool, what each job wants, and the current allocation (allocator.h).
//
// Soft state: a worker or job exists while it keeps beating; one silent for
// `expire_after_seconds` is dropped. Any change in the pool or in a job's
// want marks the allocation stale; the next job beat (or Expire()) rebalances.
// Time is passed in, so tests drive the clock.
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
#include <string>
#include <utility>

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
};

struct SchedulerCounts {
  int workers = 0;
  int jobs = 0;   // training jobs
  int ranks = 0;  // their ranks (a job without ranks counts one)
  double pool_cores = 0;
  double granted_cores = 0;
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
  // Drops workers and jobs silent for too long and rebalances if needed.
  void Expire(int64_t now);

  SchedulerCounts counts() const;
  // Called after each rebalance with its duration, outside the lock.
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
  };
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
  // Returns the rebalance's duration in seconds, or a negative number when
  // nothing was stale.
  double RebalanceIfStale() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  Allocation allocation_ ABSL_GUARDED_BY(mu_);
  bool stale_ ABSL_GUARDED_BY(mu_) = false;
  SchedulerCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow::scheduler

#endif  // PREPFLOW_SCHEDULER_SCHEDULER_CORE_H_
