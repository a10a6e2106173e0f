// The stats field table and its renderers: the CLI's JSON and the Prometheus
// collector show exactly the table's fields (the Python dict is checked
// against the same table in tests/python/test_loader.py).
#include "client/loader_stats.h"

#include <set>
#include <string>

#include "client/metrics.h"
#include "client/stats_json.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

LoaderStats Filled(const std::string& scheduler) {
  LoaderStats st;
  st.images = 10;
  st.local_images = 4;
  st.remote_images = 6;
  st.errors = 1;
  st.batches = 2;
  st.bytes = 1234;
  st.checksum = 0xfedcba9876543210ull;
  st.seconds = 2;
  st.cpu_seconds = 3;
  st.wait_seconds = 0.5;
  st.reissued_items = 5;
  st.hedged_items = 6;
  st.hedge_wins = 7;
  st.stolen_items = 8;
  st.offload = "auto";
  st.plan = "a plan";
  st.plan_fractions = {0.25, 0, 0.75};
  st.plan_changes = 2;
  st.plan_throughput = 99;
  st.ingest_limit = 1e6;
  st.receive_cpu_per_byte = 1e-10;
  st.unseen_cpu_per_sample = 2e-4;
  st.worker_send_cpu_per_byte = 3e-9;
  LoaderStats::WorkerStats w;
  w.address = "w:1";
  w.alive = true;
  w.granted_cores = 2;
  w.streams = 1;
  w.received_bytes = 100;
  w.samples = 6;
  w.link_limit = 5e5;
  w.ingest_rate = 4e5;
  st.workers = {w};
  st.workers_alive = st.workers_total = 1;
  st.scheduler = scheduler;
  st.scheduler_reachable = true;
  st.wanted_cores = 8;
  st.fair_share_cores = 4;
  st.granted_cores = 2;
  StageStats s;
  s.name = "decode";
  s.samples = 10;
  s.cpu_seconds = 0.1;
  s.output_bytes = 1000;
  st.stages = {s};
  st.remote_stages = {s};
  st.first_errors = {SampleError{3, "a/b.jpg", absl::DataLossError("truncated")}};
  return st;
}

template <typename Record>
std::set<std::string> Keys(const std::vector<StatField<Record>>& fields) {
  std::set<std::string> keys;
  for (const auto& f : fields) keys.insert(f.key);
  return keys;
}

std::set<std::string> Keys(const nlohmann::json& j) {
  std::set<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  return keys;
}

TEST(LoaderStats, JsonHasExactlyTheTablesFields) {
  const nlohmann::json j = StatsJson(Filled("s:7060"));
  std::set<std::string> expected = Keys(LoaderStatFields());
  VisitStatLists(LoaderStats(),
                 [&expected](const char* key, const auto&, const auto&) { expected.insert(key); });
  EXPECT_EQ(Keys(j), expected);
  EXPECT_EQ(Keys(j["workers"][0]), Keys(WorkerStatFields()));
  EXPECT_EQ(Keys(j["stages"][0]), Keys(StageStatFields()));
  EXPECT_EQ(Keys(j["first_errors"][0]), Keys(ErrorStatFields()));
  EXPECT_EQ(j["checksum"], "fedcba9876543210");
  EXPECT_EQ(j["checksum_value"].get<uint64_t>(), 0xfedcba9876543210ull);
  EXPECT_EQ(j["hedge_wins"], 7);
  EXPECT_EQ(j["stolen_items"], 8);
  EXPECT_DOUBLE_EQ(j["remote_fraction"].get<double>(), 0.75);
  EXPECT_EQ(j["cut"], 1);
  EXPECT_EQ(j["first_errors"][0]["error"], "DATA_LOSS: truncated");
}

// Every table field with a metric is a series with its labels and value, and
// every family comes from the table.
TEST(LoaderStats, PrometheusHasExactlyTheTablesSeries) {
  const LoaderStats st = Filled("s:7060");
  const std::vector<prometheus::MetricFamily> families = StatsFamilies(st, "job-1", /*rank=*/2);
  std::set<std::string> names;
  for (const auto& f : families) names.insert(f.name);
  std::set<std::string> expected;
  auto add = [&expected](const auto& fields) {
    for (const auto& f : fields) {
      if (f.metric != nullptr) expected.insert(f.metric);
    }
  };
  add(LoaderStatFields());
  add(WorkerStatFields());
  add(StageStatFields());
  add(ErrorStatFields());
  EXPECT_EQ(names, expected);

  auto value = [&families](const std::string& name,
                           const std::map<std::string, std::string>& labels) {
    for (const auto& f : families) {
      if (f.name != name) continue;
      for (const auto& m : f.metric) {
        std::map<std::string, std::string> got;
        for (const auto& l : m.label) got[l.name] = l.value;
        if (got != labels) continue;
        return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
    return -1.0;
  };
  EXPECT_EQ(value("prepflow_client_samples_total",
                  {{"job_id", "job-1"}, {"rank", "2"}, {"placement", "remote"}}),
            6);
  EXPECT_EQ(value("prepflow_client_hedge_wins_total", {{"job_id", "job-1"}, {"rank", "2"}}), 7);
  EXPECT_EQ(value("prepflow_client_stolen_items_total", {{"job_id", "job-1"}, {"rank", "2"}}), 8);
  EXPECT_EQ(value("prepflow_client_plan_fraction",
                  {{"job_id", "job-1"}, {"rank", "2"}, {"path", "cut=1"}}),
            0.75);
  EXPECT_EQ(value("prepflow_client_scheduler_up",
                  {{"job_id", "job-1"}, {"rank", "2"}, {"scheduler", "s:7060"}}),
            1);
  EXPECT_EQ(value("prepflow_client_worker_link_limit_bytes_per_second",
                  {{"job_id", "job-1"}, {"rank", "2"}, {"worker", "w:1"}}),
            5e5);
  EXPECT_EQ(value("prepflow_client_stage_cpu_seconds_total",
                  {{"job_id", "job-1"}, {"rank", "2"}, {"stage", "decode"}, {"side", "remote"}}),
            0.1);
}

TEST(LoaderStats, SchedulerSeriesOnlyWithAScheduler) {
  std::set<std::string> names;
  for (const auto& f : StatsFamilies(Filled(""), "job-1")) names.insert(f.name);
  EXPECT_EQ(names.count("prepflow_client_scheduler_up"), 0u);
  EXPECT_EQ(names.count("prepflow_client_remote_cores"), 0u);
  EXPECT_EQ(names.count("prepflow_client_workers"), 1u);
}

}  // namespace
}  // namespace prepflow
