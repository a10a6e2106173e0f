#include "pipeline/core/op_schema.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace prepflow {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::OneofDescriptor;
using google::protobuf::Reflection;

const OneofDescriptor& StageOps() { return *proto::Stage::descriptor()->FindOneofByName("op"); }
const OneofDescriptor& BatchStageOps() {
  return *proto::BatchStage::descriptor()->FindOneofByName("op");
}

std::string TypeName(const FieldDescriptor& f) {
  if (f.is_map()) return "map of string to string";
  std::string type;
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      type = "int";
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      type = "float";
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      type = "bool";
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      type = "enum";
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      // A composition's inner stages (compose_ops.h).
      type = f.message_type() == proto::Stage::descriptor() ? "stage" : f.type_name();
      break;
    default:
      type = f.type_name();
  }
  return f.is_repeated() ? absl::StrCat("list of ", type) : type;
}

FieldSchema FieldOf(const FieldDescriptor& f) {
  const proto::FieldDoc& doc = f.options().GetExtension(proto::field);
  FieldSchema out{f.name(), TypeName(f), doc.summary(), doc.default_value(), {}};
  if (const auto* e = f.enum_type(); e != nullptr) {
    for (int i = 0; i < e->value_count(); ++i) out.choices.push_back(e->value(i)->name());
  }
  return out;
}

OpSchema OpOf(const FieldDescriptor& stage_field, bool batch) {
  const Descriptor& m = *stage_field.message_type();
  const proto::OpDoc& doc = m.options().GetExtension(proto::op);
  // An audio op names torchaudio's equivalent where an image op names
  // torchvision's; a video op what it matches elsewhere.
  const std::string& other = doc.torchaudio().empty() ? doc.reference() : doc.torchaudio();
  const std::string& reference = doc.torchvision().empty() ? other : doc.torchvision();
  OpSchema op{stage_field.name(), doc.summary(), reference, doc.input(), doc.output(),
              doc.parity(),       doc.random(),  batch,     {}};
  for (int i = 0; i < m.field_count(); ++i) op.fields.push_back(FieldOf(*m.field(i)));
  op.other_reference = doc.torchvision().empty() && !other.empty();
  return op;
}

bool IsUnset(const Message& m, const FieldDescriptor& f) {
  const Reflection& r = *m.GetReflection();
  return f.is_repeated() ? r.FieldSize(m, &f) == 0 : !r.HasField(m, &f);
}

// The text between `before` and the next '"' in `message`, or "".
std::string Quoted(const std::string& message, const std::string& before) {
  const size_t at = message.find(before);
  if (at == std::string::npos) return "";
  const size_t begin = at + before.size();
  const size_t end = message.find('"', begin);
  return end == std::string::npos ? "" : message.substr(begin, end - begin);
}

// `text` in lines of at most `width` columns (longer words stand alone),
// each starting with `indent` and ending with a newline.
std::string Wrapped(const std::string& text, const std::string& indent, size_t width) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, indent, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, indent, line, "\n");
  return out;
}

// A '|' would end a Markdown table cell.
std::string Cell(const std::string& text) { return absl::StrReplaceAll(text, {{"|", "\\|"}}); }

}  // namespace

const std::vector<OpSchema>& OpSchemas() {
  static const std::vector<OpSchema>* const kSchemas = [] {
    auto* schemas = new std::vector<OpSchema>;
    const OneofDescriptor& ops = StageOps();
    for (int i = 0; i < ops.field_count(); ++i) schemas->push_back(OpOf(*ops.field(i), false));
    const OneofDescriptor& batch_ops = BatchStageOps();
    for (int i = 0; i < batch_ops.field_count(); ++i) {
      schemas->push_back(OpOf(*batch_ops.field(i), true));
    }
    return schemas;
  }();
  return *kSchemas;
}

const OpSchema* FindOpSchema(absl::string_view name) {
  for (const OpSchema& op : OpSchemas()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

std::string OpNamesList(bool batch) {
  std::vector<std::string> names;
  for (const OpSchema& op : OpSchemas()) {
    if (op.batch == batch) names.push_back(op.name);
  }
  return absl::StrJoin(names, ", ");
}

namespace {

// The defaults of the op set in `stage`'s oneof `ops`.
absl::Status ApplyDefaultsTo(Message* stage, const OneofDescriptor& ops, bool batch) {
  const FieldDescriptor* which = stage->GetReflection()->GetOneofFieldDescriptor(*stage, &ops);
  if (which == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no op set (one of: ", OpNamesList(batch), ")"));
  }
  Message* op = stage->GetReflection()->MutableMessage(stage, which);
  const Descriptor& m = *op->GetDescriptor();
  for (int i = 0; i < m.field_count(); ++i) {
    const FieldDescriptor& f = *m.field(i);
    const std::string& value = f.options().GetExtension(proto::field).default_value();
    if (value.empty() || !IsUnset(*op, f)) continue;
    google::protobuf::TextFormat::Parser parser;
    if (!parser.MergeFromString(absl::StrCat(f.name(), ": ", value), op)) {
      // A schema bug, caught by op_schema_test for every op.
      return absl::InternalError(
          absl::StrCat(which->name(), ".", f.name(), ": bad default_value '", value, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyDefaults(proto::Stage* stage) {
  return ApplyDefaultsTo(stage, StageOps(), false);
}
absl::Status ApplyDefaults(proto::BatchStage* stage) {
  return ApplyDefaultsTo(stage, BatchStageOps(), true);
}

std::string OpsText() {
  std::string out;
  for (const OpSchema& op : OpSchemas()) {
    absl::StrAppend(
        &out, op.name, "  (", op.input, " -> ", op.output, op.random ? "; random" : "",
        op.torchvision.empty()
            ? ""
            : absl::StrCat(op.other_reference ? "; " : "; torchvision ", op.torchvision),
        ")\n", Wrapped(op.summary, "    ", 100));
    for (const FieldSchema& f : op.fields) {
      absl::StrAppend(
          &out, "    ", f.name, " (", f.type, ")",
          f.default_value.empty() ? "" : absl::StrCat(" = ", f.default_value), ": ", f.summary,
          f.choices.empty() ? "" : absl::StrCat(" [", absl::StrJoin(f.choices, ", "), "]"), "\n");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string OpsMarkdown() {
  std::string out =
      "# Ops\n\n"
      "<!-- Generated by `prepflow ops --markdown` from proto/pipeline.proto; "
      "tests/client/cli_test.cc checks it is current. Do not edit by hand. -->\n\n"
      "Every op a pipeline may use, with its fields and their defaults (a field left unset "
      "takes its default), and how close it comes to torchvision (torchaudio, for audio) on "
      "the same input and "
      "parameters. Random ops draw from the sample's own generator, keyed by (seed, epoch, "
      "sample, stage), so a sample's result never depends on where it ran. How to write a "
      "pipeline: [pipelines.md](pipelines.md).\n\n";
  absl::StrAppend(&out, "| op | input → output | random | torchvision / torchaudio | parity |\n",
                  "|---|---|---|---|---|\n");
  for (const OpSchema& op : OpSchemas()) {
    absl::StrAppend(&out, "| [`", op.name, "`](#", op.name, ") | ", op.input, " → ", op.output,
                    " | ", op.random ? "yes" : "no", " | ", Cell(op.torchvision), " | ",
                    Cell(op.parity), " |\n");
  }
  for (const OpSchema& op : OpSchemas()) {
    absl::StrAppend(&out, "\n## ", op.name, "\n\n", op.summary, "\n");
    if (op.fields.empty()) continue;
    absl::StrAppend(&out, "\n| field | type | default | |\n|---|---|---|---|\n");
    for (const FieldSchema& f : op.fields) {
      const std::string choices =
          f.choices.empty() ? "" : absl::StrCat(" (", absl::StrJoin(f.choices, ", "), ")");
      absl::StrAppend(&out, "| `", f.name, "` | ", f.type, " | ",
                      f.default_value.empty() ? "—" : absl::StrCat("`", f.default_value, "`"),
                      " | ", Cell(f.summary + choices), " |\n");
    }
  }
  return out;
}

std::string ExplainParseError(const std::string& message) {
  // protobuf's words: Message type "prepflow.proto.Resize" has no field
  // named "size".
  const std::string type = Quoted(message, "Message type \"prepflow.proto.");
  const std::string name = Quoted(message, "has no field named \"");
  if (type.empty() || name.empty()) return message;
  if (type == "Stage" || type == "BatchStage") {
    return absl::StrCat(message, " There is no ", type == "Stage" ? "op" : "batch op", " '", name,
                        "'; the ", type == "Stage" ? "ops" : "batch ops",
                        " are: ", OpNamesList(type == "BatchStage"),
                        " (`prepflow ops` shows their fields).");
  }
  for (const OpSchema& op : OpSchemas()) {
    const OneofDescriptor& ops = op.batch ? BatchStageOps() : StageOps();
    const FieldDescriptor* field = ops.containing_type()->FindFieldByName(op.name);
    if (field == nullptr || field->message_type()->name() != type) continue;
    std::vector<std::string> names;
    for (const FieldSchema& f : op.fields) names.push_back(f.name);
    return absl::StrCat(message, " ", op.name, " takes ",
                        names.empty() ? "no fields" : absl::StrJoin(names, ", "), ".");
  }
  return message;
}

}  // namespace prepflow
