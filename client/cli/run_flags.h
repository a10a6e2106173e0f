// The flags `prepflow run` and `prepflow demo` share (what LoaderOptions
// holds), and the run they drive.
//
// Thread-safety: called from main's thread only (ExecuteRun's Loader has
// its own threads; see client/loader.h).
#ifndef PREPFLOW_CLIENT_CLI_RUN_FLAGS_H_
#define PREPFLOW_CLIENT_CLI_RUN_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "client/cli/console.h"
#include "client/loader.h"

namespace prepflow::cli {

// The flags shared by run and demo: the data, the pipeline and plugins, one
// flag per row of LoaderOptionFields() (client/loader_options.h), --json and
// --metrics-port.
struct RunFlags {
  std::string data, pipeline = "imagenet-train", plugins;
  bool json = false;
  int metrics_port = -1;
  // What the table's flags set (each checked as it is parsed); defaults are
  // LoaderOptions' own, or what the command set before Register().
  LoaderOptions options;

  // Adds every flag to `f`; --data is described as required or optional.
  void Register(FlagSet& f, bool data_required);
  // `options` with the data and the pipeline; InvalidArgument naming the flag.
  absl::StatusOr<LoaderOptions> ToOptions() const;
};

struct RunOutcome {
  int exit_code = kFailed;
  Json summary;  // the --json object (null if the loader could not start)
  uint64_t checksum = 0;
};

// Runs `options` to the end. Prints progress and, unless `json`, a human
// summary; the JSON summary is returned for the caller to print. Errors go
// through `console` (named `command`).
RunOutcome ExecuteRun(Console& console, const std::string& command, const LoaderOptions& options,
                      bool json, int metrics_port = -1);

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_RUN_FLAGS_H_
