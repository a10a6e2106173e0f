// Talking to prepflow-scheduler from a worker or a job: a thread that sends
// one heartbeat every period the scheduler asks for. The first beat
// registers; a restarted scheduler learns of the sender again from its next
// beat (state is soft, see proto/scheduler.proto). Failures are logged once
// when they start and once when beats get through again; the sender carries
// on either way (a worker serves its clients, a job keeps its workers).
//
// Thread-safety: construct, then Start() once; Kick() from any thread; the
// destructor stops and joins.
#ifndef PREPFLOW_NET_REGISTRATION_H_
#define PREPFLOW_NET_REGISTRATION_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "net/security.h"
#include "proto/scheduler.grpc.pb.h"

namespace prepflow {

// The loop both registrations share. `beat` sends one beat on the stub and
// returns its status; on success it may lower or raise `*period`.
class HeartbeatLoop {
 public:
  using BeatFn = std::function<grpc::Status(proto::Scheduler::Stub&, double* period)>;
  // `who` names the sender in logs ("worker w1", "job job-…"); `security`:
  // TLS to the scheduler and the token every beat carries (security.h).
  HeartbeatLoop(std::string scheduler, std::string who, Security security, BeatFn beat);
  ~HeartbeatLoop();
  HeartbeatLoop(const HeartbeatLoop&) = delete;
  HeartbeatLoop& operator=(const HeartbeatLoop&) = delete;

  void Start();
  // Beats now rather than at the end of the period (e.g. the want changed).
  void Kick();
  // Stops beating and joins, after the beat a Kick() asked for (bounded by a
  // beat's deadline); later calls do nothing.
  void Stop();
  const std::string& scheduler() const { return scheduler_; }
  const Security& security() const { return security_; }

 private:
  void Loop();

  const std::string scheduler_;
  const std::string who_;
  const Security security_;
  BeatFn beat_;
  std::unique_ptr<proto::Scheduler::Stub> stub_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A worker's registration: sends `beat` as given, with its load fields
// refreshed by `refresh` (may be null) before each beat.
class WorkerRegistration {
 public:
  WorkerRegistration(std::string scheduler, Security security, proto::WorkerBeat beat,
                     std::function<void(proto::WorkerBeat*)> refresh);
  void Start() { loop_.Start(); }
  // Beats now (e.g. to say it is draining) rather than at the next period.
  void Kick() { loop_.Kick(); }

 private:
  proto::WorkerBeat beat_;
  std::function<void(proto::WorkerBeat*)> refresh_;
  HeartbeatLoop loop_;  // last: its thread uses the fields above
};

// A job's registration: each beat carries the job's current want and
// workers (`fill`, called on the beat thread), and each grant that comes back
// goes to `on_grant` (also on the beat thread). While the scheduler is
// unreachable nothing is delivered, so the job keeps what it has.
// `identity`: who beats (job_id, rank, world_size, instance), sent with
// every beat.
class JobRegistration {
 public:
  JobRegistration(std::string scheduler, Security security, proto::JobBeat identity,
                  std::function<void(proto::JobBeat*)> fill,
                  std::function<void(const proto::JobGrant&)> on_grant,
                  std::function<void(const grpc::Status&)> on_failure);
  void Start() { loop_.Start(); }
  void Kick() { loop_.Kick(); }
  void Stop() { loop_.Stop(); }
  // One last beat, leaving, so the scheduler frees the grant at once
  // rather than when it expires. Call after Stop().
  void Release();

 private:
  const proto::JobBeat identity_;
  std::function<void(proto::JobBeat*)> fill_;
  std::function<void(const proto::JobGrant&)> on_grant_;
  std::function<void(const grpc::Status&)> on_failure_;
  HeartbeatLoop loop_;
};

}  // namespace prepflow

#endif  // PREPFLOW_NET_REGISTRATION_H_
