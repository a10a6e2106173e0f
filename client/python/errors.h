// Errors of the core as Python exceptions.
#ifndef PREPFLOW_CLIENT_PYTHON_ERRORS_H_
#define PREPFLOW_CLIENT_PYTHON_ERRORS_H_

#include "absl/status/status.h"

namespace prepflow::python {

// Raises `s` in Python: ValueError (InvalidArgument, OutOfRange),
// FileNotFoundError (NotFound), PermissionError (PermissionDenied), else
// RuntimeError with the code; the message made safe to print.
[[noreturn]] void Raise(const absl::Status& s);

}  // namespace prepflow::python

#endif  // PREPFLOW_CLIENT_PYTHON_ERRORS_H_
