#include "pipeline/core/executor.h"

#include <malloc.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace prepflow {

namespace {

// How many more threads this process's address space limit (ulimit -v,
// RLIMIT_AS) has room for: each takes its stack and some more, and
// everything else must still have room after. A thread started past it
// aborts the process later, not here: Abseil maps its per-thread state on
// its first wait and aborts when that mmap fails.
int64_t ThreadsThatFit() {
  rlimit as = {};
  if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return INT64_MAX;
  rlimit stack = {};
  const int64_t stack_bytes =
      getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY && stack.rlim_cur > 0
          ? static_cast<int64_t>(stack.rlim_cur)
          : int64_t{8} << 20;
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  if (!(statm >> pages)) return INT64_MAX;
  const int64_t used = pages * sysconf(_SC_PAGESIZE);
  // Room left for the rest of the process: a quarter of the limit.
  const int64_t room = static_cast<int64_t>(as.rlim_cur) * 3 / 4 - used;
  return std::max<int64_t>(room / (stack_bytes + (int64_t{1} << 20)), 0);
}

}  // namespace

ThreadPool::ThreadPool(int threads, size_t queue_capacity)
    : capacity_(std::max<size_t>(queue_capacity, 1)), ring_(capacity_) {
  threads = std::max(threads, 1);
  if (const int64_t fit = ThreadsThatFit(); fit < threads) {
    start_error_ = absl::StrCat("room for ", fit, " under the address space limit (ulimit -v)");
    threads = static_cast<int>(std::max<int64_t>(fit, 1));
  }
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    try {
      threads_.emplace_back([this, i] { WorkerLoop(i); });
    } catch (const std::system_error& e) {  // out of threads or address space
      start_error_ = e.what();
      break;
    }
  }
}

ThreadPool::~ThreadPool() { Stop(); }

bool ThreadPool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  if (count_ == ring_.size() && !stopping_) {
    ++blocked_;
    while (count_ == ring_.size() && !stopping_) not_full_.Wait(&mu_);
    --blocked_;
  }
  if (stopping_) return false;
  ring_[(head_ + count_) % ring_.size()] = std::move(task);
  ++count_;
  not_empty_.Signal();
  return true;
}

int ThreadPool::blocked_producers() const {
  absl::MutexLock lock(&mu_);
  return blocked_;
}

void ThreadPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    for (size_t i = 0; i < count_; ++i) ring_[(head_ + i) % ring_.size()] = nullptr;
    count_ = 0;
    not_empty_.SignalAll();
    not_full_.SignalAll();
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

size_t ThreadPool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

void ThreadPool::WorkerLoop(int worker) {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      while (count_ == 0 && !stopping_) not_empty_.Wait(&mu_);
      if (stopping_) return;
      task = std::move(ring_[head_]);
      ring_[head_] = nullptr;
      head_ = (head_ + 1) % ring_.size();
      --count_;
      not_full_.Signal();
    }
    task(worker);
  }
}

void TuneAllocatorForStreaming() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

namespace {

// The quota (cores) of the cgroup at `dir`, or 0 if it has none.
double QuotaAt(const std::string& dir) {
  std::ifstream max(dir + "/cpu.max");  // v2: "<quota|max> <period>"
  std::string quota_text;
  double period = 0;
  if (max >> quota_text >> period) {
    return quota_text == "max" || period <= 0 ? 0 : std::atof(quota_text.c_str()) / period;
  }
  std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");  // v1
  double quota = 0;
  if (q >> quota && p >> period && quota > 0 && period > 0) return quota / period;
  return 0;
}

// Calls `visit` with the folder of each cgroup this process is in that
// holds `controller`'s files: the v2 unified folder, or the v1 hierarchy
// mounted for it (`v1_mounts`, tried in order).
void ForEachCgroup(const std::string& controller, const std::vector<std::string>& v1_mounts,
                   const std::function<void(const std::string& dir)>& visit) {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    // "N:controllers:/path" (v1) or "0::/path" (v2).
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      visit("/sys/fs/cgroup" + path);
    } else if (("," + controllers + ",").find("," + controller + ",") != std::string::npos) {
      for (const std::string& mount : v1_mounts) {
        const std::string dir = "/sys/fs/cgroup/" + mount + path;
        if (access(dir.c_str(), R_OK) == 0) {
          visit(dir);
          break;
        }
      }
    }
  }
}

}  // namespace

double EffectiveCpus() {
  double cores = AvailableCpus();
  ForEachCgroup("cpu", {"cpu", "cpu,cpuacct"}, [&](const std::string& dir) {
    const double quota = QuotaAt(dir);
    if (quota > 0) cores = std::min(cores, quota);
  });
  return cores;
}

int64_t AvailableMemoryBytes() {
  int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  ForEachCgroup("memory", {"memory"}, [&](const std::string& dir) {
    for (const char* file : {"/memory.max", "/memory.limit_in_bytes"}) {  // v2, v1
      std::ifstream in(dir + file);
      int64_t limit = 0;
      if (in >> limit && limit > 0) bytes = std::min(bytes, limit);  // "max" does not parse
    }
  });
  return std::max<int64_t>(bytes, 1 << 30);
}

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

}  // namespace prepflow
