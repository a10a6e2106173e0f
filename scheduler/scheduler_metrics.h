// prepflow-scheduler's Prometheus metrics.
//
//   prepflow_scheduler_heartbeats_total{kind="worker"|"job"}
//   prepflow_scheduler_unauthenticated_total{kind}   calls refused for their token
//   prepflow_scheduler_pool{what="workers"|"jobs"|"ranks"|"pool_cores"|"granted_cores"}
//   prepflow_scheduler_job_share_cores{job_id}       each training job's fair share
//   prepflow_scheduler_rank_share_cores{job_id,rank} its part for each rank
//   prepflow_scheduler_expired_total{kind}           dropped for missing beats
//   prepflow_scheduler_refused_beats_total           beats naming another lease's worker
//   prepflow_scheduler_listener_restarts_total
//   prepflow_scheduler_rebalance_seconds             time to recompute the allocation
//
// Thread-safety: every method may be called from any thread (prometheus-cpp
// metrics are atomic); Update() from one thread at a time.
#ifndef PREPFLOW_SCHEDULER_SCHEDULER_METRICS_H_
#define PREPFLOW_SCHEDULER_SCHEDULER_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "scheduler/scheduler_core.h"

namespace prepflow::scheduler {

class SchedulerMetrics {
 public:
  SchedulerMetrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  prometheus::Family<prometheus::Counter>& beats() { return beats_; }
  prometheus::Family<prometheus::Counter>& unauthenticated() { return unauthenticated_; }
  void ListenerRestarted() { listener_restarts_.Increment(); }
  void Rebalanced(double seconds) { rebalance_seconds_.Observe(seconds); }
  // Sets the pool gauges from `counts` and adds what the counters grew by
  // since the last call.
  void Update(const SchedulerCounts& counts);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& beats_;
  prometheus::Family<prometheus::Counter>& unauthenticated_;
  prometheus::Family<prometheus::Gauge>& pool_;
  prometheus::Gauge& workers_;
  prometheus::Gauge& jobs_;
  prometheus::Gauge& ranks_;
  prometheus::Gauge& pool_cores_;
  prometheus::Gauge& granted_cores_;
  prometheus::Gauge& wanted_cores_;
  prometheus::Gauge& short_cores_;
  prometheus::Gauge& idle_cores_;
  prometheus::Gauge& draining_workers_;
  prometheus::Family<prometheus::Counter>& expired_;
  prometheus::Counter& expired_workers_;
  prometheus::Counter& expired_jobs_;
  prometheus::Counter& refused_beats_;
  prometheus::Counter& listener_restarts_;
  prometheus::Histogram& rebalance_seconds_;
  prometheus::Family<prometheus::Gauge>& job_share_;
  prometheus::Family<prometheus::Gauge>& rank_share_;
  std::map<std::string, prometheus::Gauge*> job_share_series_;
  std::map<std::pair<std::string, int>, prometheus::Gauge*> rank_share_series_;
  prometheus::Family<prometheus::Gauge>& job_cost_;
  std::map<std::string, prometheus::Gauge*> job_cost_series_;
  prometheus::Family<prometheus::Gauge>& class_cores_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> class_cores_series_;
  SchedulerCounts last_;
};

}  // namespace prepflow::scheduler

#endif  // PREPFLOW_SCHEDULER_SCHEDULER_METRICS_H_
