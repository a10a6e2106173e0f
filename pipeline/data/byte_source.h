// Where a dataset's bytes come from: a local file or an object in remote
// storage, behind one small interface.
//
// pipeline/ reads datasets through ByteSources and stays free of networking:
// remote storage (HTTP(S), S3) is an ObjectStore that the embedding program
// (client/, server/, through storage/) hands to OpenDataset.
//
// Thread-safety: every method of a ByteSource and of an ObjectStore may be
// called concurrently.
#ifndef PREPFLOW_PIPELINE_DATA_BYTE_SOURCE_H_
#define PREPFLOW_PIPELINE_DATA_BYTE_SOURCE_H_

#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace prepflow {

// A version string (an ETag) as a number: 0 for none.
uint64_t HashVersion(absl::string_view version);

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // For messages: a path or a URL (without credentials).
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  // Reads bytes [offset, offset + length) into `dst`. Errors name the source;
  // a range past the end, or fewer bytes than asked, is DataLoss.
  virtual absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const = 0;
  // What changes whenever the bytes do: a remote object's ETag (empty when
  // the store gives none), a local file's FileVersion as it is now, in hex.
  virtual std::string version() const { return ""; }
  // The same as a number, without formatting a string (a cache asks per
  // sample): HashVersion(version()); 0 when there is none.
  virtual uint64_t version_hash() const { return HashVersion(version()); }
};

// A local regular file, read with pread. Owns `fd`.
std::unique_ptr<ByteSource> FileSource(int fd, std::string path, uint64_t size);

// A local file's version: a hash (never 0) of its device, inode, size, and
// modification and change times to the nanosecond (the change time moves on
// every write, whatever the writer does to the modification time).
uint64_t FileVersion(const struct stat& st);

// Reads `source` through a window of `window_bytes` that moves forward: a
// scan of small reads at rising offsets (tar headers) costs one read of the
// source per window, which makes indexing a remote shard one streaming pass.
// Reads outside the window move it.
class WindowedSource : public ByteSource {
 public:
  WindowedSource(const ByteSource& source, size_t window_bytes);
  const std::string& name() const override { return source_.name(); }
  uint64_t size() const override { return source_.size(); }
  absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override;

 private:
  const ByteSource& source_;
  const size_t window_bytes_;
  mutable absl::Mutex mu_;
  mutable std::vector<uint8_t> window_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t window_offset_ ABSL_GUARDED_BY(mu_) = 0;
};

// Request latency buckets (upper bounds, seconds), as Prometheus histograms
// have them; a last bucket holds what is slower.
inline constexpr std::array<double, 13> kStorageLatencyBounds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

// What remote storage has done, for metrics.
struct StorageStats {
  int64_t bytes = 0;     // body bytes received
  int64_t requests = 0;  // requests sent, retries included
  int64_t retries = 0;
  int64_t errors = 0;  // reads that failed after their retries
  // Objects fetched whole, from servers that ignore Range requests.
  int64_t whole_objects = 0;
  // Requests by latency: latency[i] took at most kStorageLatencyBounds[i]
  // (and more than the bound before), the last entry longer; and their sum.
  std::array<int64_t, kStorageLatencyBounds.size() + 1> latency{};
  double latency_seconds = 0;

  void Add(const StorageStats& other);
  StorageStats Minus(const StorageStats& before) const;
  void ObserveLatency(double seconds);
};

// What this thread's reads have cost in storage, added to by the stores
// that serve them (a read served from a prefetch adds what its fetch cost).
// A caller snapshots it around a sample's read to attribute the requests to
// the sample (workers report them with each item).
StorageStats& ThreadStorageStats();

struct ObjectInfo {
  std::string url;
  uint64_t size = 0;
  std::string version;  // the ETag, where the listing gives one
};

// Remote storage: objects named by URL.
class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  // The objects whose URLs start with `prefix` (a "folder" ending in '/'),
  // sorted by URL. Unimplemented where the scheme has no listing (HTTP).
  virtual absl::StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix) const = 0;
  // The object at `url`; `size` and `version`, when known (from a listing),
  // spare a request for them. NotFound, PermissionDenied, ... name the URL.
  virtual absl::StatusOr<std::unique_ptr<ByteSource>> Open(
      const std::string& url, int64_t size = -1, const std::string& version = "") const = 0;
  virtual StorageStats stats() const = 0;
};

// Whether `location` is a URL (scheme://...) rather than a local path.
bool IsUrl(const std::string& location);

// `url` for messages and logs: no user:password@, no query or fragment (a
// presigned URL's signature lives there), and printable (SafeText), since a
// job may name any bytes.
std::string RedactedUrl(const std::string& url);

// OK when `url` may be read under `prefixes` (a worker's --allow-url-prefix):
// it starts with one of them at a path boundary (the prefix ends in '/', or
// the URL goes on with '/' or ends there), and it holds nothing that a server
// or libcurl would resolve elsewhere (dot segments, encoded dots or slashes,
// backslashes, credentials, a fragment, control bytes). Otherwise
// PermissionDenied naming the URL.
absl::Status CheckUrlAllowed(const std::string& url, const std::vector<std::string>& prefixes);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_BYTE_SOURCE_H_
