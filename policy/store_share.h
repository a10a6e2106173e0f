// What storage gives this trainer and its workers when both read from it at
// once, and what each side gets alone: one store they share (its egress, its
// request rate) or storage of their own, as far as the reads show.
//
// Storage is seen binding a side when its readers wait for bytes half their
// time (Replanner's FoldStorage gives S_l here and S_r on the workers). When
// both sides bind at once, each rate is only that side's share of what the
// store gave: planned as separate limits, all local would be held to S_l and
// offloading credited with S_r on top, a gain a shared store never gives.
//
//   window     at least a second and four reads (both sides together)
//   quiet      a side that read under 5% of the window's bytes
//   together   both sides waited >= half their time, neither quiet: S, what
//              they read together, a limit on every placement where both
//              read (planner.h)
//   alone      one side waited >= half its time while the other was quiet:
//              that side's own limit
//   switch     a window that opened before half a second after the
//              placement changed (PlacementChanged) counts for neither side
//   smoothed   each rate is its bytes over its windows' seconds, over about
//              the last 8 s of them (a window's rate swings by 10% with the
//              files it held, and the two sides differ by less than that)
//   limits     once S is seen: S together, and each side's alone rate, or S
//              where that side was never seen alone (a shared store's
//              reading: one side may get what both did). Separate stores
//              show as alone rates that sum to S, where S never binds
//
// The unseen side taken at S is the prudent reading (it credits offloading
// with no second store). No verdict flips between readings: each term is a
// measured rate. But a store can give one reader more than two at once (the
// testbed's, behind one link, gave the workers alone 6.1 MB/s, the trainer
// 5.9, and both together 5.8), and a side never seen alone is then ranked
// below what it would give. So a side can be probed:
//
//   probe      the re-planner runs one side alone for a while (its rules say
//              when); it ends once two windows after the switch saw that
//              side alone, or after the seconds it is given. Each side is
//              probed once
//
// Thread-safety: not thread-safe (the Replanner holds it under its lock).
#ifndef PREPFLOW_POLICY_STORE_SHARE_H_
#define PREPFLOW_POLICY_STORE_SHARE_H_

#include <cstdint>
#include <string>

#include "policy/measurements.h"

namespace prepflow::policy {

class StoreShare {
 public:
  // One side's reads, cumulative: the wall seconds its readers waited for
  // bytes, the bytes and reads, and how many readers there are.
  struct Side {
    double wait_seconds = 0;
    double bytes = 0;
    double reads = 0;
    double readers = 1;
  };

  enum class Reader { kHere, kWorkers };

  // Folds both sides' counters in at `now` (nanoseconds). Returns a line
  // worth logging when a rate is first seen, else "".
  std::string Observe(int64_t now, const Side& here, const Side& workers);

  // The placement changed at `now` (by more than a revision): the window
  // open then counts for neither side (see "switch").
  void PlacementChanged(int64_t now) { changed_at_ = now; }

  // Whether `reader` may be probed: S is seen, that side never was alone,
  // and it was not probed before.
  bool Unprobed(Reader reader) const;
  // Starts probing `reader` at `now` (a placement change), for at most
  // `seconds`.
  void StartProbe(Reader reader, int64_t now, double seconds);
  bool probing() const { return probe_until_ > 0; }
  // Ends the running probe when it is done at `now` (see above): a line
  // saying what it found; "" while it goes on.
  std::string EndProbe(int64_t now);
  // Drops the running probe unfinished (its side may be probed again).
  void CancelProbe();
  // For log lines: "the reads here", "the workers' reads".
  static const char* Name(Reader reader);

  // S, bytes/s: what both sides read together while both waited; 0: not seen.
  double together() const { return together_.value(); }
  // Each side's limit once S is seen: its alone rate, or S (see above); 0
  // before S is seen (the per-side windows stand).
  double here_limit() const { return Limit(alone_[kHere].value()); }
  double workers_limit() const { return Limit(alone_[kWorkers].value()); }

 private:
  // A rate over the windows it was seen in (see "smoothed"); 0: none yet.
  class Rate {
   public:
    void Add(double bytes, double seconds) {
      bytes_ += bytes;
      seconds_ += seconds;
      mean_.Update(bytes_, seconds_);
    }
    double value() const { return mean_.value_or(0); }

   private:
    double bytes_ = 0, seconds_ = 0;
    SmoothedRatio mean_ = SmoothedRatio::OverLast(8, 0.5, 0.5);
  };

  // Index of a reader's rate and probe mark.
  enum { kHere, kWorkers };
  static int Index(Reader reader) { return reader == Reader::kHere ? kHere : kWorkers; }

  double Limit(double alone) const { return together() == 0 ? 0 : alone > 0 ? alone : together(); }
  // Folds a window in which `reader` read alone; a line when first seen.
  std::string FoldAlone(Reader reader, double rate, double seconds);

  int64_t start_ = 0;
  Side here_, workers_;  // the counters when the window opened
  Rate together_, alone_[2];
  int64_t changed_at_ = 0;  // the placement's last change; 0: none
  // The probe: whom, until when (0: none running), the windows since its
  // switch that saw it alone, and who was probed.
  Reader probed_ = Reader::kHere;
  int64_t probe_until_ = 0;
  int probe_windows_ = 0;
  bool probed_sides_[2] = {false, false};
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_STORE_SHARE_H_
