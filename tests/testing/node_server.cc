#include "tests/testing/node_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "gtest/gtest.h"

namespace prepflow::testing {

NodeServer::NodeServer(const std::string& kind, const std::string& dir,
                       const std::vector<std::string>& args) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return;
  }
  const std::string servers = std::string(PREPFLOW_SOURCE_DIR) + "/tests/servers/";
  const bool python = kind == "http-norange";
  const std::string script = servers + (python ? "plain_http.py" : "serve.js");
  // s3rver makes ListObjectsV2's continuation tokens with DES, which
  // OpenSSL 3 (Node 17 and later) keeps in its legacy provider.
  std::vector<const char*> argv = {"node", "--openssl-legacy-provider", script.c_str(),
                                   kind.c_str(), dir.c_str()};
  if (python) argv = {"python3", script.c_str(), dir.c_str()};
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    // The server ends with the test, however the test ends: a deadline's
    // _Exit left Node servers running.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the test already went
    dup2(out[1], 1);
    dup2(out[1], 2);
    execvp(argv[0], const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (address_.empty() && std::chrono::steady_clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, 1000) <= 0) continue;
    char buf[512];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;  // it exited
    text.append(buf, static_cast<size_t>(n));
    const size_t at = text.find("listening ");
    const size_t end = at == std::string::npos ? at : text.find('\n', at);
    if (end != std::string::npos) address_ = text.substr(at + 10, end - at - 10);
  }
  close(out[0]);
  if (address_.empty()) {
    ADD_FAILURE() << argv[0] << " " << script << " " << kind << " did not start (scripts/setup.sh "
                  << "installs the test servers): " << text;
  }
}

NodeServer::~NodeServer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
}

}  // namespace prepflow::testing
