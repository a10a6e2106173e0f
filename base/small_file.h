// Reading a small file whose path an operator or a script gives (a pid file,
// a lease key), which may be anything: a FIFO that would block a plain open,
// a device that never ends, a file far too large.
//
// Thread-safety: a function of the file system.
#ifndef PREPFLOW_BASE_SMALL_FILE_H_
#define PREPFLOW_BASE_SMALL_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace prepflow {

// The whole of the regular file at `path` if it holds at most `max_bytes`.
// Opened without blocking (a FIFO is refused, not waited on), and never read
// past max_bytes + 1. Errors: NotFound (no such file); FailedPrecondition
// (not a regular file, or over max_bytes); others from open(2), with
// errno's text. Messages say what was wrong, not the path: callers name it.
absl::StatusOr<std::string> ReadSmallRegularFile(const std::string& path, size_t max_bytes);

}  // namespace prepflow

#endif  // PREPFLOW_BASE_SMALL_FILE_H_
