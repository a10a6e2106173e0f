#include "server/scheduler_client.h"

#include <chrono>

#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace prepflow {

WorkerRegistration::WorkerRegistration(std::string scheduler, proto::WorkerBeat beat,
                                       std::function<void(proto::WorkerBeat*)> refresh)
    : scheduler_(std::move(scheduler)), beat_(std::move(beat)), refresh_(std::move(refresh)) {
  stub_ = proto::Scheduler::NewStub(
      grpc::CreateChannel(scheduler_, grpc::InsecureChannelCredentials()));
}

WorkerRegistration::~WorkerRegistration() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void WorkerRegistration::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void WorkerRegistration::Loop() {
  double period = 2;
  bool failing = false, registered = false;
  do {
    if (refresh_) refresh_(&beat_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    proto::WorkerBeatReply reply;
    const grpc::Status status = stub_->WorkerHeartbeat(&context, beat_, &reply);
    if (status.ok()) {
      if (failing || !registered) {
        spdlog::info("registered with scheduler {} as {} ({})", scheduler_, beat_.worker_id(),
                     beat_.address());
      }
      failing = false;
      registered = true;
      if (reply.heartbeat_seconds() > 0) period = reply.heartbeat_seconds();
    } else if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      spdlog::error("scheduler {} refused this worker: {}", scheduler_, status.error_message());
      return;  // nothing will change that
    } else if (!failing) {
      spdlog::warn("scheduler {} unreachable ({}); serving on, retrying every {} s", scheduler_,
                   status.error_message(), period);
      failing = true;
    }
  } while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(period)));
}

}  // namespace prepflow
