// OpFileReaderFor: one file an op reads whole (a tokenizer's model), opened
// as a dataset's files are: confined below a worker's data root, or read by
// URL through the store within the allowed prefixes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeline/data/byte_source.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/datasets.h"

namespace prepflow {
namespace {

absl::Status TooLarge(const std::string& path, uint64_t size, int64_t max_bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat(path, " has ", size, " bytes, over the limit of ", max_bytes));
}

absl::StatusOr<std::string> ReadUrl(const DatasetOptions& options, const std::string& url,
                                    int64_t max_bytes) {
  if (options.store == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(url, ": URLs are not read here"));
  }
  if (options.confine_urls) {
    if (absl::Status s = CheckUrlAllowed(url, options.url_prefixes); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<ByteSource>> source = options.store->Open(url);
  if (!source.ok()) return source.status();
  if (max_bytes < 0) return std::string();
  const uint64_t size = (*source)->size();
  if (size > static_cast<uint64_t>(max_bytes)) return TooLarge(url, size, max_bytes);
  std::string bytes(size, '\0');
  if (absl::Status s = (*source)->ReadAt(0, size, reinterpret_cast<uint8_t*>(bytes.data()));
      !s.ok()) {
    return s;
  }
  return bytes;
}

absl::StatusOr<std::string> ReadLocal(const std::string& root, const std::string& path,
                                      int64_t max_bytes) {
  int root_fd = -1;
  std::string real_root;
  if (!root.empty()) {
    char real[PATH_MAX];
    if (realpath(root.c_str(), real) == nullptr) {
      return detail::ErrnoStatus(errno, absl::StrCat("data root ", root));
    }
    real_root = std::string(real) == "/" ? "" : real;
    root_fd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) return detail::ErrnoStatus(errno, absl::StrCat("cannot open ", real));
  }
  struct stat st;
  absl::StatusOr<int> fd = detail::OpenConfined(real_root, root_fd, path, &st);
  if (root_fd >= 0) close(root_fd);
  if (!fd.ok()) return fd.status();
  if (max_bytes < 0 || st.st_size > max_bytes) {
    close(*fd);
    if (max_bytes < 0) return std::string();
    return TooLarge(path, static_cast<uint64_t>(st.st_size), max_bytes);
  }
  Buffer buffer;
  size_t size = 0;
  if (absl::Status s = detail::ReadFile(*fd, st, path, max_bytes, &buffer, &size); !s.ok()) {
    return s;
  }
  return std::string(reinterpret_cast<const char*>(buffer.data()), size);
}

}  // namespace

OpFileReader OpFileReaderFor(DatasetOptions options) {
  return [options = std::move(options)](const std::string& path,
                                        int64_t max_bytes) -> absl::StatusOr<std::string> {
    if (IsUrl(path)) return ReadUrl(options, path, max_bytes);
    if (!options.confine_to.empty() && (path.empty() || path[0] != '/')) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " is not an absolute path below the data root"));
    }
    return ReadLocal(options.confine_to, path, max_bytes);
  };
}

}  // namespace prepflow
