// Text that came from outside (file names, member names, error messages
// quoting them) made safe to print in a log line or a JSON string.
//
// A file name is bytes: it may hold newlines, terminal escapes or bytes that
// are not UTF-8. Printed raw, such a name forges log lines and makes JSON
// encoders throw. SafeText keeps valid printable UTF-8 as it is and writes
// every other byte as \xNN (a backslash as \\), so the result is valid UTF-8
// on one line, and the original bytes can still be read back from it.
//
// Thread-safety: a pure function.
#ifndef PREPFLOW_BASE_TEXT_H_
#define PREPFLOW_BASE_TEXT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace prepflow {

std::string SafeText(absl::string_view text);

// Rate limit for a repeated log line (a bad sample, every epoch): the first
// `burst` pass, then one per `interval_seconds`, which reports how many were
// held back since the last that passed.
// Thread-safety: none; guard it with the caller's lock.
class LogLimiter {
 public:
  explicit LogLimiter(int burst = 10, double interval_seconds = 10)
      : burst_(burst), interval_nanos_(static_cast<int64_t>(interval_seconds * 1e9)) {}
  // -1: hold this one back. Otherwise log it, noting the returned number of
  // lines held back before it.
  int64_t Admit(int64_t now_nanos);

 private:
  int burst_;
  int64_t interval_nanos_;
  int64_t passed_ = 0;
  int64_t held_ = 0;
  int64_t last_nanos_ = 0;
};

}  // namespace prepflow

#endif  // PREPFLOW_BASE_TEXT_H_
