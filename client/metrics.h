// The trainer side's Prometheus metrics, read from a Loader at scrape time.
//
// Everything is derived from Loader::Stats() when Prometheus scrapes, so the
// data path pays nothing for it and the figures are never stale. Names follow
// Prometheus conventions: prepflow_client_ prefix, base units, _total for
// counters. Every series carries a `job_id` label (the Loader's job).
//
//   prepflow_client_samples_total{placement="local"|"remote"}
//   prepflow_client_batches_total, prepflow_client_errors_total,
//   prepflow_client_output_bytes_total, prepflow_client_reissued_items_total,
//   prepflow_client_hedged_items_total
//   prepflow_client_wait_seconds_total      time the trainer waited in Next()
//   prepflow_client_elapsed_seconds         since the first Next()
//   prepflow_client_plan_fraction{path="local"|"cut=K"}   share of samples
//   prepflow_client_remote_fraction, prepflow_client_cut (the largest remote
//     share's cut; 0 when all local), prepflow_client_plan_changes_total,
//   prepflow_client_plan_predicted_samples_per_second
//   prepflow_client_workers{state="alive"|"configured"}
//   prepflow_client_worker_received_bytes_total{worker}
//   prepflow_client_worker_samples_total{worker}
//   prepflow_client_worker_up{worker}
//   prepflow_client_worker_ingest_bytes_per_second{worker}   (auto mode)
//   prepflow_client_scheduler_up{scheduler}                    (with a scheduler)
//   prepflow_client_remote_cores{kind="wanted"|"fair_share"|"granted"}
//   prepflow_client_stage_cpu_seconds_total{stage,side="local"|"remote"}
//
// Thread-safety: Collect() may run on the exposer's threads at any time.
#ifndef PREPFLOW_CLIENT_METRICS_H_
#define PREPFLOW_CLIENT_METRICS_H_

#include <string>
#include <vector>

#include "client/loader.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace prepflow {

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
