// One job stream to one worker over gRPC: the WorkerStream (worker_stream.h)
// the Loader uses in production.
//
// Results arrive on a reader thread, which runs the handlers; Send() queues
// work items for a writer thread, so the caller never blocks on the network.
//
// Thread-safety: all methods may be called from any thread; handlers run on
// the reader thread.
#ifndef PREPFLOW_CLIENT_REMOTE_REMOTE_WORKER_H_
#define PREPFLOW_CLIENT_REMOTE_REMOTE_WORKER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
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
  // Cancels the stream if it is still open and joins its threads.
  ~RemoteWorker() override;
  RemoteWorker(const RemoteWorker&) = delete;
  RemoteWorker& operator=(const RemoteWorker&) = delete;

  void Start(const proto::JobOpen& open) override;
  void Send(proto::WorkItem item) override;
  void Close() override;
  void Cancel() override;
  const std::string& address() const { return address_; }
  // The reader thread's CPU counts receiving, parsing and handing results over.
  int64_t received_bytes() const override {
    return received_bytes_.load(std::memory_order_relaxed);
  }
  int64_t receive_cpu_nanos() const override {
    return receive_cpu_nanos_.load(std::memory_order_relaxed);
  }

 private:
  void ReadLoop();
  void WriteLoop();

  const std::string address_;
  Handlers handlers_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<proto::ClientMessage, ReceivedMessage>> stream_;

  absl::Mutex mu_;
  std::deque<proto::ClientMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> received_bytes_{0};
  std::atomic<int64_t> receive_cpu_nanos_{0};
  std::thread writer_;
  std::thread reader_;
};

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_REMOTE_WORKER_H_
