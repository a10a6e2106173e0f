#include "base/options.h"

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/flags.h"

namespace prepflow {
namespace {

absl::Status NotA(const std::string& name, const std::string& text, OptionKind kind) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": '", text, "' is not ", OptionKindName(kind)));
}

// `text` as a T (cli::ParseValue) into `*value`; false, `*value` untouched,
// when it does not parse.
template <typename T>
bool ParseInto(const std::string& text, OptionValue* value) {
  T x{};
  if (!cli::ParseValue(text, &x)) return false;
  *value = x;
  return true;
}

}  // namespace

namespace options_internal {

absl::Status OutOfBounds(const std::string& name, const std::string& bounds,
                         const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": must be ", bounds, ", got ", got));
}

std::string Bounds(double min, double max, bool min_open) {
  if (max == std::numeric_limits<double>::max()) {
    if (min_open) return min == 0 ? "positive" : absl::StrCat("above ", min);
    return absl::StrCat(">= ", min);
  }
  return absl::StrCat(min_open ? "above " : "", min, " to ", max);
}

}  // namespace options_internal

const char* OptionKindName(OptionKind kind) {
  switch (kind) {
    case OptionKind::kBool:
      return "true or false";
    case OptionKind::kInt:
      return "an integer";
    case OptionKind::kUint:
      return "an integer >= 0";
    case OptionKind::kDouble:
      return "a number";
    case OptionKind::kString:
      return "a string";
    case OptionKind::kList:
      return "a list of strings";
    case OptionKind::kMap:
      return "key=value pairs";
    case OptionKind::kIntOrAuto:
      return "auto or an integer";
  }
  return "?";
}

absl::Status ParseOptionText(OptionKind kind, const std::string& text, const std::string& name,
                             OptionValue* value) {
  bool parsed = true;
  switch (kind) {
    case OptionKind::kBool:
      parsed = ParseInto<bool>(text, value);
      break;
    case OptionKind::kInt:
      parsed = ParseInto<int64_t>(text, value);
      break;
    case OptionKind::kUint:
      parsed = ParseInto<uint64_t>(text, value);
      break;
    case OptionKind::kDouble:
      parsed = ParseInto<double>(text, value);
      break;
    case OptionKind::kString:
      *value = text;
      break;
    case OptionKind::kList:
      *value = cli::SplitList(text);
      break;
    case OptionKind::kMap: {
      auto pairs = cli::ParseKeyValues(text, name);
      if (!pairs.ok()) return pairs.status();
      *value = *std::move(pairs);
      break;
    }
    case OptionKind::kIntOrAuto:  // the row says what words it takes
      if (!ParseInto<int64_t>(text, value)) *value = text;
      break;
  }
  return parsed ? absl::OkStatus() : NotA(name, text, kind);
}

std::string OptionText(const OptionValue& value) {
  struct Render {
    std::string operator()(std::monostate) const { return ""; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return absl::StrCat(i); }
    std::string operator()(uint64_t u) const { return absl::StrCat(u); }
    std::string operator()(double d) const { return absl::StrCat(d); }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<std::string>& list) const {
      return absl::StrJoin(list, ",");
    }
    std::string operator()(const std::map<std::string, std::string>& map) const {
      return absl::StrJoin(map, ",", absl::PairFormatter("="));
    }
  };
  return std::visit(Render{}, value);
}

}  // namespace prepflow
