// Simulates the offload planner over random scenarios and compares it with
//  * an oracle: brute force over (cut k, remote fraction f on a 1% grid,
//    workers w), the best single-cut decision there is;
//  * FastFlow's rule (Um et al., VLDB 2023), re-implemented from its
//    description: offload only when the model-bound rate (here: demand) is
//    more than 1.3x the local throughput; candidate offload points "before
//    batching / before prefetch" (both: the whole pipeline, cut n) and one
//    middle point (cut ceil(n/2)); the local ratio from its throughput
//    formula, which balances local and remote CPU and ignores the network; all
//    granted workers used; the candidate with the best estimate wins.
// Every decision is scored with the same model (policy/planner.h): samples/s
// under local CPU, remote CPU, bandwidth and demand. Prints one JSON line.
//
//   plan_sim [--scenarios 5000] [--seed 1]
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/flags.h"
#include "pipeline/core/rng.h"
#include "policy/planner.h"

namespace {

using prepflow::policy::PlanInput;

struct Scenario {
  PlanInput in;  // remote_cores = max_workers * cores_per_worker
  int max_workers = 0;
};

double LogUniform(prepflow::SampleRng& rng, double lo, double hi) {
  return std::exp(rng.Uniform(std::log(lo), std::log(hi)));
}

// Path costs: local CPU, remote CPU, bytes, for cut k.
struct Path {
  double local, remote, bytes;
};
Path PathOf(const PlanInput& in, size_t k) {
  Path p{0, 0, 0};
  for (size_t i = 0; i < in.local_cost.size(); ++i) {
    if (i >= k) {
      p.local += in.local_cost[i];
    } else {
      p.remote += in.remote_cost[i];
    }
  }
  p.bytes = k == 0 ? 0 : in.boundary_bytes[k - 1];
  return p;
}

// Throughput of "a fraction f of samples at cut k on w workers, the rest
// fully local" under every limit.
double Score(const Scenario& s, size_t k, double f, int w) {
  const Path local = PathOf(s.in, 0), cut = PathOf(s.in, k);
  const double r = w * s.in.cores_per_worker;
  double t = s.in.demand;
  const double local_per = (1 - f) * local.local + f * cut.local;
  if (local_per > 0) t = std::min(t, s.in.local_cores / local_per);
  if (f * cut.remote > 0) t = std::min(t, r / (f * cut.remote));
  if (f * cut.bytes > 0) t = std::min(t, s.in.bandwidth / (f * cut.bytes));
  return t;
}

double Oracle(const Scenario& s) {
  const size_t n = s.in.local_cost.size();
  double best = Score(s, 0, 0, 0);
  for (size_t k = 1; k <= n; ++k) {
    for (int w = 1; w <= s.max_workers; ++w) {
      for (int step = 1; step <= 100; ++step) best = std::max(best, Score(s, k, step / 100.0, w));
    }
  }
  return best;
}

double FastFlow(const Scenario& s) {
  const size_t n = s.in.local_cost.size();
  const Path local = PathOf(s.in, 0);
  const double local_rate = s.in.local_cores / local.local;
  if (s.in.demand / local_rate <= 1.3 || s.max_workers == 0) return Score(s, 0, 0, 0);
  const int w = s.max_workers;
  const double r = w * s.in.cores_per_worker;
  double best_estimate = -1, best_actual = Score(s, 0, 0, 0);
  for (size_t k : {n, static_cast<size_t>((n + 1) / 2)}) {
    const Path cut = PathOf(s.in, k);
    // Balance local and remote CPU (network not considered):
    // L / ((1-f) lc0 + f lck) = R / (f rck).
    const double f = std::clamp(
        r * local.local / (s.in.local_cores * cut.remote + r * (local.local - cut.local)), 0.0,
        1.0);
    const double estimate = std::min(s.in.local_cores / ((1 - f) * local.local + f * cut.local),
                                     f > 0 ? r / (f * cut.remote) : 1e300);
    if (estimate > best_estimate) {
      best_estimate = estimate;
      best_actual = Score(s, k, f, w);
    }
  }
  return best_actual;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t scenarios = 5000;
  uint64_t seed = 1;
  prepflow::cli::FlagSet flags("plan_sim", "Planner vs oracle vs FastFlow's rule.");
  flags.Int("scenarios", &scenarios, "random scenarios");
  flags.Uint("seed", &seed, "seed");
  std::string csv_path;
  flags.String("csv", &csv_path,
               "also write one line per scenario (planner, oracle, FastFlow rule, bandwidth "
               "bound) to this file, for scripts/plot_benchmarks.py");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  FILE* csv = nullptr;
  if (!csv_path.empty()) {
    csv = std::fopen(csv_path.c_str(), "w");
    if (csv == nullptr) {
      std::fprintf(stderr, "plan_sim: --csv %s: %s\n", csv_path.c_str(), std::strerror(errno));
      return 2;
    }
    std::fprintf(csv, "planner,oracle,fastflow,bandwidth_bound\n");
  }
  prepflow::SampleRng rng(seed, 0, 0, 0);
  int64_t within_1pct = 0, below_fastflow = 0, bandwidth_bound = 0;
  double worst = 1e300, sum_vs_ff = 0, sum_vs_ff_bw = 0;
  for (int64_t i = 0; i < scenarios; ++i) {
    Scenario s;
    const int n = 2 + static_cast<int>(rng.UniformInt(0, 4));
    for (int k = 0; k < n; ++k) {
      s.in.local_cost.push_back(LogUniform(rng, 1e-4, 1e-2));
      s.in.remote_cost.push_back(s.in.local_cost.back() * rng.Uniform(0.7, 1.5));
      s.in.boundary_bytes.push_back(LogUniform(rng, 1e4, 1e6));
    }
    s.in.local_cores = rng.Uniform(0.5, 8);
    s.in.cores_per_worker = std::pow(2.0, static_cast<double>(rng.UniformInt(0, 3)));
    s.max_workers = static_cast<int>(rng.UniformInt(0, 16));
    s.in.remote_cores = s.max_workers * s.in.cores_per_worker;
    s.in.bandwidth = LogUniform(rng, 1e7, 1e10);
    s.in.demand = LogUniform(rng, 100, 1e5);
    auto plan = prepflow::policy::MakePlan(s.in);
    if (!plan.ok()) {
      std::fprintf(stderr, "plan_sim: %s\n", std::string(plan.status().message()).c_str());
      return 1;
    }
    const double p = plan->throughput, o = Oracle(s), ff = FastFlow(s);
    within_1pct += p >= 0.99 * o;
    worst = std::min(worst, p / o);
    below_fastflow += p < 0.99 * ff;
    sum_vs_ff += p / ff;
    const bool bw = std::find(plan->binding.begin(), plan->binding.end(),
                              prepflow::policy::Binding::kNetwork) != plan->binding.end();
    if (bw) {
      ++bandwidth_bound;
      sum_vs_ff_bw += p / ff;
    }
    if (csv != nullptr) std::fprintf(csv, "%.6g,%.6g,%.6g,%d\n", p, o, ff, bw ? 1 : 0);
  }
  if (csv != nullptr) std::fclose(csv);
  std::printf(
      "{\"program\":\"plan_sim\",\"scenarios\":%lld,\"within_1pct_of_oracle\":%.4f,"
      "\"worst_ratio_to_oracle\":%.4f,\"mean_ratio_to_fastflow\":%.3f,"
      "\"bandwidth_bound_scenarios\":%lld,\"mean_ratio_to_fastflow_bandwidth_bound\":%.3f,"
      "\"below_fastflow_by_over_1pct\":%lld}\n",
      static_cast<long long>(scenarios), static_cast<double>(within_1pct) / scenarios, worst,
      sum_vs_ff / scenarios, static_cast<long long>(bandwidth_bound),
      bandwidth_bound ? sum_vs_ff_bw / bandwidth_bound : 0.0,
      static_cast<long long>(below_fastflow));
  return 0;
}
