// A worker's message as the client receives it, without copying payloads.
//
// protobuf would copy every sample's bytes out of gRPC's receive buffers into
// a fresh std::string (measured: a quarter of the client's CPU at 1.5 GB/s,
// plus page faults on the new strings). Here everything but SampleValue.data
// is parsed by protobuf as usual, and each sample's data is kept as views into
// the received slices, which the message owns. The consumer copies each
// payload once, straight to where it is needed.
//
// The wire format is unchanged: the worker writes a plain WorkerMessage.
//
// Thread-safety: a ReceivedMessage is owned by one thread at a time (gRPC
// hands it to the reader, the reader to the pool).
#ifndef PREPFLOW_CLIENT_REMOTE_RECEIVED_MESSAGE_H_
#define PREPFLOW_CLIENT_REMOTE_RECEIVED_MESSAGE_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/impl/serialization_traits.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/worker.pb.h"

namespace prepflow {

struct ReceivedMessage {
  // The message with every result sample's value.data left empty.
  proto::WorkerMessage message;
  // For result sample i, its data as pieces of the received buffer.
  std::vector<std::vector<absl::string_view>> payloads;
  // Owns what the pieces point into. Never resized after parsing (small
  // slices keep their bytes inline).
  std::shared_ptr<const std::vector<grpc::Slice>> slices;
  // Serialized size: what crossed the network for this message.
  size_t wire_bytes = 0;

  size_t payload_size(size_t i) const;
  // Copies payload i to `dst` (payload_size(i) bytes).
  void CopyPayload(size_t i, uint8_t* dst) const;
};

// Parses a serialized WorkerMessage held in `slices`. Errors: DataLoss for
// malformed input.
absl::Status ParseReceivedMessage(std::vector<grpc::Slice> slices, ReceivedMessage* out);

}  // namespace prepflow

namespace grpc {

template <>
class SerializationTraits<prepflow::ReceivedMessage, void> {
 public:
  static Status Serialize(const prepflow::ReceivedMessage&, ByteBuffer*, bool*) {
    return Status(StatusCode::UNIMPLEMENTED, "ReceivedMessage is receive-only");
  }
  static Status Deserialize(ByteBuffer* buffer, prepflow::ReceivedMessage* msg);
};

}  // namespace grpc

#endif  // PREPFLOW_CLIENT_REMOTE_RECEIVED_MESSAGE_H_
