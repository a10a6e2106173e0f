// Bytes that several holders share: a worker's reads ahead and echoed values
// over all its datasets and jobs. Each holder takes before it keeps bytes
// and gives them back when it drops them; a take that does not fit is
// refused, and the holder does without (reads the sample when it is needed,
// loads the value again), so what all of them hold stays within the budget
// however many there are.
//
// Thread-safety: every method may be called from any thread.
#ifndef PREPFLOW_PIPELINE_CORE_BYTE_BUDGET_H_
#define PREPFLOW_PIPELINE_CORE_BYTE_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace prepflow {

class ByteBudget {
 public:
  explicit ByteBudget(int64_t capacity) : capacity_(capacity) {}

  // Takes `bytes` if they fit; false (nothing taken) otherwise.
  bool TryTake(int64_t bytes) {
    int64_t held = held_.load(std::memory_order_relaxed);
    do {
      if (bytes > capacity_ - held) return false;
    } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
    return true;
  }
  // Gives back `bytes` taken before.
  void Give(int64_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }

  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  int64_t capacity() const { return capacity_; }

 private:
  const int64_t capacity_;
  std::atomic<int64_t> held_{0};
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_BYTE_BUDGET_H_
