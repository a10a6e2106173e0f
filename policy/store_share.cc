#include "policy/store_share.h"

#include "absl/strings/str_format.h"

namespace prepflow::policy {
namespace {

constexpr double kQuiet = 0.05;  // the other side read under this share of the bytes
// Windows count from this long after the placement changed: one open
// across the switch holds one side's last reads and the other's ramp (the
// workers alone read 5.1 MB/s over such windows, 6.0 over later ones; the
// trainer 1.9 where it read 5.6).
constexpr int64_t kSettleNanos = 500'000'000;

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
  const bool here_quiet = here_rate < kQuiet * total, workers_quiet = workers_rate < kQuiet * total;
  const bool switching = changed_at_ > 0 && start_ < changed_at_ + kSettleNanos;
  std::string note;
  if (switching) {
    // A switch of placement says neither side's rate.
  } else if (here_bound && workers_bound && !here_quiet && !workers_quiet) {
    if (together() == 0) {
      note = absl::StrFormat(
          "storage binds the reads here and on the workers together at %.1f MB/s: a limit on "
          "every placement where both read",
          total / 1e6);
    }
    together_.Add(total * seconds, seconds);
  } else if (here_bound && workers_quiet && here_rate > 0) {
    note = FoldAlone(Reader::kHere, here_rate, seconds);
  } else if (workers_bound && here_quiet && workers_rate > 0) {
    note = FoldAlone(Reader::kWorkers, workers_rate, seconds);
  }
  start_ = now;
  here_ = here;
  workers_ = workers;
  return note;
}

std::string StoreShare::FoldAlone(Reader reader, double rate, double seconds) {
  Rate& alone = alone_[Index(reader)];
  std::string note;
  if (alone.value() == 0)
    note = absl::StrFormat("storage gives %s alone %.1f MB/s", Name(reader), rate / 1e6);
  alone.Add(rate * seconds, seconds);
  if (probing() && probed_ == reader) ++probe_windows_;
  return note;
}

const char* StoreShare::Name(Reader reader) {
  return reader == Reader::kHere ? "the reads here" : "the workers' reads";
}

bool StoreShare::Unprobed(Reader reader) const {
  return together() > 0 && alone_[Index(reader)].value() == 0 && !probed_sides_[Index(reader)];
}

void StoreShare::StartProbe(Reader reader, int64_t now, double seconds) {
  probed_ = reader;
  probed_sides_[Index(reader)] = true;
  changed_at_ = now;
  probe_until_ = now + static_cast<int64_t>(seconds * 1e9);
  probe_windows_ = 0;
}

void StoreShare::CancelProbe() {
  if (!probing()) return;
  probe_until_ = 0;
  probed_sides_[Index(probed_)] = false;
}

std::string StoreShare::EndProbe(int64_t now) {
  if (!probing() || (probe_windows_ < 2 && now < probe_until_)) return "";
  probe_until_ = 0;
  const char* who = Name(probed_);
  const double alone = alone_[Index(probed_)].value();
  if (alone == 0) {
    return absl::StrFormat(
        "storage probe: %s alone were never held by storage; they stay planned at the %.1f MB/s "
        "both sides read together",
        who, together() / 1e6);
  }
  return absl::StrFormat(
      "storage probe: storage gives %s alone %.1f MB/s, both sides together %.1f", who, alone / 1e6,
      together() / 1e6);
}

}  // namespace prepflow::policy
