// The workers' links and this machine's ingest, watched through windows of
// their counters (the re-planner's rules, replanner.h: "probe" and
// "links"): which link binds and at what rate, what a probe says before any
// window closes, and the fastest ingest seen (slow start's base).
//
// Thread-safety: not thread-safe (the Replanner holds it under its lock).
#ifndef PREPFLOW_POLICY_LINK_WATCH_H_
#define PREPFLOW_POLICY_LINK_WATCH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "policy/snapshot.h"

namespace prepflow::policy {

// One worker's link as watched.
struct LinkEstimate {
  double limit = 0;        // bytes/s the link bound at; 0: never seen binding
  double ingest_rate = 0;  // bytes/s over its last window
  double probe = 0;        // bytes/s its probe came at (WorkerTotals); 0: none
};

class LinkWatch {
 public:
  // Folds a snapshot in: each worker's window, and the ingest's over all of
  // them, with a note for each limit found. `receive_cost_per_byte`: this
  // process's CPU per byte received (a busy process is slow to take answers
  // only where receiving them is real work).
  void Fold(const Snapshot& s, double receive_cost_per_byte, std::vector<std::string>* notes);
  // The workers sat idle (every sample placed here) and are sent work
  // again: each window reopens at the next snapshot, so none spans the idle
  // time (a window that did read its few answers, which came with every
  // credit out, as a slow link: 6.4 MB/s on an unlimited bridge, after the
  // storage probe ran all local).
  void Reopen();
  // Whether every usable worker that has answered has had a window close or
  // a steady probe.
  bool Measured(const Snapshot& s) const;
  // Worker `id`'s link limit in bytes/s; 0: never seen binding.
  double limit(int id) const;
  // The ingest's limit (0: never seen binding) and the fastest ingest seen,
  // bytes/s.
  double ingest_limit() const { return ingest_.limit; }
  double ingest_peak() const { return ingest_.peak; }
  // Every worker's, by WorkerTotals::id.
  std::map<int, LinkEstimate> links() const;

 private:
  void FoldLinks(const Snapshot& snapshot, std::vector<std::string>* notes);
  // The workers' links together: the trainer's ingest.
  struct IngestWindow {
    int64_t start_nanos = 0;
    int64_t start_cpu_nanos = 0;
    std::map<int, WorkerTotals> start;  // each usable worker's counters then
    double limit = 0;                   // bytes/s; 0: never seen binding
    double peak = 0;                    // the fastest window's bytes/s
    bool probes_seen = false;           // SeedIngestFromProbes looked
    bool probed = false;                // limit is the probes': no window has closed
  };
  void FoldIngest(const Snapshot& snapshot, std::vector<std::string>* notes);
  // Takes the workers' link probes together as the ingest's limit where they
  // shared one link (see the rules), once every usable worker's has come.
  void SeedIngestFromProbes(const Snapshot& snapshot, std::vector<std::string>* notes);
  // The share of the results since `start` that came with every credit out.
  static double Saturated(const WorkerTotals& w, const WorkerTotals& start);
  // Whether worker `w`'s increments since `start` say its link bound: every
  // credit out (>= 80% of results), its CPU < 60% busy for this job and
  // < 80% for all (its own report), and this process either < 70% busy or
  // needing < 0.25 core to receive `rate` (at the cost Fold was given) where
  // its link was probed and the probe did not carry over twice `rate`.
  bool LinkBound(const WorkerTotals& w, const WorkerTotals& start, double seconds, double rate,
                 double here_busy) const;

  struct LinkWindow {
    int64_t start_nanos = 0;
    int64_t start_cpu_nanos = 0;  // this process's CPU then
    WorkerTotals start;           // the worker's counters then
    LinkEstimate link;
    bool measured = false;  // a window has closed, or a steady probe came
    bool probed = false;    // link.limit is the probe's: no window has closed
  };
  // Takes worker `w`'s link probe (see the rules).
  static void SeedFromProbe(const WorkerTotals& w, LinkWindow& lw, std::vector<std::string>* notes);

  double receive_cost_ = 0;  // per byte, as the Fold under way was given
  std::map<int, LinkWindow> links_;
  IngestWindow ingest_;
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_LINK_WATCH_H_
