// Records of several fields: a sample whose stages work on one field at a
// time (a WebDataset sample's image, then its audio) while the others are
// kept in Sample::fields.
//
// The value a stage works on lives in the thread's Workspace, as for a
// sample of one field; the others are owned by the Sample. Moving to another
// field copies the value out and the other in: once per field a record's
// pipeline moves to, small beside the stages.
//
// Thread-safety: pure functions over the caller's Sample and Workspace.
#ifndef PREPFLOW_PIPELINE_CORE_RECORD_H_
#define PREPFLOW_PIPELINE_CORE_RECORD_H_

#include <string>

#include "absl/status/status.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/workspace.h"

namespace prepflow {

// The working value of `s`, owned, under `name`.
StoredField StoreValue(const Sample& s, const std::string& name);
// Makes the stored field `to` the working value of `s` (copied into a
// buffer of `ws`) and stores the working value as field `from`. DataLoss
// naming the field when the record has no field `to` (a value from a worker
// or a cache that is not what the pipeline makes).
absl::Status SwitchField(const std::string& from, const std::string& to, Workspace& ws, Sample& s);
// InvalidArgument unless `name` may name a field: 1-64 bytes of letters,
// digits and . _ - ; (alternatives: "jpg;png").
absl::Status CheckFieldName(const std::string& name);
// A field's name for messages: "the media" for "", else 'name'.
std::string FieldName(const std::string& name);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_RECORD_H_
