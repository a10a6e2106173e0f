// A bounded set of threads, each draining one gRPC CompletionQueue, that
// every worker stream of this process shares: a stream's reads, writes and
// end complete on one of them, which runs its handlers there. The thread
// that waits on a queue also polls the sockets (gRPC's epoll engine), so an
// answer is received, parsed and handed over by one thread, as a stream's
// own reader thread did. Threads are added as streams come, one per
// kStreamsPerThread, up to clamp(cores / 8, 2, 8) whatever the number of
// streams: an idle thread waiting on a queue would take turns polling and
// cost the busy ones a hand-off per answer (one stream with two threads
// spent 15% more CPU per GB than with one).
//
// Thread-safety: thread-safe. The set lives as long as the process.
#ifndef PREPFLOW_CLIENT_REMOTE_COMPLETION_THREADS_H_
#define PREPFLOW_CLIENT_REMOTE_COMPLETION_THREADS_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/completion_queue.h"

namespace prepflow {

// What a completion runs: the tag gRPC hands back is a CompletionTag*.
class CompletionTag {
 public:
  virtual ~CompletionTag() = default;
  // `ok`: the operation succeeded (false: the call is over or cancelled).
  // `wait_cpu_nanos`: the CPU the thread spent waiting for it (polling the
  // sockets, reading and parsing what came: gRPC does that inside Next).
  virtual void Complete(bool ok, int64_t wait_cpu_nanos) = 0;
};

class CompletionThreads {
 public:
  // The process's set, started on first use.
  static CompletionThreads& Shared();

  static constexpr int kStreamsPerThread = 8;

  // The queue of the thread with the fewest streams (a new thread's where
  // each has kStreamsPerThread and there may be more); Release() it when
  // the stream is done.
  grpc::CompletionQueue* Acquire();
  void Release(grpc::CompletionQueue* queue);

 private:
  explicit CompletionThreads(int max_threads);
  struct Lane {
    grpc::CompletionQueue queue;
    std::thread thread;
    int streams = 0;  // guarded by mu_
  };
  const int max_threads_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_COMPLETION_THREADS_H_
