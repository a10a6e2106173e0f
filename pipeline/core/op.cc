#include "pipeline/core/op.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pipeline/core/op_schema.h"

namespace prepflow {

using proto::Stage;

void OpRegistry::Register(Stage::OpCase op_case, OpFactory factory) {
  factories_.emplace_back(op_case, std::move(factory));
}

std::string OpRegistry::OpName(Stage::OpCase op_case) {
  if (op_case == Stage::OP_NOT_SET) return "unset";
  const auto* field = Stage::descriptor()->FindFieldByNumber(static_cast<int>(op_case));
  return field != nullptr ? field->name() : absl::StrCat("op#", static_cast<int>(op_case));
}

std::vector<std::string> OpRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [op_case, factory] : factories_) names.push_back(OpName(op_case));
  return names;
}

absl::StatusOr<std::unique_ptr<Op>> OpRegistry::Create(const Stage& given) const {
  if (given.op_case() == Stage::OP_NOT_SET) {
    return absl::InvalidArgumentError(
        absl::StrCat("no op set; one of: ", absl::StrJoin(Names(), ", ")));
  }
  // Factories see every unset field at its documented default.
  Stage stage = given;
  if (absl::Status s = ApplyDefaults(&stage); !s.ok()) return s;
  for (const auto& [op_case, factory] : factories_) {
    if (op_case == stage.op_case()) return factory(stage);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("op ", OpName(stage.op_case()), " is not registered"));
}

}  // namespace prepflow
