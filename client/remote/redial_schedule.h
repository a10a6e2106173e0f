// When to dial a static worker (--workers) again after its stream failed.
//
// A worker listed with --workers that was not up when the job started (still
// booting), or that crashed or restarted mid-run, is dialled again: first
// `first_seconds` after the failure, then twice as long after each failure
// in a row, at most `max_seconds` apart. A stream that opened the job resets
// the delay. Workers the scheduler granted are dialled by its grants
// instead (SchedulerGrants), and a refusal stops the run, so neither comes
// here.
//
// Thread-safety: none; the RemotePool calls it under its lock.
#ifndef PREPFLOW_CLIENT_REMOTE_REDIAL_SCHEDULE_H_
#define PREPFLOW_CLIENT_REMOTE_REDIAL_SCHEDULE_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace prepflow {

class RedialSchedule {
 public:
  RedialSchedule(double first_seconds, double max_seconds)
      : first_seconds_(first_seconds), max_seconds_(std::max(first_seconds, max_seconds)) {}

  // `address`'s stream failed at `now_nanos`; `opened`: it had opened the
  // job. Returns the seconds until it is due again.
  double Failed(const std::string& address, bool opened, int64_t now_nanos) {
    Entry& e = entries_[address];
    e.delay = opened || e.delay == 0 ? first_seconds_ : std::min(2 * e.delay, max_seconds_);
    e.at = now_nanos + static_cast<int64_t>(e.delay * 1e9);
    e.due = true;
    return e.delay;
  }
  // The addresses due at `now_nanos`, each once until it fails again.
  std::vector<std::string> Due(int64_t now_nanos) {
    std::vector<std::string> due;
    for (auto& [address, e] : entries_) {
      if (e.due && e.at <= now_nanos) {
        e.due = false;
        due.push_back(address);
      }
    }
    return due;
  }

 private:
  struct Entry {
    int64_t at = 0;
    double delay = 0;  // seconds; 0: never failed
    bool due = false;
  };
  const double first_seconds_, max_seconds_;
  std::map<std::string, Entry> entries_;
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_REDIAL_SCHEDULE_H_
