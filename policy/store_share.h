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
//   together   both sides waited >= half their time: S, what they read
//              together (smoothed: the mean with the last), a limit on all
//              reads wherever they run
//   alone      one side waited >= half its time while the other read under
//              5% of the bytes: that side's own limit (smoothed likewise)
//   limits     once S is seen: S together, and each side's alone rate, or S
//              where that side was never seen alone (a shared store's
//              reading: one side may get what both did). Separate stores
//              show as alone rates that sum to S, where S never binds
//
// The unseen side taken at S is the prudent reading (it credits offloading
// with no second store), and the one that lets all local run, where the
// trainer's alone rate is then measured. No verdict flips between readings:
// each term is a measured rate.
//
// Thread-safety: not thread-safe (the Replanner holds it under its lock).
#ifndef PREPFLOW_POLICY_STORE_SHARE_H_
#define PREPFLOW_POLICY_STORE_SHARE_H_

#include <cstdint>
#include <string>

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

  // Folds both sides' counters in at `now` (nanoseconds). Returns a line
  // worth logging when a rate is first seen, else "".
  std::string Observe(int64_t now, const Side& here, const Side& workers);

  // S, bytes/s: what both sides read together while both waited; 0: not seen.
  double together() const { return together_; }
  // Each side's limit once S is seen: its alone rate, or S (see above); 0
  // before S is seen (the per-side windows stand).
  double here_limit() const { return Limit(alone_here_); }
  double workers_limit() const { return Limit(alone_workers_); }

 private:
  double Limit(double alone) const { return together_ == 0 ? 0 : alone > 0 ? alone : together_; }

  int64_t start_ = 0;
  Side here_, workers_;  // the counters when the window opened
  double together_ = 0, alone_here_ = 0, alone_workers_ = 0;
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_STORE_SHARE_H_
