// Whether this trainer and its workers read from one store whose capacity
// they share (its egress, its request rate), or each from storage of its
// own, as far as the reads show.
//
// Storage is seen binding a side when its readers wait for bytes half their
// time (Replanner's FoldStorage gives S_l here and S_r on the workers). When
// both sides bind at once, each limit is only that side's share of what the
// store gave: planned as separate limits, all local would be held to S_l and
// offloading credited with S_r on top, a gain a shared store never gives.
//
//   window     at least a second and four reads (both sides together)
//   together   both sides waited >= half their time: what they read
//              together (smoothed: the mean with the last)
//   alone      one side waited >= half its time while the other read under
//              5% of the bytes: what it read alone (smoothed likewise)
//   shared     seen together, and alone (when seen) at least 0.8x together:
//              one side alone gets what both got, so they share one store;
//              S (PlanInput::storage_bandwidth) is the together rate
//   separate   alone under 0.8x together: each side has storage of its own,
//              and the per-side limits stand
//
// Until a side is seen alone, a store seen binding both at once is taken as
// shared: the prudent reading (it plans no gain from reading elsewhere), and
// the one that lets all local be tried, where the alone rate settles it.
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
  // worth logging when the verdict changes (shared, or separate), else "".
  std::string Observe(int64_t now, const Side& here, const Side& workers);

  // S: bytes/s both sides read at together, when they share a store; 0 when
  // not seen binding together, or seen to have storage of their own.
  double shared_limit() const { return Shared() ? together_ : 0; }
  double together() const { return together_; }
  double alone() const { return alone_; }

 private:
  bool Shared() const;

  int64_t start_ = 0;
  Side here_, workers_;  // the counters when the window opened
  double together_ = 0, alone_ = 0;
  enum class Said { kNothing, kShared, kSeparate } said_ = Said::kNothing;
};

}  // namespace prepflow::policy

#endif  // PREPFLOW_POLICY_STORE_SHARE_H_
