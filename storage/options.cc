#include "storage/options.h"

#include <cstdlib>
#include <limits>

namespace prepflow {

absl::StatusOr<ObjectStoreOptions> StoreOptions(const RemoteReadOptions& remote) {
  ObjectStoreOptions storage;
  storage.http = remote.http;
  storage.whole_objects = remote.whole_objects;
  if (absl::Status s = S3FromEnvironment(&storage); !s.ok()) return s;
  return storage;
}

std::string DefaultIndexCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/prepflow/index";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    return std::string(home) + "/.cache/prepflow/index";
  }
  return "";
}

const std::vector<OptionField<RemoteReadOptions>>& StorageOptionFields() {
  using O = RemoteReadOptions;
  constexpr double kNoMax = std::numeric_limits<double>::max();
  static const auto* table = new std::vector<OptionField<O>>{
      DoubleOption<O>(
          "storage_connect_timeout_seconds", "storage-connect-timeout-seconds",
          [](auto& o) -> auto& { return o.http.connect_timeout_seconds; }, 0, kNoMax, true,
          "remote data (URLs): the longest a connection to storage may take to open"),
      DoubleOption<O>(
          "storage_timeout_seconds", "storage-timeout-seconds",
          [](auto& o) -> auto& { return o.http.request_timeout_seconds; }, 0, kNoMax, true,
          "remote data: the longest one request may take, and the longest a transfer may "
          "stall; past it the request is retried"),
      IntOption<O>(
          "storage_attempts", "storage-attempts",
          [](auto& o) -> auto& { return o.http.max_attempts; }, 1, 100,
          "remote data: tries per request, the first included; what may pass (5xx, 429, "
          "resets, timeouts, short reads) is retried until then"),
      DoubleOption<O>(
          "storage_backoff_seconds", "storage-backoff-seconds",
          [](auto& o) -> auto& { return o.http.first_backoff_seconds; }, 0, 60, false,
          "remote data: the wait before the first retry, doubled before each next one (up to "
          "5 s)"),
      DoubleOption<O>(
          "storage_outage_seconds", "storage-outage-seconds",
          [](auto& o) -> auto& { return o.http.outage_seconds; }, 0, 86400, false,
          "remote data: a request that still fails after --storage-attempts with an outage's "
          "error (5xx, 429, refused or reset connections, timeouts) is tried again until "
          "storage has failed it this long; past it the run stops, whatever --on-error says "
          "(an outage is not bad data; 0: --storage-attempts only)"),
      IntOption<O>(
          "read_ahead_requests", "read-ahead-requests",
          [](auto& o) -> auto& { return o.read_ahead.requests; }, 0, 1024,
          "remote data: reads started ahead of the CPU stages, at most this many at once (0: "
          "none; each sample is then read by the thread that decodes it)"),
      IntOption<O>(
          "read_ahead_bytes", "read-ahead-bytes",
          [](auto& o) -> auto& { return o.read_ahead.max_bytes; }, 0,
          std::numeric_limits<int64_t>::max(),
          "remote data: bytes read ahead and not yet used, at most"),
      ShownDefault(
          StringOption<O>("index_cache_dir", "index-cache-dir", &O::index_cache_dir,
                          "remote data: where the index of a shard without a sidecar (made by "
                          "one pass over it) is kept, by URL, size and ETag, for the next open "
                          "(empty: not kept)"),
          "$XDG_CACHE_HOME/prepflow/index, else ~/.cache/prepflow/index"),
      IntOption<O>(
          "whole_object_bytes", "whole-object-bytes",
          [](auto& o) -> auto& { return o.whole_objects.max_bytes; }, 1,
          std::numeric_limits<int64_t>::max(),
          "remote data from an HTTP server that ignores Range requests: each object (shard) is "
          "fetched whole once and read from that copy; the copies kept at once, in bytes, "
          "least recently used dropped first (a larger object fails naming this flag)"),
      StringOption<O>(
          "whole_object_dir", "whole-object-dir",
          [](auto& o) -> auto& { return o.whole_objects.dir; },
          "remote data from a server that ignores Range requests: keep the whole "
          "copies in unlinked files in this folder rather than in memory (empty: "
          "memory)"),
  };
  return *table;
}

}  // namespace prepflow
