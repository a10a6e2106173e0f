// The scheduler's rebalance at cluster scale: a pool of --workers workers in
// --zones zones and --jobs jobs with random wants, weights and zones; prints
// one JSON line with the time of a cold rebalance and of a warm one (one job
// joined, earlier grants kept), median over --rounds.
//
//   build/bin/alloc_bench --workers 10000 --jobs 1000
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/flags.h"
#include "pipeline/core/rng.h"
#include "scheduler/allocator.h"

namespace {

using prepflow::scheduler::Allocate;
using prepflow::scheduler::Allocation;

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t workers = 10000, jobs = 1000, zones = 8, rounds = 5;
  uint64_t seed = 1;
  prepflow::cli::FlagSet flags("alloc_bench", "Times the scheduler's rebalance at scale.");
  flags.Int("workers", &workers, "workers in the pool");
  flags.Int("jobs", &jobs, "jobs asking for cores");
  flags.Int("zones", &zones, "locality zones");
  flags.Int("rounds", &rounds, "timed rounds (the median is printed)");
  flags.Uint("seed", &seed, "seed");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (workers < 0 || jobs < 0 || zones < 1 || rounds < 1) {
    std::fprintf(stderr,
                 "alloc_bench: --workers and --jobs must be >= 0, --zones and --rounds "
                 "at least 1\n");
    return 2;
  }
  prepflow::SampleRng rng(seed, 0, 0, 0);
  std::vector<prepflow::scheduler::PoolWorker> pool;
  double pool_cores = 0;
  for (int64_t w = 0; w < workers; ++w) {
    const double cores = static_cast<double>(1 << rng.UniformInt(0, 5));  // 1..32
    pool.push_back(
        {"w" + std::to_string(w), cores, "z" + std::to_string(rng.UniformInt(0, zones - 1))});
    pool_cores += cores;
  }
  std::vector<prepflow::scheduler::JobWant> wants;
  double wanted = 0;
  for (int64_t j = 0; j < jobs; ++j) {
    const double want = rng.Uniform(1, 4 * pool_cores / std::max<int64_t>(jobs, 1));
    wants.push_back({"j" + std::to_string(j), static_cast<double>(rng.UniformInt(1, 4)), want,
                     "z" + std::to_string(rng.UniformInt(0, zones - 1))});
    wanted += want;
  }
  std::vector<double> cold, warm;
  Allocation last;
  for (int64_t r = 0; r < rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    last = Allocate(pool, wants);
    cold.push_back(Seconds(start));
    auto more = wants;
    more.push_back({"newcomer", 1, 64, "z0"});
    start = std::chrono::steady_clock::now();
    const Allocation next = Allocate(pool, more, last.grants);
    warm.push_back(Seconds(start));
  }
  size_t grants = 0;
  for (const auto& [job, g] : last.grants) grants += g.size();
  std::printf(
      "{\"program\":\"alloc_bench\",\"workers\":%lld,\"jobs\":%lld,\"zones\":%lld,"
      "\"pool_cores\":%.0f,\"wanted_cores\":%.0f,\"granted_cores\":%.1f,\"grants\":%zu,"
      "\"cold_rebalance_ms\":%.2f,\"warm_rebalance_ms\":%.2f,\"bar_ms\":50}\n",
      static_cast<long long>(workers), static_cast<long long>(jobs), static_cast<long long>(zones),
      pool_cores, wanted, last.granted_cores, grants, 1e3 * Median(cold), 1e3 * Median(warm));
  return 0;
}
