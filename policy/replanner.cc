#include "policy/replanner.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace prepflow::policy {
namespace {

// What the re-planner asks for when it scores the pool as its own.
constexpr double kUnlimitedCores = 1e6;
// A new plan whose placement differs from the one the delivery trial's window
// started with by at most this share of samples revises it: the window goes
// on (small steps cannot add up to a new plan judged as the old).
constexpr double kRevision = 0.05;

// The largest change between two plan inputs, and what it was.
struct DriftMeter {
  std::pair<double, std::string> worst = {0, ""};
  void Note(double change, const std::string& what) {
    if (change > worst.first) worst = {change, what};
  }
  // Relative to the larger; a limit appearing or going is a whole change.
  void Relative(double x, double y, const std::string& what) {
    const bool x_limited = x < 1e299, y_limited = y < 1e299;
    Note(x_limited != y_limited ? 1 : x_limited ? RelativeChange(x, y) : 0, what);
  }
  // A term of a larger whole: by its change's part of the whole.
  void Part(double x, double y, double whole, const std::string& what) {
    Note(whole > 0 ? std::min(1.0, std::abs(x - y) / whole) : 0, what);
  }
};

// `remote_bytes`: what a remote sample brings under the running placement;
// `throughput`: what that placement reaches (0: not known).
std::pair<double, std::string> Drift(const PlanInput& a, const PlanInput& b, double remote_bytes,
                                     double throughput) {
  DriftMeter m;
  double la = 0, lb = 0, ra = 0, rb = 0;
  for (size_t i = 0; i < a.local_cost.size() && i < b.local_cost.size(); ++i) {
    la += a.local_cost[i];
    lb += b.local_cost[i];
    ra += a.remote_cost[i];
    rb += b.remote_cost[i];
    m.Relative(a.boundary_bytes[i], b.boundary_bytes[i],
               absl::StrCat("stage ", i, "'s output size"));
  }
  m.Relative(la, lb, "the local cost per sample");
  m.Relative(ra, rb, "the workers' cost per sample");
  m.Relative(a.local_cores, b.local_cores, "the local cores");
  m.Relative(a.remote_cores, b.remote_cores, "the remote cores");
  m.Relative(a.bandwidth, b.bandwidth, "the ingest bandwidth");
  // A trainer that takes far more than any placement gives limits none: its
  // demand's swings (a consumer that only counts samples swings by half)
  // are no reason to re-plan until it comes near what is delivered.
  const double cap = throughput > 0 ? 2 * throughput : 1e300;
  m.Relative(std::min(a.demand, cap), std::min(b.demand, cap), "the demand");
  // Terms added to a sample's cost here (the trainer's own work, receiving)
  // or on a worker (sending) move by their part of that sample's whole
  // cost: the noise of a small term is no reason to re-plan.
  const double t_l = std::max(a.local_cost_per_byte, b.local_cost_per_byte);
  const double t_r = std::max(a.remote_cost_per_byte, b.remote_cost_per_byte);
  const double here =
      std::max(la + a.fixed_local_cost, lb + b.fixed_local_cost) + remote_bytes * t_l;
  const double there = std::max(ra, rb) + remote_bytes * t_r;
  m.Part(remote_bytes * a.local_cost_per_byte, remote_bytes * b.local_cost_per_byte, here,
         "the receive cost per byte");
  m.Part(a.fixed_local_cost, b.fixed_local_cost, here, "the trainer's own cost per sample");
  m.Part(remote_bytes * a.remote_cost_per_byte, remote_bytes * b.remote_cost_per_byte, there,
         "the workers' send cost per byte");
  // The bytes a read takes only matter where storage is limited.
  const bool storage = std::min({a.local_storage_bandwidth, a.remote_storage_bandwidth,
                                 a.storage_bandwidth, b.local_storage_bandwidth,
                                 b.remote_storage_bandwidth, b.storage_bandwidth}) < 1e299;
  if (storage) m.Relative(a.read_bytes, b.read_bytes, "the bytes a read takes");
  m.Relative(a.local_storage_bandwidth, b.local_storage_bandwidth, "storage's bandwidth here");
  m.Relative(a.remote_storage_bandwidth, b.remote_storage_bandwidth,
             "storage's bandwidth to workers");
  m.Relative(a.storage_bandwidth, b.storage_bandwidth, "storage's bandwidth to both together");
  // A link found binding (or no longer counted) is a whole change; else the
  // links' sum moved.
  double links_a = 0, links_b = 0;
  for (const PlanInput::WorkerLink& w : a.worker_links) links_a += w.bandwidth;
  for (const PlanInput::WorkerLink& w : b.worker_links) links_b += w.bandwidth;
  if (a.worker_links.size() != b.worker_links.size()) {
    m.Note(1, "the workers' links");
  } else if (!a.worker_links.empty()) {
    m.Relative(links_a, links_b, "the workers' links");
  }
  return m.worst;
}

// What a remote sample of `placement` brings (bytes at its cuts, weighted
// by their shares); all local: the fewest bytes any cut would.
double RemoteSampleBytes(const Placement& placement, const PlanInput& in) {
  const std::vector<double> shares = placement.PathShares();
  double bytes = 0, remote = 0, fewest = 1e300;
  for (size_t k = 1; k < shares.size() && k <= in.boundary_bytes.size(); ++k) {
    bytes += shares[k] * in.boundary_bytes[k - 1];
    remote += shares[k];
    fewest = std::min(fewest, in.boundary_bytes[k - 1]);
  }
  if (remote > 0) return bytes / remote;
  return fewest < 1e300 ? fewest : 0;
}

void Fold(std::vector<SmoothedRatio>& cpu, std::vector<SmoothedRatio>& bytes,
          const std::vector<StageTotals>& totals) {
  if (cpu.empty()) {
    // Over about the last 1024 samples, a first estimate after 16: a
    // sample's cost follows its size (photographs of 3 KB and 350 KB), so a
    // mean over fewer swings by which samples it happened to hold (windows
    // of 64 weighed 30% each: the costs planned with moved by 10-15% from
    // one period to the next, and each plan's split with them). The first
    // estimate stays early: a slow pipeline's 64 samples take seconds.
    cpu.assign(totals.size(), SmoothedRatio::OverLast(1024, 32, 16));
    bytes.assign(totals.size(), SmoothedRatio::OverLast(1024, 32, 16));
  }
  for (size_t i = 0; i < totals.size() && i < cpu.size(); ++i) {
    cpu[i].Update(totals[i].cpu_seconds, totals[i].samples);
    bytes[i].Update(totals[i].output_bytes, totals[i].samples);
  }
}

}  // namespace

Placement Placement::Cut(int num_stages, int cut, double remote_fraction) {
  Placement p;
  p.cdf_.assign(static_cast<size_t>(num_stages) + 2, 1.0);
  for (int j = 0; j <= cut && j <= num_stages; ++j) p.cdf_[j] = 1 - remote_fraction;
  return p;
}

Placement Placement::FromRates(const std::vector<double>& rate) {
  double total = 0;
  for (double r : rate) total += r;
  Placement p;
  p.cdf_.assign(rate.size() + 1, 1.0);
  if (total <= 0) return p;
  // Outcomes: local (path 0), remote cut 0 (never planned), then cuts 1..n.
  double sum = rate[0];
  p.cdf_[0] = p.cdf_[1] = sum / total;
  for (size_t k = 1; k < rate.size(); ++k) p.cdf_[k + 1] = (sum += rate[k]) / total;
  p.cdf_.back() = 1;
  return p;
}

int Placement::Draw(double u) const {
  const int outcomes = static_cast<int>(cdf_.size());
  for (int j = 0; j < outcomes - 1; ++j) {
    if (u < cdf_[j]) return j - 1;
  }
  return outcomes - 2;
}

std::vector<double> Placement::Fractions() const {
  std::vector<double> out;
  double prev = 0;
  for (double c : cdf_) {
    out.push_back(c - prev);
    prev = c;
  }
  return out;
}

double Placement::Distance(const Placement& other) const {
  if (cdf_.size() != other.cdf_.size()) return 1;
  const std::vector<double> a = Fractions(), b = other.Fractions();
  double sum = 0;
  for (size_t k = 0; k < a.size(); ++k) sum += std::abs(a[k] - b[k]);
  return sum / 2;
}

std::vector<double> Placement::PathShares() const {
  std::vector<double> shares(cdf_.size() - 1);
  shares[0] = cdf_[1];
  for (size_t k = 1; k < shares.size(); ++k) shares[k] = cdf_[k + 1] - cdf_[k];
  return shares;
}

std::optional<Placement> WarmUp(const std::vector<int64_t>& fixed_bytes, double local_cores,
                                double remote_cores, double probe_share, int* cut) {
  if (remote_cores <= 0 || fixed_bytes.size() < 2 || probe_share <= 0) return std::nullopt;
  const int n = static_cast<int>(fixed_bytes.size()) - 1;
  int best = n;
  for (int k = n; k >= 1; --k) {
    if (fixed_bytes[k] >= 0 && fixed_bytes[k] < fixed_bytes[best]) best = k;
  }
  if (cut != nullptr) *cut = best;
  const double share = std::min(probe_share, remote_cores / (local_cores + remote_cores));
  return Placement::Cut(n, best, share);
}

namespace {

DeliveryTrialOptions TrialOptions(const ReplanOptions& o) {
  DeliveryTrialOptions t = o.delivery;
  t.period_seconds = o.period_seconds;
  t.gain = o.gain;
  return t;
}

Placement AllLocal(const Placement& like) {
  return Placement::Cut(static_cast<int>(like.Fractions().size()) - 2, 0, 0);
}

}  // namespace

Replanner::Replanner(const ReplanOptions& options, const Placement& initial)
    : options_(options),
      placement_(initial),
      trial_(TrialOptions(options)),
      watched_(initial),
      ledger_(options.period_seconds),
      ledger_placement_(initial),
      tried_(initial) {}

std::optional<Placement> Replanner::StartWarmUp(const std::vector<int64_t>& fixed_bytes,
                                                double local_cores, double remote_cores) {
  int cut = 0;
  std::optional<Placement> warm =
      WarmUp(fixed_bytes, local_cores, remote_cores, options_.probe_share, &cut);
  if (!warm) return std::nullopt;
  absl::MutexLock lock(&mu_);
  placement_ = *warm;
  reason_ = absl::StrFormat(
      "warm-up: %.0f%% of samples go to the workers at cut %d (%.2f remote cores, %.2f here) "
      "until every stage is measured",
      100 * (1 - warm->Fractions()[0]), cut, remote_cores, local_cores);
  return warm;
}

bool Replanner::JudgeDelivery(const Snapshot& s, std::vector<std::string>* notes, bool* switched) {
  if (!options_.check_delivery) return false;
  if (resources_changed_) {
    trial_.Abort();
    return false;
  }
  std::string why;
  switch (trial_.Observe(s.now_nanos, s.delivered_samples, s.busy_seconds, &why)) {
    case DeliveryTrial::Verdict::kTryLocal:
      tried_ = placement_;
      tried_explanation_ = explanation_;
      tried_reason_ = reason_;
      placement_ = AllLocal(placement_);
      explanation_ = why;
      reason_ = absl::StrCat("delivery trial: ", why);
      *switched = true;
      break;
    case DeliveryTrial::Verdict::kKeepLocal:
      explanation_ = why;
      reason_ = absl::StrCat("delivery trial: ", why);
      break;
    case DeliveryTrial::Verdict::kBackToPlan:
      placement_ = tried_;
      explanation_ = absl::StrCat(tried_explanation_, " (", why, ")");
      reason_ = absl::StrCat(tried_reason_, "; kept after a delivery trial");
      *switched = true;
      break;
    case DeliveryTrial::Verdict::kNone:
      break;
  }
  if (!why.empty() && notes != nullptr) notes->push_back(why);
  return trial_.Blocks(s.now_nanos);
}

absl::StatusOr<Plan> Replanner::WorthwhilePlan(const PlanInput& in, std::string* reason) const {
  absl::StatusOr<Plan> plan = MakePlan(in);
  if (!plan.ok() || plan->remote_fraction <= 0) {
    *reason = "offloading predicts no gain";
    return plan;
  }
  PlanInput here = in;
  here.max_cut = 0;
  absl::StatusOr<Plan> local = MakePlan(here);
  if (!local.ok() || local->throughput <= 0) return plan;
  // The gain is judged without the slow-start cap, which paces growth into
  // an unknown link rather than models it: judged under it, a plan capped
  // to what a small warm-up share passed could stay local, and the cap never grow.
  double best = plan->throughput;
  std::string capped;
  if (network_cap_ > 0) {
    PlanInput open = in;
    open.bandwidth = 1e300;
    const absl::StatusOr<Plan> uncapped = MakePlan(open);
    if (uncapped.ok()) best = std::max(best, uncapped->throughput);
    if (best > plan->throughput * (1 + 1e-9)) {
      capped = absl::StrFormat(
          "; %+.0f%% within the network's cap, %gx the %.1f MB/s seen until a link binds",
          100 * (plan->throughput / local->throughput - 1), options_.link_growth,
          network_cap_ / options_.link_growth / 1e6);
    }
  }
  const double gain = best / local->throughput - 1;
  if (gain >= options_.min_gain) {
    *reason = absl::StrFormat("offloading predicts %+.0f%% over all local%s", 100 * gain, capped);
    return plan;
  }
  *reason = absl::StrFormat("all local: offloading predicts %+.1f%%, under the %.0f%% it must gain",
                            100 * gain, 100 * options_.min_gain);
  here.max_cut_why = absl::StrFormat("offloading gains under %.0f%%", 100 * options_.min_gain);
  return MakePlan(here);
}

void Replanner::Apply(const Plan& plan, std::string reason, const PlanInput& in, int64_t now,
                      std::vector<std::string>* notes) {
  throughput_ = plan.throughput;
  placement_ = Placement::FromRates(plan.rate);
  explanation_ = plan.explanation;
  reason_ = std::move(reason);
  ++changes_;
  if (notes != nullptr) {
    notes->push_back(absl::StrCat("plan ", changes_, ": ", explanation_, " (", reason_, ")"));
    notes->push_back(absl::StrCat("plan ", changes_, "'s inputs: ", DescribeInput(in)));
  }
  if (placement_.all_local()) return;
  const Placement local = AllLocal(placement_);
  const absl::StatusOr<double> local_rate = ThroughputOf(in, local.PathShares());
  const bool kept = trial_.PlanStarted(now, plan.throughput, local_rate.ok() ? *local_rate : 0,
                                       /*revises=*/placement_.Distance(watched_) <= kRevision);
  if (!kept) watched_ = placement_;
}

void Replanner::Invalidate() {
  absl::MutexLock lock(&mu_);
  last_plan_nanos_ = 0;
  resources_changed_ = true;
}

void Replanner::FoldStages(const Snapshot& s) {
  Fold(local_cpu_, local_bytes_, s.local_stages);
  Fold(remote_cpu_, remote_bytes_, s.remote_stages);
  read_cpu_.Update(s.read.cpu_seconds, s.read.samples);
  const double remote_reads = s.remote_stages.empty() ? 0 : s.remote_stages[0].samples;
  read_bytes_.Update(s.read.output_bytes + s.remote_read_bytes, s.read.samples + remote_reads);
  trainer_cpu_.Update(s.trainer_work.cpu_seconds, s.trainer_work.samples);
  receive_cost_.Update(s.receive_cpu_seconds, s.received_bytes);
  send_cost_.Update(s.worker_transport.cpu_seconds, s.worker_transport.bytes);
  // What no counter saw, counted from the first snapshot (the process's CPU
  // before it is set-up: opening the dataset, building the pipeline).
  double seen = s.read.cpu_seconds + s.receive_cpu_seconds + s.trainer_work.cpu_seconds;
  for (const StageTotals& t : s.local_stages) seen += t.cpu_seconds;
  const double unseen = s.process_cpu_nanos * 1e-9 - seen;
  if (!unseen_base_) unseen_base_ = {unseen, s.delivered_samples};
  unseen_cpu_.Update(unseen - unseen_base_->first, s.delivered_samples - unseen_base_->second);
  demand_.Update(s.delivered_samples, s.busy_seconds);
  if (s.cache_hits >= 0 && s.cache_misses >= 0) {
    cache_hit_.Update(s.cache_hits, s.cache_hits + s.cache_misses);
  }
}

bool Replanner::LinksMeasured(const Snapshot& s) const {
  return options_.bandwidth > 0 || links_.Measured(s);  // told, or watched
}

bool Replanner::FoldStorage(StorageWindow& w, int64_t now, double wait_seconds, double bytes,
                            double reads, double readers) {
  if (w.start_nanos == 0) {
    w = StorageWindow{now, wait_seconds, bytes, reads, w.limit};
    return false;
  }
  const double seconds = (now - w.start_nanos) * 1e-9;
  if (seconds < 1 || reads - w.reads < 4) return false;
  const double rate = (bytes - w.bytes) / seconds;
  const bool bound = StorageBound(wait_seconds - w.wait_seconds, seconds, readers);
  const bool first = bound && w.limit == 0;
  if (bound) {
    w.limit = MeanWithLast(w.limit, rate);
  } else if (w.limit > 0 && rate > w.limit) {
    w.limit = rate;
  }
  w = StorageWindow{now, wait_seconds, bytes, reads, w.limit};
  return first;
}

void Replanner::FoldStorageSides(const Snapshot& snapshot, std::vector<std::string>* notes) {
  double worker_cores = 0;
  for (const WorkerTotals& w : snapshot.workers) worker_cores += w.usable ? w.cores : 0;
  const StageTotals none;
  const StageTotals& remote_read =
      snapshot.remote_stages.empty() ? none : snapshot.remote_stages[0];
  if (FoldStorage(storage_here_, snapshot.now_nanos, snapshot.read_wait_seconds,
                  snapshot.read.output_bytes, snapshot.read.samples, snapshot.read_threads) &&
      notes != nullptr) {
    notes->push_back(
        absl::StrFormat("storage binds the reads here at %.1f MB/s", storage_here_.limit / 1e6));
  }
  if (FoldStorage(storage_workers_, snapshot.now_nanos, snapshot.remote_read_wait_seconds,
                  snapshot.remote_read_bytes, remote_read.samples, worker_cores) &&
      notes != nullptr) {
    notes->push_back(absl::StrFormat("storage binds the workers' reads at %.1f MB/s",
                                     storage_workers_.limit / 1e6));
  }
  const std::string shared =
      store_share_.Observe(snapshot.now_nanos,
                           {snapshot.read_wait_seconds, snapshot.read.output_bytes,
                            snapshot.read.samples, snapshot.read_threads},
                           {snapshot.remote_read_wait_seconds, snapshot.remote_read_bytes,
                            remote_read.samples, worker_cores});
  if (!shared.empty() && notes != nullptr) notes->push_back(shared);
}

std::optional<PlanInput> Replanner::CurrentInput(const Snapshot& s) {
  PlanInput in;
  for (size_t i = 0; i < local_cpu_.size() && i + 1 < remote_cpu_.size(); ++i) {
    const SmoothedRatio& lc = local_cpu_[i];
    const SmoothedRatio& rc = remote_cpu_[i + 1];
    if (!lc.known() && !rc.known()) return std::nullopt;  // nothing known about this stage yet
    const double local = lc.value_or(rc.value());
    in.local_cost.push_back(local);
    in.remote_cost.push_back(rc.value_or(local));
    in.boundary_bytes.push_back(local_bytes_[i].known() ? local_bytes_[i].value()
                                                        : remote_bytes_[i + 1].value());
  }
  if (in.local_cost.empty()) return std::nullopt;
  // Whoever runs stage 0 reads the file.
  const double read_local = read_cpu_.value_or(0);
  in.local_cost[0] += read_local;
  in.remote_cost[0] += remote_cpu_[0].value_or(read_local);
  in.local_cost_per_byte = receive_cost_.value_or(options_.prior_receive_cost_per_byte);
  in.fixed_local_cost = trainer_cpu_.value_or(0) + std::max(0.0, unseen_cpu_.value_or(0));
  in.remote_cost_per_byte = send_cost_.value_or(options_.send_cost_per_byte);
  in.local_cores = s.local_cores;
  // Reuse: measured stage costs are per run (a cached or echoed value runs
  // nothing before its boundary), and the planner amortises them.
  if (s.reuse_at >= 0 && s.reuse_at <= static_cast<int>(in.local_cost.size())) {
    in.reuse_at = s.reuse_at;
  }
  if (cache_hit_.known()) in.cache_hit = std::clamp(cache_hit_.value(), 0.0, 1.0);
  if (s.echo >= 1 && std::isfinite(s.echo)) in.echo = s.echo;
  if (s.max_cut >= 0 && s.max_cut < static_cast<int>(in.local_cost.size())) {
    in.max_cut = s.max_cut;
    in.max_cut_why = s.max_cut_why;
  }
  double remote_cores = 0;
  int usable = 0;
  bool every_link_binds = true;
  for (const WorkerTotals& w : s.workers) {
    if (!w.usable) continue;
    remote_cores += w.cores;
    ++usable;
    const double limit = links_.limit(w.id);
    // A worker whose link binds takes what its link carries (planner.h).
    if (limit > 0) in.worker_links.push_back({w.cores, limit});
    every_link_binds = every_link_binds && limit > 0;
  }
  in.remote_cores = remote_cores;
  // Storage: what a read takes, and what storage gave where it bound.
  in.read_bytes = read_bytes_.value_or(0);
  const auto [here_limit, workers_limit] = StorageLimits();
  if (here_limit > 0) in.local_storage_bandwidth = here_limit;
  if (workers_limit > 0) in.remote_storage_bandwidth = workers_limit;
  if (store_share_.together() > 0) in.storage_bandwidth = store_share_.together();
  // (Workers that offer no cores leave the default: MakePlan refuses 0.)
  in.cores_per_worker = usable > 0 && remote_cores > 0 ? remote_cores / usable : 1;
  if (usable > 0 && links_.ingest_limit() > 0) {
    in.bandwidth = std::min(in.bandwidth, links_.ingest_limit());
  }
  if (options_.bandwidth > 0) in.bandwidth = std::min(in.bandwidth, options_.bandwidth);
  // Slow start (see the rules): no link known, so none is assumed faster than
  // link_growth x what has been seen to pass.
  network_cap_ = 0;
  if (usable > 0 && !every_link_binds && in.bandwidth >= 1e299 && links_.ingest_peak() > 0 &&
      options_.link_growth > 0) {
    network_cap_ = in.bandwidth = options_.link_growth * links_.ingest_peak();
  }
  if (options_.demand > 0) {
    in.demand = options_.demand;
  } else if (demand_.known() && demand_.value() > 0) {
    in.demand = demand_.value();
  }
  return in;
}

std::optional<Placement> Replanner::Update(const Snapshot& snapshot,
                                           std::vector<std::string>* notes) {
  absl::MutexLock lock(&mu_);
  const size_t noted = notes != nullptr ? notes->size() : 0;
  // The workers idle while a plan (a trial, a probe) keeps every sample here.
  const bool idle_workers = placement_.all_local() && changes_ > 0;
  std::optional<Placement> placed = Decide(snapshot, notes);
  if (idle_workers && !placement_.all_local()) links_.Reopen();
  // A new placement (more than a revision of the last): a new span, and
  // storage's window across the switch says nothing.
  const bool started = placement_.Distance(ledger_placement_) > kRevision;
  if (started) {
    ledger_placement_ = placement_;
    store_share_.PlacementChanged(snapshot.now_nanos);
  }
  const std::optional<PredictionLedger::Span> ended = ledger_.Observe(
      snapshot.now_nanos, snapshot.delivered_samples, snapshot.busy_seconds, throughput_, started);
  // Told before what replaced it.
  if (ended && notes != nullptr) notes->insert(notes->begin() + noted, ledger_.Describe(*ended));
  return placed;
}

std::string Replanner::LedgerSummary() const {
  absl::MutexLock lock(&mu_);
  std::string summary = ledger_.Summary();
  // The running placement's prediction is revised with each update's
  // inputs: beside the last plan's inputs in the log, these say which term
  // moved after it.
  if (latest_input_)
    absl::StrAppend(&summary, "; inputs at the end: ", DescribeInput(*latest_input_));
  return summary;
}

std::optional<Placement> Replanner::Decide(const Snapshot& snapshot,
                                           std::vector<std::string>* notes) {
  FoldStages(snapshot);
  links_.Fold(snapshot, receive_cost_.value_or(options_.prior_receive_cost_per_byte), notes);
  FoldStorageSides(snapshot, notes);
  const std::optional<PlanInput> in = CurrentInput(snapshot);
  if (!in) return std::nullopt;
  latest_input_ = in;
  const int64_t now = snapshot.now_nanos;
  bool switched = false;
  const bool blocked = JudgeDelivery(snapshot, notes, &switched);
  if (switched) return Switched(*in);
  if (blocked) return std::nullopt;
  if (first_nanos_ == 0) first_nanos_ = now;
  // Slow start paces a first plan made before the links are watched.
  const bool paced = options_.link_growth > 0 && links_.ingest_peak() > 0;
  if (changes_ == 0 && !paced && !LinksMeasured(snapshot) &&
      now - first_nanos_ < static_cast<int64_t>(options_.link_wait_seconds * 1e9)) {
    return std::nullopt;  // the first plan waits for the links (see the rules)
  }
  const int64_t period = static_cast<int64_t>(options_.period_seconds * 1e9);
  const auto [drift, what] =
      input_ ? Drift(*input_, *in, RemoteSampleBytes(placement_, *input_), throughput_)
             : std::make_pair(1.0, std::string());
  const int64_t since = now - last_plan_nanos_;
  const bool drifted = drift > options_.drift && since >= period / 4;
  const bool due = last_plan_nanos_ == 0 || since >= period;
  if (ProbeStorage(*in, now, due, notes, &switched)) {
    return switched ? std::optional<Placement>(Switched(*in)) : std::nullopt;
  }
  const std::string measured = since >= period / 4 ? MeasuredGuesses(*in) : std::string();
  if (!due && !drifted && measured.empty() && !probe_ended_) return std::nullopt;
  if (!due && notes != nullptr) {
    if (drifted) {
      notes->push_back(absl::StrFormat("re-planning: %s moved %.0f%%", what, 100 * drift));
    } else if (!measured.empty()) {
      notes->push_back(absl::StrCat("re-planning: ", measured));
    }
  }
  last_plan_nanos_ = now;
  input_ = in;
  guessed_receive_ = !receive_cost_.known();
  guessed_own_ = !unseen_cpu_.known();
  // After a worker came or went the running placement was made for other
  // resources, and after a storage probe it was made to measure: the new
  // plan replaces it whatever the gain.
  const bool resources_changed = std::exchange(resources_changed_, false);
  const bool probed = std::exchange(probe_ended_, false);
  std::string reason;
  auto plan = WorthwhilePlan(*in, &reason);
  if (!plan.ok() || plan->throughput <= 0) return std::nullopt;
  if (changes_ > 0 && !resources_changed && !probed) {
    const absl::StatusOr<double> running = ThroughputOf(*in, placement_.PathShares());
    if (running.ok() && plan->throughput <= (1 + options_.gain) * *running) {
      throughput_ = *running;
      const absl::StatusOr<double> local = ThroughputOf(*in, AllLocal(placement_).PathShares());
      trial_.Rescored(*running, local.ok() ? *local : 0);
      return std::nullopt;
    }
  }
  Apply(*plan, std::move(reason), *in, now, notes);
  return placement_;
}

std::string Replanner::MeasuredGuesses(const PlanInput& in) const {
  std::vector<std::string> measured;
  if (guessed_receive_ && receive_cost_.known()) {
    measured.push_back(
        absl::StrFormat("the receive cost is %.3f ns a byte", 1e9 * in.local_cost_per_byte));
  }
  if (guessed_own_ && unseen_cpu_.known() && unseen_cpu_.value() > 0) {
    measured.push_back(
        absl::StrFormat("the trainer's own cost is %.1f µs a sample", 1e6 * in.fixed_local_cost));
  }
  if (measured.empty()) return "";
  return absl::StrCat(absl::StrJoin(measured, " and "),
                      ", measured since the last plan guessed it");
}

Placement Replanner::Switched(const PlanInput& in) {
  ++changes_;
  const absl::StatusOr<double> running = ThroughputOf(in, placement_.PathShares());
  throughput_ = running.ok() ? *running : 0;
  return placement_;
}

bool Replanner::ProbeStorage(const PlanInput& in, int64_t now, bool due,
                             std::vector<std::string>* notes, bool* switched) {
  using Reader = StoreShare::Reader;
  if (store_share_.probing()) {
    if (resources_changed_) {
      store_share_.CancelProbe();  // a plan for the new resources comes first
      return false;
    }
    const std::string ended = store_share_.EndProbe(now);
    if (ended.empty()) return true;
    if (notes != nullptr) notes->push_back(ended);
    probe_ended_ = true;
    return false;
  }
  if (!due || changes_ == 0 || probe_ended_ || resources_changed_) return false;
  // Each unprobed side alone, its storage unlimited: what it could give.
  std::optional<Plan> best;
  Reader side = Reader::kHere;
  for (const Reader reader : {Reader::kHere, Reader::kWorkers}) {
    const bool here = reader == Reader::kHere;
    std::optional<PlanInput> alone = OneSided(in, here);
    if (!store_share_.Unprobed(reader) || !alone || (!here && in.remote_cores <= 0)) continue;
    (here ? alone->local_storage_bandwidth : alone->remote_storage_bandwidth) = 1e300;
    absl::StatusOr<Plan> plan = MakePlan(*alone);
    if (!plan.ok() || plan->throughput <= (1 + options_.gain) * throughput_) continue;
    if (!best || plan->throughput > best->throughput) {
      best = *std::move(plan);
      side = reader;
    }
  }
  if (!best) return false;
  const double seconds = kStorageProbePeriods * options_.period_seconds;
  store_share_.StartProbe(side, now, seconds);
  trial_.Abort();
  placement_ = Placement::FromRates(best->rate);
  explanation_ = absl::StrFormat(
      "storage probe: %s alone for up to %.0f s, to measure what storage gives them alone (both "
      "sides together read %.1f MB/s; alone, with storage unlimited, %.1f samples/s is predicted "
      "against the running plan's %.1f)",
      StoreShare::Name(side), seconds, store_share_.together() / 1e6, best->throughput,
      throughput_);
  reason_ = explanation_;
  if (notes != nullptr) notes->push_back(explanation_);
  *switched = true;
  return true;
}

std::optional<double> Replanner::WantedRemoteCores() const {
  absl::MutexLock lock(&mu_);
  if (!input_) return std::nullopt;
  PlanInput unlimited = *input_;
  unlimited.remote_cores = kUnlimitedCores;
  auto plan = MakePlan(unlimited);
  if (!plan.ok() || plan->throughput <= 0) return std::nullopt;
  return plan->remote_cores_used;
}

std::optional<int> Replanner::EchoFactor(int max_echo, std::string* why) const {
  absl::MutexLock lock(&mu_);
  if (!latest_input_) return std::nullopt;
  Plan plan;
  const absl::StatusOr<int> echo = ChooseEcho(*latest_input_, max_echo, &plan);
  if (!echo.ok()) return std::nullopt;
  if (why != nullptr) *why = plan.explanation;
  return *echo;
}

std::pair<double, double> Replanner::StorageLimits() const {
  // Seen binding both sides at once: what they read together limits every
  // placement where both read, and a side's own window rate was only its
  // share (store_share.h).
  if (store_share_.together() > 0) return {store_share_.here_limit(), store_share_.workers_limit()};
  return {storage_here_.limit, storage_workers_.limit};
}

bool Replanner::StorageBoundWorkers() const {
  absl::MutexLock lock(&mu_);
  return storage_workers_.limit > 0 || store_share_.together() > 0;
}

ReplanState Replanner::State() const {
  absl::MutexLock lock(&mu_);
  ReplanState st;
  st.explanation = explanation_;
  st.reason = reason_;
  st.changes = changes_;
  st.backoffs = trial_.backoffs();
  st.throughput = throughput_;
  st.delivered = ledger_.delivered();
  st.prediction_error = ledger_.error();
  st.prediction_seconds = ledger_.seconds();
  if (input_ && input_->bandwidth < 1e299) st.ingest_limit = input_->bandwidth;
  st.receive_cost_per_byte = receive_cost_.value_or(0);
  st.unseen_cost_per_sample = std::max(0.0, unseen_cpu_.value_or(0));
  st.send_cost_per_byte = send_cost_.value_or(0);
  st.links = links_.links();
  std::tie(st.storage_limit_here, st.storage_limit_workers) = StorageLimits();
  st.storage_limit_shared = store_share_.together();
  return st;
}

}  // namespace prepflow::policy
