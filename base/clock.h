// Clocks, in nanoseconds: the monotonic wall clock, and the CPU time of the
// calling thread and of the whole process.
//
// Thread-safety: pure functions of the system's clocks.
#ifndef PREPFLOW_BASE_CLOCK_H_
#define PREPFLOW_BASE_CLOCK_H_

#include <cstdint>

namespace prepflow {

// CPU time consumed so far by the calling thread.
int64_t ThreadCpuNanos();
// Monotonic wall-clock time.
int64_t WallNanos();
// CPU time consumed so far by the whole process (all threads).
int64_t ProcessCpuNanos();

}  // namespace prepflow

#endif  // PREPFLOW_BASE_CLOCK_H_
