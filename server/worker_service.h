// The gRPC face of WorkerCore: one callback-API reactor per job stream. It
// only translates messages and drives the stream; the logic is WorkerCore's.
//
// Thread-safety: gRPC calls the reactors; Drain() may be called from any
// thread.
#ifndef PREPFLOW_SERVER_WORKER_SERVICE_H_
#define PREPFLOW_SERVER_WORKER_SERVICE_H_

#include <cstdint>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/worker.grpc.pb.h"
#include "server/worker_core.h"

namespace prepflow {

class StreamReactor;

struct WorkerServiceOptions {
  // The bearer token every stream must carry (security.h); empty: none.
  std::string token;
  // A stream that has not opened a job by then is ended DEADLINE_EXCEEDED,
  // so idle connections cannot hold the stream slots (--max-streams); 0: no
  // limit.
  double open_timeout_seconds = 10;
  // A stream whose client has not taken a reply for this long is cancelled,
  // its unsent results (and their share of the memory budget) dropped, so a
  // client that stops reading cannot hold the budget other jobs wait on;
  // its client hands the items elsewhere. 0: no limit.
  double reply_timeout_seconds = 120;
  // The most link-probe bytes a stream gets (JobOpen.probe_bytes).
  int64_t max_probe_bytes = int64_t{4} << 20;
};

// The Process method is served raw (byte buffers) so results go out without
// protobuf copying their payloads (result_encoding.h); the messages on the
// wire are the same WorkerMessage and ClientMessage.
class WorkerService final
    : public proto::Worker::WithRawCallbackMethod_Process<proto::Worker::Service> {
 public:
  WorkerService(WorkerCore* core, WorkerServiceOptions options);
  ~WorkerService() override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Process(
      grpc::CallbackServerContext* context) override;

  // Graceful shutdown, step one: refuse new jobs; every stream with a job
  // gets a DrainNotice (the worker stays `seconds`), answers the items it
  // has and those still on their way, and ends when its client closes it
  // (or when the server shuts down, its client re-issuing what is left).
  // Returns at once.
  void Drain(double seconds);
  int active_streams() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(streams_.size());
  }

 private:
  friend class StreamReactor;
  void Forget(StreamReactor* reactor);

  void JanitorLoop();

  WorkerCore* core_;
  const WorkerServiceOptions options_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread janitor_;
  std::set<StreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
  // Streams the janitor is cancelling outside mu_: not deleted meanwhile.
  std::set<StreamReactor*> pinned_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  double drain_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_WORKER_SERVICE_H_
