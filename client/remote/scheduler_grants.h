// A job's side of prepflow-scheduler: heartbeats that say what the job wants,
// and grants applied to its RemotePool.
//
// Each beat carries the job's weight, labels, the remote cores it wants (from
// `want`, e.g. what the planner would use with the pool to itself) and the
// granted workers it holds. Each grant that comes back is applied: a newly
// named worker is opened (unless it refused the job, or failed within the
// pool's redial delay), a changed share re-sizes its credits, and a worker no
// longer named is retired (finishes its items, then closes). A settling
// scheduler (just restarted) only adds. While the scheduler is unreachable
// the job keeps the workers it has.
//
// Thread-safety: every method may be called from any thread; beats and grants
// run on the registration's thread. Lock order: this object's lock, then the
// pool's; `want` is called without the lock and must not call back here.
#ifndef PREPFLOW_CLIENT_REMOTE_SCHEDULER_GRANTS_H_
#define PREPFLOW_CLIENT_REMOTE_SCHEDULER_GRANTS_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/remote/remote_pool.h"
#include "net/registration.h"
#include "net/security.h"

namespace prepflow {

class SchedulerGrants {
 public:
  struct Options {
    std::string scheduler;  // host:port
    std::string job_id;     // the training job: shared by its ranks
    int rank = 0;
    int world_size = 1;
    double weight = 1;
    std::map<std::string, std::string> labels;
  };
  // `pool` must outlive this object. `want`: remote cores to ask for now;
  // nullopt for no measure of them (the beat asks for what the fair share
  // gives, kWantAllCores, and says its want is unknown).
  SchedulerGrants(const Options& options, const Security& security, RemotePool* pool,
                  std::function<std::optional<double>()> want);
  // Stop().
  ~SchedulerGrants();

  void Start();
  // Waits until the first grant is applied or a beat failed, or `deadline`.
  void AwaitFirstAnswer(absl::Time deadline);
  // The run is over (or failed): from now on the job wants nothing and no
  // grant is applied (the stats keep the share it ran with); the scheduler is
  // told at once.
  void Finish();
  // Stops beating and, if the scheduler was reachable, releases the grant at
  // once. Idempotent.
  void Stop();

  struct State {
    bool reachable = false;  // the last beat got through
    std::string error;       // why the last beat failed, when it did
    double wanted_cores = 0;
    double fair_share_cores = 0;      // this rank's
    double job_fair_share_cores = 0;  // the training job's, all ranks'
    // What the grant costs an hour (JobGrant.cost_per_hour), and what the
    // grants have cost so far: each rate over the time it held, until the
    // run finished.
    double cost_per_hour = 0;
    double cost = 0;
  };
  State state() const;

 private:
  void FillBeat(proto::JobBeat* beat);
  void Apply(const proto::JobGrant& grant);

  const Options options_;
  RemotePool* const pool_;
  const std::function<std::optional<double>()> want_;
  mutable absl::Mutex mu_;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  State state_ ABSL_GUARDED_BY(mu_);
  absl::Time cost_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // of cost_per_hour
  // What the grants cost until `now`: state_.cost and the running rate's
  // since cost_since_ (nothing more once finished or stopped).
  double CostUntil(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Folds the running rate's cost up to `now` into state_.cost.
  void AddCost(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<JobRegistration> registration_;  // last: its thread uses the above
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_SCHEDULER_GRANTS_H_
