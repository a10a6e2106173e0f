// Sharing the worker pool's cores among jobs: weighted max-min fairness,
// then placement on workers preferring locality and keeping earlier grants.
//
// Fair share (water-filling). With C cores in the pool and jobs j wanting
// d_j cores with weight w_j, every job gets s_j = min(d_j, λ·w_j), where the
// level λ is the largest with Σ_j s_j <= C. No job gets more than it wants;
// a job that gets less than it wants cannot gain without taking from a job
// whose share per weight is no larger (the max-min property).
//
// Training jobs with ranks. The entries are ranks; those naming the same
// `job` are one training job: it wants what its ranks want together, weighs
// what its heaviest rank does (its ranks should agree), and its share is
// split among its ranks max-min by what each wants: a rank wanting less
// than an equal part gets its want, the rest split equally (ranks run in
// step: the slowest sets the job's pace, and a rank whose want is inflated
// cannot starve the others). So an 8-rank job gets what a 1-rank job of the
// same weight and want gets, not 8 times it.
//
// Placement. Each job's share is then cut into grants on workers, in three
// passes over the jobs (largest share first, ties by id, so the result is a
// pure function of the input):
//   1. keep its previous grants, as far as the new share and the worker's
//      free cores allow (running streams stay where they are);
//   2. fill from workers whose locality label equals the job's;
//   3. fill from any worker with free cores.
// Passes 2 and 3 take the cheapest workers first (PoolWorker::cost, e.g.
// spot before on-demand; a reclaimed class's after all others), ties in the
// workers' order; then
//   4. where prices differ, a grant moves to free cores that cost less
//      (keeping the job's locality where it has it): a job granted dear
//      cores before cheap ones joined does not keep them, nor one on a
//      class being reclaimed where other cores are free.
// Each pass walks per-label lists of workers with free cores, so a rebalance
// costs O(workers + jobs + grants) after an O(J log J) sort.
//
// Thread-safety: Allocate() is a pure function.
#ifndef PREPFLOW_SCHEDULER_ALLOCATOR_H_
#define PREPFLOW_SCHEDULER_ALLOCATOR_H_

#include <map>
#include <string>
#include <vector>

namespace prepflow::scheduler {

struct PoolWorker {
  std::string id;
  double cores = 0;
  std::string locality;  // e.g. its zone or rack; "" for none
  double cost = 0;       // per core-hour: the cheapest cores are granted first
  // Its class is being reclaimed (spot capacity taken back): its cores come
  // after every other worker's, whatever they cost.
  bool reclaimed = false;
};

struct JobWant {
  std::string id;  // what grants are keyed by: a job, or one rank of one
  double weight = 1;
  double wanted_cores = 0;
  std::string locality;  // preferred workers' locality; "" for none
  std::string job = {};  // the training job its ranks share; "": `id` alone
};

struct Grant {
  std::string worker_id;
  double cores = 0;
  bool operator==(const Grant& o) const { return worker_id == o.worker_id && cores == o.cores; }
};

struct Allocation {
  std::map<std::string, double> share;               // job id -> cores
  std::map<std::string, double> job_share;           // training job -> its ranks' cores
  std::map<std::string, std::vector<Grant>> grants;  // job id -> grants, by worker id
  double pool_cores = 0;
  double granted_cores = 0;
  std::map<std::string, double> cost_per_hour;  // job id -> its grants' cores x cost
};

// Grants smaller than this many cores are not made (they would only add
// streams).
inline constexpr double kMinGrantCores = 0.05;

// `previous`: the last allocation's grants (job id -> grants), kept where
// possible. Jobs with a non-positive weight or want, and unknown workers in
// `previous`, are ignored.
Allocation Allocate(const std::vector<PoolWorker>& workers, const std::vector<JobWant>& jobs,
                    const std::map<std::string, std::vector<Grant>>& previous = {});

// The fair shares alone (cores per entry, in the order of `jobs`; `job`
// ignored: each entry is a job).
std::vector<double> FairShares(double pool_cores, const std::vector<JobWant>& jobs);

// The fair shares of entries that may be ranks of training jobs (`job`):
// each training job's share, split among its ranks max-min by their wants.
// `job_shares`, if given, gets each training job's share (those above 0).
std::vector<double> RankShares(double pool_cores, const std::vector<JobWant>& ranks,
                               std::map<std::string, double>* job_shares = nullptr);

}  // namespace prepflow::scheduler

#endif  // PREPFLOW_SCHEDULER_ALLOCATOR_H_
