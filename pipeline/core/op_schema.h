// The vocabulary's schema: every op prepflow knows, with its fields, their
// types, defaults and docs, and what it matches in torchvision.
//
// The schema is read from the options that proto/pipeline.proto puts on each
// op message (OpDoc) and field (FieldDoc), so that file is the one source for
// `prepflow ops`, docs/ops.md (OpsMarkdown), the default an unset field takes
// (ApplyDefaults, called before any op is built) and the parse errors that
// list what exists (ExplainParseError).
//
// Thread-safety: the schema is built once, on first use, and immutable after;
// every function may be called from any thread.
#ifndef PREPFLOW_PIPELINE_CORE_OP_SCHEMA_H_
#define PREPFLOW_PIPELINE_CORE_OP_SCHEMA_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

struct FieldSchema {
  std::string name;
  // "int", "float", "bool", "string", "enum", each as "list of ..." when
  // repeated.
  std::string type;
  std::string summary;
  std::string default_value;         // as written in a pipeline file; "" when none
  std::vector<std::string> choices;  // an enum's values
};

struct OpSchema {
  std::string name;  // as written in a pipeline file: "random_resized_crop"
  std::string summary;
  std::string torchvision;  // what it matches, if anything (torchaudio's, for audio ops)
  std::string input;        // "encoded", "image", "tensor"
  std::string output;
  std::string parity;   // how close to torchvision it comes
  bool random = false;  // draws random numbers
  bool batch = false;   // a batch op (proto::BatchStage), run on the trainer after batching
  std::vector<FieldSchema> fields;
  // `torchvision` names another library's op (torchaudio's, PyAV's).
  bool other_reference = false;
};

// Every op of proto::Stage, then every batch op of proto::BatchStage, in
// field order.
const std::vector<OpSchema>& OpSchemas();
// The op named `name`, or null.
const OpSchema* FindOpSchema(absl::string_view name);
// "decode, random_resized_crop, ..." (or the batch ops).
std::string OpNamesList(bool batch = false);

// Sets every field of the stage's op that is unset (and every empty list) to
// its default_value. InvalidArgument when no op is set.
absl::Status ApplyDefaults(proto::Stage* stage);
absl::Status ApplyDefaults(proto::BatchStage* stage);

// `prepflow ops`: every op with its fields, defaults and docs, as text.
std::string OpsText();
// docs/ops.md, generated (a test checks the file is current).
std::string OpsMarkdown();

// A protobuf text-format parse error with what exists added: an unknown op
// gets the list of ops, an unknown field of an op that op's fields.
// Other messages come back unchanged.
std::string ExplainParseError(const std::string& message);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_OP_SCHEMA_H_
