#include "storage/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/text.h"
#include "pipeline/data/byte_source.h"

namespace prepflow {
namespace {

// A ranged GET answered 200 with the whole object: the server does not do
// Range requests (HTTP allows that). No retry mends it: the caller reads
// such objects whole (CurlObjectStore does).
absl::Status RangeIgnored(const std::string& where) {
  return absl::UnimplementedError(
      absl::StrCat(where,
                   ": the server ignored the Range request (it answered 200 with the "
                   "whole object)"));
}

CURL* Handle(void* p) { return static_cast<CURL*>(p); }

// libcurl's process-wide set-up, once, before the first handle.
void GlobalInit() {
  static const CURLcode done = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)done;
}

// Failures a later attempt may not see: the server or the path to it.
bool MayPass(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

}  // namespace

// One request's destination (and upload) and what came back.
struct HttpReader::Attempt {
  uint8_t* dst = nullptr;       // fixed room for `capacity` bytes, or
  std::string* grow = nullptr;  // a string that grows up to `capacity`
  int64_t capacity = 0;
  int64_t received = 0;
  bool overflow = false;  // the body was longer than asked for
  long status = 0;        // NOLINT(runtime/int): libcurl's type
  curl_off_t content_length = -1;
  std::string etag;                 // the answer's ETag header, if any
  const uint8_t* upload = nullptr;  // a PUT's body
  size_t upload_size = 0, uploaded = 0;

  static size_t Write(char* data, size_t size, size_t n, void* self) {
    auto* a = static_cast<Attempt*>(self);
    const int64_t bytes = static_cast<int64_t>(size * n);
    if (bytes > a->capacity - a->received) {
      a->overflow = true;
      return 0;  // libcurl stops the transfer: CURLE_WRITE_ERROR
    }
    if (a->grow != nullptr) {
      a->grow->append(data, static_cast<size_t>(bytes));
    } else {
      std::memcpy(a->dst + a->received, data, static_cast<size_t>(bytes));
    }
    a->received += bytes;
    return static_cast<size_t>(bytes);
  }
  static size_t Header(char* data, size_t size, size_t n, void* self) {
    const std::string line(data, size * n);
    if (line.size() > 5 && line.size() < 1024 &&
        absl::EqualsIgnoreCase(line.substr(0, 5), "etag:")) {
      static_cast<Attempt*>(self)->etag = std::string(absl::StripAsciiWhitespace(line.substr(5)));
    }
    return size * n;
  }
  static size_t Read(char* buffer, size_t size, size_t n, void* self) {
    auto* a = static_cast<Attempt*>(self);
    const size_t bytes = std::min(size * n, a->upload_size - a->uploaded);
    std::memcpy(buffer, a->upload + a->uploaded, bytes);
    a->uploaded += bytes;
    return bytes;
  }
};

HttpReader::HttpReader(HttpOptions options) : options_(std::move(options)) {
  GlobalInit();
  curl_ = curl_easy_init();
  // A signed request states its body's SHA-256, which S3 requires: that of
  // the empty body for GET and HEAD; an upload's is not computed.
  const bool signed_requests = !options_.aws_sigv4.empty();
  for (const bool put : {false, true}) {
    curl_slist* list = nullptr;
    for (const std::string& h : options_.headers) list = curl_slist_append(list, h.c_str());
    if (signed_requests) {
      list = curl_slist_append(
          list, put ? "x-amz-content-sha256: UNSIGNED-PAYLOAD"
                    : "x-amz-content-sha256: "
                      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
    (put ? put_headers_ : headers_) = list;
  }
}

HttpReader::~HttpReader() {
  curl_easy_cleanup(Handle(curl_));
  curl_slist_free_all(static_cast<curl_slist*>(headers_));
  curl_slist_free_all(static_cast<curl_slist*>(put_headers_));
}

absl::Status HttpReader::Perform(const std::string& url, Method method, int64_t offset,
                                 int64_t length, Attempt* a) {
  const bool head = method == Method::kHead;
  CURL* c = Handle(curl_);
  if (c == nullptr) return absl::ResourceExhaustedError("libcurl could not make a handle");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  // Plain HTTP(S) only: no file://, no redirects to wherever a server points
  // (a worker must never fetch what the job did not name).
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout_seconds * 1e3));  // NOLINT
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(options_.request_timeout_seconds * 1e3));  // NOLINT
  if (!options_.aws_sigv4.empty()) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, options_.aws_sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERPWD, options_.user_password.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER,
                   static_cast<curl_slist*>(method == Method::kPut ? put_headers_ : headers_));
  curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
  if (method == Method::kPut) {
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, &Attempt::Read);
    curl_easy_setopt(c, CURLOPT_READDATA, a);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(a->upload_size));
  } else if (!head) {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method == Method::kDelete ? "DELETE" : nullptr);
  const std::string range = absl::StrCat(offset, "-", offset + length - 1);
  curl_easy_setopt(c, CURLOPT_RANGE,
                   method == Method::kGet && length >= 0 ? range.c_str() : nullptr);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Attempt::Write);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &Attempt::Header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
  curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, fresh_connection_ ? 1L : 0L);
  fresh_connection_ = false;
  const CURLcode code = curl_easy_perform(c);
  ++stats_.requests;
  stats_.bytes += a->received;
  curl_off_t micros = 0;
  curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &micros);
  stats_.ObserveLatency(static_cast<double>(micros) * 1e-6);
  long connects = 0;  // NOLINT(runtime/int)
  curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
  stats_.connections += connects;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
  curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &a->content_length);
  long sent = 0;  // NOLINT(runtime/int): request bytes, 0 when none went out
  curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &sent);
  return Outcome(code, url, method, offset, length, /*reused=*/connects == 0 && sent > 0, *a);
}

absl::Status HttpReader::Outcome(int curl_code, const std::string& url, Method method,
                                 int64_t offset, int64_t length, bool reused, const Attempt& at) {
  const auto code = static_cast<CURLcode>(curl_code);
  const Attempt* a = &at;
  const std::string where = RedactedUrl(url);
  if (code == CURLE_WRITE_ERROR && a->overflow) {
    if (length < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where, ": the response is over the limit of ", a->capacity, " bytes"));
    }
    if (a->status == 200) return RangeIgnored(where);
    return absl::DataLossError(
        absl::StrCat(where, ": the server sent more than the ", length, " bytes asked for"));
  }
  if (code != CURLE_OK) {
    const std::string what = absl::StrCat(where, ": ", curl_easy_strerror(code));
    if (code == CURLE_OPERATION_TIMEDOUT) return absl::DeadlineExceededError(what);
    if (MayPass(code)) return absl::UnavailableError(what);
    if (reused) {
      // A kept-alive connection that answers garbage (bytes a server sent
      // past its last response's Content-Length, say) says nothing of this
      // request: tried again on a new connection.
      fresh_connection_ = true;
      return absl::UnavailableError(absl::StrCat(what, " (on a reused connection)"));
    }
    if (code == CURLE_UNSUPPORTED_PROTOCOL || code == CURLE_URL_MALFORMAT) {
      return absl::InvalidArgumentError(what);
    }
    return absl::FailedPreconditionError(what);
  }
  const long s = a->status;  // NOLINT(runtime/int)
  if (s == 200 || s == 206 ||
      ((method == Method::kPut || method == Method::kDelete) && s >= 200 && s < 300)) {
    return absl::OkStatus();
  }
  const std::string what = absl::StrCat(where, ": HTTP ", s);
  if (s == 404) {
    // Signed: which credentials asked, as for 403 (another account's
    // endpoint or bucket answers 404 too).
    return absl::NotFoundError(
        absl::StrCat(what, " (no such object", options_.aws_sigv4.empty() ? "" : "; signed request",
                     options_.aws_sigv4.empty() || options_.credential_note.empty() ? "" : "; ",
                     options_.aws_sigv4.empty() ? "" : options_.credential_note, ")"));
  }
  if (s == 401 || s == 403) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, " (", options_.aws_sigv4.empty() ? "unsigned request" : "signed request",
                     options_.credential_note.empty() ? "" : "; ", options_.credential_note, ")"));
  }
  if (s == 416)
    return absl::OutOfRangeError(absl::StrCat(what, " (the object ends before ", offset, ")"));
  if (s == 429 || s >= 500) return absl::UnavailableError(what);
  return absl::FailedPreconditionError(what);
}

absl::Status HttpReader::CheckRange(const std::string& url, int64_t offset, int64_t length) const {
  if (offset < 0 || length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad range (offset %d, length %d)", RedactedUrl(url), offset, length));
  }
  if (length > options_.max_range_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: a %d-byte range is over the limit of %d", RedactedUrl(url), length,
                        options_.max_range_bytes));
  }
  return absl::OkStatus();
}

absl::Status HttpReader::ReadRange(const std::string& url, int64_t offset, int64_t length,
                                   Buffer* out, size_t* size) {
  if (absl::Status st = CheckRange(url, offset, length); !st.ok()) return st;
  if (absl::Status st = ReadRange(url, offset, length, out->Reserve(static_cast<size_t>(length)));
      !st.ok()) {
    return st;
  }
  *size = static_cast<size_t>(length);
  return absl::OkStatus();
}

absl::Status HttpReader::ReadRange(const std::string& url, int64_t offset, int64_t length,
                                   uint8_t* dst) {
  if (absl::Status st = CheckRange(url, offset, length); !st.ok()) return st;
  return WithRetries([&]() -> absl::Status {
    Attempt a;
    a.dst = dst;
    a.capacity = length;
    if (absl::Status st = Perform(url, Method::kGet, offset, length, &a); !st.ok()) return st;
    if (a.status == 200 && !(offset == 0 && a.received == length)) {
      return RangeIgnored(RedactedUrl(url));
    }
    if (a.received != length) {
      return absl::DataLossError(absl::StrFormat("%s: %d bytes at %d, expected %d (short read)",
                                                 RedactedUrl(url), a.received, offset, length));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::string> HttpReader::Fetch(const std::string& url, int64_t max_bytes) {
  std::string body;
  absl::Status st = WithRetries([&]() -> absl::Status {
    body.clear();
    Attempt a;
    a.grow = &body;
    a.capacity = max_bytes;
    if (absl::Status p = Perform(url, Method::kGet, 0, -1, &a); !p.ok()) return p;
    if (a.status != 200)
      return absl::DataLossError(absl::StrCat(RedactedUrl(url), ": HTTP ", a.status));
    if (a.content_length >= 0 && a.received != a.content_length) {
      return absl::DataLossError(absl::StrFormat("%s: %d of %d bytes (short read)",
                                                 RedactedUrl(url), a.received, a.content_length));
    }
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return body;
}

absl::Status HttpReader::Put(const std::string& url, const uint8_t* data, size_t size) {
  return WithRetries([&]() -> absl::Status {
    Attempt a;
    a.upload = data;
    a.upload_size = size;
    a.capacity = 1 << 20;  // the response: S3 answers an XML error at most
    std::string response;
    a.grow = &response;
    return Perform(url, Method::kPut, 0, -1, &a);
  });
}

absl::Status HttpReader::WithRetries(const std::function<absl::Status()>& attempt) {
  constexpr double kMaxBackoffSeconds = 5;
  absl::Status last;
  double wait = options_.first_backoff_seconds;
  const int attempts = std::max(1, options_.max_attempts);
  const auto first_failure = std::chrono::steady_clock::now();
  const auto failing = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - first_failure).count();
  };
  int tries = 0;
  while (true) {
    if (tries > 0) {
      ++stats_.retries;
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      wait = std::min(wait * 2, std::max(kMaxBackoffSeconds, options_.first_backoff_seconds));
    }
    ++tries;
    last = attempt();
    if (last.ok()) return last;
    const bool outage = absl::IsUnavailable(last) || absl::IsDeadlineExceeded(last);
    if (!outage && !absl::IsDataLoss(last)) {
      ++stats_.errors;  // what no retry mends: 404, 403, ...
      return last;
    }
    if (tries < attempts) continue;
    if (!outage || failing() + wait > options_.outage_seconds) break;
  }
  ++stats_.errors;
  if (tries == attempts) {
    return absl::Status(last.code(), absl::StrCat(last.message(), " (", tries, " attempts)"));
  }
  return absl::Status(last.code(), absl::StrFormat("%s (%d attempts over %.1f s of outage)",
                                                   last.message(), tries, failing()));
}

absl::Status HttpReader::Delete(const std::string& url) {
  return WithRetries([&]() -> absl::Status {
    Attempt a;
    std::string response;
    a.grow = &response;
    a.capacity = 1 << 20;  // an XML error at most
    return Perform(url, Method::kDelete, 0, -1, &a);
  });
}

absl::StatusOr<int64_t> HttpReader::Size(const std::string& url) {
  absl::StatusOr<ObjectHead> head = Head(url);
  if (!head.ok()) return head.status();
  return head->size;
}

absl::StatusOr<HttpReader::ObjectHead> HttpReader::Head(const std::string& url) {
  ObjectHead head;
  absl::Status st = WithRetries([&]() -> absl::Status {
    Attempt a;
    if (absl::Status p = Perform(url, Method::kHead, 0, 1, &a); !p.ok()) return p;
    if (a.content_length < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(RedactedUrl(url), ": the server gave no Content-Length"));
    }
    head.size = static_cast<int64_t>(a.content_length);
    head.etag = a.etag;
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return head;
}

}  // namespace prepflow
