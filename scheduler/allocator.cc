#include "scheduler/allocator.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace prepflow::scheduler {

std::vector<double> FairShares(double pool_cores, const std::vector<JobWant>& jobs) {
  std::vector<double> share(jobs.size(), 0);
  std::vector<size_t> order;
  double weight_left = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].weight > 0 && jobs[j].wanted_cores > 0) {
      order.push_back(j);
      weight_left += jobs[j].weight;
    }
  }
  // Least want per weight first: those are satisfied in full while the level
  // rises; the rest split what remains by weight.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return jobs[a].wanted_cores / jobs[a].weight < jobs[b].wanted_cores / jobs[b].weight;
  });
  double left = std::max(0.0, pool_cores);
  for (size_t j : order) {
    const double fair = left * jobs[j].weight / weight_left;
    share[j] = std::min(jobs[j].wanted_cores, fair);
    left -= share[j];
    weight_left -= jobs[j].weight;
  }
  return share;
}

Allocation Allocate(const std::vector<PoolWorker>& workers, const std::vector<JobWant>& jobs,
                    const std::map<std::string, std::vector<Grant>>& previous) {
  Allocation out;
  std::vector<double> free(workers.size());
  std::unordered_map<std::string, size_t> by_id;
  for (size_t w = 0; w < workers.size(); ++w) {
    free[w] = std::max(0.0, workers[w].cores);
    out.pool_cores += free[w];
    by_id.emplace(workers[w].id, w);
  }
  const std::vector<double> share = FairShares(out.pool_cores, jobs);

  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (share[a] != share[b]) return share[a] > share[b];
    return jobs[a].id < jobs[b].id;
  });
  std::vector<double> need(jobs.size());
  std::vector<std::map<size_t, double>> granted(jobs.size());  // worker -> cores
  for (size_t j : order) {
    need[j] = share[j];
    if (share[j] > 0) out.share[jobs[j].id] = share[j];
  }
  auto give = [&](size_t j, size_t w, double cores) {
    cores = std::min({cores, need[j], free[w]});
    if (cores < kMinGrantCores) return;  // not worth a stream
    granted[j][w] += cores;
    need[j] -= cores;
    free[w] -= cores;
  };

  // 1. Earlier grants stay where they are.
  for (size_t j : order) {
    auto it = previous.find(jobs[j].id);
    if (it == previous.end()) continue;
    for (const Grant& g : it->second) {
      auto w = by_id.find(g.worker_id);
      if (w != by_id.end() && need[j] > 0) give(j, w->second, g.cores);
    }
  }
  // 2 and 3. Workers with free cores, per locality and in all; each list is
  // walked by a cursor that only moves past workers with nothing left.
  std::unordered_map<std::string, std::vector<size_t>> local_lists;
  std::vector<size_t> all;
  for (size_t w = 0; w < workers.size(); ++w) {
    if (free[w] <= 0) continue;
    all.push_back(w);
    if (!workers[w].locality.empty()) local_lists[workers[w].locality].push_back(w);
  }
  std::unordered_map<std::string, size_t> local_cursor;
  size_t all_cursor = 0;
  auto fill = [&](size_t j, const std::vector<size_t>& list, size_t& cursor) {
    while (need[j] >= kMinGrantCores && cursor < list.size()) {
      const size_t w = list[cursor];
      if (free[w] < kMinGrantCores) {  // used up, or only a sliver left
        ++cursor;
        continue;
      }
      give(j, w, need[j]);
    }
  };
  for (size_t j : order) {
    if (jobs[j].locality.empty()) continue;
    auto list = local_lists.find(jobs[j].locality);
    if (list != local_lists.end()) fill(j, list->second, local_cursor[jobs[j].locality]);
  }
  for (size_t j : order) fill(j, all, all_cursor);

  for (size_t j : order) {
    if (granted[j].empty()) continue;
    std::vector<Grant>& grants = out.grants[jobs[j].id];
    for (const auto& [w, cores] : granted[j]) {
      grants.push_back({workers[w].id, cores});
      out.granted_cores += cores;
    }
    std::sort(grants.begin(), grants.end(),
              [](const Grant& a, const Grant& b) { return a.worker_id < b.worker_id; });
  }
  return out;
}

}  // namespace prepflow::scheduler
