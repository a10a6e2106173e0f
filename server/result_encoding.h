// Encodes a finished work item as a WorkerMessage on the wire without
// copying payloads: protobuf writes the small parts, and each sample's data
// goes out as a slice that aliases the worker's buffer (freed by gRPC once
// sent). The bytes are an ordinary serialized WorkerMessage (the data field of
// each SampleValue comes last in its message, which protobuf allows).
//
// Thread-safety: pure functions; the buffer returned owns what it aliases.
#ifndef PREPFLOW_SERVER_RESULT_ENCODING_H_
#define PREPFLOW_SERVER_RESULT_ENCODING_H_

#include "grpcpp/support/byte_buffer.h"
#include "proto/worker.pb.h"
#include "server/worker_core.h"

namespace prepflow {

// Consumes `output`'s payloads.
grpc::ByteBuffer EncodeItemOutput(ItemOutput output);
// Any other message, serialized by protobuf.
grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message);

}  // namespace prepflow

#endif  // PREPFLOW_SERVER_RESULT_ENCODING_H_
