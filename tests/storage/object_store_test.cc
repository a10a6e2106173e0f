// The object store against a real S3-compatible server (s3rver) and a real
// HTTP server (http-server), both from tests/servers, and against a socket
// that answers listings crafted to be hostile.
#include "storage/object_store.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/dataset.h"
#include "tests/testing/node_server.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::NodeServer;
using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<uint8_t> Random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

class ObjectStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    testing::WriteFile(dir_->Join("www/a.bin"), Random(1000, 1));
    s3_ = new NodeServer("s3", dir_->Join("s3"), {"data"});
    http_ = new NodeServer("http", dir_->Join("www"));
  }
  static void TearDownTestSuite() {
    delete http_;
    delete s3_;
    delete dir_;
  }
  static std::shared_ptr<CurlObjectStore> S3(const std::string& key = "S3RVER",
                                             const std::string& secret = "S3RVER") {
    ObjectStoreOptions o;
    o.s3_endpoint = absl::StrCat("http://", s3_->address());
    o.access_key_id = key;
    o.secret_access_key = secret;
    o.credential_source = absl::StrCat("access key ", key, " (test)");
    o.list_page_objects = 2;  // every listing of more than two objects pages
    o.http.first_backoff_seconds = 0.01;
    return CurlObjectStore::Create(o);
  }
  static std::string Read(const ByteSource& source, uint64_t offset, size_t length) {
    std::string out(length, '\0');
    const absl::Status s = source.ReadAt(offset, length, reinterpret_cast<uint8_t*>(out.data()));
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  static TempDir* dir_;
  static NodeServer* s3_;
  static NodeServer* http_;
};
TempDir* ObjectStoreTest::dir_ = nullptr;
NodeServer* ObjectStoreTest::s3_ = nullptr;
NodeServer* ObjectStoreTest::http_ = nullptr;

TEST_F(ObjectStoreTest, WhatIsPutIsListedInOrderAndReadBackByRange) {
  auto store = S3();
  const std::vector<std::string> keys = {"t1/b.bin", "t1/a.bin", "t1/sub/c d.bin", "t1x/e.bin",
                                         "t1/\xc3\xa9t\xc3\xa9.bin"};
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<uint8_t> bytes = Random(3000 + i, static_cast<unsigned>(i));
    ASSERT_TRUE(store->Put(absl::StrCat("s3://data/", keys[i]), bytes.data(), bytes.size()).ok());
  }
  absl::StatusOr<std::vector<ObjectInfo>> listed = store->List("s3://data/t1/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> urls;
  for (const ObjectInfo& o : *listed) urls.push_back(o.url);
  EXPECT_THAT(urls, ::testing::ElementsAre("s3://data/t1/a.bin", "s3://data/t1/b.bin",
                                           "s3://data/t1/sub/c d.bin",
                                           "s3://data/t1/\xc3\xa9t\xc3\xa9.bin"));
  EXPECT_EQ((*listed)[0].size, 3001u);

  for (size_t i : {size_t{2}, size_t{4}}) {
    absl::StatusOr<std::unique_ptr<ByteSource>> object =
        store->Open(absl::StrCat("s3://data/", keys[i]));  // size by HEAD
    ASSERT_TRUE(object.ok()) << object.status();
    EXPECT_EQ((*object)->size(), 3000 + i);
    const std::vector<uint8_t> bytes = Random(3000 + i, static_cast<unsigned>(i));
    EXPECT_EQ(Read(**object, 100, 1000), std::string(bytes.begin() + 100, bytes.begin() + 1100));
  }
  const StorageStats stats = store->stats();
  EXPECT_GE(stats.bytes, 2000);
  EXPECT_EQ(stats.requests, 5 + 2 + 2 + 2);  // puts, two pages, heads and reads
  EXPECT_EQ(stats.errors, 0);
}

TEST_F(ObjectStoreTest, MissingObjectsAndBucketsAreNotFoundNamingThem) {
  auto store = S3();
  absl::StatusOr<std::unique_ptr<ByteSource>> missing = store->Open("s3://data/no/such.tar");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("s3://data/no/such.tar"));
  // Which credentials asked: another account's bucket answers 404 too.
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("signed request; access key"));
  absl::StatusOr<std::vector<ObjectInfo>> bucket = store->List("s3://nobucket/x/");
  EXPECT_TRUE(absl::IsNotFound(bucket.status())) << bucket.status();
  EXPECT_THAT(std::string(bucket.status().message()), HasSubstr("s3://nobucket/x/"));
  EXPECT_EQ(store->stats().errors, 2);
}

// s3rver checks the access key id (not the signature): an unknown one is
// refused, and the error says which credentials were used, never the secret.
TEST_F(ObjectStoreTest, RefusedCredentialsAreNamedButNotTheSecret) {
  auto store = S3("NOSUCHKEY", "very-secret-value");
  absl::StatusOr<std::unique_ptr<ByteSource>> object = store->Open("s3://data/t1/a.bin");
  ASSERT_TRUE(absl::IsPermissionDenied(object.status())) << object.status();
  const std::string message(object.status().message());
  EXPECT_THAT(message, HasSubstr("s3://data/t1/a.bin"));
  EXPECT_THAT(message, HasSubstr("signed request; access key NOSUCHKEY (test)"));
  EXPECT_THAT(message, Not(HasSubstr("very-secret-value")));
}

TEST_F(ObjectStoreTest, HttpObjectsAreReadButNotListed) {
  auto store = S3();
  absl::StatusOr<std::unique_ptr<ByteSource>> object = store->Open(http_->Url("a.bin"));
  ASSERT_TRUE(object.ok()) << object.status();
  const std::vector<uint8_t> bytes = Random(1000, 1);
  EXPECT_EQ(Read(**object, 990, 10), std::string(bytes.begin() + 990, bytes.end()));
  std::string past(20, '\0');
  const absl::Status s = (*object)->ReadAt(990, 20, reinterpret_cast<uint8_t*>(past.data()));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  absl::StatusOr<std::vector<ObjectInfo>> listed = store->List(http_->Url(""));
  EXPECT_TRUE(absl::IsUnimplemented(listed.status()));
  EXPECT_THAT(std::string(listed.status().message()), HasSubstr("brace pattern"));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Open("ftp://host/x.tar").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Open("s3://Bad_Bucket!/x.tar").status()));
}

TEST(S3EnvironmentTest, CredentialsRegionAndEndpointComeFromTheEnvironment) {
  struct Restore {
    ~Restore() {
      for (const char* v :
           {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
            "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}) {
        unsetenv(v);
      }
    }
  } restore;
  ObjectStoreOptions o;
  ASSERT_TRUE(S3FromEnvironment(&o).ok());
  EXPECT_TRUE(o.access_key_id.empty());
  EXPECT_THAT(o.credential_source, HasSubstr("anonymous"));
  EXPECT_EQ(o.s3_region, "us-east-1");

  setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  absl::Status s = S3FromEnvironment(&o);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("AWS_SECRET_ACCESS_KEY is not"));

  setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI", 1);
  setenv("AWS_DEFAULT_REGION", "eu-west-1", 1);
  setenv("AWS_ENDPOINT_URL", "http://minio:9000/", 1);
  setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com", 1);
  o = ObjectStoreOptions();
  ASSERT_TRUE(S3FromEnvironment(&o).ok());
  EXPECT_EQ(o.access_key_id, "AKIDEXAMPLE");
  EXPECT_EQ(o.s3_region, "eu-west-1");
  EXPECT_EQ(o.s3_endpoint, "https://s3.example.com");  // the S3-specific one wins
  EXPECT_THAT(o.credential_source, HasSubstr("AKIDEXAMPLE"));
  EXPECT_THAT(o.credential_source, Not(HasSubstr("wJalrXUtnFEMI")));

  setenv("AWS_ENDPOINT_URL_S3", "minio:9000", 1);
  s = S3FromEnvironment(&o);
  EXPECT_THAT(std::string(s.message()), HasSubstr("AWS_ENDPOINT_URL_S3='minio:9000'"));
  unsetenv("AWS_ENDPOINT_URL_S3");
  setenv("AWS_REGION", "us-east-1/../x", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(S3FromEnvironment(&o)));
}

// A server that answers every request with `body` (as XML, status 200): what
// a hostile or broken endpoint may send as a listing.
class CannedServer {
 public:
  explicit CannedServer(std::string body) : body_(std::move(body)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        char buf[8192];
        (void)!read(c, buf, sizeof(buf));  // one request; the reply closes the connection
        const std::string reply = absl::StrCat(
            "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: ", body_.size(),
            "\r\nConnection: close\r\n\r\n", body_);
        (void)!write(c, reply.data(), reply.size());
        close(c);
      }
    });
  }
  ~CannedServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  std::string body_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(HostileListingTest, BadListingsAreErrorsNamingThePrefixNotLoops) {
  const std::string page =
      "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>same"
      "</NextContinuationToken><Contents><Key>p/a.tar</Key><Size>10</Size></Contents>"
      "</ListBucketResult>";
  struct Case {
    std::string body;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {page, "without a new continuation token"},  // the same token again and again
           {"<ListBucketResult><Contents><Key>a</Key>", "bad listing XML"},
           {"<ListBucketResult><Contents><Key>a</Key><Size>-4</Size></Contents>"
            "</ListBucketResult>",
            "lacks its key or size"},
           {std::string(1 << 20, ' '), "over the limit"},
       }) {
    CannedServer server(c.body);
    ObjectStoreOptions o;
    o.s3_endpoint = server.endpoint();
    o.max_listing_page_bytes = 64 << 10;
    o.http.max_attempts = 1;
    absl::StatusOr<std::vector<ObjectInfo>> listed =
        CurlObjectStore::Create(o)->List("s3://bucket/p/");
    ASSERT_FALSE(listed.ok()) << c.error;
    EXPECT_THAT(std::string(listed.status().message()), HasSubstr("s3://bucket/p/")) << c.error;
    EXPECT_THAT(std::string(listed.status().message()), HasSubstr(c.error));
  }
}

// Keys a listing of "p/" must never hold: outside the prefix (a real store
// never lists them; a hostile one may), shorter than it, or with a dot
// segment that libcurl would squash into another object's URL.
TEST(HostileListingTest, ListedKeysOutsideThePrefixOrWithDotSegmentsAreRefused) {
  const auto listing = [](const std::string& key) {
    return absl::StrCat("<ListBucketResult><Contents><Key>p/c0/ok.jpg</Key><Size>3</Size>",
                        "</Contents><Contents><Key>", key,
                        "</Key><Size>3</Size></Contents></ListBucketResult>");
  };
  struct Case {
    std::string key;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"q", "'q', which is not below the prefix"},
           {"pX/c0/x.jpg", "'pX/c0/x.jpg', which is not below the prefix"},
           {"p/c0/../../private/c0/x.jpg", "'.' or '..' segment"},
           {"p/./c0/x.jpg", "'.' or '..' segment"},
           {"p/c0/..", "'.' or '..' segment"},
       }) {
    CannedServer server(listing(c.key));
    ObjectStoreOptions o;
    o.s3_endpoint = server.endpoint();
    o.http.max_attempts = 1;
    absl::StatusOr<std::vector<ObjectInfo>> listed =
        CurlObjectStore::Create(o)->List("s3://bucket/p/");
    ASSERT_TRUE(absl::IsDataLoss(listed.status())) << c.key << ": " << listed.status();
    EXPECT_THAT(std::string(listed.status().message()), HasSubstr(c.error)) << c.key;
    EXPECT_THAT(std::string(listed.status().message()), HasSubstr("listing s3://bucket/p/"));
  }
  // Dots inside a name are a name.
  CannedServer server(listing("p/c0/..x.jpg"));
  ObjectStoreOptions o;
  o.s3_endpoint = server.endpoint();
  absl::StatusOr<std::vector<ObjectInfo>> listed =
      CurlObjectStore::Create(o)->List("s3://bucket/p/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 2u);
}

// A dataset named by a prefix, over a store whose listing (by any means) holds
// a key that is not below it: the open fails naming the key; it crashed the
// trainer (std::out_of_range from substr) and wedged a worker's dataset cache.
TEST(HostileListingTest, ADatasetOverAHostileListingFailsToOpen) {
  for (const std::string key : {"q", "p/../secret/c0/x.jpg"}) {
    CannedServer server(absl::StrCat("<ListBucketResult><Contents><Key>", key,
                                     "</Key><Size>3</Size></Contents></ListBucketResult>"));
    ObjectStoreOptions o;
    o.s3_endpoint = server.endpoint();
    o.http.max_attempts = 1;
    DatasetOptions options;
    options.store = CurlObjectStore::Create(o);
    proto::DatasetSpec spec;
    spec.set_path("s3://bucket/p");
    absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(spec, options);
    ASSERT_TRUE(absl::IsDataLoss(ds.status())) << key << ": " << ds.status();
    EXPECT_THAT(std::string(ds.status().message()), HasSubstr(key));
  }
}

}  // namespace
}  // namespace prepflow
