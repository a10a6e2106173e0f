// The online re-planner: when to replace the running placement, and with what.
//
// The planner (planner.h) answers "where should samples run, given these
// costs and capacities". The re-planner feeds it while a job runs: it folds
// what the client measured into smoothed costs, infers which worker links
// bind, and decides when a new plan is worth switching to.
//
// Terms and rules, in short (symbols as planner.h: c_i, r_i, b_k, L, R, B,
// D, t_l, T); the details are at the functions named.
//
//   term        meaning
//   placement   the share of samples on each path (local; remote at cut
//               0..n), drawn per sample from its cumulative distribution
//   snapshot    the client's cumulative counters and capacities at one
//               instant; time comes in with it (no clock here)
//   window      increments between snapshots folded into one smoothed value
//               (SmoothedRatio; stage costs and sizes, and the bytes a read
//               takes: over about the last 1024 samples or reads; cache
//               hits: the last 512 lookups; links and storage: >= 1 s and
//               >= 4 events)
//   drift       the largest relative change of any planner input since the
//               last plan (RelativeChange); a term added to a sample's cost
//               (the trainer's own work, receiving or sending per byte)
//               counts as its change's part of that sample's whole cost; the
//               demand counts up to twice the running placement's throughput
//
//   rule        what it does
//   warm-up     until every stage is measured, R / (L + R) of samples (at
//               most probe_share, 1 by default) go remote at the cut
//               with the fewest bytes (WarmUp); the first plan also waits,
//               at most link_wait_seconds, for a link window (or a steady
//               probe) from every worker unless the bandwidth was given or
//               slow start (below) can pace it
//   worth it    a plan that offloads must predict min_gain over all local
//               (the model's error, delivery_trial.h's tolerance), judged
//               without the slow-start cap below; otherwise all local is
//               planned (WorthwhilePlan)
//   when        every period_seconds; sooner (after a quarter period) when
//               drift > `drift`, or when a term the last plan guessed is
//               measured (t_l, which the prior stood for; the CPU here no
//               counter saw, taken as none): a first plan comes before
//               either is; at the next snapshot after Invalidate()
//   hysteresis  switch only when T_new > (1 + gain) T_running on the same
//               inputs (ThroughputOf); not after Invalidate()
//   probe       a worker's link probe at stream open (WorkerTotals::probe):
//               a steady one is its link's limit until the first window
//               closes (that window's verdict replaces it), so the first
//               plan need not wait; any probe's rate counts as ingest seen
//               for slow start (below). Steady probes of two or more
//               workers that came no faster together than the fastest alone
//               (within a fifth) crossed one link into this machine: the
//               rate they came at together (TogetherRate) is B's limit
//               until the first ingest window closes
//   links       a worker's link binds in a window when its credits were out
//               and its CPU idle enough (LinkWatch::LinkBound; every answer on its
//               stream counts, a hedged copy's loser too); its rate is then
//               the link's, kept and probed as LinkWatch::FoldLinks says, and the plan
//               counts that worker's cores only as far as its link carries
//               (PlanInput::worker_links). The trainer's ingest likewise
//               over all workers (LinkWatch::FoldIngest). B: the ingest, capped by the
//               operator's bandwidth. Until every link binds (and untold), B is at most
//               link_growth x the fastest ingest seen (over a window, or
//               from a quarter second into one while credits were to
//               spare), so plans grow into an unknown link by steps (slow
//               start) instead of sending it all at once
//   storage     readers that waited for bytes half their time were bound by
//               storage: its rate is S_l here, S_r on the workers (FoldStorage);
//               once both bind at once, what they read together (S) limits
//               every placement where both read, and each side's limit is
//               what it read alone, or S where never seen alone
//               (store_share.h)
//   probe       once S is seen, a side never seen reading alone whose
//               placement alone (its storage taken as unlimited) would beat
//               the running one by the gain runs alone, the better-predicted
//               side first, until its rate alone is measured or
//               kStorageProbePeriods pass (store_share.h); no new plan
//               meanwhile, and the plan made after it replaces it whatever
//               the gain. Each side once a run
//   demand      D: samples delivered per second the trainer did not wait
//               (or the operator's figure)
//   trainer     fixed_local_cost: this machine's CPU per delivered sample
//               outside the stages (trainer work, a Python tail, batching,
//               gRPC), charged to every path
//   send cost   t_r: workers' CPU outside samples per byte sent
//               (ItemResult.transport_cpu_per_byte)
//   delivery    each plan is judged by the samples it delivers; one that
//               falls short of its prediction and of all local's is tried
//               against all local, and the better kept (delivery_trial.h;
//               no new plan while all local is tried or held)
//   reason      each placement carries why it was chosen (ReplanState::
//               reason: warm-up, the predicted gain, the cap, a trial)
//
// Thread-safety: thread-safe (one internal mutex); no I/O.
#ifndef PREPFLOW_POLICY_REPLANNER_H_
#define PREPFLOW_POLICY_REPLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "policy/delivery_trial.h"
#include "policy/link_watch.h"
#include "policy/measurements.h"
#include "policy/planner.h"
#include "policy/prediction_ledger.h"
#include "policy/snapshot.h"
#include "policy/store_share.h"

namespace prepflow::policy {

// Transport CPU per byte the planner charges before it has measured any: the
// client's receive cost on the wire benchmark (docs/benchmarks.md), and a
// worker's send cost, one copy into the kernel like iperf3's sender (0.12
// CPU-s/GB there), until workers report theirs (ItemResult's
// transport_cpu_per_byte: all their CPU outside the sample costs).
inline constexpr double kPriorReceiveCpuPerByte = 0.17e-9;
inline constexpr double kAssumedSendCpuPerByte = 0.12e-9;
// How long the first plan may wait for the links to be measured (default).
inline constexpr double kLinkWaitSeconds = 2;
// The warm-up's share of samples on workers, at most (default: no cap
// below R / (L + R); a 10% probe measured 0.9x in the CPU-bound scenario
// and no better behind a tight link, docs/benchmarks.md).
inline constexpr double kProbeShare = 1;
// What an offloading plan must predict over all local (default): the
// prediction error the delivery trial tolerates.
inline constexpr double kMinGain = 0.05;
// B's slow-start cap, as a multiple of the fastest ingest seen (default).
inline constexpr double kLinkGrowth = 4;
// The longest a storage probe runs, in periods.
inline constexpr double kStorageProbePeriods = 4;

// Where samples run: the share of each path, as a cumulative distribution
// over n + 2 outcomes (local, then remote cut 0..n).
class Placement {
 public:
  // A share `remote_fraction` of samples at `cut`, the rest local. Cut(n, 0,
  // 0) is all local; Cut(n, n, 1) runs every stage remotely.
  static Placement Cut(int num_stages, int cut, double remote_fraction);
  // From a plan's rates (planner.h: rate[k] for k = 0..n, 0 local).
  static Placement FromRates(const std::vector<double>& rate);

  // The path of a sample whose uniform draw is `u` in [0, 1): -1 to run it
  // all locally, else the remote cut.
  int Draw(double u) const;
  bool all_local() const { return cdf_[0] >= 1; }
  // The share of samples on workers (at any cut).
  double remote_share() const { return 1 - cdf_[0]; }
  // The share of each outcome: local, then remote cut 0..n.
  std::vector<double> Fractions() const;
  // The planner's view: share per path k = 0..n (0 local; cut 0, which plans
  // never use, counts as local).
  std::vector<double> PathShares() const;
  // The share of samples whose path differs between the two (total
  // variation); 1 where they have different numbers of stages.
  double Distance(const Placement& other) const;

 private:
  std::vector<double> cdf_;
};

// The warm-up placement (see the rules): min(probe_share, R / (L + R)) of
// samples at the cut with the fewest bytes; nullopt when there are no remote
// cores. `fixed_bytes[k]` for k = 1..n: the bytes of the value after stage
// k - 1 when its type fixes them, else < 0 (index 0 unused); the last one
// must be known. `cut` is set to the chosen cut.
std::optional<Placement> WarmUp(const std::vector<int64_t>& fixed_bytes, double local_cores,
                                double remote_cores, double probe_share, int* cut);

struct ReplanOptions {
  double period_seconds = 2;
  double drift = 0.25;
  double gain = 0.03;
  double demand = 0;     // D in samples/s; 0: measured
  double bandwidth = 0;  // a cap on B in bytes/s; 0: none
  // The first plan waits at most this long for the links (see the rules).
  double link_wait_seconds = kLinkWaitSeconds;
  // The warm-up's share on workers, at most; the gain an offloading plan
  // must predict over all local; B's cap as a multiple of the fastest
  // ingest seen while no link binds (0: no cap). See the rules.
  double probe_share = kProbeShare;
  double min_gain = kMinGain;
  double link_growth = kLinkGrowth;
  // t_l before any receive is measured, and t_r before workers report it.
  double prior_receive_cost_per_byte = kPriorReceiveCpuPerByte;
  double send_cost_per_byte = kAssumedSendCpuPerByte;
  // Judging plans by what they deliver (period_seconds is this one's).
  bool check_delivery = true;
  DeliveryTrialOptions delivery;
};

// What the re-planner holds now, for stats.
struct ReplanState {
  std::string explanation;  // of the plan in force ("" before the first)
  std::string reason;       // why the placement in force was chosen
  int64_t changes = 0;      // plans applied
  int64_t backoffs = 0;     // plans given up for all local (delivery)
  double throughput = 0;    // T the running placement reaches, samples/s
  // What the placement in force delivered since it settled, samples/s, once
  // it ran a period (before that, the one before it; 0: none yet), and the
  // time-weighted error of every placement's delivery
  // against its prediction over `prediction_seconds` (PredictionLedger).
  double delivered = 0;
  double prediction_error = 0;
  double prediction_seconds = 0;
  double ingest_limit = 0;            // B of the last plan input; 0: unlimited
  double receive_cost_per_byte = 0;   // t_l as measured; 0: not yet
  double unseen_cost_per_sample = 0;  // CPU-s here no counter saw, per sample
  double send_cost_per_byte = 0;      // t_r as the workers measured it; 0: not yet
  using Link = LinkEstimate;
  std::map<int, Link> links;  // by WorkerTotals::id
  // Bytes/s storage gave while it bound (S_l, S_r, as planned: once both
  // sides bound together, each side's alone rate or S); 0: never seen
  // binding.
  double storage_limit_here = 0;
  double storage_limit_workers = 0;
  // Bytes/s both sides read at together while storage bound both (S,
  // StoreShare); 0: not seen.
  double storage_limit_shared = 0;
};

class Replanner {
 public:
  Replanner(const ReplanOptions& options, const Placement& initial);

  // Starts the warm-up (see the rules): the placement to run until the
  // first plan, nullopt when there are no remote cores (WarmUp's arguments).
  std::optional<Placement> StartWarmUp(const std::vector<int64_t>& fixed_bytes, double local_cores,
                                       double remote_cores);
  // Folds `snapshot` in. Returns the new placement when it is time to re-plan
  // and the plan found beats the running one; nullopt otherwise (also while a
  // stage is still unmeasured). `notes` (may be null) gets lines worth
  // logging: a link found binding, a re-plan brought forward by drift, the
  // plan applied.
  std::optional<Placement> Update(const Snapshot& snapshot, std::vector<std::string>* notes);

  // The remote capacity changed: re-plan at the next Update().
  void Invalidate();
  // Cores the last plan's inputs would use with the pool to itself; nullopt
  // before the first plan input.
  std::optional<double> WantedRemoteCores() const;
  // `--echo auto`: the echo factor (1 to max_echo) ChooseEcho picks for the
  // latest measurements (the last Update's plan input, whether or not it
  // made a plan), the echo factor aside; nullopt before every stage is
  // measured. `why` (may be null) gets the plan it expects, one line.
  std::optional<int> EchoFactor(int max_echo, std::string* why) const;
  ReplanState State() const;
  // Whether storage was seen binding the workers' reads (State's
  // storage_limit_workers or storage_limit_shared set), without its copy.
  bool StorageBoundWorkers() const;
  // For the log at a run's end: the last placement's delivery against its
  // prediction, the error over the run (PredictionLedger::Summary), and the
  // inputs the prediction was last revised with.
  std::string LedgerSummary() const;

 private:
  // Update's decision, before the ledger is told what it came to.
  std::optional<Placement> Decide(const Snapshot& snapshot, std::vector<std::string>* notes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The planner's input from the smoothed measurements; nullopt while a
  // stage is unmeasured on both sides.
  std::optional<PlanInput> CurrentInput(const Snapshot& snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FoldStages(const Snapshot& snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The delivery trial's step; sets `*switched` where the placement changes.
  // True while it blocks planning.
  bool JudgeDelivery(const Snapshot& snapshot, std::vector<std::string>* notes, bool* switched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan for `in`, or all local's where offloading predicts under
  // min_gain over it (see the rules); `reason` says which and why.
  absl::StatusOr<Plan> WorthwhilePlan(const PlanInput& in, std::string* reason) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The storage probe's step (see the rules) on a snapshot where a plan is
  // `due`: true while one runs, or when one starts (then `*switched` is set).
  bool ProbeStorage(const PlanInput& in, int64_t now, bool due, std::vector<std::string>* notes,
                    bool* switched) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the last plan took as a guess (the prior receive cost, no CPU of
  // the trainer's own) and is measured now, for the log; "" when none.
  std::string MeasuredGuesses(const PlanInput& in) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The placement was switched outside a plan (a trial, a probe): scores it
  // on `in` and returns it.
  Placement Switched(const PlanInput& in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a new plan (placement, explanation and reason, the trial).
  void Apply(const Plan& plan, std::string reason, const PlanInput& in, int64_t now,
             std::vector<std::string>* notes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether every worker that has answered has had a link window close (or
  // the operator gave the bandwidth).
  bool LinksMeasured(const Snapshot& snapshot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Storage's window on one side (see the rules).
  struct StorageWindow {
    int64_t start_nanos = 0;
    double wait_seconds = 0, bytes = 0, reads = 0;  // the counters when it opened
    double limit = 0;
  };
  // Each side's storage limit as planned (S_l, S_r; 0: none): once both
  // sides bound together, what it read alone, or S.
  std::pair<double, double> StorageLimits() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Folds both sides' storage counters in (each side's window, and whether
  // they share one store), with a note for each limit found.
  void FoldStorageSides(const Snapshot& snapshot, std::vector<std::string>* notes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Folds one side's counters in; true when storage is first found binding.
  static bool FoldStorage(StorageWindow& w, int64_t now, double wait_seconds, double bytes,
                          double reads, double readers);

  const ReplanOptions options_;
  mutable absl::Mutex mu_;
  Placement placement_ ABSL_GUARDED_BY(mu_);
  std::vector<SmoothedRatio> local_cpu_ ABSL_GUARDED_BY(mu_), local_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<SmoothedRatio> remote_cpu_ ABSL_GUARDED_BY(mu_), remote_bytes_ ABSL_GUARDED_BY(mu_);
  SmoothedRatio read_cpu_ ABSL_GUARDED_BY(mu_){8};
  // Snapshot::trainer_work, per 64 samples (a batch's CPU is noisy: a window
  // counts for a fifth)
  SmoothedRatio trainer_cpu_ ABSL_GUARDED_BY(mu_){64, 0.2};
  SmoothedRatio receive_cost_ ABSL_GUARDED_BY(mu_){16e6};  // per 16 MB received
  SmoothedRatio send_cost_ ABSL_GUARDED_BY(mu_){16e6};     // per 16 MB the workers sent
  SmoothedRatio demand_ ABSL_GUARDED_BY(mu_){0.25};        // per 0.25 busy s
  // This process's CPU no counter saw, per delivered sample, from the first
  // snapshot's (unseen CPU, samples); windows of 256 samples, since the
  // process's CPU clock moves in coarser steps than the stages' thread clocks.
  SmoothedRatio unseen_cpu_ ABSL_GUARDED_BY(mu_){256};
  std::optional<std::pair<double, double>> unseen_base_ ABSL_GUARDED_BY(mu_);
  LinkWatch links_ ABSL_GUARDED_BY(mu_);
  StorageWindow storage_here_ ABSL_GUARDED_BY(mu_), storage_workers_ ABSL_GUARDED_BY(mu_);
  StoreShare store_share_ ABSL_GUARDED_BY(mu_);
  // Cache hits per lookup over about the last 512 lookups: a cache fills
  // over a run (each worker's holds what it ran), and the share since the
  // start lags it (echo's: 40% where the recent share was 65%).
  SmoothedRatio cache_hit_ ABSL_GUARDED_BY(mu_) = SmoothedRatio::OverLast(512, 32, 32);
  // s: bytes per read, both sides' reads together, over about the last 1024
  // (files differ by 100x: over windows of 8, the bytes a read takes moved
  // 26% between plans, and storage-bound predictions with them).
  SmoothedRatio read_bytes_ ABSL_GUARDED_BY(mu_) = SmoothedRatio::OverLast(1024, 32, 16);
  int64_t last_plan_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  bool resources_changed_ ABSL_GUARDED_BY(mu_) = false;  // Invalidate() since the last plan
  bool probe_ended_ ABSL_GUARDED_BY(mu_) = false;  // a storage probe ended since the last plan
  // The last plan guessed t_l (the prior) or the unseen CPU (none): see the
  // rules ("when").
  bool guessed_receive_ ABSL_GUARDED_BY(mu_) = false;
  bool guessed_own_ ABSL_GUARDED_BY(mu_) = false;
  int64_t first_nanos_ ABSL_GUARDED_BY(mu_) = 0;  // the first snapshot with every stage measured
  std::optional<PlanInput> input_ ABSL_GUARDED_BY(mu_);         // of the last plan
  std::optional<PlanInput> latest_input_ ABSL_GUARDED_BY(mu_);  // of the last Update
  double throughput_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string explanation_ ABSL_GUARDED_BY(mu_);
  std::string reason_ ABSL_GUARDED_BY(mu_);
  // B's slow-start cap in the last input, bytes/s; 0: none (see the rules).
  double network_cap_ ABSL_GUARDED_BY(mu_) = 0;
  DeliveryTrial trial_ ABSL_GUARDED_BY(mu_);
  // The placement whose delivery the trial's window started with: later
  // plans within kRevision of it keep the window.
  Placement watched_ ABSL_GUARDED_BY(mu_);
  // What each placement delivered against its prediction; a span is one
  // placement, revisions within kRevision of it included.
  PredictionLedger ledger_ ABSL_GUARDED_BY(mu_);
  Placement ledger_placement_ ABSL_GUARDED_BY(mu_);
  // The plan a trial of all local replaced, to restore.
  Placement tried_ ABSL_GUARDED_BY(mu_);
  std::string tried_explanation_ ABSL_GUARDED_BY(mu_);
  std::string tried_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_REPLANNER_H_
