#include "client/loader.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/executor.h"
#include "pipeline/data/synthetic.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    SyntheticFolderOptions o;
    o.classes = 3;
    o.images_per_class = 10;
    o.min_side = 100;
    o.max_side = 700;
    ASSERT_TRUE(WriteSyntheticImageFolder(dir_->Join("data"), o).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  static LoaderOptions Options(const std::string& pipeline = "imagenet-train") {
    LoaderOptions o;
    o.dataset.set_path(dir_->Join("data"));
    o.pipeline = *LoadPipelineSpec(pipeline);
    o.batch_size = 8;
    o.threads = 2;
    o.seed = 17;
    return o;
  }

  using Result = testing::Drained;
  static Result Drain(const LoaderOptions& o) { return testing::Drain(o); }

  static TempDir* dir_;
};
TempDir* LoaderTest::dir_ = nullptr;

TEST_F(LoaderTest, DeliversEverySampleOnceInContiguousBatches) {
  const Result r = Drain(Options());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.stats.images, 30);
  EXPECT_EQ(r.stats.errors, 0);
  EXPECT_EQ(std::set<int64_t>(r.indices.begin(), r.indices.end()).size(), 30u);
  EXPECT_EQ(r.batch_sizes, (std::vector<size_t>{8, 8, 8, 6}));
  EXPECT_EQ(r.stats.checksum, r.recomputed);
  EXPECT_EQ(r.stats.bytes, 30u * 3 * 224 * 224 * 4);
  ASSERT_EQ(r.stats.stages.size(), 5u);  // read + 4 stages
  EXPECT_EQ(r.stats.stages[0].name, "read");
  EXPECT_EQ(r.stats.stages[1].name, "decode");
  EXPECT_EQ(r.stats.stages[1].samples, 30);
  EXPECT_GT(r.stats.stages[1].cpu_seconds, 0);
}

TEST_F(LoaderTest, ChecksumIndependentOfThreadsBatchSizeAndPrefetch) {
  const Result base = Drain(Options());
  for (int threads : {1, 3}) {
    for (int batch : {1, 7, 64}) {
      LoaderOptions o = Options();
      o.threads = threads;
      o.batch_size = batch;
      o.prefetch_batches = batch == 1 ? 5 : 1;
      const Result r = Drain(o);
      EXPECT_EQ(r.stats.checksum, base.stats.checksum) << threads << " threads, batch " << batch;
      EXPECT_EQ(r.stats.images, 30);
    }
  }
}

TEST_F(LoaderTest, SeedAndEpochChangeResultsDeterministically) {
  LoaderOptions o = Options();
  o.epochs = 2;
  const Result two = Drain(o);
  ASSERT_EQ(two.indices.size(), 60u);
  const std::vector<int64_t> first(two.indices.begin(), two.indices.begin() + 30);
  const std::vector<int64_t> second(two.indices.begin() + 30, two.indices.end());
  EXPECT_NE(first, second);  // reshuffled
  EXPECT_EQ(std::set<int64_t>(second.begin(), second.end()).size(), 30u);
  EXPECT_EQ(first, Drain(Options()).indices);
  EXPECT_NE(two.stats.checksum,
            Drain(Options()).stats.checksum * 2);  // augmentations differ per epoch

  LoaderOptions other = Options();
  other.seed = 18;
  EXPECT_NE(Drain(other).stats.checksum, Drain(Options()).stats.checksum);

  LoaderOptions plain = Options("imagenet-eval");
  plain.shuffle = false;
  const Result eval = Drain(plain);
  for (size_t i = 0; i < eval.indices.size(); ++i)
    EXPECT_EQ(eval.indices[i], static_cast<int64_t>(i));
  plain.seed = 99;  // eval has no randomness: the seed only reorders
  plain.shuffle = true;
  EXPECT_EQ(Drain(plain).stats.checksum, eval.stats.checksum);
}

TEST_F(LoaderTest, RanksPartitionTheDatasetAndTheirChecksumsAddUp) {
  const Result whole = Drain(Options());
  uint64_t sum = 0;
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions o = Options();
    o.rank = rank;
    o.world_size = 3;
    const Result r = Drain(o);
    sum += r.stats.checksum;
    seen.insert(r.indices.begin(), r.indices.end());
  }
  EXPECT_EQ(seen.size(), 30u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 30u);
  EXPECT_EQ(sum, whole.stats.checksum);
}

// 30 samples over 4 ranks: padded (the default, as DistributedSampler),
// every rank runs the same 8 samples and batches, and together they cover
// the dataset once plus 2 repeats, reported by the ranks that take them;
// dropped, 7 each and 2 left out; uneven, 8, 8, 7, 7 and each sample once.
TEST_F(LoaderTest, RanksRunTheSameNumberOfBatchesUnlessUnevenIsAsked) {
  for (const RankSplit split : {RankSplit::kPad, RankSplit::kDrop, RankSplit::kUneven}) {
    std::multiset<int64_t> seen;
    std::vector<size_t> batches;
    int64_t padded = 0;
    for (int rank = 0; rank < 4; ++rank) {
      LoaderOptions o = Options();
      o.batch_size = 3;
      o.epochs = 2;
      o.rank = rank;
      o.world_size = 4;
      o.rank_split = split;
      const Result r = Drain(o);
      ASSERT_TRUE(r.status.ok()) << r.status;
      batches.push_back(r.batch_sizes.size());
      // Each epoch: no index twice within a rank.
      const std::vector<int64_t> first(r.indices.begin(), r.indices.begin() + r.indices.size() / 2);
      EXPECT_EQ(std::set<int64_t>(first.begin(), first.end()).size(), first.size());
      seen.insert(first.begin(), first.end());
      padded += r.stats.padded_samples_per_epoch;
      if (split == RankSplit::kDrop) {
        EXPECT_EQ(r.stats.dropped_samples_per_epoch, 2);
      }
    }
    const std::set<int64_t> distinct(seen.begin(), seen.end());
    if (split == RankSplit::kPad) {
      EXPECT_EQ(batches, (std::vector<size_t>(4, 2 * 3)));  // 8 samples: 3 batches an epoch
      EXPECT_EQ(seen.size(), 32u);
      EXPECT_EQ(distinct.size(), 30u);
      EXPECT_EQ(padded, 2);
    } else if (split == RankSplit::kDrop) {
      EXPECT_EQ(batches, (std::vector<size_t>(4, 2 * 3)));  // 7 samples: 3 batches
      EXPECT_EQ(seen.size(), 28u);
      EXPECT_EQ(distinct.size(), 28u);
      EXPECT_EQ(padded, 0);
    } else {
      EXPECT_EQ(seen.size(), 30u);
      EXPECT_EQ(distinct.size(), 30u);
    }
  }
  EXPECT_THAT(ParseRankSplit("even").status().message(),
              HasSubstr("'even' is not pad, drop or uneven"));
}

TEST_F(LoaderTest, ResumingDeliversExactlyTheRest) {
  LoaderOptions o = Options();
  o.epochs = 2;
  const Result whole = Drain(o);  // 2 epochs of batches 8, 8, 8, 6
  ASSERT_EQ(whole.indices.size(), 60u);
  // Stopped after 2 batches of epoch 0: the rest, in the same order.
  o.skip_batches = 2;
  const Result rest = Drain(o);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.indices, std::vector<int64_t>(whole.indices.begin() + 16, whole.indices.end()));
  EXPECT_EQ(rest.batch_sizes, (std::vector<size_t>{8, 6, 8, 8, 8, 6}));
  // From epoch 1 only: its samples, with its augmentation (same checksum part).
  o.skip_batches = 0;
  o.first_epoch = 1;
  o.epochs = 1;
  const Result second = Drain(o);
  EXPECT_EQ(second.indices, std::vector<int64_t>(whole.indices.begin() + 30, whole.indices.end()));
  LoaderOptions first = Options();
  EXPECT_EQ(Drain(first).stats.checksum + second.stats.checksum, whole.stats.checksum);
  // Past the end of an epoch: nothing left of it.
  o.skip_batches = 9;
  EXPECT_TRUE(Drain(o).indices.empty());
  o.skip_batches = -1;
  EXPECT_THAT(Loader::Create(o).status().message(), HasSubstr("--start-batch"));
}

// One --cache-dir shared by two pipelines and two datasets that look alike
// to the index (same names, labels and sizes, other pixels): every run gives
// the checksum it gives without a cache. A cache key without the pipeline's
// prefix, or without the dataset's location, served one run's values to
// another and no test saw it.
TEST_F(LoaderTest, OneCacheFolderServesEachPipelineAndDatasetItsOwnValues) {
  TempDir dir;
  for (const char* name : {"a", "b"}) {
    for (int i = 0; i < 6; ++i) {
      const auto level = static_cast<uint8_t>(std::string(name) == "a" ? 40 + 20 * i : 230 - i);
      const std::string header = "P6\n300 260\n255\n";
      std::vector<uint8_t> ppm(header.begin(), header.end());
      ppm.resize(ppm.size() + 300 * 260 * 3, level);
      testing::WriteFile(dir.Join(absl::StrCat(name, "/c", i % 2, "/", i, ".ppm")), ppm);
    }
  }
  auto options = [&](const char* data, int shorter_side, bool cached) {
    LoaderOptions o = Options("imagenet-eval");
    o.dataset.set_path(dir.Join(data));
    o.pipeline.mutable_stages(1)->mutable_resize()->set_shorter_side(shorter_side);
    if (cached) o.cache.dir = dir.Join("cache");
    o.cache_at = 2;
    return o;
  };
  struct Run {
    const char* data;
    int side;
    int64_t hits;
  };
  for (const Run& run : {Run{"a", 256, 0}, Run{"a", 240, 0}, Run{"b", 256, 0}, Run{"a", 256, 6}}) {
    const Result cached = Drain(options(run.data, run.side, true));
    const Result fresh = Drain(options(run.data, run.side, false));
    ASSERT_TRUE(cached.status.ok()) << cached.status;
    EXPECT_EQ(cached.stats.checksum, fresh.stats.checksum) << run.data << " at " << run.side;
    EXPECT_EQ(cached.stats.cache_hits, run.hits) << run.data << " at " << run.side;
  }
}

TEST_F(LoaderTest, DropLast) {
  LoaderOptions o = Options();
  o.drop_last = true;
  const Result r = Drain(o);
  EXPECT_EQ(r.batch_sizes, (std::vector<size_t>{8, 8, 8}));
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticFolderOptions o;
    o.classes = 2;
    o.images_per_class = 6;
    o.max_side = 300;
    ASSERT_TRUE(WriteSyntheticImageFolder(dir_.Join("data"), o).ok());
    std::vector<uint8_t> truncated = testing::Jpeg(300, 200, 1);
    truncated.resize(truncated.size() / 2);
    testing::WriteFile(dir_.Join("data/class001/zz-truncated.jpg"), truncated);
    testing::WriteFile(dir_.Join("data/class000/zz-text.jpg"), {'h', 'e', 'l', 'l', 'o'});
    testing::WriteFile(dir_.Join("data/class000/zz-empty.jpg"), {});
    // Odd but valid: a PNG under a .jpg name decodes by content.
    testing::WriteFile(dir_.Join("data/class000/aa-png.jpg"),
                       testing::SolidPng(40, 30, 4, 8, 1, 2, 3));
    // Too large to read at all (the limit is set below).
    testing::WriteFile(dir_.Join("data/class001/zz-huge.jpg"), std::vector<uint8_t>(300'000, 0xFF));
  }
  LoaderOptions Options(OnError on_error) {
    LoaderOptions o;
    o.dataset.set_path(dir_.Join("data"));
    o.pipeline = *LoadPipelineSpec("imagenet-train");
    o.batch_size = 4;
    o.threads = 2;
    o.on_error = on_error;
    o.shuffle = false;
    o.dataset.set_max_file_bytes(200'000);
    return o;
  }
  TempDir dir_;
};

TEST_F(BadInputTest, SkipReportsEachBadFileAndGoesOn) {
  auto loader = Loader::Create(Options(OnError::kSkip));
  ASSERT_TRUE(loader.ok()) << loader.status();
  int64_t delivered = 0;
  while (true) {
    auto b = (*loader)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (*b == nullptr) break;
    delivered += (*b)->size();
  }
  const LoaderStats st = (*loader)->Stats();
  EXPECT_EQ(delivered, 13);
  EXPECT_EQ(st.images, 13);
  EXPECT_EQ(st.errors, 4);
  ASSERT_EQ(st.first_errors.size(), 4u);
  std::string all;
  for (const SampleError& e : st.first_errors) all += e.path + ": " + e.status.ToString() + "\n";
  EXPECT_THAT(all, HasSubstr("zz-truncated.jpg: DATA_LOSS: stage 0 (decode): truncated JPEG"));
  EXPECT_THAT(all, HasSubstr("zz-text.jpg: DATA_LOSS: stage 0 (decode): not a supported image"));
  EXPECT_THAT(all, HasSubstr("zz-empty.jpg: DATA_LOSS: stage 0 (decode): empty file"));
  EXPECT_THAT(all, HasSubstr("zz-huge.jpg: RESOURCE_EXHAUSTED: "));
  EXPECT_THAT(
      all, HasSubstr("zz-huge.jpg is 300000 bytes, over the limit of 200000 (--max-file-bytes)"));
}

// Failed samples leave no short batches behind them: each batch is filled
// from the front of the next, so every batch but the last is full, the epoch
// has its planned five, every good sample comes once in the epoch's order,
// and the batches are the same at any thread count or prefetch depth. A run
// resumed after any batch (at its end_position) delivers exactly the rest.
TEST_F(BadInputTest, FailedSamplesAreReplacedFromTheNextBatch) {
  const LoaderOptions o = Options(OnError::kSkip);
  const testing::Drained whole = testing::Drain(o);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  // 17 files in batches of 4, in order (no shuffle): 9 of class000 (the
  // last two bad), 8 of class001 (the last two bad). Batch 1 loses position
  // 7 and takes 9 (8 is bad); batch 2 takes 12 and 13 from batch 3, which
  // keeps 14 and finds nothing good after it; the last batch held only a
  // bad file (a batch with nothing in it is not handed out by Python).
  EXPECT_EQ(whole.batch_sizes, (std::vector<size_t>{4, 4, 4, 1, 0}));
  EXPECT_EQ(whole.end_positions, (std::vector<int64_t>{4, 10, 14, 16, 17}));
  EXPECT_EQ(whole.stats.images, 13);
  EXPECT_EQ(whole.stats.filled_samples, 3);  // 9, 12 and 13
  EXPECT_TRUE(std::is_sorted(whole.indices.begin(), whole.indices.end()));
  EXPECT_EQ(std::set<int64_t>(whole.indices.begin(), whole.indices.end()).size(), 13u);
  for (int threads : {1, 3}) {
    LoaderOptions other = o;
    other.threads = threads;
    other.prefetch_batches = threads == 1 ? 1 : 4;
    const testing::Drained again = testing::Drain(other);
    EXPECT_EQ(again.indices, whole.indices) << threads << " threads";
    EXPECT_EQ(again.batch_sizes, whole.batch_sizes) << threads << " threads";
    EXPECT_EQ(again.stats.checksum, whole.stats.checksum);
  }
  size_t seen = 0;
  for (size_t b = 0; b + 1 < whole.batch_sizes.size(); ++b) {
    seen += whole.batch_sizes[b];
    LoaderOptions resumed = o;
    resumed.skip_batches = static_cast<int64_t>(b + 1);
    resumed.skip_samples = whole.end_positions[b];
    const testing::Drained rest = testing::Drain(resumed);
    ASSERT_TRUE(rest.status.ok()) << rest.status;
    EXPECT_EQ(rest.indices, std::vector<int64_t>(whole.indices.begin() + seen, whole.indices.end()))
        << "resumed after batch " << b;
  }
  // Resumed at the planned start instead (a state without `sample`): the
  // samples that filled the room come again.
  size_t b = 0;
  while (whole.end_positions[b] == 4 * static_cast<int64_t>(b + 1)) ++b;
  ASSERT_LT(b + 1, whole.batch_sizes.size());
  LoaderOptions planned = o;
  planned.skip_batches = static_cast<int64_t>(b + 1);
  const testing::Drained again = testing::Drain(planned);
  EXPECT_GT(again.stats.images, whole.stats.images - 4 * static_cast<int64_t>(b + 1));
}

TEST_F(BadInputTest, FailStopsWithThePathAndStaysFailed) {
  auto loader = Loader::Create(Options(OnError::kFail));
  ASSERT_TRUE(loader.ok());
  absl::Status failure;
  while (true) {
    auto b = (*loader)->Next();
    if (!b.ok()) {
      failure = b.status();
      break;
    }
    ASSERT_NE(*b, nullptr) << "the run ended without reporting the bad files";
  }
  EXPECT_EQ(failure.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(failure.message(), HasSubstr("zz-"));
  EXPECT_EQ((*loader)->Next().status(), failure);
}

// A job over `images` generated images in dir/d, batches of 2.
LoaderOptions TinyJob(const TempDir& dir, int images, const std::string& pipeline) {
  SyntheticFolderOptions so;
  so.classes = 1;
  so.images_per_class = images;
  EXPECT_TRUE(WriteSyntheticImageFolder(dir.Join("d"), so).ok());
  LoaderOptions o;
  o.dataset.set_path(dir.Join("d"));
  o.pipeline = *LoadPipelineSpec(pipeline);
  o.batch_size = 2;
  return o;
}

TEST(LoaderOptions, InvalidOptionsNameTheFlag) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 1, "imagenet-train");
  o.batch_size = 0;
  EXPECT_THAT(Loader::Create(o).status().message(), HasSubstr("--batch"));
  o.batch_size = 2;
  o.rank = 2;
  o.world_size = 2;
  EXPECT_THAT(Loader::Create(o).status().message(), HasSubstr("--rank"));
  o.rank = 0;
  o.pipeline.mutable_stages()->DeleteSubrange(1, 3);  // decode only: no fixed shape
  const absl::Status s = Loader::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no fixed shape"));
}

TEST(Loader, OffloadComesFromTheEnvironmentWhenUnset) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 4, "imagenet-eval");
  setenv("PREPFLOW_OFFLOAD", "auto", 1);
  auto loader = Loader::Create(o);  // auto without workers: runs here
  ASSERT_TRUE(loader.ok()) << loader.status();
  const testing::Drained d = testing::Drain(**loader);
  EXPECT_EQ(d.stats.offload, "auto");
  EXPECT_EQ(d.stats.images, 4);
  EXPECT_EQ(d.stats.remote_images, 0);
  setenv("PREPFLOW_OFFLOAD", "sideways", 1);
  EXPECT_THAT(Loader::Create(o).status().message(), HasSubstr("PREPFLOW_OFFLOAD"));
  o.offload = OffloadMode();  // set by the program: the environment is ignored
  EXPECT_TRUE(Loader::Create(o).ok());
  unsetenv("PREPFLOW_OFFLOAD");
}

TEST(Loader, SchedulerComesFromTheEnvironmentWhenNoWorkersAreGiven) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 4, "imagenet-eval");
  o.offload = *ParseOffload("remote");
  EXPECT_THAT(Loader::Create(o).status().message(), HasSubstr("needs workers"));
  // Nothing listens on port 1: the job fails, naming where it looked; with
  // --fallback-local it runs here and says so in its stats.
  setenv("PREPFLOW_SCHEDULER", "127.0.0.1:1", 1);
  EXPECT_THAT(Loader::Create(o).status().message(),
              HasSubstr("--offload remote: the scheduler 127.0.0.1:1 gave no grant"));
  o.fallback_local = true;
  auto loader = Loader::Create(o);
  unsetenv("PREPFLOW_SCHEDULER");
  ASSERT_TRUE(loader.ok()) << loader.status();
  const testing::Drained d = testing::Drain(**loader);
  EXPECT_EQ(d.stats.scheduler, "127.0.0.1:1");
  EXPECT_FALSE(d.stats.scheduler_reachable);
  EXPECT_EQ(d.stats.local_images, 4);
}

TEST(Loader, WorkersComeFromTheEnvironmentWhenOffloadingIsOn) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 4, "imagenet-eval");
  setenv("PREPFLOW_WORKERS", "w1:7000, w2:7000", 1);
  o.offload = *ParseOffload("auto");
  auto resolved = ResolveOptions(o);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->workers, (std::vector<std::string>{"w1:7000", "w2:7000"}));
  // Workers given to the job win; a job that does not offload takes none.
  o.workers = {"w3:7000"};
  EXPECT_EQ(ResolveOptions(o)->workers, (std::vector<std::string>{"w3:7000"}));
  o.workers.clear();
  o.offload = *ParseOffload("off");
  EXPECT_TRUE(ResolveOptions(o)->workers.empty());
  // A bad entry names the variable.
  setenv("PREPFLOW_WORKERS", "w1", 1);
  o.offload = *ParseOffload("remote");
  EXPECT_THAT(ResolveOptions(o).status().message(), HasSubstr("PREPFLOW_WORKERS: "));
  unsetenv("PREPFLOW_WORKERS");
}

// Under torchrun a job that names no rank takes RANK and WORLD_SIZE, and
// LOCAL_WORLD_SIZE ranks share the machine's CPUs: threads and the planner's
// cores are each rank's share.
TEST(Loader, RanksComeFromTheLaunchersEnvironment) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 4, "imagenet-eval");
  setenv("WORLD_SIZE", "3", 1);
  setenv("RANK", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  auto resolved = ResolveOptions(o);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->rank, 2);
  EXPECT_EQ(resolved->world_size, 3);
  EXPECT_EQ(resolved->local_ranks, 2);
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->threads(), std::max(1, AvailableCpus() / 2));
  EXPECT_EQ((*loader)->samples_per_epoch(), 2);  // 4 samples padded to 6 over 3 ranks
  // A job that names its ranks keeps them; --local-ranks wins over the
  // variable.
  o.rank = 0;
  o.world_size = 2;
  o.local_ranks = 1;
  EXPECT_EQ(ResolveOptions(o)->world_size, 2);
  EXPECT_EQ(ResolveOptions(o)->local_ranks, 1);
  // Bad values name the variable.
  o.world_size = 1;
  setenv("RANK", "3", 1);
  EXPECT_THAT(ResolveOptions(o).status().message(),
              HasSubstr("RANK/WORLD_SIZE: need 0 <= RANK < WORLD_SIZE, got 3/3"));
  setenv("WORLD_SIZE", "many", 1);
  EXPECT_THAT(ResolveOptions(o).status().message(), HasSubstr("WORLD_SIZE: 'many' is not"));
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(ResolveOptions(o)->local_ranks, 1);
}

// The job's name: --job, else PREPFLOW_JOB, else torchrun's run id with its
// master (a loopback master with this host's name), else none (the Loader
// makes up its own). Every rank of one torchrun job gets the same name.
TEST(Loader, TheJobIsNamedByTheFlagTheVariableOrTorchrun) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 4, "imagenet-eval");
  unsetenv("PREPFLOW_JOB");
  unsetenv("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(ResolveOptions(o)->job, "");
  setenv("TORCHELASTIC_RUN_ID", "4a76-e2", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
  EXPECT_EQ(ResolveOptions(o)->job, "torchrun-4a76-e2@10.1.2.3:29500");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(ResolveOptions(o)->job, absl::StrCat("torchrun-4a76-e2@", host, "/127.0.0.1:29500"));
  setenv("PREPFLOW_JOB", "resnet-sweep-3", 1);
  EXPECT_EQ(ResolveOptions(o)->job, "resnet-sweep-3");
  o.job = "mine";
  EXPECT_EQ(ResolveOptions(o)->job, "mine");
  auto loader = Loader::Create(o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->job_id(), "mine");
  // Names travel in labels and logs: bad ones are refused, naming the source.
  o.job = "two words";
  EXPECT_THAT(ResolveOptions(o).status().message(),
              HasSubstr("--job: 'two words' is not a job name"));
  o.job = "";
  setenv("PREPFLOW_JOB", std::string(200, 'x').c_str(), 1);
  EXPECT_THAT(ResolveOptions(o).status().message(), HasSubstr("PREPFLOW_JOB: 'xxx"));
  unsetenv("PREPFLOW_JOB");
  unsetenv("TORCHELASTIC_RUN_ID");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  // Without a name, each Loader is a job of its own.
  auto a = Loader::Create(o), b = Loader::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->job_id(), (*b)->job_id());
}

std::atomic<int> allocations{0}, frees{0};
void* CountingAllocate(size_t bytes) {
  ++allocations;
  return std::aligned_alloc(64, (bytes + 63) & ~size_t{63});
}
void CountingFree(void* p) {
  ++frees;
  std::free(p);
}

TEST(Loader, BatchMemoryComesFromTheGivenAllocator) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 4, "imagenet-eval");
  o.batch_allocator = {CountingAllocate, CountingFree};
  BatchPtr kept;
  {
    auto loader = Loader::Create(o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    EXPECT_GT(allocations.load(), 0);  // the batches made up front
    auto batch = (*loader)->Next();
    ASSERT_TRUE(batch.ok() && *batch != nullptr);
    kept = *batch;
  }
  EXPECT_LT(frees.load(), allocations.load());  // the kept batch is still alive
  kept.reset();
  EXPECT_EQ(frees.load(), allocations.load());
}

// Allocations after Create when the trainer keeps `held` batches while it
// asks for the next one, through a whole epoch.
int AllocationsWhileHolding(LoaderOptions o, int held) {
  o.batch_allocator = {CountingAllocate, CountingFree};
  auto loader = Loader::Create(o);
  EXPECT_TRUE(loader.ok()) << loader.status();
  if (!loader.ok()) return -1;
  const int before = allocations.load();
  std::deque<BatchPtr> kept;
  for (;;) {
    auto batch = (*loader)->Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || *batch == nullptr) break;
    kept.push_back(*std::move(batch));
    if (static_cast<int>(kept.size()) > held) kept.pop_front();
  }
  return allocations.load() - before;
}

// A GPU normalizer keeps batches whose copies are running; with
// held_batches they are made up front, so page-locked memory (whose
// allocation synchronises the device) is never allocated mid-training.
TEST(Loader, HeldBatchesAreMadeUpFront) {
  TempDir dir;
  LoaderOptions o = TinyJob(dir, 20, "imagenet-eval");
  o.threads = 1;
  o.prefetch_batches = 1;
  EXPECT_GT(AllocationsWhileHolding(o, 3), 0);  // the trainer keeps more than the loader made
  o.held_batches = 3;
  EXPECT_EQ(AllocationsWhileHolding(o, 3), 0);
}

TEST(Loader, BatchesOutliveTheLoader) {
  TempDir dir;
  const LoaderOptions o = TinyJob(dir, 3, "imagenet-eval");
  BatchPtr kept;
  {
    auto loader = Loader::Create(o);
    ASSERT_TRUE(loader.ok());
    kept = *(*loader)->Next();
  }
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->size(), 2);
  EXPECT_EQ(kept->shape(), (Shape{2, 3, 224, 224}));
}

}  // namespace
}  // namespace prepflow
