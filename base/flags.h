// A small command-line flag parser for every prepflow command: prepflow,
// prepflow-worker, prepflow-scheduler and the benchmark programs. Abseil only,
// so the lowest program may use it. Options with a table (base/options.h)
// register through RegisterOptionFlags.
//
// Flags are `--name value` or `--name=value`; booleans are `--name`,
// `--name=true|false` or `--no-name`. Every error names the flag and the
// command, and unknown flags are refused with the list of known ones.
//
// Thread-safety: a FlagSet is used from one thread (main's).
#ifndef PREPFLOW_BASE_FLAGS_H_
#define PREPFLOW_BASE_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace prepflow::cli {

class FlagSet {
 public:
  // `command` as the user types it: "prepflow run", "prepflow-worker".
  FlagSet(std::string command, std::string summary);

  void String(const std::string& name, std::string* target, const std::string& help);
  void Int(const std::string& name, int64_t* target, const std::string& help);
  void Int(const std::string& name, int* target, const std::string& help);
  void Uint(const std::string& name, uint64_t* target, const std::string& help);
  void Double(const std::string& name, double* target, const std::string& help);
  void Bool(const std::string& name, bool* target, const std::string& help);
  // A flag whose value `assign` checks and stores; its error (naming the
  // flag) is the parse error. `shown_default` is what --help prints.
  void Add(const std::string& name, const std::string& help, const std::string& shown_default,
           bool is_bool, std::function<absl::Status(const std::string& value)> assign);

  // Parses argv[first..argc). InvalidArgument on an unknown flag, a missing
  // or malformed value, or a positional argument.
  absl::Status Parse(int argc, char** argv, int first);
  // The same, but only what it knows: everything else (unknown flags, bad
  // values, positional arguments) is passed over. For a flag that must be
  // seen even when the rest of the command line is wrong (--json).
  void ParseKnown(int argc, char** argv, int first);
  bool help() const { return help_; }
  // Parse() as every main wants it: nullopt to go on; else the exit code,
  // having printed what is wrong and the usage to stderr (2), or the usage
  // asked for with --help to stdout (0).
  std::optional<int> ParseOrExit(int argc, char** argv, int first);
  // Usage text listing every flag with its default.
  std::string Usage() const;
  // What to print after a Parse() error: a blank line and the usage, or
  // nothing when the error already suggests the flag meant.
  std::string UsageAfter(absl::string_view error) const;

 private:
  struct Flag {
    std::string name, help, default_value;
    bool is_bool = false;
    std::function<absl::Status(const std::string&)> assign;
  };
  Flag* Find(const std::string& name);
  // The known flag an unknown `name` was most likely meant to be; "" if none
  // is close.
  std::string Suggest(const std::string& name) const;
  absl::Status Parse(int argc, char** argv, int first, bool lenient);

  std::string command_, summary_;
  std::vector<Flag> flags_;
  bool help_ = false;
};

// A whole flag value as a number or a bool ("true", "false", "1", "0",
// "yes", "no"); false when any of `text` is left over or out of range.
bool ParseValue(absl::string_view text, int64_t* out);
bool ParseValue(absl::string_view text, int* out);
bool ParseValue(absl::string_view text, uint64_t* out);
bool ParseValue(absl::string_view text, double* out);
bool ParseValue(absl::string_view text, bool* out);

// The items of a comma-separated flag value ("a, b,,c" -> a, b, c): each
// stripped of whitespace, empty ones skipped.
std::vector<std::string> SplitList(const std::string& text);

// Parses "k=v,k2=v2" (e.g. --labels zone=a,rack=3). Errors: InvalidArgument
// naming the option as `name` ("--labels") and the part that is not
// key=value.
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(const std::string& text,
                                                                  const std::string& name);

}  // namespace prepflow::cli

#endif  // PREPFLOW_BASE_FLAGS_H_
