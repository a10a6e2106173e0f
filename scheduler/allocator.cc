#include "scheduler/allocator.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

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

std::vector<double> RankShares(double pool_cores, const std::vector<JobWant>& ranks,
                               std::map<std::string, double>* job_shares) {
  // One entry per training job, in the order of its first rank.
  std::vector<JobWant> jobs;
  std::vector<std::vector<size_t>> members;  // by job: its ranks
  std::map<std::string, size_t> job_of;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string& name = ranks[r].job.empty() ? ranks[r].id : ranks[r].job;
    auto [it, added] = job_of.try_emplace(name, jobs.size());
    if (added) {
      jobs.push_back({name, 0, 0, "", ""});
      members.emplace_back();
    }
    members[it->second].push_back(r);
    if (ranks[r].weight > 0 && ranks[r].wanted_cores > 0) {
      JobWant& j = jobs[it->second];
      j.weight = std::max(j.weight, ranks[r].weight);
      j.wanted_cores += ranks[r].wanted_cores;
    }
  }
  const std::vector<double> job_share = FairShares(pool_cores, jobs);
  // Within a job, max-min by want: a rank wanting less than an equal part
  // gets what it wants, the others split the rest equally (ranks run in
  // step, so the slowest sets the job's pace).
  std::vector<double> share(ranks.size(), 0);
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::vector<JobWant> equal;
    for (size_t r : members[j]) {
      equal.push_back({ranks[r].id, ranks[r].weight > 0 ? 1.0 : 0.0, ranks[r].wanted_cores, ""});
    }
    const std::vector<double> part = FairShares(job_share[j], equal);
    for (size_t k = 0; k < members[j].size(); ++k) share[members[j][k]] = part[k];
    if (job_shares != nullptr && job_share[j] > 0) (*job_shares)[jobs[j].id] = job_share[j];
  }
  return share;
}

namespace {

// Each job's grants (worker index, cores; a worker may come more than once)
// as grants sorted by worker id, into `out`, jobs taken in `order`.
// `by_id_order`: the workers are sorted by id, so their indices sort alike.
void AddGrants(const std::vector<PoolWorker>& workers, const std::vector<JobWant>& jobs,
               const std::vector<size_t>& order,
               std::vector<std::vector<std::pair<size_t, double>>>& granted, bool by_id_order,
               Allocation* out) {
  for (size_t j : order) {
    auto& given = granted[j];
    if (given.empty()) continue;
    std::sort(given.begin(), given.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Grant>& grants = out->grants[jobs[j].id];
    for (size_t k = 0; k < given.size(); ++k) {
      if (k > 0 && given[k].first == given[k - 1].first) {
        grants.back().cores += given[k].second;
      } else {
        grants.push_back({workers[given[k].first].id, given[k].second});
      }
      out->granted_cores += given[k].second;
      if (workers[given[k].first].cost > 0) {
        out->cost_per_hour[jobs[j].id] += given[k].second * workers[given[k].first].cost;
      }
    }
    if (!by_id_order) {
      std::sort(grants.begin(), grants.end(),
                [](const Grant& a, const Grant& b) { return a.worker_id < b.worker_id; });
    }
  }
}

// The order workers are granted in where prices differ: a reclaimed
// class's last, then by cost.
bool Cheaper(const PoolWorker& a, const PoolWorker& b) {
  return std::tie(a.reclaimed, a.cost) < std::tie(b.reclaimed, b.cost);
}

// Whether the workers' prices differ (then passes 2 to 4 look at them).
bool Priced(const std::vector<PoolWorker>& workers) {
  return std::any_of(workers.begin(), workers.end(), [&](const PoolWorker& w) {
    return Cheaper(w, workers.front()) || Cheaper(workers.front(), w);
  });
}

// The workers with free cores, in all and per locality label, cheapest first
// where `priced` (the workers' order among equals).
void FreeLists(const std::vector<PoolWorker>& workers, const std::vector<double>& free, bool priced,
               std::vector<size_t>* all,
               std::unordered_map<std::string, std::vector<size_t>>* local_lists) {
  for (size_t w = 0; w < workers.size(); ++w) {
    if (free[w] > 0) all->push_back(w);
  }
  if (priced) {
    std::stable_sort(all->begin(), all->end(),
                     [&](size_t a, size_t b) { return Cheaper(workers[a], workers[b]); });
  }
  for (size_t w : *all) {
    if (!workers[w].locality.empty()) (*local_lists)[workers[w].locality].push_back(w);
  }
}

// 4. Where prices differ (the caller asks only then), grants on a worker
// move to free cores that cost less (not away from the job's locality to a
// worker outside it): a job that was granted dear cores before cheap ones
// joined does not keep paying for them. `all`: the workers that had free
// cores, cheapest first.
void MoveToCheaperCores(const std::vector<PoolWorker>& workers, const std::vector<JobWant>& jobs,
                        const std::vector<size_t>& order, const std::vector<size_t>& all,
                        std::vector<double>& free,
                        std::vector<std::vector<std::pair<size_t, double>>>& granted) {
  size_t cursor = 0;  // past workers with nothing left
  for (size_t j : order) {
    const std::string& local = jobs[j].locality;
    const size_t held = granted[j].size();
    for (size_t k = 0; k < held; ++k) {
      const size_t from = granted[j][k].first;
      const bool keeps_locality = !local.empty() && workers[from].locality == local;
      for (size_t c = cursor; c < all.size() && granted[j][k].second >= kMinGrantCores; ++c) {
        const size_t to = all[c];
        if (!Cheaper(workers[to], workers[from])) break;  // none cheaper left
        if (free[to] < kMinGrantCores) {
          if (c == cursor) ++cursor;
          continue;
        }
        if (keeps_locality && workers[to].locality != local) continue;
        double moved = std::min(granted[j][k].second, free[to]);
        const double left = granted[j][k].second - moved;
        // Leave a whole grant behind or nothing, never a sliver.
        if (left > 0 && left < kMinGrantCores) moved -= kMinGrantCores - left;
        if (moved < kMinGrantCores) continue;
        granted[j][k].second -= moved;
        granted[j].emplace_back(to, moved);
        free[to] -= moved;
        free[from] += moved;
      }
    }
    // What stayed behind is a sliver or nothing: not worth a stream.
    granted[j].erase(std::remove_if(granted[j].begin(), granted[j].end(),
                                    [](const auto& g) { return g.second < 1e-12; }),
                     granted[j].end());
  }
}

}  // namespace

Allocation Allocate(const std::vector<PoolWorker>& workers, const std::vector<JobWant>& jobs,
                    const std::map<std::string, std::vector<Grant>>& previous) {
  Allocation out;
  std::vector<double> free(workers.size());
  absl::flat_hash_map<absl::string_view, size_t> by_id;
  by_id.reserve(workers.size());
  bool by_id_order = true;  // as the scheduler passes them: its registry's order
  for (size_t w = 0; w < workers.size(); ++w) {
    free[w] = std::max(0.0, workers[w].cores);
    out.pool_cores += free[w];
    by_id.emplace(workers[w].id, w);
    if (w > 0 && !(workers[w - 1].id < workers[w].id)) by_id_order = false;
  }
  const std::vector<double> share = RankShares(out.pool_cores, jobs, &out.job_share);

  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (share[a] != share[b]) return share[a] > share[b];
    return jobs[a].id < jobs[b].id;
  });
  std::vector<double> need(jobs.size());
  std::vector<std::vector<std::pair<size_t, double>>> granted(jobs.size());  // (worker, cores)
  for (size_t j : order) {
    need[j] = share[j];
    if (share[j] > 0) out.share[jobs[j].id] = share[j];
  }
  auto give = [&](size_t j, size_t w, double cores) {
    cores = std::min({cores, need[j], free[w]});
    if (cores < kMinGrantCores) return;  // not worth a stream
    granted[j].emplace_back(w, cores);
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
  const bool priced = Priced(workers);
  FreeLists(workers, free, priced, &all, &local_lists);
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
  if (priced) MoveToCheaperCores(workers, jobs, order, all, free, granted);
  AddGrants(workers, jobs, order, granted, by_id_order, &out);
  return out;
}

}  // namespace prepflow::scheduler
