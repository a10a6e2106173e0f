#include "client/remote/completion_threads.h"

#include <algorithm>

#include "base/clock.h"

namespace prepflow {

CompletionThreads& CompletionThreads::Shared() {
  static CompletionThreads* threads = new CompletionThreads(
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 8, 2, 8));
  return *threads;
}

CompletionThreads::CompletionThreads(int max_threads) : max_threads_(max_threads) {}

grpc::CompletionQueue* CompletionThreads::Acquire() {
  absl::MutexLock lock(&mu_);
  Lane* least = nullptr;
  for (const auto& lane : lanes_) {
    if (least == nullptr || lane->streams < least->streams) least = lane.get();
  }
  if (least == nullptr ||
      (least->streams >= kStreamsPerThread && static_cast<int>(lanes_.size()) < max_threads_)) {
    auto lane = std::make_unique<Lane>();
    grpc::CompletionQueue* queue = &lane->queue;
    lane->thread = std::thread([queue] {
      void* tag = nullptr;
      bool ok = false;
      for (int64_t cpu = ThreadCpuNanos(); queue->Next(&tag, &ok);) {
        const int64_t now = ThreadCpuNanos();
        static_cast<CompletionTag*>(tag)->Complete(ok, now - cpu);
        cpu = ThreadCpuNanos();
      }
    });
    lane->thread.detach();  // the set lives as long as the process
    least = lanes_.emplace_back(std::move(lane)).get();
  }
  ++least->streams;
  return &least->queue;
}

void CompletionThreads::Release(grpc::CompletionQueue* queue) {
  absl::MutexLock lock(&mu_);
  for (const auto& lane : lanes_) {
    if (&lane->queue == queue) --lane->streams;
  }
}

}  // namespace prepflow
