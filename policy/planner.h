// The offload planner: where each sample's stages should run.
//
// Glossary
//   stage i        one step of the pipeline, i = 0 .. n-1.
//   cut k          stages [0, k) run on workers, [k, n) here; k = 0 is the
//                  local-only path, k = n runs everything remotely.
//   c_i, r_i       CPU-seconds per sample of stage i here (c) and on a worker (r).
//   b_k            bytes per sample crossing the network at cut k (the value
//                  after stage k-1; b_0 = 0: nothing crosses).
//   L, R           cores this trainer may spend on preprocessing; remote cores
//                  available to it.
//   B              ingest bandwidth, bytes/s.   D  demand, samples/s.
//   t_l, t_r       transport CPU-seconds per byte: receiving here (t_l) and
//                  sending on a worker (t_r).
//   K, h, E        reuse: stages [0, K) of a sample run once per load, a load
//                  is answered by a cache with probability h, and yields E
//                  echoed copies; s bytes are read from storage per miss.
//   S_l, S_r       storage read bandwidth of this trainer and of the workers.
//   S              storage read bandwidth of both together: one store whose
//                  own capacity (its egress, say) both sides share.
//   c_j, l_j       a worker whose own link binds: its cores and its link's
//                  bytes/s (worker_links; its cores are counted in R too).
//
// The model. Choose rates y_k >= 0 (samples/s taking path k) to
//
//   maximise   T = Σ_k y_k
//   subject to Σ_k y_k · (Σ_{i>=k} c_i + t_l·b_k) <= L   (local CPU)
//              Σ_k y_k · (Σ_{i<k}  r_i + t_r·b_k) <= R   (remote CPU)
//              Σ_k y_k · b_k          <= B       (network)
//              Σ_k y_k                <= D       (demand)
//              y_0 · s·(1-h)/E        <= S_l     (storage, here)
//              Σ_{k>0} y_k · s·(1-h)/E <= S_r    (storage, workers)
//              Σ_k y_k · s·(1-h)/E     <= S      (storage, shared)
//
// where, on the paths that reuse (k = 0, where the trainer's cache and echo
// store serve, and k >= K, where the workers' do), the stages before K cost
// (1-h)/E of themselves per delivered sample; a cut between 0 and K reuses
// nothing (the value at K is made on both sides).
//
// S binds only where both sides read (0 < y_0 < T): a placement whose reads
// are all on one side is held by that side's own limit (S_l or S_r, what it
// was seen reading alone), not by what the two got when they read at once.
// So the plan is the best of three programmes: the one above, all local
// without S, and every sample on workers (y_0 = 0) without S.
//
// Workers whose own link binds (one far away, or behind a slow port) are
// not one pool's cores: a worker takes the same mix of paths as the rest
// (items go to whichever worker has a credit), so with ρ the bytes per
// remote CPU-second of the plan's remote paths, worker j uses at most
// min(c_j, l_j / ρ) of its cores. R is cut to that for each such worker,
// at the ρ of the plan being made: a plan is made at a guess of ρ (first
// the workers' full cores) and made again at its own ρ until the two agree
// (WithLinks in planner.cc). ThroughputOf applies the same cut at the
// split's own ρ.
//
// (c_i includes, on every path, the trainer's fixed per-sample work: batch
// ops), and, among plans reaching the best T, use the fewest remote cores, then the
// fewest network bytes. It is a linear programme, so an optimum (lexicographic too) lies at a
// vertex with at most as many paths in use as constraints bind;
// the planner enumerates those vertices and so solves it exactly, in
// microseconds for pipelines of a dozen stages.
//
// Thread-safety: Plan() is a pure function.
#ifndef PREPFLOW_POLICY_PLANNER_H_
#define PREPFLOW_POLICY_PLANNER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prepflow::policy {

struct PlanInput {
  std::vector<double> local_cost;      // c_i, CPU-s per sample, size n
  std::vector<double> remote_cost;     // r_i, size n (empty: same as local_cost)
  std::vector<double> boundary_bytes;  // b_k for k = 1..n, size n (b_0 = 0)
  double local_cores = 1;              // L
  double remote_cores = 0;             // R
  double bandwidth = 1e300;            // B, bytes/s (default: unlimited)
  double demand = 1e300;               // D, samples/s (default: unlimited)
  double cores_per_worker = 1;         // to turn remote cores into workers
  double local_cost_per_byte = 0;      // t_l, CPU-s per byte received here
  double remote_cost_per_byte = 0;     // t_r, CPU-s per byte a worker sends
  // CPU-s per sample spent here on every path, whatever the cut: batch ops
  // (MixUp/CutMix) on the assembled batch, a Python tail.
  double fixed_local_cost = 0;
  // The last cut workers can take: stages from max_cut on are local-only (a
  // custom op a worker lacks, a Python tail). -1: any cut.
  int max_cut = -1;
  std::string max_cut_why;  // for the explanation
  // The first cut a sample may take: 0, any (all local included); 1 or more,
  // every sample runs stages [0, min_cut) on workers.
  int min_cut = 0;
  // Reuse (caches, echoing): the boundary K a load reaches, the share h of
  // loads a cache answers (0 to 1), the copies E per load (>= 1), the bytes
  // s a miss reads from storage, and the storage bandwidths S_l, S_r.
  int reuse_at = 0;
  double cache_hit = 0;
  double echo = 1;
  double read_bytes = 0;
  double local_storage_bandwidth = 1e300;
  double remote_storage_bandwidth = 1e300;
  double storage_bandwidth = 1e300;  // S: both sides' reads together
  // Workers whose own link binds (c_j, l_j): see "Workers whose own link
  // binds" above. Their cores are part of remote_cores.
  struct WorkerLink {
    double cores = 0;      // c_j
    double bandwidth = 0;  // l_j, bytes/s
  };
  std::vector<WorkerLink> worker_links;
};

enum class Binding {
  kLocalCpu,
  kRemoteCpu,
  kNetwork,
  kDemand,
  kLocalStorage,
  kRemoteStorage,
  kSharedStorage,
  kWorkerLinks,  // remote CPU binds, cut to what link-bound workers' links carry
};
const char* BindingName(Binding b);

// The input in one line, for the log: each stage's CPU here and on workers
// (µs per sample) and output size, the terms outside the stages, the
// capacities and limits that are set.
std::string DescribeInput(const PlanInput& input);

struct Plan {
  // rate[k]: samples/s taking cut k, k = 0..n.
  std::vector<double> rate;
  double throughput = 0;       // Σ rate
  double remote_fraction = 0;  // share of samples with any stage remote
  double local_cores_used = 0;
  double remote_cores_used = 0;  // what to ask the scheduler for
  int workers = 0;               // ceil(remote_cores_used / cores_per_worker)
  double network_bytes_per_s = 0;
  std::vector<Binding> binding;  // constraints tight at the optimum
  std::string explanation;       // one line, for logs and `prepflow plan`
};

// Errors: InvalidArgument naming the bad input (sizes that disagree, negative
// or non-finite costs, non-positive capacities).
absl::StatusOr<Plan> MakePlan(const PlanInput& input);

// The input for placements whose reads are all on one side (`here`: all
// local; else every sample on workers), which S does not bind; nullopt where
// the input allows none (min_cut > 0 for here, max_cut 0 for workers).
std::optional<PlanInput> OneSided(const PlanInput& input, bool here);

// The throughput a fixed split reaches under `input`: `fractions[k]` is the
// share of samples taking cut k (k = 0..n, summing to 1), and the rate is
// raised until the first constraint binds. This is how a running plan is
// re-scored when measurements change, so that a new plan replaces it only when
// it is really better; S counts only where both sides read. Errors:
// InvalidArgument as MakePlan, or fractions of the wrong size, negative, or
// not summing to 1.
absl::StatusOr<double> ThroughputOf(const PlanInput& input, const std::vector<double>& fractions);

// `--echo auto`: the smallest echo factor in [1, max_echo] whose plan meets
// the demand (input.demand; the input's own echo is ignored). When none does
// (or the demand is unlimited), the smallest whose throughput is within 2% of
// the best factor's: more copies than that only repeat data, since something
// other than the loads (storage, the stages before the echo boundary) binds.
// Sets *plan to that factor's plan. Errors as MakePlan, and InvalidArgument
// for max_echo < 1.
absl::StatusOr<int> ChooseEcho(const PlanInput& input, int max_echo, Plan* plan);

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_PLANNER_H_
