#include "client/remote/remote_worker.h"

#include "absl/strings/str_cat.h"
#include "net/status.h"
#include "pipeline/core/profiler.h"
#include "pipeline/core/wire.h"

namespace prepflow {

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
  // The reader joins the writer before it returns.
  if (reader_.joinable()) reader_.join();
}

void RemoteWorker::Start(const proto::JobOpen& open) {
  // Worker.Process with our own deserialisation of what comes back (see
  // received_message.h); requests are plain protobuf.
  static const grpc::internal::RpcMethod kProcess("/prepflow.proto.Worker/Process",
                                                  grpc::internal::RpcMethod::BIDI_STREAMING);
  stream_.reset(
      grpc::internal::ClientReaderWriterFactory<proto::ClientMessage, ReceivedMessage>::Create(
          channel_.get(), kProcess, &context_));
  proto::ClientMessage msg;
  *msg.mutable_open() = open;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(msg));
  }
  writer_ = std::thread([this] { WriteLoop(); });
  reader_ = std::thread([this] { ReadLoop(); });
}

void RemoteWorker::Send(proto::WorkItem item) {
  proto::ClientMessage msg;
  *msg.mutable_item() = std::move(item);
  absl::MutexLock lock(&mu_);
  if (!closing_) queue_.push_back(std::move(msg));
}

void RemoteWorker::Close() {
  absl::MutexLock lock(&mu_);
  closing_ = true;
}

void RemoteWorker::Cancel() {
  context_.TryCancel();
  absl::MutexLock lock(&mu_);
  closing_ = true;
  queue_.clear();
}

void RemoteWorker::WriteLoop() {
  while (true) {
    proto::ClientMessage msg;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || closing_ || reader_done_;
      };
      mu_.Await(absl::Condition(&ready));
      if (reader_done_) return;
      if (queue_.empty()) break;  // closing, and everything is written
      msg = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!stream_->Write(msg)) return;  // the stream ended; the reader reports why
  }
  stream_->WritesDone();
}

void RemoteWorker::ReadLoop() {
  int64_t cpu = ThreadCpuNanos();
  while (true) {
    auto msg = std::make_shared<ReceivedMessage>();
    if (!stream_->Read(msg.get())) break;
    received_bytes_.fetch_add(static_cast<int64_t>(msg->wire_bytes), std::memory_order_relaxed);
    if (msg->message.has_opened()) {
      if (handlers_.opened) handlers_.opened(msg->message.opened());
    } else if (msg->message.has_result()) {
      if (handlers_.result) handlers_.result(std::move(msg));
    }
    const int64_t now = ThreadCpuNanos();
    receive_cpu_nanos_.fetch_add(now - cpu, std::memory_order_relaxed);
    cpu = now;
  }
  {
    absl::MutexLock lock(&mu_);
    reader_done_ = true;
  }
  // Finish() may only run once the writer has stopped touching the stream.
  writer_.join();
  const grpc::Status status = stream_->Finish();
  const absl::Status result =
      status.ok()
          ? absl::OkStatus()
          : FromGrpcStatus(grpc::Status(status.error_code(), absl::StrCat("worker ", address_, ": ",
                                                                          status.error_message())));
  if (handlers_.closed) handlers_.closed(result);
}

}  // namespace prepflow
