#include "base/options.h"

#include "absl/strings/numbers.h"
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
  bool parsed = false;
  switch (kind) {
    case OptionKind::kBool: {
      bool b = false;
      parsed = absl::SimpleAtob(text, &b);
      *value = b;
      break;
    }
    case OptionKind::kInt: {
      int64_t i = 0;
      parsed = absl::SimpleAtoi(text, &i);
      *value = i;
      break;
    }
    case OptionKind::kUint: {
      uint64_t u = 0;
      parsed = absl::SimpleAtoi(text, &u);
      *value = u;
      break;
    }
    case OptionKind::kDouble: {
      double d = 0;
      parsed = absl::SimpleAtod(text, &d);
      *value = d;
      break;
    }
    case OptionKind::kString:
      *value = text;
      return absl::OkStatus();
    case OptionKind::kList:
      *value = cli::SplitList(text);
      return absl::OkStatus();
    case OptionKind::kMap: {
      auto pairs = cli::ParseKeyValues(text, name);
      if (!pairs.ok()) return pairs.status();
      *value = *std::move(pairs);
      return absl::OkStatus();
    }
    case OptionKind::kIntOrAuto:
      if (int64_t i = 0; absl::SimpleAtoi(text, &i)) {
        *value = i;
      } else {
        *value = text;
      }
      return absl::OkStatus();
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
