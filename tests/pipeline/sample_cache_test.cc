#include "pipeline/reuse/sample_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>

#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/pipeline.h"
#include "pipeline/reuse/materialize.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using testing::MakePipeline;
using testing::TempDir;

constexpr char kResizeFirst[] = R"pb(
  stages { decode {} }
  stages { resize { shorter_side: 40 } }
  stages { random_crop { size: 32 } }
  stages { random_horizontal_flip {} }
  stages { normalize {} }
)pb";

std::unique_ptr<Pipeline> Preset(const std::string& name) {
  auto spec = LoadPipelineSpec(name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto p = Pipeline::Create(*spec, PipelineOptions());
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

TEST(DeterministicTest, ImagenetTrainCachesTheReadBytes) {
  // The decode is planned from random_resized_crop's draws, so the decoded
  // image differs from epoch to epoch: only the read bytes may be kept.
  auto p = Preset("imagenet-train");
  EXPECT_EQ(p->CacheBoundary(), 0);
  EXPECT_TRUE(p->Deterministic(0));
  EXPECT_EQ(p->WhyNotDeterministic(1),
            "stage 0 (decode) decodes the region that stage 1 (random_resized_crop) draws at "
            "random");
  EXPECT_EQ(p->WhyNotDeterministic(2),
            "stage 1 (random_resized_crop) before it draws random numbers");
  EXPECT_TRUE(p->stage_random(1));
  EXPECT_FALSE(p->stage_random(0));
}

TEST(DeterministicTest, ResizeFirstCachesTheResizedImage) {
  auto p = MakePipeline(kResizeFirst);
  EXPECT_EQ(p->CacheBoundary(), 2);
  EXPECT_TRUE(p->Deterministic(1));  // resize plans the decode without drawing
  EXPECT_FALSE(p->Deterministic(3));
}

TEST(DeterministicTest, AllDeterministicCachesTheOutput) {
  auto p = Preset("imagenet-eval");
  EXPECT_EQ(p->CacheBoundary(), p->num_stages());
  for (int k = 0; k <= p->num_stages(); ++k) EXPECT_TRUE(p->Deterministic(k)) << k;
}

TEST(DeterministicTest, PrefixFingerprintsNameThePrefix) {
  auto a = MakePipeline(kResizeFirst);
  auto b = MakePipeline(R"pb(
    stages { decode {} }
    stages { resize { shorter_side: 41 } }
    stages { random_crop { size: 32 } }
  )pb");
  EXPECT_EQ(a->PrefixFingerprint(1), b->PrefixFingerprint(1));
  EXPECT_NE(a->PrefixFingerprint(2), b->PrefixFingerprint(2));
  EXPECT_NE(a->PrefixFingerprint(0), a->PrefixFingerprint(1));
  DecodeOptions smaller;
  smaller.max_pixels = 100000;
  EXPECT_NE(MakePipeline(kResizeFirst, 0, smaller)->PrefixFingerprint(0), a->PrefixFingerprint(0));
  // The seed does not enter: deterministic values are the same in any job.
  EXPECT_EQ(MakePipeline(kResizeFirst, 7)->PrefixFingerprint(2), a->PrefixFingerprint(2));
}

SampleCache::Blob Value(int64_t index, size_t size) {
  auto v = std::make_shared<std::string>(size, '\0');
  for (size_t i = 0; i < size; ++i) (*v)[i] = static_cast<char>(index * 31 + i);
  return v;
}

std::unique_ptr<SampleCache> OpenCache(const SampleCacheOptions& options) {
  auto cache = SampleCache::Open(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

// One epoch in a fresh random order: each sample is looked up and, on a
// miss, offered. Returns the hits.
int64_t RunEpoch(SampleCache& cache, int64_t n, uint32_t epoch,
                 const std::function<size_t(int64_t)>& size_of) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(epoch);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t hits = 0;
  for (int64_t i : order) {
    const CacheKey key{42, i};
    if (SampleCache::Blob v = cache.Find(key, 0)) {
      EXPECT_EQ(*v, *Value(i, size_of(i))) << i;
      ++hits;
    } else {
      cache.Insert(key, 0, Value(i, size_of(i)));
    }
  }
  return hits;
}

TEST(SampleCacheTest, KeepsAStableSubsetWhenTheDataOutgrowsIt) {
  // 2,000 samples of 1 KiB, room for 500: from the second epoch on, a
  // quarter of every epoch hits (the ideal for an unknown order) and the
  // cache is not rewritten. LRU would hit far less, and churn.
  SampleCacheOptions o;
  o.ram_bytes = 500 * 1024;
  auto cache = OpenCache(o);
  auto size_of = [](int64_t) { return size_t{1024}; };
  EXPECT_EQ(RunEpoch(*cache, 2000, 1, size_of), 0);
  const int64_t inserted = cache->stats().insertions;
  for (uint32_t epoch = 2; epoch <= 4; ++epoch) {
    EXPECT_EQ(RunEpoch(*cache, 2000, epoch, size_of), 500) << epoch;
  }
  EXPECT_EQ(cache->stats().insertions, inserted);  // settled after epoch 1
  EXPECT_EQ(cache->stats().ram_entries, 500);
  EXPECT_EQ(cache->stats().ram_bytes, 500 * 1024);
}

TEST(SampleCacheTest, NeverHoldsMoreThanItsBudget) {
  SampleCacheOptions o;
  o.ram_bytes = 100'000;
  auto cache = OpenCache(o);
  auto size_of = [](int64_t i) { return static_cast<size_t>(100 + (i * 7919) % 5000); };
  int64_t hits = 0;
  for (uint32_t epoch = 1; epoch <= 3; ++epoch) {
    hits = RunEpoch(*cache, 1000, epoch, size_of);
    EXPECT_LE(cache->stats().ram_bytes, o.ram_bytes);
  }
  // Sizes vary, so the share is near the ideal rather than at it.
  EXPECT_GT(hits, 1000 * 100'000 / (1000 * 2600) * 8 / 10);
  EXPECT_GT(cache->stats().evictions, 0);
  // A value larger than the whole budget is not kept.
  cache->Insert({42, 5000}, 0, Value(5000, 200'000));
  EXPECT_FALSE(cache->Holds({42, 5000}));
}

TEST(SampleCacheTest, TheDatasetFitsAndTheSecondEpochAllHits) {
  SampleCacheOptions o;
  o.ram_bytes = 1 << 20;
  auto cache = OpenCache(o);
  auto size_of = [](int64_t) { return size_t{1000}; };
  EXPECT_EQ(RunEpoch(*cache, 1000, 1, size_of), 0);
  EXPECT_EQ(RunEpoch(*cache, 1000, 2, size_of), 1000);
  EXPECT_EQ(cache->stats().evictions, 0);
  EXPECT_EQ(cache->stats().hits, 1000);
  EXPECT_EQ(cache->stats().misses, 1000);
}

TEST(SampleCacheTest, RamOverflowsToDiskAndDiskOutlivesTheProcess) {
  TempDir dir;
  SampleCacheOptions o;
  o.ram_bytes = 100 * 1000;
  o.dir = dir.Join("cache");
  o.disk_bytes = 300 * 1000;
  auto size_of = [](int64_t) { return size_t{1000}; };
  {
    auto cache = OpenCache(o);
    EXPECT_EQ(RunEpoch(*cache, 400, 1, size_of), 0);
    const SampleCache::Stats s = cache->stats();
    EXPECT_EQ(s.ram_entries, 100);
    EXPECT_EQ(s.disk_entries, 300);
    EXPECT_EQ(RunEpoch(*cache, 400, 2, size_of), 400);
    EXPECT_EQ(cache->stats().disk_errors, 0);
  }
  // The next process finds the disk tier's entries (RAM's are gone) and
  // moves those that rank into RAM up as they are asked for.
  auto cache = OpenCache(o);
  EXPECT_EQ(cache->stats().disk_entries, 300);
  EXPECT_EQ(RunEpoch(*cache, 400, 3, size_of), 300);
  EXPECT_EQ(RunEpoch(*cache, 400, 4, size_of), 400);
  EXPECT_EQ(cache->stats().ram_entries, 100);
}

TEST(SampleCacheTest, ADamagedFileIsAMissNotAValue) {
  TempDir dir;
  SampleCacheOptions o;
  o.dir = dir.Join("cache");
  o.disk_bytes = 1 << 20;
  auto cache = OpenCache(o);
  cache->Insert({7, 3}, 0, Value(3, 5000));
  ASSERT_TRUE(cache->Holds({7, 3}));
  // Flip one byte of the value in its file.
  const std::string file = o.dir + "/0000000000000007/3-1.pfc";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    char c = 0;
    f.seekg(100);
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  EXPECT_EQ(cache->Find({7, 3}, 0), nullptr);
  EXPECT_EQ(cache->stats().disk_errors, 1);
  EXPECT_FALSE(cache->Holds({7, 3}));
  EXPECT_NE(access(file.c_str(), F_OK), 0);  // removed
}

// A value is served only for the version of its source it was made from,
// in RAM and on disk, and after a restart (the version is in the file): a
// file rewritten since is a miss, and its entry makes room for the new one.
TEST(SampleCacheTest, AValueOfAnotherSourceVersionIsStale) {
  TempDir dir;
  for (const bool disk : {false, true}) {
    SampleCacheOptions o;
    o.ram_bytes = disk ? 0 : 1 << 20;
    if (disk) o.dir = dir.Join("cache");
    o.disk_bytes = 1 << 20;
    auto cache = OpenCache(o);
    for (const int64_t i : {3, 4}) {
      cache->Insert({7, i}, 11, Value(i, 5000));
      EXPECT_NE(cache->Find({7, i}, 11), nullptr) << i;
      EXPECT_EQ(cache->Find({7, i}, 12), nullptr) << i;
      EXPECT_FALSE(cache->Holds({7, i})) << "a stale entry is dropped";
      cache->Insert({7, i}, 12, Value(i, 5000));
      EXPECT_NE(cache->Find({7, i}, 12), nullptr) << i;
    }
    EXPECT_EQ(cache->stats().stale, 2) << disk;
  }
  SampleCacheOptions o;
  o.dir = dir.Join("cache");
  auto cache = OpenCache(o);  // what the disk pass left, versions unread
  EXPECT_EQ(cache->stats().disk_entries, 2);
  EXPECT_EQ(cache->Find({7, 3}, 11), nullptr);
  EXPECT_EQ(cache->stats().stale, 1);
  EXPECT_EQ(cache->stats().disk_errors, 0);
  EXPECT_NE(cache->Find({7, 4}, 12), nullptr);
}

TEST(SampleCacheTest, AFolderServesOneProcessAtATime) {
  TempDir dir;
  SampleCacheOptions o;
  o.dir = dir.Join("cache");
  o.disk_bytes = 1 << 20;
  auto first = OpenCache(o);
  auto second = SampleCache::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("--cache-dir " + o.dir + " is in use"),
            std::string::npos)
      << second.status();
  first.reset();
  EXPECT_TRUE(SampleCache::Open(o).ok());
}

TEST(SampleCacheTest, ASmallerBudgetDropsTheLowestOnOpen) {
  TempDir dir;
  SampleCacheOptions o;
  o.dir = dir.Join("cache");
  o.disk_bytes = 100 * 1000;
  auto size_of = [](int64_t) { return size_t{1000}; };
  {
    auto cache = OpenCache(o);
    RunEpoch(*cache, 300, 1, size_of);
    EXPECT_EQ(cache->stats().disk_entries, 100);
  }
  o.disk_bytes = 50 * 1000;
  auto cache = OpenCache(o);
  EXPECT_EQ(cache->stats().disk_entries, 50);
  EXPECT_EQ(RunEpoch(*cache, 300, 2, size_of), 50);
}

TEST(SampleCacheTest, RefusesNegativeBudgets) {
  SampleCacheOptions o;
  o.ram_bytes = -1;
  EXPECT_EQ(SampleCache::Open(o).status().message(), "--cache-bytes must be >= 0");
}

TEST(BoundaryCacheTest, ARestoredValueContinuesExactlyAsTheOriginal) {
  // imagenet-eval cached after its resize: the rest run on the restored
  // image gives the bytes of an uncut run.
  auto p = Preset("imagenet-eval");
  const std::vector<uint8_t> jpeg = testing::Jpeg(300, 200, 5);
  SampleCacheOptions o;
  o.ram_bytes = 1 << 24;
  BoundaryCache cache(OpenCache(o), CacheSpace(1, p->PrefixFingerprint(2)), 2, nullptr);
  const testing::Output whole = testing::RunPipeline(*p, jpeg, 9);
  ASSERT_TRUE(whole.status.ok()) << whole.status;

  Workspace ws;
  Sample s;
  s.index = 9;
  EXPECT_FALSE(cache.Restore(s, ws));
  uint8_t* bytes = ws.encoded.Reserve(jpeg.size());
  std::copy(jpeg.begin(), jpeg.end(), bytes);
  s.data = bytes;
  s.size = jpeg.size();
  s.shape = {static_cast<int64_t>(jpeg.size())};
  ASSERT_TRUE(p->Run(0, 2, s, ws).ok());
  cache.Keep(s);
  EXPECT_TRUE(cache.Holds(9));
  EXPECT_EQ(cache.NotHeld({8, 9, 10}), (std::vector<int64_t>{8, 10}));

  Workspace other;
  Sample r;
  r.index = 9;
  r.epoch = 3;  // any epoch
  ASSERT_TRUE(cache.Restore(r, other));
  ASSERT_TRUE(p->Run(2, p->num_stages(), r, other).ok());
  ASSERT_EQ(r.size, whole.bytes.size());
  EXPECT_EQ(std::vector<uint8_t>(r.data, r.data + r.size), whole.bytes);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
}

TEST(BoundaryCacheTest, AValueOfTheWrongTypeIsRefusedNotRun) {
  // What arrives from elsewhere (a worker, a cache file, a materialized
  // shard) is checked against the boundary's type: a one-dimensional tensor
  // handed to center_crop would be read as an image of a shape it lacks.
  auto p = Preset("imagenet-eval");
  Workspace ws;
  float data[5] = {};
  Sample s;
  s.kind = ValueKind::kTensor;
  s.data = reinterpret_cast<uint8_t*>(data);
  s.size = sizeof(data);
  s.shape = {5};
  const absl::Status status = p->Run(2, p->num_stages(), s, ws);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            "the value before stage 2 (center_crop) is float32 tensor [5]; the stage takes uint8 "
            "image [?, ?, 3]");
  // An image of the wrong channel count, likewise.
  uint8_t pixels[16] = {};
  s.kind = ValueKind::kImage;
  s.data = pixels;
  s.size = sizeof(pixels);
  s.shape = {2, 2, 4};
  EXPECT_EQ(p->Run(2, p->num_stages(), s, ws).code(), absl::StatusCode::kDataLoss);
}

TEST(MaterializedTest, HostileStoredValuesAreCleanErrors) {
  // A .pfv member that is not a value: truncated, a header that lies about
  // its length, or bytes that disagree with the shape it claims.
  proto::Materialized m;
  m.set_upto(2);
  m.set_encoding("raw");
  Workspace ws;
  const std::vector<std::string> hostile = {
      std::string("\x01\x00", 2), std::string("\xff\xff\xff\x7f garbage", 12),
      std::string("\x06\x00\x00\x00\x08\x02\x12\x02\x10\x10", 10) + std::string(5, 'x')};
  for (const std::string& bytes : hostile) {
    Sample s;
    s.kind = ValueKind::kEncoded;
    s.data = reinterpret_cast<uint8_t*>(const_cast<char*>(bytes.data()));
    s.size = bytes.size();
    s.shape = {static_cast<int64_t>(bytes.size())};
    const absl::Status status = DecodeMaterialized(m, DecodeOptions(), ws, s);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find("not a materialized value"), std::string::npos) << status;
  }
  EXPECT_EQ(CheckEncoding("jpeg:101").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckEncoding("jpeg:").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace prepflow
