#include "base/clock.h"

#include <time.h>

namespace prepflow {
namespace {

int64_t Nanos(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

int64_t ThreadCpuNanos() { return Nanos(CLOCK_THREAD_CPUTIME_ID); }
int64_t WallNanos() { return Nanos(CLOCK_MONOTONIC); }
int64_t ProcessCpuNanos() { return Nanos(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace prepflow
