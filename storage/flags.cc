#include "storage/flags.h"

namespace prepflow {

void RegisterStorageFlags(cli::FlagSet& flags, HttpOptions* options) {
  flags.Double("storage-connect-timeout-seconds", &options->connect_timeout_seconds,
               "remote data (URLs): the longest a connection to storage may take to open");
  flags.Double("storage-timeout-seconds", &options->request_timeout_seconds,
               "remote data: the longest one request may take, and the longest a transfer may "
               "stall; past it the request is retried");
  flags.Int("storage-attempts", &options->max_attempts,
            "remote data: tries per request, the first included; what may pass (5xx, 429, "
            "resets, timeouts, short reads) is retried until then");
  flags.Double("storage-backoff-seconds", &options->first_backoff_seconds,
               "remote data: the wait before the first retry, doubled before each next one");
}

absl::Status CheckStorageOptions(const HttpOptions& o) {
  if (!(o.connect_timeout_seconds > 0) || !(o.request_timeout_seconds > 0)) {
    return absl::InvalidArgumentError(
        "--storage-connect-timeout-seconds and --storage-timeout-seconds must be positive");
  }
  if (o.max_attempts < 1 || o.max_attempts > 100) {
    return absl::InvalidArgumentError("--storage-attempts must be 1 to 100");
  }
  if (!(o.first_backoff_seconds >= 0) || o.first_backoff_seconds > 60) {
    return absl::InvalidArgumentError("--storage-backoff-seconds must be 0 to 60");
  }
  return absl::OkStatus();
}

}  // namespace prepflow
