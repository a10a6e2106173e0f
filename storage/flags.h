// The flags that tune reads from remote storage, the same for prepflow and
// prepflow-worker.
#ifndef PREPFLOW_STORAGE_FLAGS_H_
#define PREPFLOW_STORAGE_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "net/flags.h"
#include "pipeline/read_ahead.h"
#include "pipeline/sample_cache.h"
#include "storage/http.h"

namespace prepflow {

// How data named by URL is read: each request, and the reads ahead.
// Where remote shards' indexes made by a pass are kept by default:
// $XDG_CACHE_HOME/prepflow/index, else $HOME/.cache/prepflow/index ("" when
// neither is set: not kept).
std::string DefaultIndexCacheDir();

struct RemoteReadOptions {
  HttpOptions http;
  ReadAheadOptions read_ahead;
  std::string index_cache_dir = DefaultIndexCacheDir();
};

// --storage-connect-timeout-seconds, --storage-timeout-seconds,
// --storage-attempts, --storage-backoff-seconds, --storage-outage-seconds,
// --read-ahead-requests,
// --read-ahead-bytes, --index-cache-dir.
void RegisterStorageFlags(cli::FlagSet& flags, RemoteReadOptions* options);

// InvalidArgument naming the flag whose value cannot be used.
absl::Status CheckStorageOptions(const RemoteReadOptions& options);

// --cache-bytes, --cache-dir, --cache-disk-bytes: a process's sample cache
// (pipeline/sample_cache.h), the same for prepflow and prepflow-worker.
void RegisterCacheFlags(cli::FlagSet& flags, SampleCacheOptions* options);

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_FLAGS_H_
