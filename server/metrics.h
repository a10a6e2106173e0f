// The worker's Prometheus metrics. Handles are created once (per stage name
// at job open) so the per-sample path only calls Increment()/Observe().
//
// Thread-safety: all methods may be called from any thread.
#ifndef PREPFLOW_SERVER_METRICS_H_
#define PREPFLOW_SERVER_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prepflow {

class WorkerMetrics {
 public:
  WorkerMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void ItemDone(int64_t samples, int64_t bytes) {
    items_.Increment();
    samples_.Increment(static_cast<double>(samples));
    bytes_sent_.Increment(static_cast<double>(bytes));
  }
  void SampleFailed(absl::StatusCode code);
  // Histogram handles for these stage names, created on first use.
  std::vector<prometheus::Histogram*> StageHistograms(const std::vector<std::string>& stages);
  void SetQueueDepth(double depth) { queue_depth_.Set(depth); }
  // The memory budget: bytes reserved by admitted items, items waiting.
  void SetMemory(int64_t reserved_bytes, size_t waiting_items) {
    memory_reserved_.Set(static_cast<double>(reserved_bytes));
    memory_waiting_.Set(static_cast<double>(waiting_items));
  }
  void SetMemoryBudget(int64_t bytes) { memory_budget_.Set(static_cast<double>(bytes)); }
  void StreamOpened() {
    active_streams_.Increment();
    streams_opened_.Increment();
  }
  void StreamClosed() { active_streams_.Decrement(); }
  // A training job opened here (its first rank's stream), or closed (its
  // last stream ended).
  void JobOpened() {
    active_jobs_.Increment();
    jobs_opened_.Increment();
  }
  void JobClosed() { active_jobs_.Decrement(); }
  void StreamRefused(absl::StatusCode code);
  void ListenerRestarted() { listener_restarts_.Increment(); }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter& items_;
  prometheus::Counter& samples_;
  prometheus::Counter& bytes_sent_;
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Counter>& refused_;
  prometheus::Family<prometheus::Histogram>& stage_seconds_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& active_streams_;
  prometheus::Counter& streams_opened_;
  prometheus::Gauge& active_jobs_;
  prometheus::Counter& jobs_opened_;
  prometheus::Family<prometheus::Gauge>& memory_;
  prometheus::Gauge& memory_reserved_;
  prometheus::Gauge& memory_budget_;
  prometheus::Gauge& memory_waiting_;
  prometheus::Counter& listener_restarts_;
  absl::Mutex mu_;
  std::map<std::string, prometheus::Histogram*> stage_handles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_METRICS_H_
