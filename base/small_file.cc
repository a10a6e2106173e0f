#include "base/small_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prepflow {

absl::StatusOr<std::string> ReadSmallRegularFile(const std::string& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError("no such file");
    return absl::UnknownError(std::strerror(errno));
  }
  struct stat st = {};
  std::string text(max_bytes + 1, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, text.data(), text.size());
  close(fd);
  if (n < 0 || static_cast<size_t>(n) > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("not a regular file of at most ", max_bytes, " bytes"));
  }
  text.resize(static_cast<size_t>(n));
  return text;
}

}  // namespace prepflow
