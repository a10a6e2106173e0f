// The wire form of a stage-boundary value (proto::SampleValue).
//
// Every boundary has exactly one wire form, so a pipeline can be cut at any
// stage: the value after stage k-1 is serialised on one side and stage k
// continues from it on the other, with bit-identical results.
//
// Thread-safety: pure functions; FromWire writes only into the caller's
// Workspace and Sample (one per thread).
#ifndef PREPFLOW_PIPELINE_CORE_WIRE_H_
#define PREPFLOW_PIPELINE_CORE_WIRE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/value_type.h"
#include "pipeline/core/workspace.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

// The largest reply a worker sends for one item, and so the most bytes one
// item may hold: well under protobuf's 2 GiB message limit.
inline constexpr int64_t kMaxReplyBytes = int64_t{1} << 30;
// The most fields a record's value may carry on the wire.
inline constexpr int kMaxRecordFields = 64;

// Writes the value `sample` holds into `out` (its identity is not included:
// index, label and epoch travel in the enclosing message), and a record's
// other fields, whole, in SampleValue.fields.
// With include_data false only the working value's metadata is written (the
// caller sends its bytes separately).
void ToWire(const Sample& sample, proto::SampleValue* out, bool include_data = true);

// Makes `sample` hold the value in `value`, copying the bytes into a buffer of
// `ws`. Keeps sample's identity. Errors: InvalidArgument when kind, shape and
// byte count disagree.
absl::Status FromWire(const proto::SampleValue& value, Workspace& ws, Sample& sample);

// The same, with the value's data given separately as pieces (a received
// buffer that was not copied into value.data).
absl::Status FromWire(const proto::SampleValue& value, absl::Span<const absl::string_view> data,
                      Workspace& ws, Sample& sample);

// The value `sample` holds as one string: its wire form's metadata and its
// bytes (what the sample caches and the echo store keep).
std::string ValueBytes(const Sample& sample);
// Makes `sample` hold the value in `bytes` (from ValueBytes), copied into a
// buffer of `ws`; keeps its identity. InvalidArgument when malformed.
absl::Status FromValueBytes(absl::string_view bytes, Workspace& ws, Sample& sample);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_WIRE_H_
