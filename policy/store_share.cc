#include "policy/store_share.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace prepflow::policy {
namespace {

constexpr double kBound = 0.5;   // a side waited this share of its readers' time, at least
constexpr double kQuiet = 0.05;  // the other side read under this share of the bytes
constexpr double kShared = 0.8;  // alone at least this share of together: one store

double Smoothed(double last, double rate) { return last > 0 ? 0.5 * (last + rate) : rate; }

}  // namespace

bool StoreShare::Shared() const {
  return together_ > 0 && (alone_ == 0 || alone_ >= kShared * together_);
}

std::string StoreShare::Observe(int64_t now, const Side& here, const Side& workers) {
  if (start_ == 0) {
    start_ = now;
    here_ = here;
    workers_ = workers;
    return "";
  }
  const double seconds = (now - start_) * 1e-9;
  if (seconds < 1 || here.reads + workers.reads - here_.reads - workers_.reads < 4) return "";
  const double here_rate = (here.bytes - here_.bytes) / seconds;
  const double workers_rate = (workers.bytes - workers_.bytes) / seconds;
  const auto waited = [&](const Side& now_side, const Side& then) {
    return (now_side.wait_seconds - then.wait_seconds) /
           (seconds * std::max(now_side.readers, 0.01));
  };
  const bool here_bound = waited(here, here_) >= kBound;
  const bool workers_bound = waited(workers, workers_) >= kBound;
  const double total = here_rate + workers_rate;
  if (here_bound && workers_bound && here_rate > 0 && workers_rate > 0) {
    together_ = Smoothed(together_, total);
  } else if (here_bound && workers_rate < kQuiet * total) {
    alone_ = Smoothed(alone_, here_rate);
  } else if (workers_bound && here_rate < kQuiet * total) {
    alone_ = Smoothed(alone_, workers_rate);
  }
  start_ = now;
  here_ = here;
  workers_ = workers;
  if (together_ == 0) return "";
  const Said verdict = Shared() ? Said::kShared : Said::kSeparate;
  if (verdict == said_) return "";
  said_ = verdict;
  if (verdict == Said::kShared) {
    return absl::StrFormat(
        "storage binds the reads here and on the workers together at %.1f MB/s%s: planned as "
        "one store they share",
        together_ / 1e6,
        alone_ > 0 ? absl::StrFormat(" (one side alone: %.1f MB/s)", alone_ / 1e6)
                   : " (no side seen alone yet)");
  }
  return absl::StrFormat(
      "storage gave one side alone %.1f MB/s against %.1f MB/s to both together: each reads "
      "storage of its own",
      alone_ / 1e6, together_ / 1e6);
}

}  // namespace prepflow::policy
