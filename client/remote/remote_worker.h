// One job stream to one worker over gRPC: the WorkerStream (worker_stream.h)
// the Loader uses in production.
//
// The stream is driven by gRPC's asynchronous API on one of a fixed set of
// completion threads the process's streams share (completion_threads.h), so
// a trainer's threads do not grow with the workers it streams from (each
// stream used to take a reader and a writer thread: 256 threads for 128
// workers). Send() queues work items, written one at a time as each write
// completes; the caller never blocks on the network. Answers are handled on
// the stream's completion thread, in order, one at a time, while the next
// one is read.
//
// Thread-safety: all methods may be called from any thread; handlers run on
// the stream's completion thread and must not wait on the network.
#ifndef PREPFLOW_CLIENT_REMOTE_REMOTE_WORKER_H_
#define PREPFLOW_CLIENT_REMOTE_REMOTE_WORKER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/remote/completion_threads.h"
#include "client/remote/received_message.h"
#include "client/remote/worker_stream.h"
#include "grpcpp/grpcpp.h"
#include "net/security.h"
#include "proto/worker.grpc.pb.h"

namespace prepflow {

class RemoteWorker : public WorkerStream {
 public:
  // `security`: TLS and the bearer token (net/security.h).
  RemoteWorker(std::string address, Handlers handlers, const Security& security = {});
  // Cancels the stream if it is still open and waits for its last handler.
  ~RemoteWorker() override;
  RemoteWorker(const RemoteWorker&) = delete;
  RemoteWorker& operator=(const RemoteWorker&) = delete;

  void Start(const proto::JobOpen& open) override;
  void Send(proto::WorkItem item) override;
  void Close() override;
  void Cancel() override;
  const std::string& address() const { return address_; }
  // Receiving's CPU here: the completion thread's, waiting for this
  // stream's operations (polling, reading, parsing) and running its handlers.
  int64_t received_bytes() const override {
    return received_bytes_.load(std::memory_order_relaxed);
  }
  int64_t receive_cpu_nanos() const override {
    return receive_cpu_nanos_.load(std::memory_order_relaxed);
  }

 private:
  enum class Op { kStart, kRead, kWrite, kHalfClose, kFinish };
  class Tag : public CompletionTag {
   public:
    Tag(RemoteWorker* stream, Op op) : stream_(stream), op_(op) {}
    void Complete(bool ok, int64_t wait_cpu_nanos) override {
      stream_->OnComplete(op_, ok, wait_cpu_nanos);
    }

   private:
    RemoteWorker* const stream_;
    const Op op_;
  };
  // On the completion thread.
  void OnComplete(Op op, bool ok, int64_t wait_cpu_nanos);
  void OnRead(bool ok);
  // Starts writing the next queued message, or half-closes once closing
  // and everything is written. REQUIRES: the call started, no write in flight.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Once Finish has completed and no operation is in flight: runs the
  // closed handler and lets the destructor go (the last thing it does).
  void EndIfOverLocked() ABSL_UNLOCK_FUNCTION(mu_);

  const std::string address_;
  Handlers handlers_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  grpc::CompletionQueue* completions_ = nullptr;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<proto::ClientMessage, ReceivedMessage>> stream_;
  Tag start_tag_{this, Op::kStart}, read_tag_{this, Op::kRead}, write_tag_{this, Op::kWrite},
      half_close_tag_{this, Op::kHalfClose}, finish_tag_{this, Op::kFinish};
  std::shared_ptr<ReceivedMessage> reading_;  // the read in flight's target
  grpc::Status status_;                       // Finish's

  absl::Mutex mu_;
  std::deque<proto::ClientMessage> queue_ ABSL_GUARDED_BY(mu_);
  proto::ClientMessage writing_ ABSL_GUARDED_BY(mu_);  // the write in flight's message
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;             // operations not yet completed
  bool started_ ABSL_GUARDED_BY(mu_) = false;          // Start() ran
  bool ready_ ABSL_GUARDED_BY(mu_) = false;            // StartCall completed
  bool writing_now_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool over_ ABSL_GUARDED_BY(mu_) = false;      // no more writes: the call is ending
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish completed
  std::atomic<int64_t> received_bytes_{0};
  std::atomic<int64_t> receive_cpu_nanos_{0};
  absl::Notification done_;  // the closed handler has run
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_REMOTE_WORKER_H_
