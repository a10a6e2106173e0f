// The client's view of one job stream to one worker: what RemotePool needs,
// so that a fake stream can stand in for the network in tests.
//
// Start() sends the job's open message; answers arrive through the handlers;
// Send() queues a work item without blocking on the network. `closed` runs
// exactly once, last, with the stream's final status (OK after Close(),
// CANCELLED after Cancel(), the worker's refusal, or UNAVAILABLE when it went
// away). RemoteWorker (remote_worker.h) is the gRPC implementation.
//
// Thread-safety: every method may be called from any thread; handlers run on
// the stream's own thread, never inside a call to the stream.
#ifndef PREPFLOW_CLIENT_REMOTE_WORKER_STREAM_H_
#define PREPFLOW_CLIENT_REMOTE_WORKER_STREAM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/remote/received_message.h"
#include "proto/worker.pb.h"

namespace prepflow {

class WorkerStream {
 public:
  struct Handlers {
    std::function<void(const proto::JobOpened&)> opened;
    // An answer and its payloads, which stay in the received buffer.
    std::function<void(std::shared_ptr<const ReceivedMessage>)> result;
    // The worker is leaving and stays `seconds` (DrainNotice).
    std::function<void(double seconds)> draining;
    // A chunk of the link probe (LinkProbe) arrived: its bytes on the wire
    // and the probe's chunk count.
    std::function<void(int64_t bytes, int count)> probe;
    std::function<void(const absl::Status&)> closed;
  };

  // Cancels the stream if it is still open and waits for its handlers.
  virtual ~WorkerStream() = default;
  virtual void Start(const proto::JobOpen& open) = 0;
  virtual void Send(proto::WorkItem item) = 0;
  // Half-closes once the queued items are written; the worker then finishes
  // what it has and ends the stream.
  virtual void Close() = 0;
  // Ends the stream now; outstanding items are never answered.
  virtual void Cancel() = 0;
  // What the stream has received so far, and the CPU time spent here
  // receiving and parsing it (the transport's share of this process's CPU).
  virtual int64_t received_bytes() const = 0;
  virtual int64_t receive_cpu_nanos() const = 0;
};

// Opens a stream to `address` (not started). `tls_name`: the certificate name
// to verify instead of the address's ("" for the address's own).
using StreamFactory = std::function<std::unique_ptr<WorkerStream>(
    const std::string& address, const std::string& tls_name, WorkerStream::Handlers handlers)>;

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_REMOTE_WORKER_STREAM_H_
