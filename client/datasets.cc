#include "client/datasets.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/text_format.h"
#include "pipeline/data/braces.h"
#include "pipeline/reuse/materialize.h"
#include "storage/object_store.h"

namespace prepflow {

bool ReadsUrls(const proto::DatasetSpec& spec) {
  bool urls = IsUrl(spec.path());
  for (const proto::MixSource& source : spec.mix()) urls |= IsUrl(source.path());
  return urls;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenClientDataset(const proto::DatasetSpec& spec,
                                                           const RemoteReadOptions& remote) {
  DatasetOptions options;
  options.read_ahead = remote.read_ahead;
  options.index_cache_dir = remote.index_cache_dir;
  if (ReadsUrls(spec)) {
    absl::StatusOr<ObjectStoreOptions> storage = StoreOptions(remote);
    if (!storage.ok()) return storage.status();
    options.store = CurlObjectStore::Create(*std::move(storage));
  }
  return OpenDataset(spec, options);
}

OpDataOpener ClientOpDataOpener(const RemoteReadOptions& remote) {
  return [remote](const std::string& path) -> absl::StatusOr<std::unique_ptr<OpData>> {
    proto::DatasetSpec spec;
    spec.set_path(path);
    absl::StatusOr<std::unique_ptr<Dataset>> dataset = OpenClientDataset(spec, remote);
    if (!dataset.ok()) return dataset.status();
    return AsOpData(*std::move(dataset));
  };
}

OpFileReader ClientOpFileReader(const RemoteReadOptions& remote) {
  DatasetOptions options;
  if (absl::StatusOr<ObjectStoreOptions> storage = StoreOptions(remote); storage.ok()) {
    options.store = CurlObjectStore::Create(*std::move(storage));
  }
  return OpFileReaderFor(std::move(options));
}

std::string SharedPath(const std::string& path) {
  char real[PATH_MAX], cwd[PATH_MAX];
  if (IsUrl(path)) return path;
  if (realpath(path.c_str(), real) != nullptr) return real;
  if (!path.empty() && path[0] != '/' && getcwd(cwd, sizeof(cwd)) != nullptr) {
    return absl::StrCat(cwd, "/", path);
  }
  return path;
}

namespace {

// The folder (or URL prefix) where a dataset's manifest would be.
std::string ManifestFolder(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  struct stat st;
  const bool folder = IsUrl(p) ? !absl::EndsWith(p, ".tar") && !HasBraces(p)
                               : stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  if (folder) return p;
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

}  // namespace

absl::Status FindMaterialized(proto::DatasetSpec* spec, const RemoteReadOptions& remote) {
  constexpr uint64_t kMaxManifestBytes = 1 << 20;
  const std::string where = absl::StrCat(ManifestFolder(spec->path()), "/", kManifestName);
  std::string text;
  if (IsUrl(where)) {
    absl::StatusOr<ObjectStoreOptions> storage = StoreOptions(remote);
    if (!storage.ok()) return storage.status();
    std::shared_ptr<CurlObjectStore> store = CurlObjectStore::Create(*std::move(storage));
    absl::StatusOr<std::unique_ptr<ByteSource>> source = store->Open(where);
    if (absl::IsNotFound(source.status())) return absl::OkStatus();
    if (!source.ok()) {
      // The probe is the run's first request: its failure (storage down,
      // credentials refused) is the dataset's.
      return absl::Status(source.status().code(),
                          absl::StrCat("dataset ", RedactedUrl(spec->path()),
                                       ": its storage failed the first request (looking for ",
                                       kManifestName, "): ", source.status().message()));
    }
    if ((*source)->size() > kMaxManifestBytes) {
      return absl::DataLossError(absl::StrCat(RedactedUrl(where), ": over 1 MiB, not a manifest"));
    }
    text.resize((*source)->size());
    if (absl::Status s = (*source)->ReadAt(0, text.size(), reinterpret_cast<uint8_t*>(text.data()));
        !s.ok()) {
      return s;
    }
  } else {
    std::ifstream in(where, std::ios::binary);
    if (!in) return absl::OkStatus();
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (text.size() > kMaxManifestBytes) {
      return absl::DataLossError(absl::StrCat(where, ": over 1 MiB, not a manifest"));
    }
  }
  if (!google::protobuf::TextFormat::ParseFromString(text, spec->mutable_materialized()) ||
      spec->materialized().upto() < 0 ||
      CheckEncoding(spec->materialized().encoding()) != absl::OkStatus()) {
    spec->clear_materialized();
    return absl::DataLossError(
        absl::StrCat(IsUrl(where) ? RedactedUrl(where) : where,
                     ": not a materialized dataset's manifest (written by prepflow materialize)"));
  }
  return absl::OkStatus();
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
