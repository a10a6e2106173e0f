#include "client/metrics.h"

#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "storage/metrics.h"

namespace prepflow {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Families {
 public:
  Families(std::string job_id, int rank) : job_id_(std::move(job_id)), rank_(rank) {}

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
    m.label.push_back({"rank", absl::StrCat(rank_)});
    for (ClientMetric::Label& l : labels) m.label.push_back(std::move(l));
    (type == MetricType::Counter ? m.counter.value : m.gauge.value) = value;
    family->metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::string job_id_;
  int rank_;
  std::vector<MetricFamily> families_;
};

// A field's value as one or more series: numbers as they are, a vector one
// series per element labelled path="local" then path="cut=K".
template <typename Record>
void AddField(Families& out, const StatField<Record>& f, const Record& record,
              const LoaderStats& st, const std::vector<ClientMetric::Label>& extra) {
  if (f.metric == nullptr || (f.scheduler_only && st.scheduler.empty())) return;
  std::vector<ClientMetric::Label> labels;
  for (const auto& [name, value] : f.labels) {
    labels.push_back({name, std::string(value) == "$scheduler" ? st.scheduler : value});
  }
  labels.insert(labels.end(), extra.begin(), extra.end());
  const MetricType type =
      f.kind == StatField<Record>::kCounter ? MetricType::Counter : MetricType::Gauge;
  const StatValue value = f.get(record);
  if (const auto* v = std::get_if<std::vector<double>>(&value)) {
    for (size_t k = 0; k < v->size(); ++k) {
      std::vector<ClientMetric::Label> path = labels;
      path.push_back({"path", k == 0 ? std::string("local") : absl::StrCat("cut=", k - 1)});
      out.Add(f.metric, f.help, type, (*v)[k], std::move(path));
    }
    return;
  }
  double number = 0;
  if (const auto* i = std::get_if<int64_t>(&value)) number = static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&value)) number = static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&value)) number = *d;
  if (const auto* b = std::get_if<bool>(&value)) number = *b ? 1 : 0;
  out.Add(f.metric, f.help, type, number, std::move(labels));
}

// The labels that tell apart the series of one list's records.
std::vector<ClientMetric::Label> ListLabels(const std::string&, const SampleError&) { return {}; }
std::vector<ClientMetric::Label> ListLabels(const std::string&, const LoaderStats::WorkerStats& w) {
  return {{"worker", w.address}};
}
std::vector<ClientMetric::Label> ListLabels(const std::string& key, const StageStats& s) {
  return {{"stage", s.name}, {"side", key == "remote_stages" ? "remote" : "local"}};
}

template <typename Record>
void AddRecord(Families& out, const Record& record, const std::vector<StatField<Record>>& fields,
               const LoaderStats& st, const std::vector<ClientMetric::Label>& extra) {
  for (const StatField<Record>& f : fields) AddField(out, f, record, st, extra);
}

}  // namespace

std::vector<MetricFamily> StatsFamilies(const LoaderStats& st, const std::string& job_id,
                                        int rank) {
  Families out(job_id, rank);
  AddRecord(out, st, LoaderStatFields(), st, {});
  VisitStatLists(st, [&](const std::string& key, const auto& records, const auto& fields) {
    for (const auto& r : records) AddRecord(out, r, fields, st, ListLabels(key, r));
  });
  return out.Take();
}

std::vector<MetricFamily> LoaderMetrics::Collect() const {
  const LoaderStats stats = loader_->Stats();
  const int rank = loader_->options().rank;
  std::vector<MetricFamily> families = StatsFamilies(stats, loader_->job_id(), rank);
  families.push_back(
      StorageLatencyFamily(stats.storage, "prepflow_client",
                           {{"job_id", loader_->job_id()}, {"rank", absl::StrCat(rank)}}));
  return families;
}

}  // namespace prepflow
