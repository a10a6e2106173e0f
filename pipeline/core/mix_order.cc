// The epoch order of a weighted mixture of datasets (epoch_order.h): the
// epoch's counts per source, which source gives each next sample, and each
// source's own order, continued across mixture epochs.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "pipeline/core/epoch_order.h"
#include "pipeline/core/rng.h"

namespace prepflow {
namespace {

constexpr int64_t kMaxMixSamples = int64_t{1} << 40;

// The share of each source in the mixture.
std::vector<double> Shares(const MixPlan& plan) {
  const double sum = std::accumulate(plan.weights.begin(), plan.weights.end(), 0.0);
  std::vector<double> shares;
  for (double w : plan.weights) shares.push_back(w / sum);
  return shares;
}

// `total` split by `shares`, largest remainders first (ties: earlier).
std::vector<int64_t> Apportion(const std::vector<double>& shares, int64_t total) {
  std::vector<int64_t> counts(shares.size());
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t s = 0; s < shares.size(); ++s) {
    const double exact = shares[s] * static_cast<double>(total);
    counts[s] = static_cast<int64_t>(std::floor(exact));
    given += counts[s];
    rest.emplace_back(exact - std::floor(exact), s);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total && k < rest.size(); ++k, ++given) ++counts[rest[k].second];
  return counts;
}

// Stop at the first end: the longest epoch whose counts fit every source.
int64_t StopLength(const MixPlan& plan, const std::vector<double>& shares) {
  double longest = static_cast<double>(kMaxMixSamples);
  for (size_t s = 0; s < shares.size(); ++s) {
    longest = std::min(longest, static_cast<double>(plan.sizes[s]) / shares[s]);
  }
  auto total = static_cast<int64_t>(std::floor(longest));
  const auto fits = [&](int64_t t) {
    const std::vector<int64_t> c = Apportion(shares, t);
    for (size_t s = 0; s < c.size(); ++s) {
      if (c[s] > plan.sizes[s]) return false;
    }
    return true;
  };
  while (total > 0 && !fits(total)) --total;  // rounding may lift one source by one
  return total;
}

// Which source gives each of the epoch's samples.
std::vector<int32_t> SourceSlots(const std::vector<int64_t>& counts, uint64_t seed, uint64_t epoch,
                                 bool shuffle) {
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<int32_t> slots;
  slots.reserve(static_cast<size_t>(total));
  if (shuffle) {
    for (size_t s = 0; s < counts.size(); ++s) {
      slots.insert(slots.end(), static_cast<size_t>(counts[s]), static_cast<int32_t>(s));
    }
    EpochRng rng(seed, epoch);
    for (int64_t i = total - 1; i > 0; --i) std::swap(slots[i], slots[rng.UniformInt(0, i)]);
    return slots;
  }
  // Smooth weighted round-robin: each step the source furthest behind its
  // due share takes the slot.
  std::vector<int64_t> given(counts.size(), 0);
  for (int64_t p = 0; p < total; ++p) {
    size_t best = 0;
    double lag = -1e300;
    for (size_t s = 0; s < counts.size(); ++s) {
      if (given[s] >= counts[s]) continue;
      const double due =
          static_cast<double>(counts[s]) * static_cast<double>(p + 1) / static_cast<double>(total) -
          static_cast<double>(given[s]);
      if (due > lag) lag = due, best = s;
    }
    ++given[best];
    slots.push_back(static_cast<int32_t>(best));
  }
  return slots;
}

}  // namespace

std::string WhyNotMixable(const MixPlan& plan) {
  if (plan.sizes.empty() || plan.sizes.size() != plan.weights.size()) {
    return "a mixture needs one weight per source, and a source";
  }
  for (size_t s = 0; s < plan.sizes.size(); ++s) {
    if (plan.sizes[s] <= 0) return absl::StrCat("source ", s, " holds no samples");
    if (!(plan.weights[s] > 0) || !std::isfinite(plan.weights[s])) {
      return absl::StrCat("source ", s, ": its weight must be a positive number");
    }
  }
  if (plan.epoch_samples < 0 || plan.epoch_samples > kMaxMixSamples) {
    return absl::StrCat("an epoch of a mixture holds 0 (the sum of the sources) to ",
                        kMaxMixSamples, " samples");
  }
  const std::vector<int64_t> counts = MixCounts(plan);
  for (size_t s = 0; s < counts.size(); ++s) {
    if (counts[s] / plan.sizes[s] >= static_cast<int64_t>(kMaxCopies)) {
      return absl::StrCat("source ", s, " (", plan.sizes[s], " samples) would repeat each ",
                          counts[s] / plan.sizes[s], " times an epoch, over ", kMaxCopies);
    }
  }
  return "";
}

std::vector<int64_t> MixCounts(const MixPlan& plan) {
  const std::vector<double> shares = Shares(plan);
  if (plan.stop_at_first_end) return Apportion(shares, StopLength(plan, shares));
  const int64_t total = plan.epoch_samples > 0
                            ? plan.epoch_samples
                            : std::accumulate(plan.sizes.begin(), plan.sizes.end(), int64_t{0});
  return Apportion(shares, total);
}

std::vector<int64_t> MixOrder(const MixPlan& plan, uint64_t seed, uint64_t epoch, bool shuffle,
                              std::vector<uint32_t>* copies) {
  const std::vector<int64_t> counts = MixCounts(plan);
  const std::vector<int32_t> slots = SourceSlots(counts, seed, epoch, shuffle);
  std::vector<int64_t> offsets(plan.sizes.size(), 0);
  for (size_t s = 1; s < offsets.size(); ++s) offsets[s] = offsets[s - 1] + plan.sizes[s - 1];
  // Source s's k-th sample of this epoch is its n-th overall, n = (what it
  // gave in the epochs before) + k: position n % size of its own epoch
  // n / size (each mixture epoch its own epoch anew when stopping at the
  // first end).
  std::vector<int64_t> next(counts.size());
  for (size_t s = 0; s < counts.size(); ++s) {
    next[s] = plan.stop_at_first_end ? 0 : static_cast<int64_t>(epoch) * counts[s];
  }
  absl::flat_hash_map<uint64_t, std::vector<int64_t>> own;  // (source, own epoch) -> order
  absl::flat_hash_map<int64_t, uint32_t> seen;
  std::vector<int64_t> order;
  order.reserve(slots.size());
  copies->clear();
  copies->reserve(slots.size());
  for (const int32_t s : slots) {
    const int64_t n = next[s]++;
    const uint64_t own_epoch =
        plan.stop_at_first_end ? epoch : static_cast<uint64_t>(n / plan.sizes[s]);
    std::vector<int64_t>& perm = own[static_cast<uint64_t>(s) << 48 | own_epoch];
    if (perm.empty()) {
      perm = EpochOrder(plan.sizes[s], Mix64(seed ^ Mix64(static_cast<uint64_t>(s) + 1)), own_epoch,
                        shuffle, 0, 1);
    }
    const int64_t index = offsets[s] + perm[n % plan.sizes[s]];
    order.push_back(index);
    copies->push_back(seen[index]++);
  }
  return order;
}

}  // namespace prepflow
