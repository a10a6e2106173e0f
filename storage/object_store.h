// Remote storage for datasets: http://, https:// and s3:// objects read with
// range requests through pools of HttpReaders (one kept-alive connection
// each), S3 prefixes listed with ListObjectsV2, requests to S3 signed by
// libcurl's SigV4 with the standard AWS environment.
//
// Any HTTP server: the first ranged GET that a host answers with 200 and
// the whole object (HTTP allows a server to ignore Range) switches that host
// to whole objects, with one log line: each of its objects is then fetched
// whole once and its ranges served from the copy (WholeObjects).
//
// S3 addressing: with an endpoint (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL,
// for S3-compatible stores) path-style, <endpoint>/<bucket>/<key>; without
// one, AWS's virtual-hosted https://<bucket>.s3.<region>.amazonaws.com/<key>.
//
// Thread-safety: an ObjectStore and the sources it opens may be used from any
// number of threads; each concurrent read takes a reader of its own.
#ifndef PREPFLOW_STORAGE_OBJECT_STORE_H_
#define PREPFLOW_STORAGE_OBJECT_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/data/byte_source.h"
#include "storage/http.h"
#include "storage/whole_objects.h"

namespace prepflow {

struct ObjectStoreOptions {
  HttpOptions http;  // timeouts, retries, limits (signing is set per scheme)
  // S3, by default from the environment (S3FromEnvironment).
  std::string s3_endpoint;  // "http://127.0.0.1:9000"; empty: AWS
  std::string s3_region = "us-east-1";
  std::string access_key_id, secret_access_key, session_token;  // empty key: anonymous
  std::string credential_source = "no AWS credentials (anonymous requests)";
  // A listing: objects asked for per page (S3's max-keys), each page's
  // bytes, and the objects in all.
  int list_page_objects = 1000;
  int64_t max_listing_page_bytes = int64_t{16} << 20;
  int64_t max_listed_objects = 10'000'000;
  // Whole copies of objects from hosts that ignore Range requests.
  WholeObjectOptions whole_objects;
};

// Fills the S3 part of `options` from AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (or
// AWS_DEFAULT_REGION) and AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL).
// InvalidArgument when a key id comes without its secret, or the endpoint is
// not an http(s) URL.
absl::Status S3FromEnvironment(ObjectStoreOptions* options);

// A store for http, https and s3 URLs.
class CurlObjectStore : public ObjectStore, public std::enable_shared_from_this<CurlObjectStore> {
 public:
  static std::shared_ptr<CurlObjectStore> Create(ObjectStoreOptions options);
  ~CurlObjectStore() override;

  // s3:// prefixes only: Unimplemented for HTTP, which has no listing.
  absl::StatusOr<std::vector<ObjectInfo>> List(const std::string& prefix) const override;
  absl::StatusOr<std::unique_ptr<ByteSource>> Open(const std::string& url, int64_t size = -1,
                                                   const std::string& version = "") const override;
  StorageStats stats() const override;

  // Writes `size` bytes as the object at `url` (HTTP PUT).
  absl::Status Put(const std::string& url, const uint8_t* data, size_t size) const;
  // Removes the object at `url` (HTTP DELETE).
  absl::Status Delete(const std::string& url) const;

 private:
  struct Pool;
  class Object;
  struct Target {
    std::string http_url;  // what is requested
    Pool* pool;            // signed (S3) or not
  };
  explicit CurlObjectStore(ObjectStoreOptions options);
  // Where `url` is fetched from: InvalidArgument for another scheme or a
  // malformed s3:// URL.
  absl::StatusOr<Target> Resolve(const std::string& url) const;
  // Runs `request` with a reader of `pool` (taken from its idle ones, or a
  // new one) and counts what it did.
  absl::Status WithReader(Pool* pool,
                          const std::function<absl::Status(HttpReader&)>& request) const;
  absl::StatusOr<std::vector<ObjectInfo>> ListS3(const std::string& bucket,
                                                 const std::string& prefix) const;
  // Whether `http_url`'s host was found to ignore Range requests; Note...
  // records it (and logs it, the first time).
  bool RangesIgnored(const std::string& http_url) const;
  void NoteRangesIgnored(const std::string& http_url) const;
  // Bytes of an object of such a host, from its whole copy.
  absl::Status ReadWhole(const std::string& url, const Target& target, uint64_t size,
                         const std::string& version, uint64_t offset, size_t length,
                         uint8_t* dst) const;

  const ObjectStoreOptions options_;
  std::unique_ptr<Pool> http_, s3_;
  struct Counters;
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<WholeObjects> whole_;
  // Whether any host ignores Range: the common case (none) costs a read
  // per sample, not a lock and a string.
  mutable std::atomic<bool> any_range_ignored_{false};
  mutable absl::Mutex hosts_mu_;
  mutable std::set<std::string> no_range_hosts_ ABSL_GUARDED_BY(hosts_mu_);
  mutable bool warned_refetch_ ABSL_GUARDED_BY(hosts_mu_) = false;
};

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_OBJECT_STORE_H_
