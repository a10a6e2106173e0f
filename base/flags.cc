#include "base/flags.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace prepflow::cli {

bool ParseValue(absl::string_view text, int64_t* out) { return absl::SimpleAtoi(text, out); }
bool ParseValue(absl::string_view text, int* out) { return absl::SimpleAtoi(text, out); }
bool ParseValue(absl::string_view text, uint64_t* out) { return absl::SimpleAtoi(text, out); }
bool ParseValue(absl::string_view text, double* out) { return absl::SimpleAtod(text, out); }
bool ParseValue(absl::string_view text, bool* out) { return absl::SimpleAtob(text, out); }

namespace {

// Assigns `target` only a value that parses whole: a bad one (refused, or
// passed over by ParseKnown) leaves the default as it was.
template <typename T>
std::function<absl::Status(const std::string&)> ParsedInto(const std::string& name, T* target) {
  return [name, target](const std::string& text) {
    T value;
    if (!ParseValue(text, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": '", text, "' is not a valid value"));
    }
    *target = value;
    return absl::OkStatus();
  };
}

// Edits (insert, delete, replace a character) that turn `a` into `b`.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string FlagSet::Suggest(const std::string& name) const {
  // The closest name within a third of its length (at least 2 edits), or
  // one that begins the other at a word (--batch-size: --batch).
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const Flag& f : flags_) {
    const size_t d = EditDistance(name, f.name);
    if (d < best_distance) {
      best = f.name;
      best_distance = d;
    }
  }
  if (!best.empty()) return best;
  for (const Flag& f : flags_) {
    if (absl::StartsWith(name, f.name + "-") || absl::StartsWith(f.name, name + "-")) {
      return f.name;
    }
  }
  return "";
}

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::String(const std::string& name, std::string* target, const std::string& help) {
  flags_.push_back({name, help, *target, false, [target](const std::string& v) {
                      *target = v;
                      return absl::OkStatus();
                    }});
}

void FlagSet::Int(const std::string& name, int64_t* target, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*target), false, ParsedInto(name, target)});
}

void FlagSet::Int(const std::string& name, int* target, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*target), false, ParsedInto(name, target)});
}

void FlagSet::Uint(const std::string& name, uint64_t* target, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*target), false, ParsedInto(name, target)});
}

void FlagSet::Double(const std::string& name, double* target, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*target), false, ParsedInto(name, target)});
}

void FlagSet::Bool(const std::string& name, bool* target, const std::string& help) {
  flags_.push_back({name, help, *target ? "true" : "false", true, ParsedInto(name, target)});
}

void FlagSet::Add(const std::string& name, const std::string& help,
                  const std::string& shown_default, bool is_bool,
                  std::function<absl::Status(const std::string&)> assign) {
  flags_.push_back({name, help, shown_default, is_bool, std::move(assign)});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(int argc, char** argv, int first) {
  return Parse(argc, argv, first, /*lenient=*/false);
}

void FlagSet::ParseKnown(int argc, char** argv, int first) {
  Parse(argc, argv, first, /*lenient=*/true).IgnoreError();
}

absl::Status FlagSet::Parse(int argc, char** argv, int first, bool lenient) {
  std::string last_valued;  // the last flag given a value as the next word
  int last_value_at = -1;   // that word's index
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (lenient) continue;
      // Right after a flag's value: most likely a pattern the shell
      // expanded into several words (--data shards-{0..9}.tar unquoted).
      std::string hint;
      if (!last_valued.empty() && i - 1 == last_value_at) {
        hint = absl::StrCat("; if the shell expanded a pattern given to --", last_valued,
                            " into several words, quote it: --", last_valued,
                            " 'shard-{000000..000009}.tar'");
      }
      return absl::InvalidArgumentError(absl::StrCat(command_, ": unexpected argument '", arg,
                                                     "' (flags start with --", hint, ")"));
    }
    arg = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    Flag* flag = Find(arg);
    if (flag == nullptr && !has_value && arg.rfind("no-", 0) == 0) {
      flag = Find(arg.substr(3));
      if (flag != nullptr && flag->is_bool) {
        value = "false";
        has_value = true;
      } else {
        flag = nullptr;
      }
    }
    if (flag == nullptr) {
      if (lenient) continue;
      if (const std::string near = Suggest(arg); !near.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": unknown flag --", arg,
                                                       "; did you mean --", near, "? (", command_,
                                                       " --help lists every flag)"));
      }
      std::vector<std::string> names;
      for (const Flag& f : flags_) names.push_back(absl::StrCat("--", f.name));
      return absl::InvalidArgumentError(
          absl::StrCat(command_, ": unknown flag --", arg, "; known: ", absl::StrJoin(names, " ")));
    }
    if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
        last_valued = flag->name;
        last_value_at = i;
      } else {
        if (lenient) continue;
        return absl::InvalidArgumentError(
            absl::StrCat(command_, ": flag --", arg, " needs a value"));
      }
    }
    if (absl::Status s = flag->assign(value); !s.ok()) {
      if (lenient) continue;
      return absl::InvalidArgumentError(absl::StrCat(command_, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: ", command_, " [flags]\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppendFormat(&out, "  --%-16s %s", f.name, f.help);
    if (!f.default_value.empty() && !(f.is_bool && f.default_value == "false")) {
      absl::StrAppend(&out, " (default ", f.default_value, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(const std::string& text,
                                                                  const std::string& name) {
  std::map<std::string, std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": '", part, "' is not key=value"));
    }
    out[kv.first] = kv.second;
  }
  return out;
}

std::string FlagSet::UsageAfter(absl::string_view error) const {
  // A suggestion is the whole answer; otherwise, the usage.
  return absl::StrContains(error, "; did you mean --") ? "" : "\n" + Usage();
}

std::optional<int> FlagSet::ParseOrExit(int argc, char** argv, int first) {
  if (absl::Status s = Parse(argc, argv, first); !s.ok()) {
    std::fprintf(stderr, "%s\n%s", std::string(s.message()).c_str(),
                 UsageAfter(s.message()).c_str());
    return 2;
  }
  if (help_) {
    std::printf("%s", Usage().c_str());
    return 0;
  }
  return std::nullopt;
}

}  // namespace prepflow::cli
