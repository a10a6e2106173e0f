#include "policy/store_share.h"

#include "absl/strings/str_format.h"
#include "policy/measurements.h"

namespace prepflow::policy {
namespace {

constexpr double kQuiet = 0.05;  // the other side read under this share of the bytes

}  // namespace

std::string StoreShare::Observe(int64_t now, const Side& here, const Side& workers) {
  if (start_ == 0) {
    start_ = now;
    here_ = here;
    workers_ = workers;
    return "";
  }
  const double seconds = (now - start_) * 1e-9;
  if (seconds < 1 || here.reads + workers.reads - here_.reads - workers_.reads < 4) return "";
  const auto rate = [&](const Side& side, const Side& then) {
    return (side.bytes - then.bytes) / seconds;
  };
  const auto bound = [&](const Side& side, const Side& then) {
    return StorageBound(side.wait_seconds - then.wait_seconds, seconds, side.readers);
  };
  const double here_rate = rate(here, here_), workers_rate = rate(workers, workers_);
  const bool here_bound = bound(here, here_), workers_bound = bound(workers, workers_);
  const double total = here_rate + workers_rate;
  std::string note;
  if (here_bound && workers_bound && here_rate > 0 && workers_rate > 0) {
    if (together_ == 0) {
      note = absl::StrFormat(
          "storage binds the reads here and on the workers together at %.1f MB/s: a limit on "
          "all reads, wherever they run",
          total / 1e6);
    }
    together_ = MeanWithLast(together_, total);
  } else if (here_bound && workers_rate < kQuiet * total) {
    if (alone_here_ == 0)
      note = absl::StrFormat("storage gives the reads here alone %.1f MB/s", here_rate / 1e6);
    alone_here_ = MeanWithLast(alone_here_, here_rate);
  } else if (workers_bound && here_rate < kQuiet * total) {
    if (alone_workers_ == 0) {
      note =
          absl::StrFormat("storage gives the workers' reads alone %.1f MB/s", workers_rate / 1e6);
    }
    alone_workers_ = MeanWithLast(alone_workers_, workers_rate);
  }
  start_ = now;
  here_ = here;
  workers_ = workers;
  return note;
}

}  // namespace prepflow::policy
