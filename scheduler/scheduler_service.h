// prepflow-scheduler's gRPC service: a thin adapter over SchedulerCore that
// checks each call's credentials (the role's bearer token; with
// --cert-roles, the client certificate's OU) and counts beats.
//
// Thread-safety: gRPC runs the handlers on its threads; the core and the
// metrics are thread-safe.
#ifndef PREPFLOW_SCHEDULER_SCHEDULER_SERVICE_H_
#define PREPFLOW_SCHEDULER_SCHEDULER_SERVICE_H_

#include <string>

#include "absl/status/status.h"
#include "proto/scheduler.grpc.pb.h"
#include "scheduler/scheduler_core.h"
#include "scheduler/scheduler_metrics.h"

namespace prepflow::scheduler {

class SchedulerService final : public proto::Scheduler::CallbackService {
 public:
  // The bearer tokens each role's calls must carry (net/security.h); empty:
  // none. `cert_roles`: each call's client certificate must carry its role.
  // `core` and `metrics` must outlive the service.
  SchedulerService(SchedulerCore* core, std::string worker_token, std::string job_token,
                   bool cert_roles, SchedulerMetrics* metrics);

  grpc::ServerUnaryReactor* WorkerHeartbeat(grpc::CallbackServerContext* context,
                                            const proto::WorkerBeat* beat,
                                            proto::WorkerBeatReply* reply) override;
  grpc::ServerUnaryReactor* JobHeartbeat(grpc::CallbackServerContext* context,
                                         const proto::JobBeat* beat,
                                         proto::JobGrant* grant) override;

 private:
  // OK, or (counted) UNAUTHENTICATED for a missing or wrong token, or
  // PERMISSION_DENIED for a certificate without the call's role.
  absl::Status Authenticate(const grpc::CallbackServerContext& context, const std::string& token,
                            const char* role, prometheus::Counter& refused) const;

  SchedulerCore* core_;
  const bool cert_roles_;
  const std::string worker_token_;
  const std::string job_token_;
  prometheus::Counter& worker_beats_;
  prometheus::Counter& job_beats_;
  prometheus::Counter& worker_unauthenticated_;
  prometheus::Counter& job_unauthenticated_;
};

}  // namespace prepflow::scheduler

#endif  // PREPFLOW_SCHEDULER_SCHEDULER_SERVICE_H_
