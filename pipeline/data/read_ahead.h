// Reading samples ahead of the CPU stages, for data whose reads wait on the
// network: each read is tens of milliseconds of latency and almost no CPU, so
// a decode thread that read for itself would sit idle. A ReadAhead runs the
// reads it is told of on its own I/O threads, many at once (each keeps its
// storage connection), within a budget of bytes, and hands each sample's
// bytes to the Read that asks for it, with what the read cost in requests
// (ThreadStorageStats) so that accounting follows the sample.
//
// Reads are hints: one that is not started (over the budget, or not hinted)
// is read by its caller as before. Bytes held but never taken (a work item a
// stream dropped) are evicted, oldest first, when new reads need the room.
//
// Thread-safety: every method may be called from any thread.
#ifndef PREPFLOW_PIPELINE_DATA_READ_AHEAD_H_
#define PREPFLOW_PIPELINE_DATA_READ_AHEAD_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/core/byte_budget.h"
#include "pipeline/core/sample.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {

struct ReadAheadOptions {
  int requests = 64;                       // reads in flight at once (I/O threads)
  int64_t max_bytes = int64_t{256} << 20;  // bytes read ahead and not yet taken
  // When set, what is read ahead is also taken from this budget, shared
  // with other holders (a worker's: every dataset and job); a read that
  // does not fit is not started.
  std::shared_ptr<ByteBudget> shared;
};

class ReadAhead {
 public:
  // Reads `size` bytes of a sample into `dst`.
  using Fetch = std::function<absl::Status(uint8_t* dst, size_t size)>;

  explicit ReadAhead(ReadAheadOptions options);
  // Waits for the reads in flight, then drops what is held.
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Starts reading sample `index` (`size` bytes) with `fetch`, unless it is
  // held or in flight already, or it does not fit the budget.
  void Start(int64_t index, size_t size, Fetch fetch);
  // When `index` was started: waits for its read, gives its bytes to `out`
  // (`*size`) or its error to `*status`, adds what it cost to this thread's
  // ThreadStorageStats, and returns true. False when it was not started, or
  // another Take has it already (one sample in two batches in flight): the
  // caller reads it itself.
  bool Take(int64_t index, Buffer* out, size_t* size, absl::Status* status);

  // Waits until every read started so far has finished (taken or held).
  void AwaitReads();

  struct Counters {
    int64_t started = 0;
    int64_t taken = 0;
    int64_t refused = 0;  // over the budget when hinted
    int64_t evicted = 0;  // held, never taken, dropped for room
  };
  Counters counters() const;

 private:
  struct Entry {
    uint64_t order;  // when started: eviction goes oldest first
    size_t size;
    Fetch fetch;
    std::unique_ptr<uint8_t[]> bytes;
    absl::Status status;
    StorageStats cost;
    bool running = false;
    bool done = false;
    // A Take has it (and may be waiting for it): no other Take gets it, and
    // MakeRoom does not drop it once done, so the taker's entry stays.
    bool claimed = false;
  };
  void IoLoop();
  // Drops held, finished entries, oldest first, until `bytes` more fit.
  bool MakeRoom(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `bytes` held (here and in the shared budget).
  void Release(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReadAheadOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar work_;  // a read to start, or stopping
  absl::CondVar done_;  // a read finished
  std::map<int64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> queue_ ABSL_GUARDED_BY(mu_);  // started, not yet running
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;     // of every entry
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_READ_AHEAD_H_
