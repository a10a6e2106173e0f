// A fixed pool of threads fed through a bounded queue.
//
// Submit() blocks while the queue is full, so a producer can never get more
// than `queue_capacity` tasks ahead of the workers: memory stays bounded by
// construction. Each task is told which worker runs it, so it can use that
// worker's scratch state without locking.
//
// Thread-safety: Submit(), queue_depth() and Stop() may be called from any
// thread. Tasks must not call Stop().
#ifndef PREPFLOW_PIPELINE_CORE_EXECUTOR_H_
#define PREPFLOW_PIPELINE_CORE_EXECUTOR_H_

#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace prepflow {

class ThreadPool {
 public:
  using Task = std::function<void(int worker)>;

  // Starts `threads` (>= 1) workers, or as many as the system lets it:
  // size() says how many, start_error() why not all.
  ThreadPool(int threads, size_t queue_capacity);
  // Stop()s and joins.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`, waiting for room. Returns false (and drops the task) once
  // Stop() has begun.
  bool Submit(Task task);
  // Drops queued tasks, lets running ones finish, joins the workers.
  // Idempotent.
  void Stop();

  int size() const { return static_cast<int>(threads_.size()); }
  const std::string& start_error() const { return start_error_; }
  size_t queue_depth() const;
  size_t queue_capacity() const { return capacity_; }
  // Producers waiting in Submit() for room now (a full queue's back-pressure).
  int blocked_producers() const;

 private:
  void WorkerLoop(int worker);

  mutable absl::Mutex mu_;
  absl::CondVar not_empty_;
  absl::CondVar not_full_;
  const size_t capacity_;
  std::vector<Task> ring_ ABSL_GUARDED_BY(mu_);  // capacity_ slots, never reallocated
  size_t head_ ABSL_GUARDED_BY(mu_) = 0;
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  std::string start_error_;
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int AvailableCpus();

// The CPU this process may actually use, in cores: AvailableCpus() capped by
// its cgroup's CPU quota (v1 cpu.cfs_quota_us / cpu.cfs_period_us, or v2
// cpu.max), e.g. 0.5 in a container limited to half a core. What the offload
// planner reads as this side's capacity.
double EffectiveCpus();

// Memory this process may use, in bytes: physical memory capped by its
// cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes).
int64_t AvailableMemoryBytes();

// Keeps large freed blocks in the heap instead of returning them to the
// kernel (glibc mallopt M_MMAP_THRESHOLD 256 MiB, M_TRIM_THRESHOLD 1 GiB). A
// process streaming gigabytes through fresh multi-megabyte buffers otherwise
// page-faults on every one: on the wire benchmark this cut the client's CPU
// per GB by a fifth. prepflow and prepflow-worker call it at start-up; an
// embedding program may. Process-wide; call before starting threads.
void TuneAllocatorForStreaming();

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_EXECUTOR_H_
