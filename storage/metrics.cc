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
  return out;
}

}  // namespace prepflow
