// `prepflow plan`.
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/flags.h"
#include "client/cli/commands.h"
#include "client/cli/profile.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"
#include "policy/planner.h"
#include "policy/replanner.h"
#include "storage/options.h"

namespace prepflow::cli {

namespace {

// "8,2,1" -> {8, 2, 1}; InvalidArgument naming the flag.
absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &v) || !(v >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a non-negative number"));
    }
    out.push_back(v);
  }
  return out;
}

void PrintPlan(Console& console, const policy::PlanInput& in, const std::vector<std::string>& names,
               const policy::Plan& plan, bool json) {
  if (json) {
    Json stages = Json::array();
    for (size_t i = 0; i < names.size(); ++i) {
      stages.push_back({{"name", names[i]},
                        {"cpu_ms_per_sample", in.local_cost[i] * 1e3},
                        {"bytes_per_sample", in.boundary_bytes[i]}});
    }
    Json binding = Json::array();
    for (policy::Binding b : plan.binding) binding.push_back(policy::BindingName(b));
    Json j = {{"command", "plan"},
              {"stages", stages},
              {"throughput", plan.throughput},
              {"rate_per_cut", plan.rate},
              {"remote_fraction", plan.remote_fraction},
              {"local_cores", plan.local_cores_used},
              {"remote_cores", plan.remote_cores_used},
              {"workers", plan.workers},
              {"network_bytes_per_s", plan.network_bytes_per_s},
              {"binding", binding},
              {"explanation", plan.explanation}};
    console.PrintJson(j);
    return;
  }
  std::printf("  %-24s %14s %16s\n", "stage", "cpu ms/sample", "out KiB/sample");
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("  %-24s %14.3f %16.1f\n", names[i].c_str(), in.local_cost[i] * 1e3,
                in.boundary_bytes[i] / 1024);
  }
  std::printf("\nplan: %s\n", plan.explanation.c_str());
  for (size_t k = 0; k < plan.rate.size(); ++k) {
    if (plan.rate[k] <= 0) continue;
    std::printf("  cut=%zu  %.1f samples/s\n", k, plan.rate[k]);
  }
}

// prepflow plan's reuse terms (policy/planner.h: K, h, E, s, S_l, S_r).
struct ReuseFlags {
  int reuse_at = 0, max_echo = 4;
  double cache_hit = 0, read_bytes = -1, storage_mbps = 0, worker_storage_mbps = 0;
  std::string echo = "1";

  void Register(FlagSet& flags) {
    flags.Int("reuse-at", &reuse_at,
              "reuse: the boundary a load reaches (the cache or echo boundary; 0: the read)");
    flags.Double("cache-hit", &cache_hit, "reuse: the share of loads caches answer (0 to 1)");
    flags.String("echo", &echo,
                 "reuse: copies per load, or auto (the fewest that meet --demand, up to "
                 "--max-echo)");
    flags.Int("max-echo", &max_echo, "with --echo auto: the most copies per load");
    flags.Double("read-bytes", &read_bytes,
                 "bytes a load reads from storage (default: with --data, the files' mean size; "
                 "else 0)");
    flags.Double("storage-mbps", &storage_mbps,
                 "storage read bandwidth of this trainer in Mbit/s (0: unlimited)");
    flags.Double("worker-storage-mbps", &worker_storage_mbps,
                 "storage read bandwidth of the workers together in Mbit/s (0: unlimited)");
  }

  // Sets the terms in `in` and plans, choosing the echo factor for --echo
  // auto. InvalidArgument naming the flag.
  absl::StatusOr<policy::Plan> Plan(policy::PlanInput* in) const {
    in->reuse_at = reuse_at;
    in->cache_hit = cache_hit;
    in->read_bytes = std::max(0.0, read_bytes);
    if (storage_mbps > 0) in->local_storage_bandwidth = storage_mbps * 1e6 / 8;
    if (worker_storage_mbps > 0) in->remote_storage_bandwidth = worker_storage_mbps * 1e6 / 8;
    if (echo == "auto") {
      policy::Plan chosen;
      absl::StatusOr<int> factor = policy::ChooseEcho(*in, max_echo, &chosen);
      if (!factor.ok()) return factor.status();
      in->echo = *factor;
      return chosen;
    }
    if (!absl::SimpleAtod(echo, &in->echo) || !(in->echo >= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--echo: '", echo, "' is neither auto nor a number >= 1"));
    }
    return policy::MakePlan(*in);
  }
};

// The stages' costs and sizes as --stage-ms and --stage-bytes give them.
absl::Status CostsFromLists(const std::string& stage_ms, const std::string& stage_bytes,
                            policy::PlanInput* in, std::vector<std::string>* names) {
  auto ms = ParseList("stage-ms", stage_ms);
  if (!ms.ok()) return ms.status();
  auto bytes = ParseList("stage-bytes", stage_bytes);
  if (!bytes.ok()) return bytes.status();
  for (double v : *ms) in->local_cost.push_back(v / 1e3);
  in->boundary_bytes = *bytes;
  for (size_t i = 0; i < in->local_cost.size(); ++i) names->push_back(absl::StrCat("stage ", i));
  return absl::OkStatus();
}

// The stages' costs and sizes from a short profile of --data.
absl::Status CostsFromProfile(const ProfileFlags& pf, ReuseFlags* reuse, policy::PlanInput* in,
                              std::vector<std::string>* names) {
  auto profile = ProfileDataset(pf);
  if (!profile.ok()) return profile.status();
  // "read" first, then the stages; whoever runs stage 0 reads the file.
  const std::vector<StageStats>& stages = profile->stages;
  for (size_t i = 1; i < stages.size(); ++i) {
    names->push_back(stages[i].name);
    in->local_cost.push_back(stages[i].cpu_seconds_per_sample());
    in->boundary_bytes.push_back(stages[i].bytes_per_sample());
  }
  if (!in->local_cost.empty()) in->local_cost[0] += stages[0].cpu_seconds_per_sample();
  if (reuse->read_bytes < 0) reuse->read_bytes = stages[0].bytes_per_sample();
  return absl::OkStatus();
}

}  // namespace

int PlanCommand(Console& console, int argc, char** argv) {
  ProfileFlags pf;
  pf.samples = 64;
  std::string stage_ms, remote_ms, stage_bytes;
  double local_cores = 1, remote_cores = 0, cores_per_worker = 1, bandwidth_mbps = 0, demand = 0;
  double receive_ns_per_byte = policy::kPriorReceiveCpuPerByte * 1e9,
         send_ns_per_byte = policy::kAssumedSendCpuPerByte * 1e9;
  bool json = false;
  FlagSet flags("prepflow plan",
                "Prints what the offload planner decides for given measurements, or for a short "
                "profile of a dataset: how many samples take each cut, the remote cores and "
                "workers to ask for, and which resource binds.");
  pf.Register(flags, "profile this dataset for the stage costs and sizes",
              "samples to profile with --data");
  flags.String("stage-ms", &stage_ms, "instead of --data: CPU ms per sample of each stage, a,b,c");
  flags.String("remote-ms", &remote_ms,
               "CPU ms per sample of each stage on a worker (default: as here)");
  flags.String("stage-bytes", &stage_bytes, "with --stage-ms: bytes per sample after each stage");
  flags.Double("local-cores", &local_cores, "cores this trainer may spend on preprocessing");
  flags.Double("remote-cores", &remote_cores, "remote cores available");
  flags.Double("cores-per-worker", &cores_per_worker, "cores of one worker");
  flags.Double("bandwidth-mbps", &bandwidth_mbps, "ingest bandwidth in Mbit/s (0: unlimited)");
  flags.Double("demand", &demand, "samples/s the training loop consumes (0: unlimited)");
  flags.Double("receive-ns-per-byte", &receive_ns_per_byte,
               "CPU ns this trainer spends per byte it receives");
  flags.Double("send-ns-per-byte", &send_ns_per_byte, "CPU ns a worker spends per byte it sends");
  int max_cut = -1;
  flags.Int("max-cut", &max_cut,
            "the last cut workers can take: stages from it on run here (e.g. a custom op the "
            "workers lack); -1: any");
  ReuseFlags reuse;
  reuse.Register(flags);
  flags.Bool("json", &json, "print JSON");
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;

  policy::PlanInput in;
  std::vector<std::string> names;
  if (stage_ms.empty() && pf.data.empty()) {
    return console.UsageError("prepflow plan: give --data, or --stage-ms with --stage-bytes",
                              flags);
  }
  const absl::Status costs = stage_ms.empty() ? CostsFromProfile(pf, &reuse, &in, &names)
                                              : CostsFromLists(stage_ms, stage_bytes, &in, &names);
  if (!costs.ok()) return console.Failure("plan", costs);
  if (!remote_ms.empty()) {
    auto ms = ParseList("remote-ms", remote_ms);
    if (!ms.ok()) return console.Failure("plan", ms.status());
    for (double v : *ms) in.remote_cost.push_back(v / 1e3);
  }
  in.local_cores = local_cores;
  in.remote_cores = remote_cores;
  in.cores_per_worker = cores_per_worker;
  in.local_cost_per_byte = receive_ns_per_byte * 1e-9;
  in.remote_cost_per_byte = send_ns_per_byte * 1e-9;
  if (bandwidth_mbps > 0) in.bandwidth = bandwidth_mbps * 1e6 / 8;
  if (demand > 0) in.demand = demand;
  in.max_cut = max_cut;
  if (max_cut >= 0 && max_cut < static_cast<int>(names.size())) {
    in.max_cut_why = absl::StrCat("--max-cut: ", names[max_cut], " and after run here");
  }
  absl::StatusOr<policy::Plan> plan = reuse.Plan(&in);
  if (!plan.ok()) return console.Failure("plan", plan.status());
  PrintPlan(console, in, names, *plan, json);
  return kOk;
}

}  // namespace prepflow::cli
