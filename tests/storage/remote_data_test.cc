// Datasets in remote storage, end to end: the same shards and images served
// by a real HTTP server (http-server) and a real S3-compatible one (s3rver),
// read by the Loader and by real worker processes, against the local copy.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "client/datasets.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/pack.h"
#include "pipeline/data/shard_index.h"
#include "storage/object_store.h"
#include "tests/testing/fault_proxy.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/node_server.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

namespace fs = std::filesystem;
using ::prepflow::testing::NodeServer;
using ::prepflow::testing::TempDir;
using ::prepflow::testing::WorkerProcess;
using ::testing::HasSubstr;
using ::testing::Not;

class RemoteDataTest : public ::testing::Test {
 protected:
  // root/data: the 96-image ImageFolder; www/shards: it packed (4 shards,
  // with sidecars), www/bare: the same shards without them. s3://data/shards/
  // and s3://data/images/ hold the same.
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    testing::WriteRemoteTestSet(dir_->Join("root/data"));
    proto::DatasetSpec folder;
    folder.set_path(dir_->Join("root/data"));
    auto images = OpenDataset(folder);
    ASSERT_TRUE(images.ok()) << images.status();
    PackOptions pack;
    pack.out_dir = dir_->Join("www/shards");
    pack.samples_per_shard = 25;  // shards 000000 to 000003
    const absl::StatusOr<PackStats> packed = PackWebDataset(**images, pack, nullptr);
    ASSERT_TRUE(packed.ok()) << packed.status();
    fs::create_directories(dir_->Join("www/bare"));
    for (int i = 0; i < 4; ++i) {
      const std::string name = absl::StrFormat("shard-%06d.tar", i);
      fs::copy_file(dir_->Join("www/shards/" + name), dir_->Join("www/bare/" + name));
    }
    http_ = new NodeServer("http", dir_->Join("www"));
    plain_ = new NodeServer("http-norange", dir_->Join("www"));
    // The default index cache (~/.cache/prepflow/index) goes below the suite's
    // folder, here and in the workers it starts.
    setenv("XDG_CACHE_HOME", dir_->Join("xdg-cache").c_str(), 1);
    s3_ = new NodeServer("s3", dir_->Join("s3"), {"data"});
    setenv("AWS_ENDPOINT_URL", absl::StrCat("http://", s3_->address()).c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    ObjectStoreOptions o;
    ASSERT_TRUE(S3FromEnvironment(&o).ok());
    auto store = CurlObjectStore::Create(o);
    for (const fs::directory_entry& e :
         fs::recursive_directory_iterator(dir_->Join("www/shards"))) {
      Upload(*store, e.path(), absl::StrCat("s3://data/shards/", e.path().filename().string()));
    }
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir_->Join("root/data"))) {
      if (!e.is_regular_file()) continue;
      const std::string rel = fs::relative(e.path(), dir_->Join("root/data")).string();
      Upload(*store, e.path(), absl::StrCat("s3://data/images/", rel));
    }
  }
  static void TearDownTestSuite() {
    delete s3_;
    delete plain_;
    delete http_;
    delete dir_;
    for (const char* v :
         {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "XDG_CACHE_HOME"}) {
      unsetenv(v);
    }
  }
  static void Upload(const CurlObjectStore& store, const fs::path& from, const std::string& to) {
    const std::vector<uint8_t> bytes = testing::ReadFile(from.string());
    const absl::Status s = store.Put(to, bytes.data(), bytes.size());
    ASSERT_TRUE(s.ok()) << s;
  }

  static std::string HttpPattern(const std::string& folder) {
    return http_->Url(folder + "/shard-{000000..000003}.tar");
  }
  static LoaderOptions Options(const std::string& data, const std::vector<std::string>& workers,
                               const std::string& mode) {
    return testing::RemoteTestOptions(data, workers, mode);
  }
  static void ExpectExactlyOnce(const testing::Drained& r, int64_t n, int epochs = 1) {
    testing::ExpectExactlyOnce(r, n, epochs);
  }
  static uint64_t LocalChecksum(int epochs = 1) {
    LoaderOptions o = Options(dir_->Join("root/data"), {}, "off");
    o.epochs = epochs;
    return testing::Drain(o).stats.checksum;
  }
  // A worker that may read this suite's servers.
  static std::vector<std::string> AllowingWorker() {
    return {"--threads", "1", "--allow-url-prefix", absl::StrCat(http_->Url(""), ",s3://data/")};
  }

  static TempDir* dir_;
  static NodeServer* http_;
  static NodeServer* plain_;
  static NodeServer* s3_;
};
TempDir* RemoteDataTest::dir_ = nullptr;
NodeServer* RemoteDataTest::http_ = nullptr;
NodeServer* RemoteDataTest::plain_ = nullptr;
NodeServer* RemoteDataTest::s3_ = nullptr;

TEST_F(RemoteDataTest, EveryRemoteFormOfTheDataGivesTheLocalChecksum) {
  const uint64_t local = LocalChecksum();
  for (const std::string& data : {
           HttpPattern("shards"),            // with sidecar indexes
           HttpPattern("bare"),              // indexed by one pass over each shard
           std::string("s3://data/shards"),  // listed: .tar objects
           std::string("s3://data/shards/shard-{000000..000003}.tar"),
           std::string("s3://data/images/"),  // listed: an ImageFolder of objects
       }) {
    const testing::Drained r = testing::Drain(Options(data, {}, "off"));
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, local) << data;
  }
}

TEST_F(RemoteDataTest, SidecarsAndAStreamingPassIndexAlike) {
  auto open = [](const std::string& data) {
    proto::DatasetSpec spec;
    spec.set_path(data);
    auto ds = OpenClientDataset(spec, RemoteReadOptions());
    EXPECT_TRUE(ds.ok()) << ds.status();
    return ds.ok() ? *std::move(ds) : nullptr;
  };
  const auto with = open(HttpPattern("shards"));
  const auto bare = open(HttpPattern("bare"));
  proto::DatasetSpec local_spec;
  local_spec.set_path(dir_->Join("www/shards"));
  const auto local = *OpenDataset(local_spec);
  ASSERT_TRUE(with && bare);
  EXPECT_EQ(with->fingerprint(), local->fingerprint());
  EXPECT_EQ(bare->fingerprint(), local->fingerprint());
  ASSERT_EQ(with->size(), 96);
  // A shard opened with a sidecar costs a HEAD and the sidecar's HEAD and
  // GET; without one, a HEAD, the sidecar's 404 and one windowed pass.
  EXPECT_EQ(with->store()->stats().requests, 4 * 3);
  EXPECT_LE(bare->store()->stats().requests, 4 * 3);
  Buffer a, b;
  for (int64_t i = 0; i < with->size(); ++i) {
    size_t na = 0, nb = 0;
    ASSERT_TRUE(with->Read(i, &a, &na).ok());
    ASSERT_TRUE(local->Read(i, &b, &nb).ok());
    ASSERT_EQ(std::string(reinterpret_cast<char*>(a.data()), na),
              std::string(reinterpret_cast<char*>(b.data()), nb))
        << with->SamplePath(i);
    EXPECT_EQ(with->label(i), local->label(i));
  }
  EXPECT_EQ(with->store()->stats().requests, 4 * 3 + 96);  // one range request per sample
  // A header probe reads a sample's first bytes: a range of them, over HTTP
  // and S3 (objects) alike.
  const auto objects = open("s3://data/images/");
  ASSERT_TRUE(objects);
  for (const Dataset* ds : {with.get(), objects.get()}) {
    const int64_t before = ds->store()->stats().bytes;
    for (int64_t i = 0; i < 8; ++i) {
      size_t na = 0, nb = 0;
      uint64_t whole = 0;
      ASSERT_TRUE(ds->ReadHead(i, 100, &a, &na, &whole).ok()) << ds->SamplePath(i);
      ASSERT_TRUE(local->Read(i, &b, &nb).ok());
      EXPECT_EQ(whole, nb);
      EXPECT_EQ(std::string(reinterpret_cast<char*>(a.data()), na),
                std::string(reinterpret_cast<char*>(b.data()), std::min<size_t>(nb, 100)));
    }
    EXPECT_LE(ds->store()->stats().bytes - before, 8 * 100) << "more than the heads read";
  }
}

// A shard without a sidecar is indexed by a pass once; the index is kept by
// (URL, size, ETag), so the next open costs no pass, and a changed shard (a
// new ETag) is indexed again.
TEST_F(RemoteDataTest, PassIndexesAreCachedByVersion) {
  RemoteReadOptions remote;
  remote.index_cache_dir = dir_->Join("index-cache");
  proto::DatasetSpec spec;
  spec.set_path(HttpPattern("bare"));
  auto count = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(remote.index_cache_dir)) n += e.is_regular_file();
    return n;
  };
  auto first = OpenClientDataset(spec, remote);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->store()->stats().requests, 4 * 3);  // HEAD, sidecar's 404, one pass
  EXPECT_EQ(count(), 4);
  auto again = OpenClientDataset(spec, remote);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->store()->stats().requests, 4 * 2) << "no pass";
  EXPECT_EQ((*again)->fingerprint(), (*first)->fingerprint());
  // A new modification time is a new ETag for http-server: indexed again.
  fs::last_write_time(
      dir_->Join("www/bare/shard-000002.tar"),
      fs::last_write_time(dir_->Join("www/bare/shard-000002.tar")) + std::chrono::hours(1));
  auto changed = OpenClientDataset(spec, remote);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ((*changed)->store()->stats().requests, 4 * 2 + 1);
  EXPECT_EQ((*changed)->fingerprint(), (*first)->fingerprint());
  EXPECT_EQ(count(), 5);
  // A damaged entry is made again, never trusted.
  for (const auto& e : fs::directory_iterator(remote.index_cache_dir)) {
    testing::WriteFile(e.path().string(), {'x'});
  }
  auto damaged = OpenClientDataset(spec, remote);
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  EXPECT_EQ((*damaged)->fingerprint(), (*first)->fingerprint());
}

TEST_F(RemoteDataTest, StaleSidecarsAndMissingShardsAreNamed) {
  // A sidecar left from another version of the shard (here: one 512 bytes
  // longer) is refused, never used to read the wrong bytes.
  fs::create_directories(dir_->Join("www/stale"));
  fs::copy_file(dir_->Join("www/bare/shard-000000.tar"), dir_->Join("www/stale/shard-000000.tar"),
                fs::copy_options::overwrite_existing);
  const std::vector<uint8_t> idx = testing::ReadFile(dir_->Join("www/shards/shard-000000.tar.idx"));
  std::string text(idx.begin(), idx.end());
  const uint64_t bytes = fs::file_size(dir_->Join("www/bare/shard-000000.tar"));
  text = absl::StrReplaceAll(
      text, {{absl::StrCat("shard-bytes ", bytes), absl::StrCat("shard-bytes ", bytes + 512)}});
  ASSERT_TRUE(WriteFileAtomically(dir_->Join("www/stale/shard-000000.tar.idx"), text).ok());
  proto::DatasetSpec spec;
  spec.set_path(http_->Url("stale/shard-000000.tar"));
  auto stale = OpenClientDataset(spec, RemoteReadOptions());
  ASSERT_TRUE(absl::IsDataLoss(stale.status())) << stale.status();
  EXPECT_THAT(std::string(stale.status().message()), HasSubstr("stale/shard-000000.tar.idx"));
  EXPECT_THAT(std::string(stale.status().message()), HasSubstr("run prepflow index again"));

  spec.set_path(http_->Url("shards/shard-{000000..000004}.tar"));
  auto missing = OpenClientDataset(spec, RemoteReadOptions());
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("shard-000004.tar"));
  spec.set_path("s3://data/nothing-here");
  auto empty = OpenClientDataset(spec, RemoteReadOptions());
  EXPECT_TRUE(absl::IsNotFound(empty.status())) << empty.status();
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("s3://data/nothing-here"));
  spec.set_path(http_->Url("shards/"));
  auto unlisted = OpenClientDataset(spec, RemoteReadOptions());
  EXPECT_TRUE(absl::IsUnimplemented(unlisted.status())) << unlisted.status();
  spec.set_path("https://user:secret@example.com/x.tar");
  auto credentials = OpenClientDataset(spec, RemoteReadOptions());
  EXPECT_TRUE(absl::IsInvalidArgument(credentials.status()));
  EXPECT_THAT(std::string(credentials.status().message()), Not(HasSubstr("secret")));
}

TEST_F(RemoteDataTest, WorkersReadTheUrlsThemselves) {
  const uint64_t local = LocalChecksum();
  WorkerProcess a(dir_->Join("root"), AllowingWorker());
  for (const std::string& data : {HttpPattern("shards"), std::string("s3://data/images")}) {
    for (const std::string mode : {"remote", "cut=2"}) {
      const testing::Drained r = testing::Drain(Options(data, {a.address()}, mode));
      ExpectExactlyOnce(r, 96);
      EXPECT_EQ(r.stats.checksum, local) << data << " " << mode;
      EXPECT_EQ(r.stats.remote_images, 96) << data << " " << mode;
      // The workers' reads (one request per sample) are counted with ours.
      EXPECT_GE(r.stats.storage.requests, 96 + 1) << data << " " << mode;
      EXPECT_GT(r.stats.storage.bytes, 96 * 1000) << data << " " << mode;
    }
  }
}

TEST_F(RemoteDataTest, AWorkerRefusesUrlsOutsideItsPrefixes) {
  WorkerProcess none(dir_->Join("root"), {"--threads", "1"});
  auto refused = Loader::Create(Options(HttpPattern("shards"), {none.address()}, "remote"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("reads no URLs"));
  EXPECT_THAT(refused.status().message(), HasSubstr(http_->Url("shards/shard-000000.tar")));

  WorkerProcess s3_only(dir_->Join("root"),
                        {"--threads", "1", "--allow-url-prefix", "s3://data/images/"});
  refused = Loader::Create(Options("s3://data/shards", {s3_only.address()}, "remote"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("outside this worker's --allow-url-prefix"));
}

// prepflow pack --out s3://...: the shards and their sidecars go up, a
// prefix that holds anything is refused without --overwrite, and
// --overwrite replaces the shards (only them).
TEST_F(RemoteDataTest, PackWritesShardsToS3) {
  const std::string pack = absl::StrCat(PREPFLOW_BIN_DIR, "/prepflow pack --data ",
                                        dir_->Join("root/data"), " --out s3://data/packed");
  auto run = [](const std::string& command) {
    const int status = std::system(absl::StrCat(command, " >/dev/null 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(run(absl::StrCat(pack, " --shard-samples 25")), 0);
  ObjectStoreOptions o;
  ASSERT_TRUE(S3FromEnvironment(&o).ok());
  auto store = CurlObjectStore::Create(o);
  auto listed = store->List("s3://data/packed/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 8u);  // 4 shards and their sidecars
  const testing::Drained r = testing::Drain(Options("s3://data/packed", {}, "off"));
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());

  const std::vector<uint8_t> note = {'k', 'e', 'e', 'p'};
  ASSERT_TRUE(store->Put("s3://data/packed/README", note.data(), note.size()).ok());
  EXPECT_EQ(run(absl::StrCat(pack, " --shard-samples 50")), 1) << "not empty";
  ASSERT_EQ(run(absl::StrCat(pack, " --shard-samples 50 --overwrite")), 0);
  listed = store->List("s3://data/packed/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->size(), 5u);  // 2 shards, their sidecars, the README
  EXPECT_EQ(testing::Drain(Options("s3://data/packed", {}, "off")).stats.checksum, LocalChecksum());
  EXPECT_EQ(run(absl::StrCat(PREPFLOW_BIN_DIR, "/prepflow pack --data ", dir_->Join("root/data"),
                             " --out ", http_->Url("x"))),
            2)
      << "HTTP has no upload: a bad --out";
}

// A server that answers 503 or 429, resets, cuts an answer short or stalls:
// each such request is retried (and counted), and the job gets every sample
// exactly once with the local checksum.
TEST_F(RemoteDataTest, InjectedFaultsAreRetriedAndCounted) {
  using testing::Fault;
  // The job first looks for a manifest (materialized data: 404 here).
  // Opening shard 0 asks for its size, its sidecar's size, then the sidecar;
  // shard 1 the same: each fault meets one of these, and its retry passes.
  testing::FaultProxy proxy(http_->address(),
                            {Fault::kNone, Fault::k503, Fault::kNone, Fault::kReset, Fault::kNone,
                             Fault::kCut, Fault::kNone, Fault::k429, Fault::kNone, Fault::kStall});
  LoaderOptions o = Options(
      absl::StrCat("http://", proxy.address(), "/shards/shard-{000000..000003}.tar"), {}, "off");
  o.storage.http.request_timeout_seconds = 3;  // the stall
  o.storage.http.first_backoff_seconds = 0.01;
  o.storage.http.max_attempts = 3;
  o.storage.read_ahead.requests = 1;  // shards opened one at a time: the order above
  const testing::Drained r = testing::Drain(o);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_EQ(r.stats.storage.retries, 5) << "one per fault";
  EXPECT_EQ(r.stats.storage.errors, 0);
  EXPECT_EQ(r.stats.storage.requests, 4 * 3 + 96 + 5);
  EXPECT_EQ(proxy.connections(), 1 + 4 * 3 + 96 + 5);

  // Storage that keeps failing: the job cannot open, and says where and why.
  testing::FaultProxy down(http_->address(), {Fault::k503}, /*always=*/true);
  o.dataset.set_path(absl::StrCat("http://", down.address(), "/shards/shard-000000.tar"));
  o.storage.http.max_attempts = 2;
  o.storage.http.outage_seconds = 0;
  auto refused = Loader::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  // Its first request, for a manifest beside the shard, already fails: the
  // message names the dataset first, then the probe.
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::StartsWith(absl::StrCat("dataset http://", down.address(),
                                                 "/shards/shard-000000.tar: its storage failed")));
  EXPECT_THAT(refused.status().message(), HasSubstr("/shards/materialized.pbtxt: HTTP 503"));
  EXPECT_THAT(refused.status().message(), HasSubstr("(2 attempts)"));
}

// Storage answering 503 for a while mid-epoch, longer than a request's
// attempts: every sample still arrives exactly once, even with
// --on-error skip (which dropped the samples read during the blip).
TEST_F(RemoteDataTest, AStorageBlipMidEpochLosesNothing) {
  using testing::Fault;
  // 13 requests open the job (a manifest probe, then 4 shards' size, sidecar
  // size and sidecar); 20 samples are read; then 40 requests meet a 503.
  std::vector<Fault> faults(13 + 20, Fault::kNone);
  faults.resize(faults.size() + 40, Fault::k503);
  testing::FaultProxy proxy(http_->address(), faults);
  LoaderOptions o = Options(
      absl::StrCat("http://", proxy.address(), "/shards/shard-{000000..000003}.tar"), {}, "off");
  o.storage.http.first_backoff_seconds = 0.001;
  o.storage.http.max_attempts = 2;
  o.storage.http.outage_seconds = 600;  // far longer than the blip takes
  o.on_error = OnError::kSkip;
  const testing::Drained r = testing::Drain(o);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.errors, 0);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_EQ(r.stats.storage.retries, 40);
}

// Storage that stays down past --storage-outage-seconds: the run stops and
// names the outage, --on-error skip or not; it ended with exit 0 and no
// images before, each sample skipped as if its file were bad.
TEST_F(RemoteDataTest, AnOutageStopsTheRunEvenWhenSkipping) {
  using testing::Fault;
  std::vector<Fault> faults(13, Fault::kNone);
  faults.push_back(Fault::k503);
  testing::FaultProxy down(http_->address(), faults, /*always=*/true);
  LoaderOptions o = Options(
      absl::StrCat("http://", down.address(), "/shards/shard-{000000..000003}.tar"), {}, "off");
  o.storage.http.first_backoff_seconds = 0.001;
  o.storage.http.max_attempts = 2;
  o.storage.http.outage_seconds = 0.2;
  o.storage.read_ahead.requests = 1;
  o.on_error = OnError::kSkip;
  const testing::Drained r = testing::Drain(o);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_THAT(r.status.message(), HasSubstr("storage is unavailable"));
  EXPECT_THAT(r.status.message(), HasSubstr("HTTP 503"));
  EXPECT_THAT(r.status.message(), HasSubstr("shard-00000"));
  EXPECT_THAT(r.status.message(), HasSubstr("--storage-outage-seconds"));
  EXPECT_EQ(r.stats.images, 0);
}

TEST_F(RemoteDataTest, AKilledWorkerLosesNothingWithRemoteData) {
  WorkerProcess a(dir_->Join("root"), AllowingWorker());
  WorkerProcess b(dir_->Join("root"), AllowingWorker());
  LoaderOptions o = Options("s3://data/shards", {a.address(), b.address()}, "cut=2");
  o.epochs = 2;
  o.hedge_after = 0;
  const testing::Drained r = testing::Drain(o, [&](Loader&) {
    b.Signal(SIGKILL);
    b.Wait();
  });
  ExpectExactlyOnce(r, 96, 2);
  EXPECT_EQ(r.stats.checksum, LocalChecksum(2));
  EXPECT_EQ(r.stats.workers_alive, 1);
}

TEST_F(RemoteDataTest, ACacheThatHoldsTheDatasetReadsNothingAfterTheFirstEpoch) {
  const uint64_t local = LocalChecksum(3);
  // Here: the trainer's own cache.
  LoaderOptions o = Options(HttpPattern("shards"), {}, "off");
  o.epochs = 3;
  o.cache.ram_bytes = 64 << 20;
  const testing::Drained here = testing::Drain(o);
  ExpectExactlyOnce(here, 96, 3);
  EXPECT_EQ(here.stats.checksum, local);
  ASSERT_EQ(here.stats.storage_bytes_read_per_epoch.size(), 3u);
  EXPECT_GT(here.stats.storage_bytes_read_per_epoch[0], 96 * 1000);
  EXPECT_EQ(here.stats.storage_bytes_read_per_epoch[1], 0);
  EXPECT_EQ(here.stats.storage_bytes_read_per_epoch[2], 0);
  EXPECT_EQ(here.stats.cache_at, 0);  // imagenet-train: the read bytes
  EXPECT_EQ(here.stats.cache_misses, 96);
  EXPECT_EQ(here.stats.cache_hits, 192);
  EXPECT_GT(here.stats.cache_ram_bytes, 96 * 1000);

  // On a worker: its cache, for every placement that reaches the boundary.
  std::vector<std::string> flags = AllowingWorker();
  flags.insert(flags.end(), {"--cache-bytes", "67108864"});
  WorkerProcess a(dir_->Join("root"), flags);
  for (const std::string mode : {"remote", "cut=2"}) {
    LoaderOptions w = Options(HttpPattern("shards"), {a.address()}, mode);
    w.epochs = 3;
    const testing::Drained there = testing::Drain(w);
    ExpectExactlyOnce(there, 96, 3);
    EXPECT_EQ(there.stats.checksum, local) << mode;
    ASSERT_EQ(there.stats.storage_bytes_read_per_epoch.size(), 3u);
    // The worker's cache outlives the job: the second job reads nothing.
    EXPECT_EQ(there.stats.storage_bytes_read_per_epoch[0] > 0, mode == "remote") << mode;
    EXPECT_EQ(there.stats.storage_bytes_read_per_epoch[1], 0) << mode;
    EXPECT_EQ(there.stats.storage_bytes_read_per_epoch[2], 0) << mode;
    EXPECT_EQ(there.stats.cache_hits, mode == "remote" ? 192 : 288) << mode;
  }
}

// Two workers, each caching half: every sample goes to its home worker, so
// over three epochs each is read from storage once for the whole pool; and
// a worker lost mid-run has its share read again by the other, exactly once.
TEST_F(RemoteDataTest, CachingWorkersShareTheDatasetAndReadEachSampleOnce) {
  const uint64_t local = LocalChecksum(3);
  std::vector<std::string> flags = AllowingWorker();
  flags.insert(flags.end(), {"--cache-bytes", "67108864"});
  int64_t one_epoch = 0;  // what one pass over the samples reads
  {
    WorkerProcess a(dir_->Join("root"), flags);
    WorkerProcess b(dir_->Join("root"), flags);
    LoaderOptions o = Options(HttpPattern("shards"), {a.address(), b.address()}, "remote");
    o.epochs = 3;
    o.hedge_after = 0;  // a hedged copy would read on the other worker
    const testing::Drained r = testing::Drain(o);
    ExpectExactlyOnce(r, 96, 3);
    EXPECT_EQ(r.stats.checksum, local);
    EXPECT_EQ(r.stats.cache_misses, 96);  // each sample missed once, on its home
    EXPECT_EQ(r.stats.cache_hits, 192);
    ASSERT_EQ(r.stats.storage_bytes_read_per_epoch.size(), 3u);
    one_epoch = r.stats.storage_bytes_read_per_epoch[0];
    EXPECT_GT(one_epoch, 96 * 1000);
    EXPECT_EQ(r.stats.storage_bytes_read_per_epoch[1], 0);
    EXPECT_EQ(r.stats.storage_bytes_read_per_epoch[2], 0);
    // Both did their share.
    ASSERT_EQ(r.stats.workers.size(), 2u);
    EXPECT_GT(r.stats.workers[0].samples, 3 * 96 / 4);
    EXPECT_GT(r.stats.workers[1].samples, 3 * 96 / 4);
  }
  WorkerProcess a(dir_->Join("root"), flags);
  WorkerProcess b(dir_->Join("root"), flags);
  LoaderOptions o = Options(HttpPattern("shards"), {a.address(), b.address()}, "remote");
  o.epochs = 3;
  o.hedge_after = 0;
  const testing::Drained r = testing::Drain(o, [&](Loader&) {
    b.Signal(SIGKILL);
    b.Wait();
  });
  ExpectExactlyOnce(r, 96, 3);
  EXPECT_EQ(r.stats.checksum, local);
  EXPECT_EQ(r.stats.workers_alive, 1);
  // b's share is read again by a, once: no later epoch reads anything.
  ASSERT_EQ(r.stats.storage_bytes_read_per_epoch.size(), 3u);
  EXPECT_EQ(r.stats.storage_bytes_read_per_epoch[2], 0);
}

// Data echoing on workers: every copy of a sample goes to its home worker,
// which reads the sample once for all of them.
TEST_F(RemoteDataTest, EchoedCopiesOnWorkersReadEachSampleOnce) {
  WorkerProcess a(dir_->Join("root"), AllowingWorker());
  WorkerProcess b(dir_->Join("root"), AllowingWorker());
  LoaderOptions plain = Options(HttpPattern("shards"), {}, "off");
  plain.echo = 3;
  plain.echo_window = 16;
  const testing::Drained here = testing::Drain(plain);
  ExpectExactlyOnce(here, 96, 3);
  // The trainer reads each sample once for its three copies. Without reads
  // ahead nothing races (a read ahead may still start for a copy whose
  // sample an earlier copy begins to load at that moment): exactly one
  // pass's requests.
  LoaderOptions unhurried = plain, fresh = Options(HttpPattern("shards"), {}, "off");
  unhurried.storage.read_ahead.requests = 0;
  fresh.storage.read_ahead.requests = 0;
  EXPECT_EQ(testing::Drain(unhurried).stats.storage.requests,
            testing::Drain(fresh).stats.storage.requests);
  LoaderOptions once = Options(HttpPattern("shards"), {a.address(), b.address()}, "remote");
  once.hedge_after = 0;
  const int64_t one_pass = testing::Drain(once).stats.storage_bytes_read_per_epoch.at(0);
  for (const std::string mode : {"remote", "cut=2"}) {
    LoaderOptions o = Options(HttpPattern("shards"), {a.address(), b.address()}, mode);
    o.echo = 3;
    o.echo_window = 16;
    o.hedge_after = 0;  // a hedged copy would load on the other worker
    const testing::Drained r = testing::Drain(o);
    ExpectExactlyOnce(r, 96, 3);
    EXPECT_EQ(r.stats.checksum, here.stats.checksum) << mode;
    EXPECT_EQ(r.copy_hashes, here.copy_hashes) << mode;
    EXPECT_EQ(r.stats.storage_bytes_read_per_epoch.at(0), one_pass) << mode;
    EXPECT_EQ(r.stats.remote_stages[0].samples, 96) << mode;      // reads
    EXPECT_EQ(r.stats.remote_stages[1].samples, 3 * 96) << mode;  // a decode per copy
  }
}

// Python's http.server answers every ranged GET with the whole shard. The
// first such answer switches the host to whole objects: each shard is
// fetched whole once and its samples are read from that copy, here and on
// a worker, with or without sidecars.
TEST_F(RemoteDataTest, AServerWithoutRangeServesEachShardWholeOnce) {
  const uint64_t local = LocalChecksum();
  for (const std::string folder : {"bare", "shards"}) {
    const std::string data = plain_->Url(folder + "/shard-{000000..000003}.tar");
    const testing::Drained r = testing::Drain(Options(data, {}, "off"));
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, local) << data;
    EXPECT_EQ(r.stats.storage.whole_objects, 4) << data;
    EXPECT_LT(r.stats.storage.requests, 96) << data << ": not a request per sample";
  }
  std::vector<std::string> worker = AllowingWorker();
  worker[3] = absl::StrCat(worker[3], ",", plain_->Url(""));
  WorkerProcess b(dir_->Join("root"), worker);
  const testing::Drained r = testing::Drain(
      Options(plain_->Url("bare/shard-{000000..000003}.tar"), {b.address()}, "remote"));
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, local);
  EXPECT_GE(r.stats.storage.whole_objects, 4);
}

// Whole copies are bounded: kept on disk in --whole-object-dir, at most two
// shards at once, the others fetched again when needed (and counted); a
// shard over --whole-object-bytes fails naming the flag.
TEST_F(RemoteDataTest, WholeObjectsStayWithinTheirBudget) {
  const std::string data = plain_->Url("bare/shard-{000000..000003}.tar");
  const int64_t shard =
      static_cast<int64_t>(fs::file_size(dir_->Join("www/bare/shard-000000.tar")));
  LoaderOptions o = Options(data, {}, "off");
  o.storage.whole_objects.max_bytes = 2 * shard + shard / 2;
  o.storage.whole_objects.dir = dir_->Join("whole");
  o.storage.index_cache_dir = "";
  const testing::Drained r = testing::Drain(o);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_GT(r.stats.storage.whole_objects, 4) << "a shuffled epoch over 4 shards, room for 2";
  EXPECT_TRUE(fs::is_empty(dir_->Join("whole"))) << "the copies are unlinked files";

  o.storage.whole_objects.max_bytes = shard / 2;
  o.on_error = OnError::kFail;
  const testing::Drained small = testing::Drain(o);
  EXPECT_EQ(small.status.code(), absl::StatusCode::kResourceExhausted) << small.status;
  EXPECT_THAT(small.status.message(), HasSubstr("--whole-object-bytes"));
  EXPECT_THAT(small.status.message(), HasSubstr("ignores Range requests"));
  EXPECT_THAT(small.status.message(), HasSubstr("shard-00000"));

  // A --whole-object-dir that is a file: each read fails naming the flag.
  testing::WriteFile(dir_->Join("not-a-folder"), {1});
  o.storage.whole_objects.max_bytes = 4 * shard;
  o.storage.whole_objects.dir = dir_->Join("not-a-folder");
  const testing::Drained file = testing::Drain(o);
  EXPECT_FALSE(file.status.ok());
  EXPECT_THAT(file.status.message(), HasSubstr("--whole-object-dir"));
}

}  // namespace
}  // namespace prepflow
