// Remote storage in Prometheus terms: what a store did (StorageStats) as
// families, for the trainer's and the workers' /metrics.
//
// Thread-safety: Collect() may run concurrently with the store's and the
// cache's work: it reads their atomic counters and locked snapshots.
#ifndef PREPFLOW_STORAGE_METRICS_H_
#define PREPFLOW_STORAGE_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "pipeline/data/byte_source.h"
#include "pipeline/reuse/sample_cache.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace prepflow {

// <prefix>_storage_request_seconds, a histogram of request latency, each
// series labelled with `labels`.
prometheus::MetricFamily StorageLatencyFamily(
    const StorageStats& stats, const std::string& prefix,
    const std::vector<prometheus::ClientMetric::Label>& labels);

// The latency histogram and counters <prefix>_storage_bytes_read_total,
// _requests_total, _retries_total, _errors_total and _whole_objects_total
// of `store`, read when
// scraped. `store` must outlive the collector's registration.
class StorageCollector : public prometheus::Collectable {
 public:
  StorageCollector(std::shared_ptr<const ObjectStore> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::shared_ptr<const ObjectStore> store_;
  std::string prefix_;
};

// A sample cache's counters and gauges, read when scraped:
// <prefix>_cache_hits_total, _cache_misses_total, _cache_evictions_total,
// _cache_disk_errors_total, and _cache_bytes and _cache_entries labelled
// tier="ram" or "disk".
class CacheCollector : public prometheus::Collectable {
 public:
  CacheCollector(std::shared_ptr<const SampleCache> cache, std::string prefix)
      : cache_(std::move(cache)), prefix_(std::move(prefix)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::shared_ptr<const SampleCache> cache_;
  std::string prefix_;
};

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_METRICS_H_
