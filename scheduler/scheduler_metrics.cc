#include "scheduler/scheduler_metrics.h"

namespace prepflow::scheduler {
namespace {

// Sets one series of `family` per entry of `values`, dropping the series of
// entries gone since the last call (jobs that left).
template <typename Key, typename LabelsOf>
void SetSeries(prometheus::Family<prometheus::Gauge>& family,
               std::map<Key, prometheus::Gauge*>& series, const std::map<Key, double>& values,
               LabelsOf labels_of) {
  for (auto it = series.begin(); it != series.end();) {
    if (values.count(it->first) == 0) {
      family.Remove(it->second);
      it = series.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, value] : values) {
    auto [it, added] = series.try_emplace(key, nullptr);
    if (added) it->second = &family.Add(labels_of(key));
    it->second->Set(value);
  }
}

}  // namespace

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
                .Help("The pool now: workers, training jobs, their ranks, cores in the pool "
                      "(draining workers' not counted), cores granted; demand: cores the "
                      "jobs' plans want (wanted_cores), want and are not granted "
                      "(short_cores), cores granted to no one (idle_cores), workers "
                      "leaving (draining_workers).")
                .Register(*registry_)),
      workers_(pool_.Add({{"what", "workers"}})),
      jobs_(pool_.Add({{"what", "jobs"}})),
      ranks_(pool_.Add({{"what", "ranks"}})),
      pool_cores_(pool_.Add({{"what", "pool_cores"}})),
      granted_cores_(pool_.Add({{"what", "granted_cores"}})),
      wanted_cores_(pool_.Add({{"what", "wanted_cores"}})),
      short_cores_(pool_.Add({{"what", "short_cores"}})),
      idle_cores_(pool_.Add({{"what", "idle_cores"}})),
      draining_workers_(pool_.Add({{"what", "draining_workers"}})),
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
                             .Add({}, prometheus::Histogram::BucketBoundaries{1e-5, 1e-4, 1e-3,
                                                                              0.01, 0.05, 0.1, 1})),
      job_share_(prometheus::BuildGauge()
                     .Name("prepflow_scheduler_job_share_cores")
                     .Help("Each training job's fair share of the pool's cores (weights apply "
                           "per job, however many ranks it has).")
                     .Register(*registry_)),
      rank_share_(prometheus::BuildGauge()
                      .Name("prepflow_scheduler_rank_share_cores")
                      .Help("Each rank's part of its job's share: max-min by what the ranks "
                            "want.")
                      .Register(*registry_)),
      job_cost_(prometheus::BuildGauge()
                    .Name("prepflow_scheduler_job_cost_per_hour")
                    .Help("What each training job's grants cost an hour: granted cores times "
                          "their workers' --cost-per-core-hour.")
                    .Register(*registry_)),
      class_cores_(prometheus::BuildGauge()
                       .Name("prepflow_scheduler_class_cores")
                       .Help("Cores per worker class (--class): in the pool (draining "
                             "workers' not counted), granted, and reclaimed (the pool's "
                             "cores of a class being reclaimed, granted after all others; "
                             "else 0).")
                       .Register(*registry_)) {
  // Both kinds' series exist from the start, at zero.
  for (const char* kind : {"worker", "job"}) {
    beats_.Add({{"kind", kind}});
    unauthenticated_.Add({{"kind", kind}});
  }
}

void SchedulerMetrics::Update(const SchedulerCounts& c) {
  workers_.Set(c.workers);
  jobs_.Set(c.jobs);
  ranks_.Set(c.ranks);
  SetSeries(job_share_, job_share_series_, c.job_shares, [](const std::string& job) {
    return prometheus::Labels{{"job_id", job}};
  });
  SetSeries(
      rank_share_, rank_share_series_, c.rank_shares, [](const std::pair<std::string, int>& rank) {
        return prometheus::Labels{{"job_id", rank.first}, {"rank", std::to_string(rank.second)}};
      });
  SetSeries(job_cost_, job_cost_series_, c.job_cost_per_hour, [](const std::string& job) {
    return prometheus::Labels{{"job_id", job}};
  });
  std::map<std::pair<std::string, std::string>, double> class_cores;
  for (const auto& [name, cores] : c.class_cores) {
    class_cores[{name, "pool"}] = cores.first;
    class_cores[{name, "granted"}] = cores.second;
    class_cores[{name, "reclaimed"}] = c.reclaimed_classes.count(name) != 0 ? cores.first : 0;
  }
  SetSeries(class_cores_, class_cores_series_, class_cores,
            [](const std::pair<std::string, std::string>& key) {
              return prometheus::Labels{{"class", key.first}, {"what", key.second}};
            });
  pool_cores_.Set(c.pool_cores);
  granted_cores_.Set(c.granted_cores);
  wanted_cores_.Set(c.wanted_cores);
  short_cores_.Set(c.short_cores);
  idle_cores_.Set(c.idle_cores);
  draining_workers_.Set(c.draining_workers);
  expired_workers_.Increment(static_cast<double>(c.expired_workers - last_.expired_workers));
  expired_jobs_.Increment(static_cast<double>(c.expired_jobs - last_.expired_jobs));
  refused_beats_.Increment(static_cast<double>(c.refused_beats - last_.refused_beats));
  last_ = c;
}

}  // namespace prepflow::scheduler
