// One conversion each way between absl::Status, which prepflow's code
// returns, and grpc::Status, which the transport carries. The codes are the
// same numbers in both (both follow google.rpc.Code).
//
// Thread-safety: pure functions.
#ifndef PREPFLOW_NET_STATUS_H_
#define PREPFLOW_NET_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace prepflow {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace prepflow

#endif  // PREPFLOW_NET_STATUS_H_
