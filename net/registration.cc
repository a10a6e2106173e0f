#include "net/registration.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace prepflow {
namespace {

constexpr auto kBeatDeadline = std::chrono::seconds(5);

}  // namespace

HeartbeatLoop::HeartbeatLoop(std::string scheduler, std::string who, Security security, BeatFn beat)
    : scheduler_(std::move(scheduler)),
      who_(std::move(who)),
      security_(std::move(security)),
      beat_(std::move(beat)) {
  stub_ = proto::Scheduler::NewStub(SecureChannel(scheduler_, security_));
}

HeartbeatLoop::~HeartbeatLoop() { Stop(); }

void HeartbeatLoop::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void HeartbeatLoop::Kick() {
  absl::MutexLock lock(&mu_);
  kicked_ = true;
}

void HeartbeatLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void HeartbeatLoop::Loop() {
  double period = 2;
  bool failing = false, registered = false;
  while (true) {
    const grpc::Status status = beat_(*stub_, &period);
    if (status.ok()) {
      if (failing || !registered) spdlog::info("{} registered with scheduler {}", who_, scheduler_);
      failing = false;
      registered = true;
    } else if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
               status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      spdlog::error("scheduler {} refused {}: {}", scheduler_, who_, status.error_message());
      return;  // nothing will change that
    } else if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      // Another process holds our worker_id (a twin, or a restart of ours
      // before the old registration expired): retry, it may expire.
      if (!failing) {
        spdlog::error("scheduler {} refused {}: {}; retrying every {} s", scheduler_, who_,
                      status.error_message(), period);
      }
      failing = true;
    } else if (!failing) {
      spdlog::warn("scheduler {} unreachable ({}); {} carries on and retries every {} s",
                   scheduler_, status.error_message(), who_, period);
      failing = true;
    }
    absl::MutexLock lock(&mu_);
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || kicked_; };
    mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Seconds(period));
    // A beat asked for before the stop still goes (a worker's "draining",
    // which would otherwise be lost when it exits at once).
    if (stop_ && !kicked_) return;
    kicked_ = false;
  }
}

WorkerRegistration::WorkerRegistration(std::string scheduler, Security security,
                                       proto::WorkerBeat beat,
                                       std::function<void(proto::WorkerBeat*)> refresh)
    : beat_(std::move(beat)),
      refresh_(std::move(refresh)),
      loop_(std::move(scheduler), "worker " + beat_.worker_id() + " (" + beat_.address() + ")",
            std::move(security), [this](proto::Scheduler::Stub& stub, double* period) {
              if (refresh_) refresh_(&beat_);
              grpc::ClientContext context;
              context.set_deadline(std::chrono::system_clock::now() + kBeatDeadline);
              AttachToken(&context, loop_.security());
              proto::WorkerBeatReply reply;
              const grpc::Status status = stub.WorkerHeartbeat(&context, beat_, &reply);
              if (status.ok() && reply.heartbeat_seconds() > 0) *period = reply.heartbeat_seconds();
              if (status.ok()) beat_.set_lease(reply.lease());  // binds our worker_id to us
              return status;
            }) {}

JobRegistration::JobRegistration(std::string scheduler, Security security, proto::JobBeat identity,
                                 std::function<void(proto::JobBeat*)> fill,
                                 std::function<void(const proto::JobGrant&)> on_grant,
                                 std::function<void(const grpc::Status&)> on_failure)
    : identity_(std::move(identity)),
      fill_(std::move(fill)),
      on_grant_(std::move(on_grant)),
      on_failure_(std::move(on_failure)),
      loop_(std::move(scheduler),
            identity_.world_size() > 1
                ? absl::StrCat("job ", identity_.job_id(), " rank ", identity_.rank())
                : "job " + identity_.job_id(),
            std::move(security), [this](proto::Scheduler::Stub& stub, double* period) {
              proto::JobBeat beat = identity_;
              fill_(&beat);
              grpc::ClientContext context;
              context.set_deadline(std::chrono::system_clock::now() + kBeatDeadline);
              AttachToken(&context, loop_.security());
              proto::JobGrant grant;
              const grpc::Status status = stub.JobHeartbeat(&context, beat, &grant);
              if (status.ok()) {
                if (grant.heartbeat_seconds() > 0) *period = grant.heartbeat_seconds();
                on_grant_(grant);
              } else if (on_failure_) {
                on_failure_(status);
              }
              return status;
            }) {}

void JobRegistration::Release() {
  auto stub = proto::Scheduler::NewStub(SecureChannel(loop_.scheduler(), loop_.security()));
  proto::JobBeat beat = identity_;
  beat.set_wanted_cores(0);
  beat.set_leaving(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  AttachToken(&context, loop_.security());
  proto::JobGrant grant;
  // Best effort: if it fails, the grant expires with the job's silence.
  (void)stub->JobHeartbeat(&context, beat, &grant);
}

}  // namespace prepflow
