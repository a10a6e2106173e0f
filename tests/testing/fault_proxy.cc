#include "tests/testing/fault_proxy.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace prepflow::testing {
namespace {

int Port(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// Reads until the end of a request's headers (the requests here have no
// body); returns what was read.
std::string ReadRequest(int fd) {
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  return request;
}

void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

FaultProxy::FaultProxy(const std::string& upstream, std::vector<Fault> faults, bool always)
    : upstream_port_(Port(upstream)), faults_(std::move(faults)), always_(always) {
  listener_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  listen(listener_, 64);
  socklen_t len = sizeof(a);
  getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] {
    while (true) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const size_t n = static_cast<size_t>(accepted_++);
      const Fault fault = n < faults_.size()            ? faults_[n]
                          : always_ && !faults_.empty() ? faults_.back()
                                                        : Fault::kNone;
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        close(client);
        return;
      }
      open_.push_back(client);
      threads_.emplace_back([this, client, fault] { Serve(client, fault); });
    }
  });
}

FaultProxy::~FaultProxy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listener_, SHUT_RDWR);
  close(listener_);
  acceptor_.join();
  for (std::thread& t : threads_) t.join();
  for (int fd : open_) close(fd);
}

void FaultProxy::Serve(int client, Fault fault) {
  if (fault == Fault::k503 || fault == Fault::k429 || fault == Fault::kReset ||
      fault == Fault::kStall) {
    ReadRequest(client);
    if (fault == Fault::kStall) {
      char byte;
      while (read(client, &byte, 1) > 0) {
      }  // until the client gives up or the proxy goes
      return;
    }
    if (fault == Fault::kReset) {
      linger l{1, 0};  // close with a reset
      setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      shutdown(client, SHUT_RDWR);
      return;
    }
    const char* answer = fault == Fault::k503
                             ? "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n"
                             : "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n";
    WriteAll(client, answer, std::strlen(answer));
    shutdown(client, SHUT_RDWR);
    return;
  }
  // One request per connection, so that the n-th connection is the n-th
  // request: relay the request, then the answer's headers and body (by its
  // Content-Length; none for HEAD), then close.
  const std::string request = ReadRequest(client);
  const int upstream = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(upstream_port_));
  if (request.empty() || connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(upstream);
    shutdown(client, SHUT_RDWR);
    return;
  }
  WriteAll(upstream, request.data(), request.size());
  std::string answer;
  char buf[16384];
  size_t end = std::string::npos;
  while ((end = answer.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = read(upstream, buf, sizeof(buf));
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  size_t body = 0;
  if (end != std::string::npos && request.compare(0, 5, "HEAD ") != 0) {
    std::string headers = answer.substr(0, end);
    for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t at = headers.find("content-length:");
    if (at != std::string::npos) body = std::stoul(headers.substr(at + 15));
  }
  const size_t total = end == std::string::npos ? answer.size() : end + 4 + body;
  while (answer.size() < total) {
    const ssize_t n = read(upstream, buf, sizeof(buf));
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(upstream);
  if (end != std::string::npos) {
    // Says it closes the connection (it does), so that the client never
    // reuses one, and connection n stays request n.
    std::string head = answer.substr(0, end + 2);  // status line and headers, each with CRLF
    std::string kept;
    size_t line = 0;
    while (line < head.size()) {
      const size_t next = head.find("\r\n", line) + 2;
      std::string name = head.substr(line, std::min<size_t>(11, next - line));
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (name != "connection:") kept += head.substr(line, next - line);
      line = next;
    }
    kept += "Connection: close\r\n";
    answer = kept + answer.substr(end + 2);
    end = kept.size() - 2;
  }
  // kCut: the headers and half the body (a body-less answer goes whole).
  const size_t send = fault == Fault::kCut && end != std::string::npos
                          ? std::min(answer.size(), end + 4 + body / 2)
                          : answer.size();
  WriteAll(client, answer.data(), send);
  shutdown(client, SHUT_RDWR);
}

}  // namespace prepflow::testing
