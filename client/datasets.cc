#include "client/datasets.h"

#include "storage/object_store.h"

namespace prepflow {

absl::StatusOr<std::unique_ptr<Dataset>> OpenClientDataset(const proto::DatasetSpec& spec,
                                                           const RemoteReadOptions& remote) {
  DatasetOptions options;
  options.read_ahead = remote.read_ahead;
  if (IsUrl(spec.path())) {
    ObjectStoreOptions storage;
    storage.http = remote.http;
    if (absl::Status s = S3FromEnvironment(&storage); !s.ok()) return s;
    options.store = CurlObjectStore::Create(std::move(storage));
  }
  return OpenDataset(spec, options);
}

}  // namespace prepflow
