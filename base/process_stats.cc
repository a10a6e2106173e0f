#include "base/process_stats.h"

#include <dirent.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace prepflow {
namespace {

// "/proc/<pid>/<leaf>", or "/proc/self/<leaf>" for pid 0.
std::string ProcPath(pid_t pid, const char* leaf) {
  return (pid == 0 ? std::string("/proc/self/") : "/proc/" + std::to_string(pid) + "/") + leaf;
}

}  // namespace

int ProcessThreadCount(pid_t pid) {
  DIR* tasks = opendir(ProcPath(pid, "task").c_str());
  if (tasks == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(tasks)) n += e->d_name[0] != '.';
  closedir(tasks);
  return n;
}

int64_t ProcessCpuNanosOf(pid_t pid) {
  clockid_t clock = CLOCK_PROCESS_CPUTIME_ID;
  if (pid != 0 && clock_getcpuclockid(pid, &clock) != 0) return -1;
  timespec ts = {};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t ProcessResidentBytes(pid_t pid, bool peak) {
  FILE* status = std::fopen(ProcPath(pid, "status").c_str(), "r");
  if (status == nullptr) return -1;
  const char* key = peak ? "VmHWM:" : "VmRSS:";
  char line[256];
  int64_t bytes = -1;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    long long kb = 0;
    if (std::strncmp(line, key, std::strlen(key)) == 0 &&
        std::sscanf(line + std::strlen(key), "%lld", &kb) == 1) {
      bytes = kb * 1024;
      break;
    }
  }
  std::fclose(status);
  return bytes;
}

std::optional<ProcessNameState> ProcessNameAndState(pid_t pid) {
  std::ifstream in(ProcPath(pid, "stat"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  // "PID (NAME) STATE ...": the name may hold spaces and parentheses.
  const size_t open = s.find('('), close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open ||
      close + 2 >= s.size()) {
    return std::nullopt;
  }
  return ProcessNameState{s.substr(open + 1, close - open - 1), s[close + 2]};
}

}  // namespace prepflow
