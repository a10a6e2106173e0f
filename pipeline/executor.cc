#include "pipeline/executor.h"

#include <malloc.h>
#include <sched.h>

#include <algorithm>

namespace prepflow {

ThreadPool::ThreadPool(int threads, size_t queue_capacity)
    : ring_(std::max<size_t>(queue_capacity, 1)) {
  threads = std::max(threads, 1);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() { Stop(); }

bool ThreadPool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  while (count_ == ring_.size() && !stopping_) not_full_.Wait(&mu_);
  if (stopping_) return false;
  ring_[(head_ + count_) % ring_.size()] = std::move(task);
  ++count_;
  not_empty_.Signal();
  return true;
}

void ThreadPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    for (size_t i = 0; i < count_; ++i) ring_[(head_ + i) % ring_.size()] = nullptr;
    count_ = 0;
    not_empty_.SignalAll();
    not_full_.SignalAll();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

size_t ThreadPool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

void ThreadPool::WorkerLoop(int worker) {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      while (count_ == 0 && !stopping_) not_empty_.Wait(&mu_);
      if (stopping_) return;
      task = std::move(ring_[head_]);
      ring_[head_] = nullptr;
      head_ = (head_ + 1) % ring_.size();
      --count_;
      not_full_.Signal();
    }
    task(worker);
  }
}

void TuneAllocatorForStreaming() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

}  // namespace prepflow
