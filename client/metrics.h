// The trainer side's Prometheus metrics, read from a Loader at scrape time.
//
// Everything is derived from Loader::Stats() when Prometheus scrapes, so the
// data path pays nothing for it and the figures are never stale. The series
// are the `metric` column of the field tables in loader_stats.h (one place
// lists every name, its labels and help; docs/deploy.md lists them).
// Names follow Prometheus conventions: prepflow_client_ prefix, base units,
// _total for counters. Every series carries `job_id` and `rank` labels (the
// training job, shared by its ranks, and this rank); per-worker ones a
// `worker` label, per-stage ones `stage` and `side`.
//
// Thread-safety: Collect() may run on the exposer's threads at any time.
#ifndef PREPFLOW_CLIENT_METRICS_H_
#define PREPFLOW_CLIENT_METRICS_H_

#include <string>
#include <vector>

#include "client/loader.h"
#include "client/loader_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace prepflow {

// The families for `stats` of rank `rank` of job `job_id`.
std::vector<prometheus::MetricFamily> StatsFamilies(const LoaderStats& stats,
                                                    const std::string& job_id, int rank = 0);

class LoaderMetrics : public prometheus::Collectable {
 public:
  // `loader` must outlive every Collect() call: unregister this from the
  // exposer (or destroy the exposer) before destroying the loader.
  explicit LoaderMetrics(const Loader* loader) : loader_(loader) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Loader* loader_;
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_METRICS_H_
