// A worker's registration with prepflow-scheduler: a thread that sends a
// WorkerBeat (id, address clients should dial, cores, labels, version, load)
// every heartbeat period the scheduler asks for. The first beat registers;
// a restarted scheduler learns of the worker again from its next beat.
// Failures are logged once when they start and once when beats get through
// again; the worker serves its clients either way.
//
// Thread-safety: construct, then Start() once; the destructor stops and joins.
#ifndef PREPFLOW_SERVER_SCHEDULER_CLIENT_H_
#define PREPFLOW_SERVER_SCHEDULER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "proto/scheduler.grpc.pb.h"

namespace prepflow {

class WorkerRegistration {
 public:
  // `beat` is sent as given, with `load` and `active_streams` refreshed from
  // `refresh` before each beat (may be null).
  WorkerRegistration(std::string scheduler, proto::WorkerBeat beat,
                     std::function<void(proto::WorkerBeat*)> refresh);
  ~WorkerRegistration();
  WorkerRegistration(const WorkerRegistration&) = delete;
  WorkerRegistration& operator=(const WorkerRegistration&) = delete;

  void Start();

 private:
  void Loop();

  const std::string scheduler_;
  proto::WorkerBeat beat_;
  std::function<void(proto::WorkerBeat*)> refresh_;
  std::unique_ptr<proto::Scheduler::Stub> stub_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_SCHEDULER_CLIENT_H_
