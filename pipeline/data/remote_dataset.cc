// Datasets in remote storage: URLs read through the embedding program's
// ObjectStore. A worker reads them for itself, only below its allowed
// prefixes.
#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/text.h"
#include "pipeline/data/braces.h"
#include "pipeline/data/datasets.h"

namespace prepflow::detail {
namespace {

// An ImageFolder of objects: the class is the first path component below the
// prefix, and samples are ordered as torchvision orders a folder's walk.
class ObjectFolder : public Dataset {
 public:
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& root,
                                                       std::vector<ObjectInfo> objects,
                                                       const Configure& configure) {
    auto ds = std::unique_ptr<ObjectFolder>(new ObjectFolder);
    configure(ds.get());
    ds->root_ = root;
    struct Found {
      std::string cls, dir, file;
      ObjectInfo object;
    };
    std::vector<Found> found;
    const std::string below = absl::StrCat(root, "/");
    for (ObjectInfo& o : objects) {
      if (!absl::StartsWith(o.url, below)) continue;  // the store checks listings; not trusted
      const std::string rel = o.url.substr(below.size());
      const size_t first = rel.find('/');
      const size_t last = rel.rfind('/');
      // Objects right below the prefix belong to no class, as files beside
      // the class folders do for torchvision.
      if (first == std::string::npos || !IsImageExtension(LowerExtension(rel))) continue;
      found.push_back({rel.substr(0, first), rel.substr(0, last), rel.substr(last + 1), o});
    }
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      return std::tie(a.cls, a.dir, a.file) < std::tie(b.cls, b.dir, b.file);
    });
    for (Found& f : found) {
      if (ds->classes_.empty() || ds->classes_.back() != f.cls) ds->classes_.push_back(f.cls);
      ds->labels_.push_back(static_cast<int64_t>(ds->classes_.size()) - 1);
      ds->objects_.push_back(std::move(f.object));
    }
    if (ds->objects_.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no image objects (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp) in class folders "
          "below ",
          SafeText(root), "/ (an ImageFolder is root/<class>/<image>)"));
    }
    return ds;
  }

  ~ObjectFolder() override { read_ahead_.reset(); }

  const char* format() const override { return "imagefolder"; }
  std::string SamplePath(int64_t i) const override { return objects_[i].url; }
  std::string Extension(int64_t i) const override { return LowerExtension(objects_[i].url); }
  uint64_t SourceVersion(int64_t i) const override { return HashVersion(objects_[i].version); }
  absl::Status Read(int64_t i, Buffer* out, size_t* size) const override {
    const ObjectInfo& o = objects_[i];
    if (absl::Status s = CheckSize(o.size, o.url); !s.ok()) return s;
    absl::Status status;
    if (read_ahead_ != nullptr && read_ahead_->Take(i, out, size, &status)) return status;
    *size = o.size;
    return Fetch(o, out->Reserve(o.size == 0 ? 1 : o.size));
  }
  absl::Status ReadHead(int64_t i, size_t max_bytes, Buffer* out, size_t* size,
                        uint64_t* whole) const override {
    const ObjectInfo& o = objects_[i];
    if (absl::Status s = CheckSize(o.size, o.url); !s.ok()) return s;
    *whole = o.size;
    *size = static_cast<size_t>(std::min<uint64_t>(o.size, max_bytes));
    absl::StatusOr<std::unique_ptr<ByteSource>> source =
        store_->Open(o.url, static_cast<int64_t>(o.size));
    if (!source.ok()) return source.status();
    return (*source)->ReadAt(0, *size, out->Reserve(std::max<size_t>(*size, 1)));
  }
  void Prefetch(absl::Span<const int64_t> indices) const override {
    if (read_ahead_ == nullptr) return;
    for (const int64_t i : indices) {
      const ObjectInfo& o = objects_[i];
      if (o.size > static_cast<uint64_t>(max_file_bytes_)) continue;  // Read refuses it
      read_ahead_->Start(i, o.size, [this, &o](uint8_t* dst, size_t) { return Fetch(o, dst); });
    }
  }

 private:
  absl::Status Fetch(const ObjectInfo& o, uint8_t* dst) const {
    absl::StatusOr<std::unique_ptr<ByteSource>> source =
        store_->Open(o.url, static_cast<int64_t>(o.size));
    if (!source.ok()) return source.status();
    return (*source)->ReadAt(0, o.size, dst);
  }

  std::vector<ObjectInfo> objects_;
};

absl::Status CheckForm(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = url.find('/', scheme + 3);
  const size_t at = url.find('@', scheme + 3);
  if (url.find_first_of("?#") != std::string::npos ||
      (at != std::string::npos && (slash == std::string::npos || at < slash))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset URL ", RedactedUrl(url),
        " carries a query or credentials: name objects by plain URLs and give credentials in "
        "the environment (AWS_ACCESS_KEY_ID, ...)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenRemoteDataset(const proto::DatasetSpec& spec,
                                                           const std::string& url,
                                                           const DatasetOptions& options,
                                                           const Configure& configure_limits) {
  const Configure configure = [&](Dataset* ds) {
    configure_limits(ds);
    DatasetSetup::ReadAheadFor(ds, options.read_ahead);
  };
  if (options.store == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset ", RedactedUrl(url), " is a URL, and this program reads no URLs"));
  }
  if (absl::Status s = CheckForm(url); !s.ok()) return s;
  const auto allowed = [&](const std::string& u) {
    return options.confine_urls ? CheckUrlAllowed(u, options.url_prefixes) : absl::OkStatus();
  };
  const bool wds_only = spec.format() == proto::DatasetSpec::FORMAT_WEBDATASET;
  const bool folder_only = spec.format() == proto::DatasetSpec::FORMAT_IMAGEFOLDER;
  // After a listing, its sizes spare a request per object, and a sidecar it
  // does not hold needs no request to be found missing.
  bool listed = false;
  std::map<std::string, ObjectInfo> listed_objects;
  ShardAccess access;
  access.remote = true;
  access.window_bytes = options.index_window_bytes;
  access.parallel = std::max(1, options.read_ahead.requests);
  access.cache_dir = options.index_cache_dir;
  access.open = [&](const std::string& name) -> absl::StatusOr<std::unique_ptr<ByteSource>> {
    const auto it = listed_objects.find(name);
    if (it != listed_objects.end()) {
      return options.store->Open(name, static_cast<int64_t>(it->second.size), it->second.version);
    }
    if (listed)
      return absl::NotFoundError(absl::StrCat(RedactedUrl(name), " is not in the listing"));
    return options.store->Open(name);
  };
  std::vector<std::string> shards;
  std::string root = url;
  if (HasBraces(url) || absl::EndsWith(url, ".tar")) {
    if (folder_only) {
      return absl::InvalidArgumentError(
          absl::StrCat("dataset ", RedactedUrl(url),
                       " names WebDataset shards (--format wds), not an ImageFolder"));
    }
    absl::StatusOr<std::vector<std::string>> names = ExpandBraces(url);
    if (!names.ok()) return names.status();
    for (const std::string& name : *names) {
      if (!absl::EndsWith(name, ".tar")) {
        return absl::InvalidArgumentError(absl::StrCat("dataset ", RedactedUrl(url), " names ",
                                                       RedactedUrl(name), ", not a .tar shard"));
      }
      if (absl::Status s = allowed(name); !s.ok()) return s;
    }
    shards = *std::move(names);
    if (HasBraces(url)) root = SharedFolder(shards);
    return OpenWebDataset(root, shards, access, configure);
  }
  if (absl::Status s = allowed(url); !s.ok()) return s;
  absl::StatusOr<std::vector<ObjectInfo>> objects = options.store->List(absl::StrCat(url, "/"));
  if (!objects.ok()) return objects.status();
  listed = true;
  for (const ObjectInfo& o : *objects) {
    // A listed object passes the check a named one does: what a store lists
    // is as much another's choice as what a job names.
    if (absl::Status s = allowed(o.url); !s.ok()) return s;
    if (absl::EndsWith(o.url, ".tar")) shards.push_back(o.url);
    listed_objects[o.url] = o;
  }
  if (wds_only || (!folder_only && !shards.empty())) {
    if (shards.empty()) {
      return absl::NotFoundError(absl::StrCat("no .tar shards below ", RedactedUrl(url), "/"));
    }
    return OpenWebDataset(root, shards, access, configure);
  }
  return ObjectFolder::Open(root, *std::move(objects), configure);
}

}  // namespace prepflow::detail
