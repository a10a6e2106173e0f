#include "storage/flags.h"

#include <cstdlib>

namespace prepflow {

std::string DefaultIndexCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/prepflow/index";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return std::string(home) + "/.cache/prepflow/index";
  }
  return "";
}

void RegisterStorageFlags(cli::FlagSet& flags, RemoteReadOptions* remote) {
  HttpOptions* options = &remote->http;
  flags.Double("storage-connect-timeout-seconds", &options->connect_timeout_seconds,
               "remote data (URLs): the longest a connection to storage may take to open");
  flags.Double("storage-timeout-seconds", &options->request_timeout_seconds,
               "remote data: the longest one request may take, and the longest a transfer may "
               "stall; past it the request is retried");
  flags.Int("storage-attempts", &options->max_attempts,
            "remote data: tries per request, the first included; what may pass (5xx, 429, "
            "resets, timeouts, short reads) is retried until then");
  flags.Double("storage-backoff-seconds", &options->first_backoff_seconds,
               "remote data: the wait before the first retry, doubled before each next one (up "
               "to 5 s)");
  flags.Double("storage-outage-seconds", &options->outage_seconds,
               "remote data: a request that still fails after --storage-attempts with an "
               "outage's error (5xx, 429, refused or reset connections, timeouts) is tried again "
               "until storage has failed it this long; past it the run stops, whatever "
               "--on-error says (an outage is not bad data; 0: --storage-attempts only)");
  flags.Int("read-ahead-requests", &remote->read_ahead.requests,
            "remote data: reads started ahead of the CPU stages, at most this many at once "
            "(0: none; each sample is then read by the thread that decodes it)");
  flags.Int("read-ahead-bytes", &remote->read_ahead.max_bytes,
            "remote data: bytes read ahead and not yet used, at most");
  flags.String("index-cache-dir", &remote->index_cache_dir,
               "remote data: where the index of a shard without a sidecar (made by one pass "
               "over it) is kept, by URL, size and ETag, for the next open (empty: not kept)");
}

void RegisterCacheFlags(cli::FlagSet& flags, SampleCacheOptions* options) {
  flags.Int("cache-bytes", &options->ram_bytes,
            "keep samples' values at the cache boundary in RAM, up to this many bytes, so later "
            "epochs (and jobs) do not read and prepare them again (0: no RAM cache)");
  flags.String("cache-dir", &options->dir,
               "keep them also in files under this folder, which outlive the process (one "
               "process per folder; empty: no disk cache)");
  flags.Int("cache-disk-bytes", &options->disk_bytes,
            "with --cache-dir: the most bytes kept there (0: half the folder's free space)");
}

absl::Status CheckStorageOptions(const RemoteReadOptions& remote) {
  const HttpOptions& o = remote.http;
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
  if (!(o.outage_seconds >= 0) || o.outage_seconds > 86400) {
    return absl::InvalidArgumentError("--storage-outage-seconds must be 0 to 86400");
  }
  if (remote.read_ahead.requests < 0 || remote.read_ahead.requests > 1024) {
    return absl::InvalidArgumentError("--read-ahead-requests must be 0 to 1024");
  }
  if (remote.read_ahead.max_bytes < 0) {
    return absl::InvalidArgumentError("--read-ahead-bytes must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace prepflow
