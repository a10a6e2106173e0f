// Data echoing's hand-over: the value a sample's first copy made at the echo
// boundary, kept for its other copies so that each sample is read and
// prepared up to that boundary once per epoch, not once per copy.
//
// A copy asks for (epoch, index): the first to ask loads the value (the
// caller's `load`) and leaves it for the `copies - 1` others, which take it
// in turn; a copy that asks while another is loading waits for that load.
// Values are held within a byte budget (and, when given, a budget shared
// with other holders: a worker's, over all its jobs); past it the oldest go,
// or a new value is not kept, and a copy that finds its value gone loads it
// again (the same bytes: the value does not depend on the copy; counted as a
// reload).
//
// Thread-safety: every method may be called from any thread. A copy waits
// only for a load that is running on another thread.
#ifndef PREPFLOW_PIPELINE_REUSE_ECHO_STORE_H_
#define PREPFLOW_PIPELINE_REUSE_ECHO_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "pipeline/core/byte_budget.h"
#include "pipeline/core/op.h"
#include "pipeline/core/sample.h"

namespace prepflow {

class EchoStore {
 public:
  explicit EchoStore(int64_t max_bytes, std::shared_ptr<ByteBudget> shared = nullptr)
      : max_bytes_(max_bytes), shared_(std::move(shared)) {}
  // Gives what it holds back to the shared budget.
  ~EchoStore();
  EchoStore(const EchoStore&) = delete;
  EchoStore& operator=(const EchoStore&) = delete;

  // Makes `s` (its identity set) hold its value at the echo boundary: from
  // an earlier copy, or by calling `load` (which must leave that value in
  // `s`) and keeping the result for the other `copies - 1` copies. A failed
  // load's error is also the answer of the copies waiting for it.
  absl::Status Get(Sample& s, Workspace& ws, int copies, const std::function<absl::Status()>& load);

  // `indices` of `epoch` that no copy has asked for yet, or whose value is
  // no longer held (those a read ahead may still serve).
  std::vector<int64_t> NotStarted(uint64_t epoch, absl::Span<const int64_t> indices) const;

  struct Stats {
    int64_t loads = 0;    // values made by `load`
    int64_t taken = 0;    // values handed to a later copy
    int64_t reloads = 0;  // loads of a value that had been dropped for room
    int64_t held_bytes = 0;
  };
  Stats stats() const;

 private:
  struct Key {
    uint64_t epoch;
    int64_t index;
    bool operator==(const Key& o) const { return epoch == o.epoch && index == o.index; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.epoch, k.index);
    }
  };
  struct Entry {
    bool loading = true;
    absl::Status status;
    std::shared_ptr<const std::string> value;  // wire form
    int remaining = 0;                         // copies still to take it
    uint64_t order = 0;
  };
  // Drops the oldest held values until the budget holds.
  void Trim() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Forgets `bytes` held (here and in the shared budget).
  void Release(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  const std::shared_ptr<ByteBudget> shared_;  // may be null
  mutable absl::Mutex mu_;
  absl::CondVar loaded_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint64_t, Key>> held_ ABSL_GUARDED_BY(mu_);  // by order
  absl::flat_hash_map<Key, int64_t> dropped_ ABSL_GUARDED_BY(mu_);  // copies still owed
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_REUSE_ECHO_STORE_H_
