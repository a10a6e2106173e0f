#include "client/metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace prepflow {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Families {
 public:
  explicit Families(std::string job_id) : job_id_(std::move(job_id)) {}

  void Add(const std::string& name, const std::string& help, MetricType type, double value,
           std::vector<ClientMetric::Label> labels = {}) {
    MetricFamily* family = nullptr;
    for (MetricFamily& f : families_) {
      if (f.name == name) family = &f;
    }
    if (family == nullptr) {
      families_.push_back(MetricFamily{name, help, type, {}});
      family = &families_.back();
    }
    ClientMetric m;
    m.label.push_back({"job_id", job_id_});
    for (ClientMetric::Label& l : labels) m.label.push_back(std::move(l));
    (type == MetricType::Counter ? m.counter.value : m.gauge.value) = value;
    family->metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::string job_id_;
  std::vector<MetricFamily> families_;
};

}  // namespace

std::vector<MetricFamily> LoaderMetrics::Collect() const {
  const LoaderStats st = loader_->Stats();
  Families out(loader_->job_id());
  const MetricType kCounter = MetricType::Counter, kGauge = MetricType::Gauge;
  out.Add("prepflow_client_samples_total", "Samples delivered to the trainer, by where they ran.",
          kCounter, static_cast<double>(st.local_images), {{"placement", "local"}});
  out.Add("prepflow_client_samples_total", "", kCounter, static_cast<double>(st.remote_images),
          {{"placement", "remote"}});
  out.Add("prepflow_client_batches_total", "Batches delivered to the trainer.", kCounter,
          static_cast<double>(st.batches));
  out.Add("prepflow_client_errors_total", "Samples that failed (skipped or fatal).", kCounter,
          static_cast<double>(st.errors));
  out.Add("prepflow_client_output_bytes_total", "Bytes of delivered batch tensors.", kCounter,
          static_cast<double>(st.bytes));
  out.Add("prepflow_client_reissued_items_total",
          "Work items handed to another worker after theirs failed.", kCounter,
          static_cast<double>(st.reissued_items));
  out.Add("prepflow_client_hedged_items_total",
          "Work items copied to a second, idle worker because the first was slow.", kCounter,
          static_cast<double>(st.hedged_items));
  out.Add("prepflow_client_wait_seconds_total",
          "Time the trainer spent waiting for data in Next(): the input-bound time.", kCounter,
          st.wait_seconds);
  out.Add("prepflow_client_elapsed_seconds", "Wall time since the first Next().", kGauge,
          st.seconds);

  const std::string help_fraction =
      "Share of samples the current placement sends each way: local, or remote with cut K.";
  double remote = 0, largest = 0;
  int cut = 0;
  for (size_t k = 0; k < st.plan_fractions.size(); ++k) {
    const double f = st.plan_fractions[k];
    out.Add("prepflow_client_plan_fraction", help_fraction, kGauge, f,
            {{"path", k == 0 ? std::string("local") : absl::StrCat("cut=", k - 1)}});
    if (k > 0) {
      remote += f;
      if (f > largest) {
        largest = f;
        cut = static_cast<int>(k) - 1;
      }
    }
  }
  out.Add("prepflow_client_remote_fraction", "Share of samples with any stage on a worker.", kGauge,
          remote);
  out.Add("prepflow_client_cut", "The cut most remote samples take (0: all local).", kGauge, cut);
  out.Add("prepflow_client_plan_changes_total", "Plans applied by --offload auto.", kCounter,
          static_cast<double>(st.plan_changes));
  out.Add("prepflow_client_plan_predicted_samples_per_second",
          "Throughput the current plan predicts (--offload auto).", kGauge, st.plan_throughput);
  out.Add("prepflow_client_workers", "Workers of this job.", kGauge, st.workers_alive,
          {{"state", "alive"}});
  out.Add("prepflow_client_workers", "", kGauge, st.workers_total, {{"state", "configured"}});
  if (!st.scheduler.empty()) {
    out.Add("prepflow_client_scheduler_up",
            "1 when the last heartbeat to the scheduler got through, else 0.", kGauge,
            st.scheduler_reachable ? 1 : 0, {{"scheduler", st.scheduler}});
    out.Add("prepflow_client_remote_cores",
            "Worker cores: what this job asked the scheduler for, its fair share, and what it "
            "holds now.",
            kGauge, st.wanted_cores, {{"kind", "wanted"}});
    out.Add("prepflow_client_remote_cores", "", kGauge, st.fair_share_cores,
            {{"kind", "fair_share"}});
    out.Add("prepflow_client_remote_cores", "", kGauge, st.granted_cores, {{"kind", "granted"}});
  }
  for (const LoaderStats::WorkerStats& w : st.workers) {
    out.Add("prepflow_client_worker_received_bytes_total", "Bytes received from each worker.",
            kCounter, static_cast<double>(w.received_bytes), {{"worker", w.address}});
    out.Add("prepflow_client_worker_samples_total", "Samples each worker returned.", kCounter,
            static_cast<double>(w.samples), {{"worker", w.address}});
    out.Add("prepflow_client_worker_up", "1 while this job streams from the worker, else 0.",
            kGauge, w.alive ? 1 : 0, {{"worker", w.address}});
    out.Add("prepflow_client_worker_ingest_bytes_per_second",
            "Bytes/s received from each worker over the last window (--offload auto).", kGauge,
            w.ingest_rate, {{"worker", w.address}});
  }
  const std::string help_cpu = "CPU seconds spent in each stage, here or on workers.";
  for (const StageStats& s : st.stages) {
    out.Add("prepflow_client_stage_cpu_seconds_total", help_cpu, kCounter, s.cpu_seconds,
            {{"stage", s.name}, {"side", "local"}});
  }
  for (const StageStats& s : st.remote_stages) {
    out.Add("prepflow_client_stage_cpu_seconds_total", help_cpu, kCounter, s.cpu_seconds,
            {{"stage", s.name}, {"side", "remote"}});
  }
  return out.Take();
}

}  // namespace prepflow
