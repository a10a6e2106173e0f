// Per-stage cost accounting: thread CPU seconds and output bytes per sample.
//
// The planner decides where to cut a pipeline from these numbers, so they are
// measured the same way on trainers and workers: CPU time of the calling
// thread (CLOCK_THREAD_CPUTIME_ID) around each stage, and the size of the
// value the stage produced.
//
// Thread-safety: Record() may be called from any number of threads; it only
// adds to relaxed atomics. Snapshot() may run concurrently and sees a
// consistent-enough view for reporting.
#ifndef PREPFLOW_PIPELINE_CORE_PROFILER_H_
#define PREPFLOW_PIPELINE_CORE_PROFILER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"

namespace prepflow {

struct StageStats {
  std::string name;
  int64_t samples = 0;
  double cpu_seconds = 0;
  int64_t output_bytes = 0;

  double cpu_seconds_per_sample() const { return samples ? cpu_seconds / samples : 0; }
  double bytes_per_sample() const {
    return samples ? static_cast<double>(output_bytes) / samples : 0;
  }
};

class StageProfiler {
 public:
  // One slot per name; stage i of a pipeline records into slot i.
  explicit StageProfiler(std::vector<std::string> names);

  void Record(int slot, int64_t cpu_nanos, int64_t output_bytes) {
    Slot& s = slots_[slot];
    s.samples.fetch_add(1, std::memory_order_relaxed);
    s.cpu_nanos.fetch_add(cpu_nanos, std::memory_order_relaxed);
    s.bytes.fetch_add(output_bytes, std::memory_order_relaxed);
  }
  std::vector<StageStats> Snapshot() const;
  int size() const { return static_cast<int>(names_.size()); }

 private:
  struct alignas(64) Slot {
    std::atomic<int64_t> samples{0};
    std::atomic<int64_t> cpu_nanos{0};
    std::atomic<int64_t> bytes{0};
  };
  std::vector<std::string> names_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_PROFILER_H_
