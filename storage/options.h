// The options that tune reads from remote storage, the same for prepflow
// (LoaderOptions::storage) and prepflow-worker: one row each
// (base/options.h).
//
// Thread-safety: plain values; the table is built once.
#ifndef PREPFLOW_STORAGE_OPTIONS_H_
#define PREPFLOW_STORAGE_OPTIONS_H_

#include <string>
#include <vector>

#include "base/options.h"
#include "pipeline/data/read_ahead.h"
#include "storage/http.h"
#include "storage/object_store.h"
#include "storage/whole_objects.h"

namespace prepflow {

// Where remote shards' indexes made by a pass are kept by default:
// $XDG_CACHE_HOME/prepflow/index, else $HOME/.cache/prepflow/index ("" when
// neither is set: not kept).
std::string DefaultIndexCacheDir();

// How data named by URL is read: each request, and the reads ahead.
struct RemoteReadOptions {
  HttpOptions http;
  ReadAheadOptions read_ahead;
  std::string index_cache_dir = DefaultIndexCacheDir();
  WholeObjectOptions whole_objects;  // for servers that ignore Range requests
};

// A store's options from these, S3's from the environment
// (S3FromEnvironment's errors).
absl::StatusOr<ObjectStoreOptions> StoreOptions(const RemoteReadOptions& remote);

// storage_connect_timeout_seconds, storage_timeout_seconds,
// storage_attempts, storage_backoff_seconds, storage_outage_seconds,
// read_ahead_requests, read_ahead_bytes, index_cache_dir,
// whole_object_bytes, whole_object_dir.
const std::vector<OptionField<RemoteReadOptions>>& StorageOptionFields();

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_OPTIONS_H_
