#include "storage/metrics.h"

#include <limits>
#include <utility>

namespace prepflow {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily StorageLatencyFamily(const StorageStats& stats, const std::string& prefix,
                                  const std::vector<ClientMetric::Label>& labels) {
  ClientMetric m;
  m.label = labels;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < stats.latency.size(); ++i) {
    cumulative += static_cast<uint64_t>(stats.latency[i]);
    m.histogram.bucket.push_back({cumulative, i < kStorageLatencyBounds.size()
                                                  ? kStorageLatencyBounds[i]
                                                  : std::numeric_limits<double>::infinity()});
  }
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = stats.latency_seconds;
  return MetricFamily{prefix + "_storage_request_seconds",
                      "Latency of requests to remote storage (data named by URL), retries "
                      "included.",
                      MetricType::Histogram,
                      {std::move(m)}};
}

std::vector<MetricFamily> StorageCollector::Collect() const {
  const StorageStats stats = store_->stats();
  std::vector<MetricFamily> out = {StorageLatencyFamily(stats, prefix_, {})};
  const auto counter = [&](const char* name, const char* help, int64_t value) {
    ClientMetric m;
    m.counter.value = static_cast<double>(value);
    out.push_back(MetricFamily{prefix_ + name, help, MetricType::Counter, {std::move(m)}});
  };
  counter("_storage_bytes_read_total", "Bytes read from remote storage.", stats.bytes);
  counter("_storage_requests_total", "Requests to remote storage, retries included.",
          stats.requests);
  counter("_storage_retries_total",
          "Requests to remote storage that repeated a failed one (5xx, 429, reset, timeout, "
          "short read).",
          stats.retries);
  counter("_storage_errors_total", "Reads from remote storage that failed after their retries.",
          stats.errors);
  counter("_storage_whole_objects_total",
          "Objects fetched whole because their server ignores Range requests (each then serves "
          "its ranges from the copy).",
          stats.whole_objects);
  return out;
}

std::vector<MetricFamily> CacheCollector::Collect() const {
  const SampleCache::Stats stats = cache_->stats();
  std::vector<MetricFamily> out;
  const auto counter = [&](const char* name, const char* help, int64_t value) {
    ClientMetric m;
    m.counter.value = static_cast<double>(value);
    out.push_back(MetricFamily{prefix_ + name, help, MetricType::Counter, {std::move(m)}});
  };
  const auto by_tier = [&](const char* name, const char* help, int64_t ram, int64_t disk) {
    MetricFamily f{prefix_ + name, help, MetricType::Gauge, {}};
    for (const auto& [tier, value] :
         {std::pair<const char*, int64_t>{"ram", ram}, {"disk", disk}}) {
      ClientMetric m;
      m.label = {{"tier", tier}};
      m.gauge.value = static_cast<double>(value);
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  };
  counter("_cache_hits_total", "Samples whose value was found in the sample cache.", stats.hits);
  counter("_cache_misses_total", "Samples looked up in the sample cache and not found.",
          stats.misses);
  counter("_cache_evictions_total",
          "Values the sample cache dropped to make room for higher-ranked ones.", stats.evictions);
  counter("_cache_disk_errors_total",
          "Sample cache files that failed their check when read, or could not be written.",
          stats.disk_errors);
  by_tier("_cache_bytes", "Bytes of sample values the cache holds, by tier.", stats.ram_bytes,
          stats.disk_bytes);
  by_tier("_cache_entries", "Sample values the cache holds, by tier.", stats.ram_entries,
          stats.disk_entries);
  return out;
}

}  // namespace prepflow
