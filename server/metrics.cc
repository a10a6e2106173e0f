#include "server/metrics.h"

#include "prometheus/counter.h"

namespace prepflow {
namespace {

std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

WorkerMetrics::WorkerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      items_(prometheus::BuildCounter()
                 .Name("prepflow_worker_items_total")
                 .Help("Work items completed")
                 .Register(*registry_)
                 .Add({})),
      samples_(prometheus::BuildCounter()
                   .Name("prepflow_worker_samples_total")
                   .Help("Samples processed (including failed ones)")
                   .Register(*registry_)
                   .Add({})),
      bytes_sent_(prometheus::BuildCounter()
                      .Name("prepflow_worker_sent_bytes_total")
                      .Help("Sample payload bytes sent to clients")
                      .Register(*registry_)
                      .Add({})),
      errors_(prometheus::BuildCounter()
                  .Name("prepflow_worker_sample_errors_total")
                  .Help("Samples that failed, by status code")
                  .Register(*registry_)),
      refused_(prometheus::BuildCounter()
                   .Name("prepflow_worker_refused_streams_total")
                   .Help("Streams refused at job open, by status code")
                   .Register(*registry_)),
      stage_seconds_(prometheus::BuildHistogram()
                         .Name("prepflow_worker_stage_seconds")
                         .Help("Thread CPU seconds per sample, by stage")
                         .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("prepflow_worker_queue_depth")
                       .Help("Work items waiting for a thread")
                       .Register(*registry_)
                       .Add({})),
      active_streams_(prometheus::BuildGauge()
                          .Name("prepflow_worker_active_streams")
                          .Help("Open job streams (one per rank of a training job)")
                          .Register(*registry_)
                          .Add({})),
      streams_opened_(prometheus::BuildCounter()
                          .Name("prepflow_worker_streams_opened_total")
                          .Help("Job streams opened")
                          .Register(*registry_)
                          .Add({})),
      active_jobs_(prometheus::BuildGauge()
                       .Name("prepflow_worker_active_jobs")
                       .Help("Open training jobs: a job's ranks share one (one pipeline, "
                             "dataset open, echo store and budget of items)")
                       .Register(*registry_)
                       .Add({})),
      jobs_opened_(prometheus::BuildCounter()
                       .Name("prepflow_worker_jobs_opened_total")
                       .Help("Training jobs opened (a job opened again after all its streams "
                             "closed counts again)")
                       .Register(*registry_)
                       .Add({})),
      memory_(prometheus::BuildGauge()
                  .Name("prepflow_worker_memory_bytes")
                  .Help("Result memory: reserved by admitted items, and the results' budget "
                        "(half of --max-memory-bytes)")
                  .Register(*registry_)),
      memory_reserved_(memory_.Add({{"what", "reserved"}})),
      memory_budget_(memory_.Add({{"what", "budget"}})),
      memory_waiting_(prometheus::BuildGauge()
                          .Name("prepflow_worker_memory_waiting_items")
                          .Help("Work items waiting for room in the memory budget")
                          .Register(*registry_)
                          .Add({})),
      listener_restarts_(prometheus::BuildCounter()
                             .Name("prepflow_worker_listener_restarts_total")
                             .Help("Times the gRPC listener stopped accepting (e.g. the "
                                   "open-files limit was reached) and was restarted")
                             .Register(*registry_)
                             .Add({})) {}

void WorkerMetrics::SampleFailed(absl::StatusCode code) {
  errors_.Add({{"code", CodeName(code)}}).Increment();
}

void WorkerMetrics::StreamRefused(absl::StatusCode code) {
  refused_.Add({{"code", CodeName(code)}}).Increment();
}

std::vector<prometheus::Histogram*> WorkerMetrics::StageHistograms(
    const std::vector<std::string>& stages) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1};
  absl::MutexLock lock(&mu_);
  std::vector<prometheus::Histogram*> out;
  for (const std::string& stage : stages) {
    auto it = stage_handles_.find(stage);
    if (it == stage_handles_.end()) {
      it = stage_handles_.emplace(stage, &stage_seconds_.Add({{"stage", stage}}, kBuckets)).first;
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace prepflow
