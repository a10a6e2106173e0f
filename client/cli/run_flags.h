// The flags `prepflow run` and `prepflow demo` share (what LoaderOptions
// holds), and the run they drive.
#ifndef PREPFLOW_CLIENT_CLI_RUN_FLAGS_H_
#define PREPFLOW_CLIENT_CLI_RUN_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/cli/console.h"
#include "client/loader.h"
#include "net/flags.h"
#include "net/security.h"
#include "pipeline/dataset.h"
#include "pipeline/image_decode.h"
#include "storage/flags.h"

namespace prepflow::cli {

// The flags shared by run and demo: what LoaderOptions holds.
struct RunFlags {
  std::string data, format = "auto", pipeline = "imagenet-train", on_error = "skip";
  int batch = 64, threads = 0, epochs = 1, rank = 0, world_size = 1, prefetch = 2;
  int start_epoch = 0, start_batch = 0;
  uint64_t seed = 0;
  int64_t max_pixels = 64'000'000;
  int64_t max_file_bytes = kDefaultMaxFileBytes;
  int max_jpeg_scans = kDefaultMaxJpegScans;
  bool json = false, shuffle = true, drop_last = false, fallback_local = false;
  std::string offload, workers;  // offload unset: $PREPFLOW_OFFLOAD, else off
  std::string scheduler, labels, plugins, rank_split = "pad", job;
  int local_ranks = 0;
  double weight = 1, max_remote_cores = 0;
  double worker_timeout = 30, demand = 0, bandwidth_mbps = 0, hedge_after = 3;
  int item_samples = 8;
  int metrics_port = -1;
  SecurityOptions security;
  RemoteReadOptions storage;
  SampleCacheOptions cache;
  std::string cache_at = "auto", echo_at = "auto", echo = "1";
  int max_echo = 4, start_echo = 0;
  int64_t echo_window = 256, echo_bytes = int64_t{512} << 20;

  // Adds every flag to `f`; --data is described as required or optional.
  void Register(FlagSet& f, bool data_required);
  // The options the flags say; InvalidArgument naming the flag.
  absl::StatusOr<LoaderOptions> ToOptions() const;

 private:
  void RegisterData(FlagSet& f, bool data_required);  // the data, the pipeline, ranks
  void RegisterOffload(FlagSet& f);                   // workers, scheduler, storage, TLS
  void RegisterReuse(FlagSet& f);                     // caches and echoing
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
