#include "client/datasets.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/object_store.h"

namespace prepflow {

absl::StatusOr<std::unique_ptr<Dataset>> OpenClientDataset(const proto::DatasetSpec& spec,
                                                           const RemoteReadOptions& remote) {
  DatasetOptions options;
  options.read_ahead = remote.read_ahead;
  options.index_cache_dir = remote.index_cache_dir;
  if (IsUrl(spec.path())) {
    ObjectStoreOptions storage;
    storage.http = remote.http;
    if (absl::Status s = S3FromEnvironment(&storage); !s.ok()) return s;
    options.store = CurlObjectStore::Create(std::move(storage));
  }
  return OpenDataset(spec, options);
}

absl::StatusOr<std::function<absl::Status(const std::string& path)>> RemotePackOutput(
    const std::string& url, bool overwrite) {
  if (!absl::StartsWith(url, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out ", RedactedUrl(url), ": only s3:// URLs can be written (HTTP has no upload)"));
  }
  ObjectStoreOptions storage;
  if (absl::Status s = S3FromEnvironment(&storage); !s.ok()) return s;
  std::shared_ptr<CurlObjectStore> store = CurlObjectStore::Create(std::move(storage));
  std::string prefix = url;
  while (absl::EndsWith(prefix, "/")) prefix.pop_back();
  absl::StatusOr<std::vector<ObjectInfo>> listed = store->List(absl::StrCat(prefix, "/"));
  if (!listed.ok()) return listed.status();
  if (!listed->empty() && !overwrite) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s/ is not empty (%d objects, e.g. %s): shards left there would be read back with the "
        "new ones; choose an empty prefix or pass --overwrite to replace its shards",
        RedactedUrl(prefix), listed->size(), RedactedUrl(listed->front().url)));
  }
  for (const ObjectInfo& o : *listed) {
    if (!absl::EndsWith(o.url, ".tar") && !absl::EndsWith(o.url, ".tar.idx")) continue;
    if (absl::Status s = store->Delete(o.url); !s.ok()) return s;
  }
  return [store, prefix](const std::string& path) -> absl::Status {
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return absl::DataLossError(absl::StrCat("cannot read ", path));
    const size_t slash = path.rfind('/');
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (absl::Status s = store->Put(absl::StrCat(prefix, "/", name), bytes.data(), bytes.size());
        !s.ok()) {
      return s;
    }
    std::remove(path.c_str());
    return absl::OkStatus();
  };
}

}  // namespace prepflow
