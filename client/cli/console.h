// What every prepflow subcommand shares: its exit codes, the help text of
// the flags several take, and the Console it prints its JSON line and errors
// through (what the --json contract reads back: RunWithJsonContract).
//
// Thread-safety: a Console is used from one thread (the command's).
#ifndef PREPFLOW_CLIENT_CLI_CONSOLE_H_
#define PREPFLOW_CLIENT_CLI_CONSOLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/flags.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/profiler.h"
#include "proto/pipeline.pb.h"

namespace prepflow::cli {

using Json = nlohmann::ordered_json;

inline constexpr int kOk = 0;
inline constexpr int kFailed = 1;
inline constexpr int kUsage = 2;

inline constexpr char kFidelityHelp[] =
    "exact | fast: resize and random_resized_crop stages that set no fidelity (as prepflow "
    "run's; a job given materialized data must use the same)";
// `text` (a --fidelity value) applied to `spec`'s resizing stages;
// InvalidArgument naming the flag.
absl::Status ApplyFidelityFlag(const std::string& text, proto::PipelineSpec* spec);
inline constexpr char kPipelineHelp[] =
    "imagenet-train | imagenet-eval | a pipeline text file | the text itself ('stages { ... }')";
inline constexpr char kPluginHelp[] =
    "plugin libraries of custom ops (pipeline/ops/plugin_api.h), FILE[,FILE...]";

// Loads the --plugin list.
absl::Status LoadPluginFlag(const std::string& list);

class Console {
 public:
  // Prints `j` as one line of valid UTF-8 JSON. Strings from outside go
  // through SafeText first; the replacing handler is a second line of
  // defence, so a stray byte can never abort the process.
  void PrintJson(const Json& j);
  // Prints a usage error and returns the usage exit code.
  int UsageError(const std::string& message, const FlagSet& flags);
  // Prints `status` as `command`'s error; returns the usage exit code for
  // InvalidArgument, else the failure code.
  int Failure(const std::string& command, const absl::Status& status);
  // Parses the command's flags. Returns the exit code when the command
  // should stop here (bad usage, or --help printed).
  std::optional<int> ParseFlags(FlagSet& flags, int argc, char** argv);

  bool json_printed() const { return json_printed_; }
  const std::string& last_error() const { return last_error_; }

 private:
  bool json_printed_ = false;
  std::string last_error_;
};

// A single status line on stderr, redrawn at most 4 times a second, and only
// when stderr is a terminal.
class Progress {
 public:
  Progress();
  void Update(const std::string& line, bool force = false);
  void Done();

 private:
  bool tty_;
  bool shown_ = false;
  int64_t last_ = 0;
};

// The per-stage table the human summaries print.
std::string StagesTable(const std::vector<StageStats>& stages);

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_CONSOLE_H_
