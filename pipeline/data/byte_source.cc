#include "pipeline/data/byte_source.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/text.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

namespace prepflow {
namespace {

class File : public ByteSource {
 public:
  File(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  ~File() override { close(fd_); }
  const std::string& name() const override { return path_; }
  uint64_t size() const override { return size_; }
  std::string version() const override {
    const uint64_t v = version_hash();
    return v == 0 ? "" : absl::StrFormat("%016x", v);
  }
  uint64_t version_hash() const override {
    struct stat st;
    return fstat(fd_, &st) == 0 ? FileVersion(st) : 0;
  }

  absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override {
    size_t done = 0;
    while (done < length) {
      const ssize_t n = pread(fd_, dst + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        return absl::Status(absl::ErrnoToStatusCode(err),
                            absl::StrCat("cannot read ", path_, ": ", std::strerror(err)));
      }
      if (n == 0) {
        return absl::DataLossError(
            absl::StrFormat("%s: read %d of %d bytes at offset %d", path_, done, length, offset));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const std::string path_;
  const uint64_t size_;
};

}  // namespace

std::unique_ptr<ByteSource> FileSource(int fd, std::string path, uint64_t size) {
  return std::make_unique<File>(fd, std::move(path), size);
}

uint64_t FileVersion(const struct stat& st) {
  const int64_t fields[] = {static_cast<int64_t>(st.st_dev),
                            static_cast<int64_t>(st.st_ino),
                            static_cast<int64_t>(st.st_size),
                            st.st_mtim.tv_sec,
                            st.st_mtim.tv_nsec,
                            st.st_ctim.tv_sec,
                            st.st_ctim.tv_nsec};
  return XXH3_64bits(fields, sizeof(fields)) | 1;
}

uint64_t HashVersion(absl::string_view version) {
  return version.empty() ? 0 : XXH3_64bits(version.data(), version.size()) | 1;
}

WindowedSource::WindowedSource(const ByteSource& source, size_t window_bytes)
    : source_(source), window_bytes_(std::max<size_t>(window_bytes, 1)) {}

absl::Status WindowedSource::ReadAt(uint64_t offset, size_t length, uint8_t* dst) const {
  const uint64_t size = source_.size();
  if (offset > size || length > size - offset) {
    return absl::DataLossError(absl::StrFormat("%s: %d bytes at offset %d run past its end (%d)",
                                               name(), length, offset, size));
  }
  if (length > window_bytes_) return source_.ReadAt(offset, length, dst);
  absl::MutexLock lock(&mu_);
  if (offset < window_offset_ || offset + length > window_offset_ + window_.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(window_bytes_, size - offset));
    window_.resize(n);
    if (absl::Status s = source_.ReadAt(offset, n, window_.data()); !s.ok()) {
      window_.clear();
      return s;
    }
    window_offset_ = offset;
  }
  std::memcpy(dst, window_.data() + (offset - window_offset_), length);
  return absl::OkStatus();
}

void StorageStats::Add(const StorageStats& o) {
  bytes += o.bytes;
  requests += o.requests;
  retries += o.retries;
  errors += o.errors;
  whole_objects += o.whole_objects;
  for (size_t i = 0; i < latency.size(); ++i) latency[i] += o.latency[i];
  latency_seconds += o.latency_seconds;
}

StorageStats StorageStats::Minus(const StorageStats& before) const {
  StorageStats d = *this;
  d.bytes -= before.bytes;
  d.requests -= before.requests;
  d.retries -= before.retries;
  d.errors -= before.errors;
  d.whole_objects -= before.whole_objects;
  for (size_t i = 0; i < latency.size(); ++i) d.latency[i] -= before.latency[i];
  d.latency_seconds -= before.latency_seconds;
  return d;
}

void StorageStats::ObserveLatency(double seconds) {
  size_t i = 0;
  while (i < kStorageLatencyBounds.size() && seconds > kStorageLatencyBounds[i]) ++i;
  ++latency[i];
  latency_seconds += seconds;
}

StorageStats& ThreadStorageStats() {
  thread_local StorageStats stats;
  return stats;
}

bool IsUrl(const std::string& location) {
  const size_t colon = location.find("://");
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    const char c = location[i];
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return absl::ascii_isalpha(location[0]);
}

std::string RedactedUrl(const std::string& url) {
  std::string out = url;
  const size_t query = out.find_first_of("?#");
  if (query != std::string::npos) out = out.substr(0, query) + "?...";
  const size_t scheme = out.find("://");
  const size_t from = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t at = out.find('@', from);
  const size_t slash = out.find('/', from);
  if (scheme != std::string::npos && at != std::string::npos &&
      (slash == std::string::npos || at < slash)) {
    out = out.substr(0, from) + out.substr(at + 1);
  }
  return SafeText(out);
}

absl::Status CheckUrlAllowed(const std::string& url, const std::vector<std::string>& prefixes) {
  const std::string shown = RedactedUrl(url);
  if (prefixes.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("this worker reads no URLs (it has no --allow-url-prefix), so not ", shown));
  }
  // What a server or libcurl would resolve to another object than the text
  // says: dot segments ("/../" is squashed by libcurl), their encodings,
  // encoded slashes, backslashes, userinfo, a fragment, control bytes.
  const size_t scheme = url.find("://");
  const size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  const std::string authority =
      url.substr(scheme + 3, path == std::string::npos ? std::string::npos : path - scheme - 3);
  const std::string lower = absl::AsciiStrToLower(url);
  bool tricky = authority.find('@') != std::string::npos || absl::StrContains(lower, "%2e") ||
                absl::StrContains(lower, "%2f") || absl::StrContains(lower, "%5c") ||
                absl::StrContains(url, "\\") || absl::StrContains(url, "#") ||
                absl::StrContains(url, "/./") || absl::StrContains(url, "/../") ||
                absl::EndsWith(url, "/.") || absl::EndsWith(url, "/..");
  for (const char c : url) tricky = tricky || static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
  if (tricky) {
    return absl::PermissionDeniedError(
        absl::StrCat("URL ", shown,
                     " is refused: it holds a dot segment, an encoded '.' or '/', a backslash, "
                     "credentials, a fragment or a control character"));
  }
  for (const std::string& prefix : prefixes) {
    if (!absl::StartsWith(url, prefix)) continue;
    if (absl::EndsWith(prefix, "/") || url.size() == prefix.size() || url[prefix.size()] == '/') {
      return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(absl::StrCat("URL ", shown,
                                                  " is outside this worker's --allow-url-prefix (",
                                                  SafeText(absl::StrJoin(prefixes, ", ")), ")"));
}

}  // namespace prepflow
