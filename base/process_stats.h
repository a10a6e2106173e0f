// Facts about a running process on this machine, read from /proc: its
// threads, its CPU time and its resident memory. Benchmarks and tests use
// them to measure a daemon they started (or themselves: pid 0).
//
// Thread-safety: pure functions of the kernel's view.
#ifndef PREPFLOW_BASE_PROCESS_STATS_H_
#define PREPFLOW_BASE_PROCESS_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace prepflow {

// The threads of process `pid` (0: this one), or -1 when it is gone.
int ProcessThreadCount(pid_t pid = 0);
// CPU time (user + system, all threads) of process `pid` (0: this one) so
// far, in nanoseconds; -1 when it is gone or not ours to read.
int64_t ProcessCpuNanosOf(pid_t pid);
// Resident set size of process `pid` (0: this one) in bytes: now, or its
// peak (VmHWM) with `peak`; -1 when it is gone.
int64_t ProcessResidentBytes(pid_t pid, bool peak = false);

// Process `pid`'s name (its comm: the executable's, at most 15 characters)
// and state letter (R, S, Z: exited, its parent yet to reap it, ...), from
// /proc/<pid>/stat; nullopt when there is no such process.
struct ProcessNameState {
  std::string name;
  char state = '?';
};
std::optional<ProcessNameState> ProcessNameAndState(pid_t pid);

}  // namespace prepflow

#endif  // PREPFLOW_BASE_PROCESS_STATS_H_
