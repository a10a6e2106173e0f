#include "scheduler/scheduler_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/text.h"
#include "net/security.h"
#include "net/status.h"

namespace prepflow::scheduler {
namespace {

// Finishes a unary call with `reply` or the error.
template <typename Reply>
grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, absl::StatusOr<Reply> result,
                                 Reply* reply) {
  if (result.ok()) *reply = *std::move(result);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(result.ok() ? grpc::Status::OK : ToGrpcStatus(result.status()));
  return reactor;
}

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": who a job's beats come from,
// without mutual TLS.
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

}  // namespace

SchedulerService::SchedulerService(SchedulerCore* core, std::string worker_token,
                                   std::string job_token, bool cert_roles,
                                   SchedulerMetrics* metrics)
    : core_(core),
      cert_roles_(cert_roles),
      worker_token_(std::move(worker_token)),
      job_token_(std::move(job_token)),
      worker_beats_(metrics->beats().Add({{"kind", "worker"}})),
      job_beats_(metrics->beats().Add({{"kind", "job"}})),
      worker_unauthenticated_(metrics->unauthenticated().Add({{"kind", "worker"}})),
      job_unauthenticated_(metrics->unauthenticated().Add({{"kind", "job"}})) {}

grpc::ServerUnaryReactor* SchedulerService::WorkerHeartbeat(grpc::CallbackServerContext* context,
                                                            const proto::WorkerBeat* beat,
                                                            proto::WorkerBeatReply* reply) {
  worker_beats_.Increment();
  const absl::Status auth =
      Authenticate(*context, worker_token_, kWorkerRole, worker_unauthenticated_);
  if (!auth.ok()) return Finish<proto::WorkerBeatReply>(context, auth, reply);
  return Finish(context, core_->WorkerBeat(*beat, WallNanos(), PeerIdentity(*context)), reply);
}

grpc::ServerUnaryReactor* SchedulerService::JobHeartbeat(grpc::CallbackServerContext* context,
                                                         const proto::JobBeat* beat,
                                                         proto::JobGrant* grant) {
  job_beats_.Increment();
  const absl::Status auth = Authenticate(*context, job_token_, kJobRole, job_unauthenticated_);
  if (!auth.ok()) return Finish<proto::JobGrant>(context, auth, grant);
  // Answered now, or by the core's rebalancer once an allocation including
  // this beat is made: gRPC's thread is not held meanwhile.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  core_->JobBeatAsync(
      *beat, WallNanos(), PeerIdentity(*context), PeerHost(context->peer()),
      [reactor, grant](absl::StatusOr<proto::JobGrant> result) {
        if (result.ok()) *grant = *std::move(result);
        reactor->Finish(result.ok() ? grpc::Status::OK : ToGrpcStatus(result.status()));
      });
  return reactor;
}

absl::Status SchedulerService::Authenticate(const grpc::CallbackServerContext& context,
                                            const std::string& token, const char* role,
                                            prometheus::Counter& refused) const {
  absl::Status s = CheckToken(context.client_metadata(), token);
  if (s.ok() && cert_roles_) {
    const std::string subject = PeerSubject(context);
    if (!SubjectHasRole(subject, role)) {
      s = absl::PermissionDeniedError(
          absl::StrCat("the client certificate (", subject.empty() ? "none" : SafeText(subject),
                       ") does not carry the role OU=", role, " (--cert-roles)"));
    }
  }
  if (!s.ok()) refused.Increment();
  return s;
}

}  // namespace prepflow::scheduler
