#include "client/remote/remote_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "client/remote/completion_threads.h"
#include "grpcpp/generic/generic_stub.h"
#include "net/status.h"
#include "pipeline/core/wire.h"

namespace prepflow {
namespace {

// Worker.Process, with our own deserialisation of what comes back (see
// received_message.h); requests are plain protobuf.
const std::string& ProcessMethod() {
  static const std::string* method = new std::string("/prepflow.proto.Worker/Process");
  return *method;
}

}  // namespace

RemoteWorker::RemoteWorker(std::string address, Handlers handlers, const Security& security)
    : address_(std::move(address)), handlers_(std::move(handlers)) {
  AttachToken(&context_, security);
  grpc::ChannelArguments args;
  // A worker holds each reply to kMaxReplyBytes (items are sized to fit):
  // anything larger is refused by the transport, not parsed.
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxReplyBytes + (1 << 20)));
  args.SetMaxSendMessageSize(16 << 20);
  // A connection of its own per stream: gRPC would otherwise share one
  // connection between every channel to the same address in the process, so
  // one job's transport trouble would end every other job's stream too.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Results are megabytes: large HTTP/2 frames and a deep receive window cut
  // per-frame work and flow-control round trips.
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (16 << 20) - 1);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  ApplyChannelArguments(security, &args);
  channel_ = grpc::CreateCustomChannel(address_, ChannelCredentials(security), args);
}

RemoteWorker::~RemoteWorker() {
  Cancel();
  bool started;
  {
    absl::MutexLock lock(&mu_);
    started = started_;
  }
  if (started) done_.WaitForNotification();
}

void RemoteWorker::Start(const proto::JobOpen& open) {
  completions_ = CompletionThreads::Shared().Acquire();
  grpc::TemplatedGenericStub<proto::ClientMessage, ReceivedMessage> stub(channel_);
  stream_ = stub.PrepareCall(&context_, ProcessMethod(), completions_);
  absl::MutexLock lock(&mu_);
  started_ = true;
  proto::ClientMessage& msg = queue_.emplace_back();
  *msg.mutable_open() = open;
  ++in_flight_;
  stream_->StartCall(&start_tag_);
}

void RemoteWorker::Send(proto::WorkItem item) {
  absl::MutexLock lock(&mu_);
  if (closing_ || over_) return;
  proto::ClientMessage& msg = queue_.emplace_back();
  *msg.mutable_item() = std::move(item);
  if (ready_ && !writing_now_) WriteNextLocked();
}

void RemoteWorker::Close() {
  absl::MutexLock lock(&mu_);
  closing_ = true;
  if (ready_ && !writing_now_ && !over_) WriteNextLocked();  // half-closes when all is written
}

void RemoteWorker::Cancel() {
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  closing_ = true;
  over_ = true;
  queue_.clear();
}

void RemoteWorker::WriteNextLocked() {
  if (!queue_.empty()) {
    writing_ = std::move(queue_.front());
    queue_.pop_front();
    writing_now_ = true;
    ++in_flight_;
    stream_->Write(writing_, &write_tag_);
  } else if (closing_ && !half_closed_) {
    half_closed_ = true;
    ++in_flight_;
    stream_->WritesDone(&half_close_tag_);
  }
}

void RemoteWorker::OnComplete(Op op, bool ok, int64_t wait_cpu_nanos) {
  receive_cpu_nanos_.fetch_add(wait_cpu_nanos, std::memory_order_relaxed);
  if (op == Op::kRead) return OnRead(ok);
  mu_.Lock();
  --in_flight_;
  switch (op) {
    case Op::kStart:  // reads start whether or not it did: a failed one ends the call
      ready_ = true;
      ++in_flight_;
      reading_ = std::make_shared<ReceivedMessage>();
      stream_->Read(reading_.get(), &read_tag_);
      if (!ok) over_ = true;
      if (!over_ && !writing_now_) WriteNextLocked();
      break;
    case Op::kWrite:
      writing_now_ = false;
      if (!ok) over_ = true;  // the call ended; the read side says how
      if (!over_) WriteNextLocked();
      break;
    case Op::kFinish:
      finished_ = true;
      break;
    default:
      break;
  }
  if (over_) queue_.clear();
  EndIfOverLocked();
}

void RemoteWorker::OnRead(bool ok) {
  if (!ok) {  // the worker ended the stream, or it broke, or was cancelled
    mu_.Lock();
    over_ = true;
    queue_.clear();
    // in_flight_ keeps the read's count for Finish's.
    stream_->Finish(&status_, &finish_tag_);
    mu_.Unlock();
    return;
  }
  const int64_t cpu = ThreadCpuNanos();
  // The next answer is read while this one is handled; its completion comes
  // to this thread, after this handler: a stream's answers stay in order.
  std::shared_ptr<ReceivedMessage> msg =
      std::exchange(reading_, std::make_shared<ReceivedMessage>());
  stream_->Read(reading_.get(), &read_tag_);
  received_bytes_.fetch_add(static_cast<int64_t>(msg->wire_bytes), std::memory_order_relaxed);
  if (msg->message.has_opened()) {
    if (handlers_.opened) handlers_.opened(msg->message.opened());
  } else if (msg->message.has_result()) {
    if (handlers_.result) handlers_.result(std::move(msg));
  } else if (msg->message.has_draining()) {
    if (handlers_.draining) handlers_.draining(msg->message.draining().seconds());
  } else if (msg->message.has_probe()) {
    if (handlers_.probe) {
      handlers_.probe(static_cast<int64_t>(msg->wire_bytes), msg->message.probe().count());
    }
  }
  receive_cpu_nanos_.fetch_add(ThreadCpuNanos() - cpu, std::memory_order_relaxed);
}

void RemoteWorker::EndIfOverLocked() {
  if (!finished_ || in_flight_ > 0) {
    mu_.Unlock();
    return;
  }
  finished_ = false;  // ends once
  mu_.Unlock();
  const absl::Status result =
      status_.ok() ? absl::OkStatus()
                   : FromGrpcStatus(grpc::Status(
                         status_.error_code(),
                         absl::StrCat("worker ", address_, ": ", status_.error_message())));
  if (handlers_.closed) handlers_.closed(result);
  CompletionThreads::Shared().Release(completions_);
  done_.Notify();
}

}  // namespace prepflow
