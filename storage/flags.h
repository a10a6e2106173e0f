// The flags that tune reads from remote storage, the same for prepflow and
// prepflow-worker.
#ifndef PREPFLOW_STORAGE_FLAGS_H_
#define PREPFLOW_STORAGE_FLAGS_H_

#include "absl/status/status.h"
#include "net/flags.h"
#include "storage/http.h"

namespace prepflow {

// --storage-connect-timeout-seconds, --storage-timeout-seconds,
// --storage-attempts, --storage-backoff-seconds.
void RegisterStorageFlags(cli::FlagSet& flags, HttpOptions* options);

// InvalidArgument naming the flag whose value cannot be used.
absl::Status CheckStorageOptions(const HttpOptions& options);

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_FLAGS_H_
