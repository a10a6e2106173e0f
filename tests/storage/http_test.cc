// HttpReader against a real HTTP server (http-server from npm, via
// tests/servers/serve.js) and against sockets that misbehave on purpose.
#include "storage/http.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_server.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::NodeServer;
using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// A loopback TCP socket on a port the kernel picks, listening or only bound
// (connections to it are then refused); sets `*url` to an object there.
int LoopbackSocket(bool listening, std::string* url) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  if (listening) {
    EXPECT_EQ(listen(s, 8), 0);
  }
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  *url = absl::StrCat("http://127.0.0.1:", ntohs(a.sin_port), "/x.tar");
  return s;
}

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    std::mt19937 gen(7);
    bytes_ = new std::vector<uint8_t>(1 << 20);
    for (uint8_t& b : *bytes_) b = static_cast<uint8_t>(gen());
    testing::WriteFile(dir_->Join("objects/shard-000000.tar"), *bytes_);
    server_ = new NodeServer("http", dir_->Join("objects"));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete bytes_;
    delete dir_;
  }

  static std::string Read(HttpReader& r, const std::string& url, int64_t offset, int64_t length,
                          absl::Status* status) {
    Buffer buf;
    size_t size = 0;
    *status = r.ReadRange(url, offset, length, &buf, &size);
    if (!status->ok()) return "";
    return std::string(reinterpret_cast<const char*>(buf.data()), size);
  }

  static TempDir* dir_;
  static std::vector<uint8_t>* bytes_;
  static NodeServer* server_;
};
TempDir* HttpTest::dir_ = nullptr;
std::vector<uint8_t>* HttpTest::bytes_ = nullptr;
NodeServer* HttpTest::server_ = nullptr;

TEST_F(HttpTest, RangesAreTheObjectsBytesOverOneConnection) {
  HttpReader r;
  const std::string url = server_->Url("shard-000000.tar");
  ASSERT_EQ(*r.Size(url), static_cast<int64_t>(bytes_->size()));
  std::mt19937 gen(3);
  for (int i = 0; i < 50; ++i) {
    const int64_t offset = gen() % bytes_->size();
    const int64_t length = 1 + gen() % std::min<int64_t>(100000, bytes_->size() - offset);
    absl::Status st;
    const std::string got = Read(r, url, offset, length, &st);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(got, std::string(bytes_->begin() + offset, bytes_->begin() + offset + length));
  }
  EXPECT_EQ(r.stats().requests, 51);
  EXPECT_EQ(r.stats().retries, 0);
  EXPECT_EQ(r.stats().connections, 1);  // kept alive
}

TEST_F(HttpTest, ErrorsNameTheUrlAndNeverItsSecrets) {
  HttpReader r;
  absl::Status st;
  Read(r, server_->Url("missing.tar?X-Amz-Signature=secret"), 0, 10, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(st.message(), HasSubstr("missing.tar"));
  EXPECT_THAT(st.message(), Not(HasSubstr("secret")));
  // Past the end of the object, and running off its end.
  const std::string url = server_->Url("shard-000000.tar");
  Read(r, url, bytes_->size() + 10, 10, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
  Read(r, url, bytes_->size() - 5, 10, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(st.message(), HasSubstr("short read"));
  // Limits and nonsense are refused before any request.
  const int64_t before = r.stats().requests;
  HttpOptions small;
  small.max_range_bytes = 1000;
  HttpReader limited(small);
  Read(limited, url, 0, 1001, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  Read(r, url, -1, 10, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(r.stats().requests, before);
  // Only http and https: a job cannot make a reader open a local file.
  Read(r, "file:///etc/passwd", 0, 10, &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  Read(r, "http://user:password@" + server_->address() + "/missing.tar", 0, 10, &st);
  EXPECT_THAT(st.message(), Not(HasSubstr("password")));
  // A name with control bytes cannot forge a log line.
  Read(r, server_->Url("x\n[2026-01-01 00:00:00.000 I] forged.tar"), 0, 10, &st);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), Not(HasSubstr("\n")));
  EXPECT_THAT(st.message(), HasSubstr("x\\x0a[2026"));
}

// A port bound but not listened on: refused at once (and nobody else can
// take it meanwhile), retried max_attempts times.
TEST_F(HttpTest, ARefusedConnectionIsRetriedThenUnavailable) {
  std::string url;
  const int s = LoopbackSocket(/*listening=*/false, &url);
  HttpOptions o;
  o.max_attempts = 3;
  o.first_backoff_seconds = 0.01;
  o.outage_seconds = 0;
  HttpReader r(o);
  absl::Status st;
  Read(r, url, 0, 10, &st);
  close(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("(3 attempts)"));
  EXPECT_EQ(r.stats().requests, 3);
  EXPECT_EQ(r.stats().retries, 2);
}

// A server that accepts and never answers: the request's deadline ends
// each attempt, and the reader gives up after its attempts.
TEST_F(HttpTest, ASilentServerTimesOut) {
  std::string url;
  const int s = LoopbackSocket(/*listening=*/true, &url);  // the kernel accepts; nobody answers
  HttpOptions o;
  o.request_timeout_seconds = 0.3;
  o.max_attempts = 2;
  o.first_backoff_seconds = 0.01;
  o.outage_seconds = 0;
  HttpReader r(o);
  absl::Status st;
  Read(r, url, 0, 10, &st);
  close(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_THAT(st.message(), HasSubstr("(2 attempts)"));
}

// An outage outlasting the attempts is tried again until storage has failed
// the request for outage_seconds; then it stands, saying so. (With none, a
// refused connection fails after its attempts, as above.)
TEST_F(HttpTest, AnOutageIsTriedUntilItHasLastedOutageSeconds) {
  std::string url;
  const int s = LoopbackSocket(/*listening=*/false, &url);
  HttpOptions o;
  o.max_attempts = 2;
  o.first_backoff_seconds = 0.01;
  o.outage_seconds = 0.5;
  HttpReader r(o);
  absl::Status st;
  Read(r, url, 0, 10, &st);
  close(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("s of outage)"));
  EXPECT_GT(r.stats().requests, 2) << "tried only its attempts";
  EXPECT_EQ(r.stats().errors, 1);
}

// A server whose kept-alive connection answers the second request with
// garbage (as when it sent bytes past a response's Content-Length), and that
// answers properly on a new connection. That request was lost (INVALID_ARGUMENT, not retried); it
// says nothing of the object, so it is tried again on a new connection.
TEST_F(HttpTest, GarbageOnAKeptAliveConnectionIsRetriedOnANewOne) {
  std::string url;
  const int s = LoopbackSocket(/*listening=*/true, &url);
  std::thread server([s] {
    const std::string good = "HTTP/1.1 206 Partial Content\r\nContent-Length: 4\r\n\r\nabcd";
    for (int n = 0; n < 2; ++n) {
      const int c = accept(s, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)!read(c, buf, sizeof(buf));
      (void)!write(c, good.data(), good.size());
      if (n == 0) {
        // The second request, on this connection, meets what a server sent
        // past its last response (here: sent now).
        (void)!read(c, buf, sizeof(buf));
        const std::string garbage = "EXTRA!!!\r\n\r\n";
        (void)!write(c, garbage.data(), garbage.size());
      }
      close(c);
    }
  });
  HttpOptions o;
  o.max_attempts = 2;
  o.first_backoff_seconds = 0.001;
  o.outage_seconds = 0;
  HttpReader r(o);
  absl::Status first, second;
  EXPECT_EQ(Read(r, url, 0, 4, &first), "abcd");
  EXPECT_EQ(Read(r, url, 0, 4, &second), "abcd") << second;
  EXPECT_EQ(r.stats().retries, 1);
  shutdown(s, SHUT_RDWR);  // a server still waiting for the retry's connection gives up
  server.join();
  close(s);
}

}  // namespace
}  // namespace prepflow
