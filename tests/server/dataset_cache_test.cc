#include "server/dataset_cache.h"

#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/synthetic.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;

proto::DatasetSpec Spec(const std::string& path) {
  proto::DatasetSpec spec;
  spec.set_path(path);
  return spec;
}

std::unique_ptr<Dataset> Index(const std::string& path) {
  auto ds = OpenDataset(Spec(path));
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? *std::move(ds) : nullptr;
}

class DatasetCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticFolderOptions o;
    o.classes = 2;
    o.images_per_class = 3;
    o.min_side = 32;
    o.max_side = 64;
    for (const char* name : {"a", "b"}) {
      ASSERT_TRUE(WriteSyntheticImageFolder(dir_.Join(name), o).ok());
    }
  }
  TempDir dir_;
};

// Indexing "a" is held up inside the indexer: an open of "b" still goes
// ahead (nothing worker-wide waits for an index), and a second open of "a"
// waits for the first indexing instead of repeating it.
TEST_F(DatasetCacheTest, SlowIndexBlocksNeitherOtherDatasetsNorRepeatsItself) {
  absl::Notification a_started, release_a;
  DatasetCacheOptions options;
  options.open = [&](const proto::DatasetSpec& spec, const DatasetOptions& o) {
    if (spec.path() == dir_.Join("a")) {
      a_started.Notify();
      release_a.WaitForNotification();
    }
    return OpenDataset(spec, o);
  };
  DatasetCache cache(options);
  const std::unique_ptr<Dataset> a = Index(dir_.Join("a")), b = Index(dir_.Join("b"));

  std::shared_ptr<const Dataset> first, second;
  std::thread t1([&] { first = *cache.Get(Spec(dir_.Join("a")), a->fingerprint(), a->size()); });
  a_started.WaitForNotification();
  std::thread t2([&] { second = *cache.Get(Spec(dir_.Join("a")), a->fingerprint(), a->size()); });
  // b must be served while a is held up: a lock over indexing would keep
  // it waiting until a is released (given a minute before the test says so).
  auto other_future = std::async(std::launch::async, [&] {
    return cache.Get(Spec(dir_.Join("b")), b->fingerprint(), b->size());
  });
  const bool served = other_future.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(served) << "opening b waited for a's indexing";
  release_a.Notify();
  auto other = other_future.get();
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->size(), b->size());
  t1.join();
  t2.join();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first, second) << "one index, shared";
  EXPECT_EQ(cache.indexings(), 2) << "a once, b once";
}

// Files added while a job runs: a new job brings the new fingerprint and gets
// a new index; the running job keeps its own.
TEST_F(DatasetCacheTest, AChangedDatasetIsIndexedAgain) {
  DatasetCacheOptions options;
  options.min_reindex_seconds = 0;
  DatasetCache cache(options);
  const std::unique_ptr<Dataset> before = Index(dir_.Join("a"));
  auto old = cache.Get(Spec(dir_.Join("a")), before->fingerprint(), before->size());
  ASSERT_TRUE(old.ok()) << old.status();

  testing::WriteFile(dir_.Join("a/class000/new.jpg"), testing::Jpeg(32, 32));
  const std::unique_ptr<Dataset> after = Index(dir_.Join("a"));
  ASSERT_NE(after->fingerprint(), before->fingerprint());
  auto fresh = cache.Get(Spec(dir_.Join("a")), after->fingerprint(), after->size());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->size(), before->size() + 1);
  EXPECT_EQ((*old)->size(), before->size()) << "the running job's index is unchanged";
}

// A fingerprint the dataset does not have is refused, and asking again within
// the interval is answered from the cache rather than indexing again.
TEST_F(DatasetCacheTest, RefusalsAreCachedForTheInterval) {
  DatasetCacheOptions options;
  options.min_reindex_seconds = 3600;
  DatasetCache cache(options);
  const std::unique_ptr<Dataset> a = Index(dir_.Join("a"));
  for (int i = 0; i < 3; ++i) {
    auto bogus = cache.Get(Spec(dir_.Join("a")), a->fingerprint() + 1, a->size());
    EXPECT_EQ(bogus.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(bogus.status().message(), HasSubstr("differs here"));
    auto missing = cache.Get(Spec(dir_.Join("missing")), 1, 1);
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(cache.indexings(), 2);
  EXPECT_TRUE(cache.Get(Spec(dir_.Join("a")), a->fingerprint(), a->size()).ok());
  EXPECT_EQ(cache.indexings(), 2);
}

// An indexing that throws (std::out_of_range from a hostile listing did) is
// an error for that open, and the dataset's entry is settled: the next open
// indexes again instead of waiting for good behind an entry left indexing.
TEST_F(DatasetCacheTest, AnIndexingThatThrowsFailsThatOpenAndWedgesNothing) {
  int calls = 0;
  DatasetCacheOptions options;
  options.min_reindex_seconds = 0;
  options.open = [&](const proto::DatasetSpec& spec, const DatasetOptions& o) {
    if (++calls == 1) throw std::out_of_range("basic_string::substr");
    return OpenDataset(spec, o);
  };
  DatasetCache cache(options);
  const std::unique_ptr<Dataset> a = Index(dir_.Join("a"));
  auto thrown = cache.Get(Spec(dir_.Join("a")), a->fingerprint(), a->size());
  EXPECT_TRUE(absl::IsInternal(thrown.status())) << thrown.status();
  EXPECT_THAT(thrown.status().message(), HasSubstr("basic_string::substr"));
  auto again = std::async(std::launch::async, [&] {
    return cache.Get(Spec(dir_.Join("a")), a->fingerprint(), a->size());
  });
  ASSERT_EQ(again.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the next open of the dataset waits behind the failed indexing";
  auto second = again.get();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->size(), a->size());
}

// What a job asks of its reads (its file limit) does not change the index:
// 40 jobs with 40 limits indexed a 100k-file dataset 40 times. The index is
// opened under the cache's limit, and kept once.
TEST_F(DatasetCacheTest, JobsWithOtherFileLimitsShareOneIndex) {
  DatasetCacheOptions options;
  options.max_file_bytes = 1 << 20;
  DatasetCache cache(options);
  const std::unique_ptr<Dataset> a = Index(dir_.Join("a"));
  std::shared_ptr<const Dataset> first;
  for (const int64_t limit : {int64_t{0}, int64_t{100}, int64_t{5000}, int64_t{1} << 40}) {
    proto::DatasetSpec spec = Spec(dir_.Join("a"));
    spec.set_max_file_bytes(limit);
    auto got = cache.Get(spec, a->fingerprint(), a->size());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)->max_file_bytes(), 1 << 20) << limit;
    if (first == nullptr) first = *got;
    EXPECT_EQ(*got, first) << limit;
  }
  EXPECT_EQ(cache.indexings(), 1);
}

}  // namespace
}  // namespace prepflow
