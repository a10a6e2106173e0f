// Byte ranges of objects over HTTP(S), through libcurl.
//
// The building block of remote datasets: a WebDataset member is one range of
// its shard, so a sample costs one request, never a whole shard. An
// HttpReader keeps its connections alive between requests (one libcurl
// handle), retries what may pass (5xx, 429, resets, timeouts) a bounded number
// of times with doubling waits, and names the URL in every error. Every limit
// is in bytes or seconds. S3's SigV4 signing is libcurl's own
// (CURLOPT_AWS_SIGV4), given as HttpOptions::aws_sigv4 and ::user_password.
//
// Thread-safety: an HttpReader is used by one thread at a time (one per
// reading thread); distinct readers are independent.
#ifndef PREPFLOW_STORAGE_HTTP_H_
#define PREPFLOW_STORAGE_HTTP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/core/sample.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {

struct HttpOptions {
  double connect_timeout_seconds = 10;
  // The whole request, connecting included; also the longest a stalled
  // transfer may sit without bytes.
  double request_timeout_seconds = 60;
  int max_attempts = 4;                // the first try and its retries
  double first_backoff_seconds = 0.1;  // doubled after each failed try, up to 5 s
  // An outage (Unavailable or DeadlineExceeded: 5xx, 429, refused or reset
  // connections, timeouts) that outlasts max_attempts is tried again until
  // storage has failed the request for this long, so a blip of storage loses
  // nothing; past it the error stands (and stops a run: an outage is not bad
  // data). 0: max_attempts only.
  double outage_seconds = 60;
  // A range larger than this is refused before any request.
  int64_t max_range_bytes = int64_t{256} << 20;
  // SigV4: "aws:amz:REGION:s3" and "KEY:SECRET" (empty: unsigned requests).
  std::string aws_sigv4;
  std::string user_password;
  // Which credentials sign the requests, for 401/403 messages (never the
  // secret): "access key AKIA... from AWS_ACCESS_KEY_ID".
  std::string credential_note;
  std::vector<std::string> headers;  // "Name: value", sent with every request
};

class HttpReader {
 public:
  // Requests (retries included), their latency, body bytes, reads that
  // failed after their retries; and new connections opened.
  struct Stats : StorageStats {
    int64_t connections = 0;
  };

  explicit HttpReader(HttpOptions options = {});
  ~HttpReader();
  HttpReader(const HttpReader&) = delete;
  HttpReader& operator=(const HttpReader&) = delete;

  // Bytes [offset, offset + length) of `url` into `out`; `*size` = length.
  // Errors name the URL: NotFound (404), PermissionDenied (401, 403),
  // OutOfRange (416: the object is shorter than `offset`), DataLoss (fewer
  // bytes than asked), Unimplemented (a server that ignores Range requests:
  // it answered 200 with the whole object; not retried), ResourceExhausted
  // (over max_range_bytes), InvalidArgument (a negative range or a URL
  // libcurl refuses), Unavailable or DeadlineExceeded (still failing after
  // max_attempts). Short reads are retried as failures that may pass.
  absl::Status ReadRange(const std::string& url, int64_t offset, int64_t length, Buffer* out,
                         size_t* size);
  // The same into `dst`, which has room for `length` bytes.
  absl::Status ReadRange(const std::string& url, int64_t offset, int64_t length, uint8_t* dst);

  // The whole object (a listing, a sidecar), refused past `max_bytes`
  // (ResourceExhausted); other errors as above.
  absl::StatusOr<std::string> Fetch(const std::string& url, int64_t max_bytes);

  // Uploads `size` bytes as the object at `url` (HTTP PUT).
  absl::Status Put(const std::string& url, const uint8_t* data, size_t size);
  // Removes the object at `url` (HTTP DELETE).
  absl::Status Delete(const std::string& url);

  // The object's size (a HEAD request's Content-Length); errors as above.
  absl::StatusOr<int64_t> Size(const std::string& url);
  // The same with its ETag (empty when the server gives none).
  struct ObjectHead {
    int64_t size = -1;
    std::string etag;
  };
  absl::StatusOr<ObjectHead> Head(const std::string& url);

  const Stats& stats() const { return stats_; }

 private:
  struct Attempt;
  // Runs `attempt` until it succeeds, fails in a way a retry cannot mend, or
  // max_attempts are spent (and, for an outage, outage_seconds since the
  // first failure), waiting first_backoff_seconds, then twice that... up to
  // 5 s.
  absl::Status WithRetries(const std::function<absl::Status()>& attempt);
  enum class Method { kGet, kHead, kPut, kDelete };
  // InvalidArgument for a negative or empty range, ResourceExhausted over
  // max_range_bytes.
  absl::Status CheckRange(const std::string& url, int64_t offset, int64_t length) const;
  // One request; a GET asks for bytes [offset, offset + length) unless
  // length < 0 (the whole object).
  absl::Status Perform(const std::string& url, Method method, int64_t offset, int64_t length,
                       Attempt* attempt);
  // What a finished request (libcurl's CURLcode `curl_code`, on a `reused`
  // connection or a new one) means: OK or the error, as ReadRange says.
  absl::Status Outcome(int curl_code, const std::string& url, Method method, int64_t offset,
                       int64_t length, bool reused, const Attempt& attempt);

  HttpOptions options_;
  void* curl_;         // CURL*
  void* headers_;      // curl_slist*: options_.headers, and what signing needs
  void* put_headers_;  // the same for uploads
  Stats stats_;
  bool fresh_connection_ = false;  // the next request opens a new connection
};

}  // namespace prepflow

#endif  // PREPFLOW_STORAGE_HTTP_H_
