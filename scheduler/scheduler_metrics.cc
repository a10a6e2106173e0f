#include "scheduler/scheduler_metrics.h"

namespace prepflow::scheduler {

SchedulerMetrics::SchedulerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      beats_(prometheus::BuildCounter()
                 .Name("prepflow_scheduler_heartbeats_total")
                 .Help("Heartbeats received, by kind (worker or job).")
                 .Register(*registry_)),
      unauthenticated_(prometheus::BuildCounter()
                           .Name("prepflow_scheduler_unauthenticated_total")
                           .Help("Calls refused for a missing or wrong bearer token, by the "
                                 "role's call (worker or job).")
                           .Register(*registry_)),
      pool_(prometheus::BuildGauge()
                .Name("prepflow_scheduler_pool")
                .Help("The pool now: workers, jobs, cores in the pool, cores granted.")
                .Register(*registry_)),
      workers_(pool_.Add({{"what", "workers"}})),
      jobs_(pool_.Add({{"what", "jobs"}})),
      pool_cores_(pool_.Add({{"what", "pool_cores"}})),
      granted_cores_(pool_.Add({{"what", "granted_cores"}})),
      expired_(prometheus::BuildCounter()
                   .Name("prepflow_scheduler_expired_total")
                   .Help("Workers and jobs dropped for missing their heartbeats.")
                   .Register(*registry_)),
      expired_workers_(expired_.Add({{"kind", "worker"}})),
      expired_jobs_(expired_.Add({{"kind", "job"}})),
      refused_beats_(prometheus::BuildCounter()
                         .Name("prepflow_scheduler_refused_beats_total")
                         .Help("Worker beats refused for naming a worker_id registered to "
                               "another lease or identity (an attempt to repoint a worker).")
                         .Register(*registry_)
                         .Add({})),
      listener_restarts_(prometheus::BuildCounter()
                             .Name("prepflow_scheduler_listener_restarts_total")
                             .Help("Times the gRPC listener stopped accepting (e.g. the "
                                   "open-files limit was reached) and was restarted")
                             .Register(*registry_)
                             .Add({})),
      rebalance_seconds_(prometheus::BuildHistogram()
                             .Name("prepflow_scheduler_rebalance_seconds")
                             .Help("Time to recompute the allocation.")
                             .Register(*registry_)
                             .Add({}, prometheus::Histogram::BucketBoundaries{
                                          1e-5, 1e-4, 1e-3, 0.01, 0.05, 0.1, 1})) {
  // Both kinds' series exist from the start, at zero.
  for (const char* kind : {"worker", "job"}) {
    beats_.Add({{"kind", kind}});
    unauthenticated_.Add({{"kind", kind}});
  }
}

void SchedulerMetrics::Update(const SchedulerCounts& c) {
  workers_.Set(c.workers);
  jobs_.Set(c.jobs);
  pool_cores_.Set(c.pool_cores);
  granted_cores_.Set(c.granted_cores);
  expired_workers_.Increment(static_cast<double>(c.expired_workers - last_.expired_workers));
  expired_jobs_.Increment(static_cast<double>(c.expired_jobs - last_.expired_jobs));
  refused_beats_.Increment(static_cast<double>(c.refused_beats - last_.refused_beats));
  last_ = c;
}

}  // namespace prepflow::scheduler
