// A real test server from tests/servers (http-server or s3rver, installed by
// scripts/setup.sh and run with Node.js; or Python's http.server, which
// ignores Range requests) on a port the kernel picks, stopped when this goes
// out of scope.
#ifndef PREPFLOW_TESTS_TESTING_NODE_SERVER_H_
#define PREPFLOW_TESTS_TESTING_NODE_SERVER_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace prepflow::testing {

class NodeServer {
 public:
  // kind: "http" (serving `dir`), "http-norange" (Python's http.server
  // serving `dir`: whole files, whatever Range asks) or "s3" (keeping its
  // buckets in `dir`; `args` names buckets to create). Fails the test (and address() is empty)
  // when it does not start within 60 s, with the server's output.
  NodeServer(const std::string& kind, const std::string& dir,
             const std::vector<std::string>& args = {});
  ~NodeServer();
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  const std::string& address() const { return address_; }  // "127.0.0.1:PORT"
  std::string Url(const std::string& path) const { return "http://" + address_ + "/" + path; }

 private:
  pid_t pid_ = -1;
  std::string address_;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_NODE_SERVER_H_
