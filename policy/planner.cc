#include "policy/planner.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace prepflow::policy {
namespace {

// Local CPU, remote CPU, network, demand, storage here, storage on workers,
// storage both together.
constexpr int kRows = 7;
constexpr int kSharedStorageRow = 6;
constexpr double kUnlimited = 1e299;

struct Candidate {
  std::vector<double> rate;
  double throughput = 0;
  double remote = 0;
  double bytes = 0;
};

// Lexicographic: more throughput, then fewer remote cores, then fewer bytes.
bool Better(const Candidate& a, const Candidate& b) {
  auto differs = [](double x, double y) {
    return std::abs(x - y) > 1e-9 * std::max({1.0, std::abs(x), std::abs(y)});
  };
  if (differs(a.throughput, b.throughput)) return a.throughput > b.throughput;
  if (differs(a.remote, b.remote)) return a.remote < b.remote;
  if (differs(a.bytes, b.bytes)) return a.bytes < b.bytes;
  return false;
}

// Solves the s x s system m * x = rhs by Gaussian elimination with partial
// pivoting. Returns false when it is singular.
bool Solve(int s, std::array<std::array<double, kRows>, kRows> m, std::array<double, kRows> rhs,
           std::array<double, kRows>* x) {
  for (int col = 0; col < s; ++col) {
    int pivot = col;
    for (int r = col + 1; r < s; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    if (std::abs(m[pivot][col]) < 1e-15) return false;
    std::swap(m[pivot], m[col]);
    std::swap(rhs[pivot], rhs[col]);
    for (int r = 0; r < s; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int c = col; c < s; ++c) m[r][c] -= f * m[col][c];
      rhs[r] -= f * rhs[col];
    }
  }
  for (int i = 0; i < s; ++i) (*x)[i] = rhs[i] / m[i][i];
  return true;
}

}  // namespace

const char* BindingName(Binding b) {
  switch (b) {
    case Binding::kLocalCpu:
      return "local CPU";
    case Binding::kRemoteCpu:
      return "remote CPU";
    case Binding::kNetwork:
      return "network";
    case Binding::kDemand:
      return "demand";
    case Binding::kLocalStorage:
      return "storage reads here";
    case Binding::kRemoteStorage:
      return "storage reads on workers";
    case Binding::kSharedStorage:
      return "storage reads here and on workers together";
    case Binding::kWorkerLinks:
      return "workers' links";
  }
  return "?";
}

std::string DescribeInput(const PlanInput& in) {
  std::string out = "stages (µs here / on workers, bytes out):";
  for (size_t i = 0; i < in.local_cost.size(); ++i) {
    const double remote = i < in.remote_cost.size() ? in.remote_cost[i] : in.local_cost[i];
    const double bytes = i < in.boundary_bytes.size() ? in.boundary_bytes[i] : 0;
    absl::StrAppendFormat(&out, " %.1f/%.1f %.0f", 1e6 * in.local_cost[i], 1e6 * remote, bytes);
  }
  absl::StrAppendFormat(&out,
                        "; trainer %.1f µs a sample, receive %.3f and send %.3f ns a byte; "
                        "%.2f cores here, %.2f on workers",
                        1e6 * in.fixed_local_cost, 1e9 * in.local_cost_per_byte,
                        1e9 * in.remote_cost_per_byte, in.local_cores, in.remote_cores);
  if (in.bandwidth < 1e299) absl::StrAppendFormat(&out, ", ingest %.1f MB/s", in.bandwidth / 1e6);
  if (in.demand < 1e299) absl::StrAppendFormat(&out, ", demand %.0f/s", in.demand);
  for (const PlanInput::WorkerLink& w : in.worker_links) {
    absl::StrAppendFormat(&out, ", a %.2f-core worker's link %.1f MB/s", w.cores,
                          w.bandwidth / 1e6);
  }
  if (in.storage_bandwidth < 1e299 || in.local_storage_bandwidth < 1e299 ||
      in.remote_storage_bandwidth < 1e299) {
    // A side storage was never seen binding has no limit (1e300 B/s).
    auto mbps = [](double b) { return b < 1e299 ? absl::StrFormat("%.1f", b / 1e6) : "none"; };
    absl::StrAppend(&out, ", storage ", mbps(in.local_storage_bandwidth), " / ",
                    mbps(in.remote_storage_bandwidth), " / ", mbps(in.storage_bandwidth),
                    " MB/s (here / workers / both)");
  }
  if (in.echo > 1 || in.cache_hit > 0) {
    absl::StrAppendFormat(&out, ", echo %.2f and cache hits %.0f%% at %d", in.echo,
                          100 * in.cache_hit, in.reuse_at);
  }
  return out;
}

namespace {

std::array<double, kRows> Capacities(const PlanInput& in) {
  return {in.local_cores,
          in.remote_cores,
          in.bandwidth,
          in.demand,
          in.local_storage_bandwidth,
          in.remote_storage_bandwidth,
          in.storage_bandwidth};
}

// Checks the input and computes each path's use of each resource per sample.
absl::Status Validate(const PlanInput& in) {
  const size_t n = in.local_cost.size();
  const std::vector<double>& remote = in.remote_cost.empty() ? in.local_cost : in.remote_cost;
  if (remote.size() != n || in.boundary_bytes.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan input: local_cost has ", n, " stages but remote_cost has ",
                     remote.size(), " and boundary_bytes ", in.boundary_bytes.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    for (double v : {in.local_cost[i], remote[i], in.boundary_bytes[i]}) {
      if (!(v >= 0) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan input: stage ", i, " has a negative or non-finite cost or size (", v, ")"));
      }
    }
  }
  const std::array<double, kRows> cap = Capacities(in);
  const char* const names[kRows] = {"local_cores",
                                    "remote_cores",
                                    "bandwidth",
                                    "demand",
                                    "local_storage_bandwidth",
                                    "remote_storage_bandwidth",
                                    "storage_bandwidth"};
  for (int r = 0; r < kRows; ++r) {
    if (!(cap[r] >= 0) || std::isnan(cap[r])) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan input: ", names[r], " must be >= 0, got ", cap[r]));
    }
  }
  if (!(in.fixed_local_cost >= 0) || !std::isfinite(in.fixed_local_cost)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan input: fixed_local_cost must be finite and >= 0, got ", in.fixed_local_cost));
  }
  for (double v : {in.local_cost_per_byte, in.remote_cost_per_byte}) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan input: transport cost per byte must be finite and >= 0, got ", v));
    }
  }
  if (in.max_cut < -1 || in.max_cut > static_cast<int>(in.local_cost.size())) {
    return absl::InvalidArgumentError(absl::StrCat("plan input: max_cut ", in.max_cut,
                                                   " is outside [-1, ", in.local_cost.size(), "]"));
  }
  if (in.min_cut < 0 || in.min_cut > static_cast<int>(in.local_cost.size()) ||
      (in.max_cut >= 0 && in.min_cut > in.max_cut)) {
    return absl::InvalidArgumentError(absl::StrCat("plan input: min_cut ", in.min_cut,
                                                   " is outside [0, ", in.local_cost.size(),
                                                   "] or past max_cut ", in.max_cut));
  }
  if (!(in.cores_per_worker > 0)) {
    return absl::InvalidArgumentError("plan input: cores_per_worker must be positive");
  }
  if (in.reuse_at < 0 || in.reuse_at > static_cast<int>(in.local_cost.size()) ||
      !(in.cache_hit >= 0 && in.cache_hit <= 1) || !(in.echo >= 1) || !std::isfinite(in.echo) ||
      !(in.read_bytes >= 0) || !std::isfinite(in.read_bytes) ||
      !(in.local_storage_bandwidth >= 0) || !(in.remote_storage_bandwidth >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan input: reuse_at must be a boundary, cache_hit in [0, 1], echo >= 1, read_bytes "
        "and storage bandwidths >= 0 (got ",
        in.reuse_at, ", ", in.cache_hit, ", ", in.echo, ", ", in.read_bytes, ")"));
  }
  for (const PlanInput::WorkerLink& w : in.worker_links) {
    if (!(w.cores >= 0) || !std::isfinite(w.cores) || !(w.bandwidth >= 0) ||
        std::isnan(w.bandwidth)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan input: a worker link needs cores and bandwidth >= 0 (got ", w.cores,
                       " cores, ", w.bandwidth, " bytes/s)"));
    }
  }
  return absl::OkStatus();
}

// Path k's use of each resource per sample (rows as kRows), k = 0..n.
std::vector<std::array<double, kRows>> PathUse(const PlanInput& in) {
  const size_t n = in.local_cost.size();
  const std::vector<double>& remote = in.remote_cost.empty() ? in.local_cost : in.remote_cost;
  std::vector<std::array<double, kRows>> use(n + 1);
  // What one delivered sample costs of a load, where loads are reused.
  const double per_load = (1 - in.cache_hit) / in.echo;
  for (size_t k = 0; k <= n; ++k) {
    const bool reuses = k == 0 || static_cast<int>(k) >= in.reuse_at;
    double local = 0, rem = 0;
    for (size_t i = 0; i < n; ++i) {
      const double share = reuses && static_cast<int>(i) < in.reuse_at ? per_load : 1.0;
      (i >= k ? local : rem) += share * (i >= k ? in.local_cost[i] : remote[i]);
    }
    const double bytes = k == 0 ? 0.0 : in.boundary_bytes[k - 1];
    const double read = in.read_bytes * (reuses ? per_load : 1.0);
    use[k] = {in.fixed_local_cost + local + in.local_cost_per_byte * bytes,
              rem + in.remote_cost_per_byte * bytes,
              bytes,
              1.0,
              k == 0 ? read : 0.0,
              k == 0 ? 0.0 : read,
              read};
  }
  return use;
}

// Bytes per remote CPU-second of a split (rates or shares per path; 0 when
// nothing runs remotely): ρ in "Workers whose own link binds" (planner.h).
double BytesPerRemoteCpu(const std::vector<std::array<double, kRows>>& use,
                         const std::vector<double>& rate) {
  double cpu = 0, bytes = 0;
  for (size_t k = 1; k < use.size() && k < rate.size(); ++k) {
    cpu += rate[k] * use[k][1];
    bytes += rate[k] * use[k][2];
  }
  return cpu > 0 ? bytes / cpu : 0;
}

// The input with each link-bound worker's cores cut to what its link carries
// at `rho` bytes per remote CPU-second, and the links dropped.
PlanInput WithLinks(const PlanInput& in, double rho) {
  PlanInput out = in;
  out.worker_links.clear();
  for (const PlanInput::WorkerLink& w : in.worker_links) {
    const double usable = rho > 0 ? std::min(w.cores, w.bandwidth / rho) : w.cores;
    out.remote_cores -= w.cores - usable;
  }
  out.remote_cores = std::max(0.0, out.remote_cores);
  return out;
}

}  // namespace

absl::StatusOr<double> ThroughputOf(const PlanInput& in, const std::vector<double>& fractions) {
  if (absl::Status s = Validate(in); !s.ok()) return s;
  const size_t paths = in.local_cost.size() + 1;
  if (fractions.size() != paths) {
    return absl::InvalidArgumentError(
        absl::StrCat("fractions: ", fractions.size(), " given for ", paths, " paths"));
  }
  double sum = 0;
  for (double f : fractions) {
    if (!(f >= 0)) return absl::InvalidArgumentError(absl::StrCat("fractions: ", f, " < 0"));
    sum += f;
  }
  if (std::abs(sum - 1) > 1e-6) {
    return absl::InvalidArgumentError(absl::StrCat("fractions sum to ", sum, ", not 1"));
  }
  const std::vector<std::array<double, kRows>> use = PathUse(in);
  const std::array<double, kRows> cap =
      Capacities(WithLinks(in, BytesPerRemoteCpu(use, fractions)));
  // S binds only where both sides read (planner.h).
  const bool both_read = fractions[0] > 1e-12 && fractions[0] < 1 - 1e-12;
  double rate = kUnlimited;
  for (int r = 0; r < kRows; ++r) {
    if (r == kSharedStorageRow && !both_read) continue;
    double per_sample = 0;
    for (size_t k = 0; k < paths; ++k) per_sample += fractions[k] * use[k][r];
    if (per_sample > 0) rate = std::min(rate, cap[r] / per_sample);
  }
  return rate;
}

namespace {

// The plan in one line, for logs and `prepflow plan`.
std::string Explain(const PlanInput& in, const Plan& plan) {
  const size_t n = in.local_cost.size();
  std::vector<std::string> parts;
  for (size_t k = 0; k <= n; ++k) {
    if (plan.rate[k] <= 1e-9 * std::max(1.0, plan.throughput)) continue;
    const std::string where = k == 0   ? "all local"
                              : k == n ? "all remote"
                                       : absl::StrCat("cut ", k);
    parts.push_back(absl::StrFormat("%s %.0f%%", where, 100 * plan.rate[k] / plan.throughput));
  }
  std::vector<std::string> binding;
  for (Binding b : plan.binding) binding.push_back(BindingName(b));
  std::string out = absl::StrFormat(
      "%.1f samples/s: %s; %.2f local + %.2f remote cores (%d worker%s), %.1f MB/s on the "
      "network; bound by %s",
      plan.throughput, parts.empty() ? "nothing runs" : absl::StrJoin(parts, ", "),
      plan.local_cores_used, plan.remote_cores_used, plan.workers, plan.workers == 1 ? "" : "s",
      plan.network_bytes_per_s / 1e6,
      binding.empty() ? "nothing" : absl::StrJoin(binding, " and "));
  if (in.cache_hit > 0 || in.echo > 1) {
    absl::StrAppend(&out, absl::StrFormat("; stages before %d run once per load (%.0f%% cached, "
                                          "%g copies each)",
                                          in.reuse_at, 100 * in.cache_hit, in.echo));
  }
  if (in.max_cut >= 0 && in.max_cut < static_cast<int>(n)) {
    absl::StrAppend(&out, "; no cut past ", in.max_cut,
                    in.max_cut_why.empty() ? "" : absl::StrCat(" (", in.max_cut_why, ")"));
  }
  return out;
}

// The cuts that can run (none past a local-only stage) into `allowed`;
// InvalidArgument for one that uses no limited resource.
absl::Status AllowedCuts(const PlanInput& in, const std::vector<std::array<double, kRows>>& use,
                         const std::vector<int>& finite_rows, std::vector<int>* allowed) {
  for (size_t k = 0; k < use.size(); ++k) {
    const int cut = static_cast<int>(k);
    if ((in.max_cut < 0 || cut <= in.max_cut) && cut >= in.min_cut) allowed->push_back(cut);
  }
  for (int k : *allowed) {
    bool bounded = false;
    for (int r : finite_rows) bounded = bounded || use[k][r] > 0;
    if (!bounded) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan input: path cut=", k,
                       " uses no limited resource, so throughput is unbounded; "
                       "give a demand or the stage costs"));
    }
  }
  return absl::OkStatus();
}

// The plan of the best vertex: its rates, what they use, and the resources
// that bind (all but the explanation).
Plan ToPlan(const PlanInput& in, const Candidate& best,
            const std::vector<std::array<double, kRows>>& use, const std::array<double, kRows>& cap,
            const std::vector<int>& finite_rows) {
  const size_t paths = use.size();
  Plan plan;
  plan.rate = best.rate;
  plan.throughput = best.throughput;
  plan.remote_cores_used = best.remote;
  plan.network_bytes_per_s = best.bytes;
  for (size_t k = 0; k < paths; ++k) plan.local_cores_used += best.rate[k] * use[k][0];
  plan.remote_fraction =
      plan.throughput > 0 ? (plan.throughput - best.rate[0]) / plan.throughput : 0;
  plan.workers = static_cast<int>(std::ceil(plan.remote_cores_used / in.cores_per_worker - 1e-9));
  std::array<double, kRows> used{};
  for (size_t k = 0; k < paths; ++k) {
    for (int r = 0; r < kRows; ++r) used[r] += best.rate[k] * use[k][r];
  }
  const Binding kinds[kRows] = {
      Binding::kLocalCpu,     Binding::kRemoteCpu,     Binding::kNetwork,      Binding::kDemand,
      Binding::kLocalStorage, Binding::kRemoteStorage, Binding::kSharedStorage};
  for (int r : finite_rows) {
    if (used[r] >= cap[r] * (1 - 1e-6) && cap[r] > 0) plan.binding.push_back(kinds[r]);
    if (cap[r] == 0) plan.binding.push_back(kinds[r]);
  }
  return plan;
}

// MakePlan without link-bound workers, on a valid input.
absl::StatusOr<Plan> SolvePlan(const PlanInput& in) {
  const size_t n = in.local_cost.size();
  const std::array<double, kRows> cap = Capacities(in);
  // Path k's use of each resource per sample.
  const size_t paths = n + 1;
  const std::vector<std::array<double, kRows>> use = PathUse(in);
  std::vector<int> finite_rows;
  for (int r = 0; r < kRows; ++r) {
    if (cap[r] < kUnlimited) finite_rows.push_back(r);
  }
  std::vector<int> allowed;
  if (absl::Status s = AllowedCuts(in, use, finite_rows, &allowed); !s.ok()) return s;

  Candidate best;
  best.rate.assign(paths, 0);
  Candidate cand;
  cand.rate.assign(paths, 0);
  // Every vertex: a support of s paths made tight on s finite rows.
  std::vector<int> support;
  auto consider_support = [&]() {
    const int s = static_cast<int>(support.size());
    const int f = static_cast<int>(finite_rows.size());
    for (int mask = 0; mask < (1 << f); ++mask) {
      if (__builtin_popcount(static_cast<unsigned>(mask)) != s) continue;
      std::array<std::array<double, kRows>, kRows> m{};
      std::array<double, kRows> rhs{}, x{};
      int row = 0;
      for (int t = 0; t < f; ++t) {
        if (!(mask & (1 << t))) continue;
        for (int j = 0; j < s; ++j) m[row][j] = use[allowed[support[j]]][finite_rows[t]];
        rhs[row] = cap[finite_rows[t]];
        ++row;
      }
      if (!Solve(s, m, rhs, &x)) continue;
      bool feasible = true;
      for (int j = 0; j < s && feasible; ++j) feasible = x[j] >= -1e-12;
      if (!feasible) continue;
      std::array<double, kRows> used{};
      for (int j = 0; j < s; ++j) {
        x[j] = std::max(0.0, x[j]);
        for (int r = 0; r < kRows; ++r) used[r] += use[allowed[support[j]]][r] * x[j];
      }
      for (int r : finite_rows) {
        if (used[r] > cap[r] * (1 + 1e-9) + 1e-12) feasible = false;
      }
      if (!feasible) continue;
      std::fill(cand.rate.begin(), cand.rate.end(), 0.0);
      for (int j = 0; j < s; ++j) cand.rate[allowed[support[j]]] = x[j];
      cand.throughput = used[3];
      cand.remote = used[1];
      cand.bytes = used[2];
      if (Better(cand, best)) best = cand;
    }
  };
  // Supports of size 1..min(finite rows, paths), in lexicographic order.
  const int choices = static_cast<int>(allowed.size());
  const int max_support = std::min({static_cast<int>(finite_rows.size()), kRows, choices});
  for (int s = 1; s <= max_support; ++s) {
    support.assign(s, 0);
    for (int j = 0; j < s; ++j) support[j] = j;
    while (true) {
      consider_support();
      int j = s - 1;
      while (j >= 0 && support[j] == choices - s + j) --j;
      if (j < 0) break;
      ++support[j];
      for (int t = j + 1; t < s; ++t) support[t] = support[t - 1] + 1;
    }
  }

  Plan plan = ToPlan(in, best, use, cap, finite_rows);
  plan.explanation = Explain(in, plan);
  return plan;
}

// The plan of fixed rates per path under `in` (no worker links): what they
// use, what binds, the explanation.
Plan PlanOfRates(const PlanInput& in, const std::vector<double>& rate) {
  const std::vector<std::array<double, kRows>> use = PathUse(in);
  const std::array<double, kRows> cap = Capacities(in);
  std::vector<int> finite_rows;
  for (int r = 0; r < kRows; ++r) {
    if (cap[r] < kUnlimited) finite_rows.push_back(r);
  }
  Candidate c;
  c.rate = rate;
  for (size_t k = 0; k < use.size(); ++k) {
    c.throughput += rate[k];
    c.remote += rate[k] * use[k][1];
    c.bytes += rate[k] * use[k][2];
  }
  Plan plan = ToPlan(in, c, use, cap, finite_rows);
  plan.explanation = Explain(in, plan);
  return plan;
}

// MakePlan with link-bound workers (planner.h): a plan is made at a guess of
// ρ, first the workers' full cores, then at the ρ of the plan made, until a
// plan's own ρ is its guess (at most 8 tries); each plan's split is scored at
// its own ρ (ThroughputOf) and the best split is the plan, at the rate it
// reaches.
absl::StatusOr<Plan> PlanWithLinks(const PlanInput& in) {
  const std::vector<std::array<double, kRows>> use = PathUse(in);
  std::vector<double> best_rate;
  double best = -1, best_rho = 0, rho = 0;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<Plan> plan = SolvePlan(WithLinks(in, rho));
    if (!plan.ok()) return plan.status();
    const double own = BytesPerRemoteCpu(use, plan->rate);
    std::vector<double> share = plan->rate;
    for (double& f : share) f = plan->throughput > 0 ? f / plan->throughput : 0;
    if (plan->throughput <= 0) share[0] = 1;
    absl::StatusOr<double> reached = ThroughputOf(in, share);
    if (!reached.ok()) return reached.status();
    if (*reached > best * (1 + 1e-9)) {
      best = *reached, best_rho = own, best_rate = share;
      for (double& r : best_rate) r *= *reached;
    }
    if (std::abs(own - rho) <= 1e-9 * std::max(own, rho)) break;  // it agrees with its guess
    rho = own;
  }
  const PlanInput linked = WithLinks(in, best_rho);
  Plan plan = PlanOfRates(linked, best_rate);
  if (linked.remote_cores < in.remote_cores * (1 - 1e-9) &&
      absl::c_linear_search(plan.binding, Binding::kRemoteCpu)) {
    plan.binding.push_back(Binding::kWorkerLinks);
    plan.explanation = Explain(linked, plan);
  }
  return plan;
}

absl::StatusOr<Plan> SolveValid(const PlanInput& in) {
  return in.worker_links.empty() ? SolvePlan(in) : PlanWithLinks(in);
}

// As Better, for plans.
bool BetterPlan(const Plan& a, const Plan& b) {
  return Better({a.rate, a.throughput, a.remote_cores_used, a.network_bytes_per_s},
                {b.rate, b.throughput, b.remote_cores_used, b.network_bytes_per_s});
}

}  // namespace

absl::StatusOr<Plan> MakePlan(const PlanInput& in) {
  if (absl::Status s = Validate(in); !s.ok()) return s;
  absl::StatusOr<Plan> plan = SolveValid(in);
  if (!plan.ok() || in.storage_bandwidth >= kUnlimited) return plan;
  // S binds only where both sides read: each side alone is planned without it.
  for (const bool here : {true, false}) {
    const std::optional<PlanInput> one = OneSided(in, here);
    if (!one) continue;
    absl::StatusOr<Plan> side = SolveValid(*one);
    if (side.ok() && BetterPlan(*side, *plan)) {
      side->explanation = Explain(in, *side);
      plan = std::move(side);
    }
  }
  return plan;
}

std::optional<PlanInput> OneSided(const PlanInput& in, bool here) {
  if (here ? in.min_cut > 0 : in.max_cut == 0) return std::nullopt;
  PlanInput one = in;
  one.storage_bandwidth = 1e300;
  if (here) {
    one.max_cut = 0;
  } else {
    one.min_cut = std::max(1, in.min_cut);
  }
  return one;
}

absl::StatusOr<int> ChooseEcho(const PlanInput& input, int max_echo, Plan* plan) {
  if (max_echo < 1) return absl::InvalidArgumentError("--max-echo: must be at least 1");
  PlanInput in = input;
  std::vector<Plan> plans;
  for (int e = 1; e <= max_echo; ++e) {
    in.echo = e;
    absl::StatusOr<Plan> p = MakePlan(in);
    if (!p.ok()) return p.status();
    // Fresh samples and this many copies meet the demand.
    if (p->throughput >= input.demand * (1 - 1e-6)) {
      *plan = *std::move(p);
      return e;
    }
    plans.push_back(*std::move(p));
  }
  // None does: the fewest copies that reach (within 2%) what the most
  // would. Copies past the point where something other than the loads
  // binds (the CPU after the echo boundary, the network) add nothing but
  // repetition.
  double best = 0;
  for (const Plan& p : plans) best = std::max(best, p.throughput);
  size_t e = 0;
  while (plans[e].throughput < 0.98 * best) ++e;
  *plan = std::move(plans[e]);
  return static_cast<int>(e) + 1;
}

}  // namespace prepflow::policy
