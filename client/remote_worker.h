// One job stream to one worker, seen from the client.
//
// Start() sends the job's open message; results arrive on a reader thread
// through the handlers; Send() queues work items for a writer thread, so the
// caller never blocks on the network. `closed` runs exactly once, last, with
// the stream's final status (OK after Close(), CANCELLED after Cancel(), the
// worker's refusal, or UNAVAILABLE when it went away).
//
// Thread-safety: all methods may be called from any thread; handlers run on
// the reader thread.
#ifndef PREPFLOW_CLIENT_REMOTE_WORKER_H_
#define PREPFLOW_CLIENT_REMOTE_WORKER_H_

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
#include "client/received_message.h"
#include "grpcpp/grpcpp.h"
#include "net/security.h"
#include "proto/worker.grpc.pb.h"

namespace prepflow {

class RemoteWorker {
 public:
  struct Handlers {
    std::function<void(const proto::JobOpened&)> opened;
    // The result and its payloads, which stay in the received buffer.
    std::function<void(std::shared_ptr<const ReceivedMessage>)> result;
    std::function<void(const absl::Status&)> closed;
  };

  // `security`: TLS and the bearer token (server/security.h).
  RemoteWorker(std::string address, Handlers handlers, const Security& security = {});
  // Cancels the stream if it is still open and joins its threads.
  ~RemoteWorker();
  RemoteWorker(const RemoteWorker&) = delete;
  RemoteWorker& operator=(const RemoteWorker&) = delete;

  void Start(const proto::JobOpen& open);
  void Send(proto::WorkItem item);
  // Half-closes once the queued items are written; the worker then finishes
  // what it has and ends the stream.
  void Close();
  // Ends the stream now; outstanding items are never answered.
  void Cancel();
  const std::string& address() const { return address_; }
  // What the stream has received so far, and the CPU time its reader thread
  // spent receiving, parsing and handing results over (the transport's share
  // of the client's CPU, which the planner charges per byte).
  int64_t received_bytes() const { return received_bytes_.load(std::memory_order_relaxed); }
  int64_t receive_cpu_nanos() const { return receive_cpu_nanos_.load(std::memory_order_relaxed); }

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

#endif  // PREPFLOW_CLIENT_REMOTE_WORKER_H_
