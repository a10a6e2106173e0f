// Bounds the scratch memory that a pool of pipeline threads holds at once:
// the encoded bytes read, decoded pixels, every op's output, and what a
// decoder holds inside libjpeg or OpenCV while it runs. A worker's threads
// share one; the trainer's own threads run unbounded.
//
// Each thread may always hold its share (bytes / (2 x threads)). A sample
// that needs more (a large file, a large image: its need is known from the
// file's size or the image's header before anything is allocated) waits
// until it is the one thread past its share, and may then hold up to its
// share plus half of `bytes`; it gives the rest back when the sample ends.
// A thread waits only while it holds no more than its share, and the thread
// past its share never waits for another thread, so no two wait on each
// other. A need past share plus half of `bytes` is refused.
//
// Thread-safety: a WorkingMemory may be used from any thread; each
// MemoryMeter by one thread at a time (its Workspace's).
#ifndef PREPFLOW_PIPELINE_CORE_WORKING_MEMORY_H_
#define PREPFLOW_PIPELINE_CORE_WORKING_MEMORY_H_

#include <cstdint>
#include <new>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace prepflow {

class WorkingMemory {
 public:
  // `bytes` for `threads` threads; `name` says where the number comes from,
  // for messages ("a quarter of --max-memory-bytes 400000000").
  WorkingMemory(int64_t bytes, int threads, std::string name);
  WorkingMemory(const WorkingMemory&) = delete;
  WorkingMemory& operator=(const WorkingMemory&) = delete;

  int64_t share() const { return share_; }
  // The most one thread may hold: its share and the pool past the shares.
  int64_t most() const { return share_ + pool_; }
  const std::string& name() const { return name_; }
  // Threads past their share now (0 or 1), and how many samples have had to
  // wait to be: what a metric or a test reads.
  int past_share() const;
  int64_t waits() const;

 private:
  friend class MemoryMeter;
  void EnterPastShare();
  void LeavePastShare();

  const int64_t share_;
  const int64_t pool_;
  const std::string name_;
  mutable absl::Mutex mu_;
  bool taken_ ABSL_GUARDED_BY(mu_) = false;
  int64_t waits_ ABSL_GUARDED_BY(mu_) = 0;
};

// One thread's count of what it holds of a WorkingMemory.
class MemoryMeter {
 public:
  explicit MemoryMeter(WorkingMemory* memory) : memory_(memory) {}
  ~MemoryMeter();
  MemoryMeter(const MemoryMeter&) = delete;
  MemoryMeter& operator=(const MemoryMeter&) = delete;

  // Counts `bytes` more as held, before they are allocated: waits first
  // when they take the thread past its share; ResourceExhausted (nothing
  // counted) when they take it past most().
  absl::Status Charge(int64_t bytes);
  void Uncharge(int64_t bytes) { held_ -= bytes; }
  int64_t held() const { return held_; }
  // Whether this thread is past its share for the running sample.
  bool past_share() const { return past_share_; }
  int64_t share() const { return memory_->share(); }
  // Called when a sample ends, once held() is back within the share: lets
  // the next large sample (of any thread) go.
  void EndSample();

 private:
  WorkingMemory* const memory_;
  int64_t held_ = 0;
  bool past_share_ = false;
};

// What Buffer::Reserve throws when its meter refuses the growth: a
// std::bad_alloc (callers already turn those into ResourceExhausted) that
// says why.
class OverWorkingMemory : public std::bad_alloc {
 public:
  explicit OverWorkingMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// The message for an allocation failure: OverWorkingMemory's reason, else
// "out of memory".
std::string OutOfMemoryMessage(const std::bad_alloc& e);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_WORKING_MEMORY_H_
