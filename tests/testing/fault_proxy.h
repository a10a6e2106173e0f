// A relay in front of a real HTTP server that misbehaves on the requests it
// is told to, for tests of what a client does when storage fails. It serves
// one request per connection (and closes it), so the n-th connection it
// accepts (from 0) is the n-th request, and meets faults[n]; later ones, and
// those given kNone, are relayed as they are.
#ifndef PREPFLOW_TESTS_TESTING_FAULT_PROXY_H_
#define PREPFLOW_TESTS_TESTING_FAULT_PROXY_H_

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace prepflow::testing {

enum class Fault {
  kNone,
  k503,    // answers 503 Service Unavailable
  k429,    // answers 429 Too Many Requests
  kReset,  // reads the request, then resets the connection
  kCut,    // relays the request, and closes after the answer's headers and half its body
  kStall,  // reads the request and says nothing until the proxy goes
};

class FaultProxy {
 public:
  // `upstream`: "127.0.0.1:PORT". With `always`, every connection from
  // faults.size() on meets faults.back() too.
  FaultProxy(const std::string& upstream, std::vector<Fault> faults, bool always = false);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int connections() const { return accepted_.load(); }

 private:
  void Serve(int client, Fault fault);

  const int upstream_port_;
  const std::vector<Fault> faults_;
  const bool always_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<int> open_;  // client sockets, to unblock their threads at the end
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_FAULT_PROXY_H_
