// WorkerCore without a network: job validation, the data-root jail, items.
#include "server/worker_core.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/synthetic.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

class WorkerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.Join("root");
    SyntheticFolderOptions o;
    o.classes = 2;
    o.images_per_class = 4;
    o.max_side = 300;
    ASSERT_TRUE(WriteSyntheticImageFolder(root_ + "/data", o).ok());
    ASSERT_TRUE(WriteSyntheticImageFolder(dir_.Join("outside"), o).ok());
    WorkerOptions options;
    options.data_root = root_;
    options.threads = 2;
    options.max_streams = 2;
    core_ = std::make_unique<WorkerCore>(options, nullptr);
  }

  proto::JobOpen Open(const std::string& path, const std::string& pipeline = "imagenet-train") {
    proto::JobOpen open;
    open.set_job_id(absl::StrCat("test-", ++jobs_));  // each its own job
    open.mutable_dataset()->set_path(path);
    *open.mutable_pipeline() = *LoadPipelineSpec(pipeline);
    open.set_seed(5);
    proto::DatasetSpec spec;
    spec.set_path(path);
    auto ds = OpenDataset(spec);
    if (ds.ok()) {
      open.set_dataset_size((*ds)->size());
      open.set_dataset_fingerprint((*ds)->fingerprint());
    }
    return open;
  }

  // One thread below the data root, with a 64 MiB sample cache in RAM.
  WorkerOptions CachingOptions() const {
    WorkerOptions options;
    options.data_root = root_;
    options.threads = 1;
    SampleCacheOptions co;
    co.ram_bytes = 64 << 20;
    options.cache = *SampleCache::Open(co);
    return options;
  }

  // Each sample's payload bytes, in order.
  static std::vector<std::string> Payloads(const ItemOutput& out) {
    std::vector<std::string> v;
    for (const Payload& p : out.payloads) {
      v.emplace_back(reinterpret_cast<const char*>(p.data.get()), p.size);
    }
    return v;
  }

  // Runs an item on `core` (default: the fixture's) and waits for it.
  ItemOutput RunItem(const std::shared_ptr<WorkerJob>& job, std::vector<int64_t> indices, int cut,
                     WorkerCore* core = nullptr, bool away = false) {
    proto::WorkItem item;
    item.set_item_id(1);
    item.set_cut(cut);
    item.set_away(away);
    for (int64_t i : indices) item.add_indices(i);
    absl::Notification done;
    ItemOutput out;
    EXPECT_TRUE((core != nullptr ? core : core_.get())
                    ->Submit(job, item,
                             [&](ItemOutput r) {
                               out = std::move(r);
                               done.Notify();
                             })
                    .ok());
    done.WaitForNotification();
    return out;
  }

  TempDir dir_;
  std::string root_;
  std::unique_ptr<WorkerCore> core_;
  int jobs_ = 0;
};

TEST_F(WorkerCoreTest, RunsItemsToTheFullPipelineLikeLocal) {
  proto::JobOpened opened;
  auto job = core_->OpenJob(Open(root_ + "/data"), "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(opened.num_stages(), 4);
  EXPECT_EQ(opened.threads(), 2);
  EXPECT_GT(opened.max_items_in_flight(), 0);
  const ItemOutput output = RunItem(*job, {0, 3, 7}, 4);
  const proto::ItemResult& r = output.result;
  ASSERT_EQ(r.samples_size(), 3);
  ASSERT_EQ(output.payloads.size(), 3u);
  // The same sample run locally gives the same bytes.
  PipelineOptions local;
  local.seed = 5;
  auto p = Pipeline::Create(*LoadPipelineSpec("imagenet-train"), local);
  ASSERT_TRUE(p.ok());
  proto::DatasetSpec spec;
  spec.set_path(root_ + "/data");
  auto ds = OpenDataset(spec);
  ASSERT_TRUE(ds.ok());
  for (int i = 0; i < 3; ++i) {
    const proto::SampleResult& s = r.samples(i);
    EXPECT_EQ(s.code(), 0) << s.error();
    EXPECT_EQ(s.stages_size(), 4);
    EXPECT_GT(s.stages(0).cpu_seconds(), 0);
    EXPECT_EQ(s.label(), (*ds)->label(s.index()));
    auto local =
        testing::RunPipeline(**p, testing::ReadFile((*ds)->SamplePath(s.index())), s.index());
    ASSERT_TRUE(local.status.ok());
    EXPECT_TRUE(s.value().data().empty());  // the payload travels separately
    const Payload& payload = output.payloads[i];
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(payload.data.get()), payload.size),
              std::string(local.bytes.begin(), local.bytes.end()));
  }
  core_->CloseJob(*job, "client-a");
}

TEST_F(WorkerCoreTest, TransportCostIsTheCpuOutsideWhatSamplesReport) {
  // No item runs here, so all the CPU this process spends is outside the
  // samples' reported costs. The first call opens a window; one of 16 MB and
  // 0.25 s closes it with at least the 20 ms burnt in between.
  EXPECT_EQ(core_->CountSent(1), 0);
  const int64_t start = ThreadCpuNanos();
  volatile uint64_t spin = 0;
  while (ThreadCpuNanos() - start < 20'000'000) spin = spin + 1;
  absl::SleepFor(absl::Milliseconds(250));
  const double per_byte = core_->CountSent(16 << 20);
  EXPECT_GE(per_byte, 20e-3 / (16 << 20));
  EXPECT_LE(per_byte, 1e-6);  // a plausible figure (policy::PlausibleCpuPerByte)
  // Less than a window's bytes later, the estimate stands.
  EXPECT_EQ(core_->CountSent(1000), per_byte);
}

TEST_F(WorkerCoreTest, RefusesPathsOutsideTheDataRoot) {
  proto::JobOpened opened;
  {
    // The data root itself may be the dataset.
    WorkerOptions options;
    options.data_root = root_ + "/data";
    WorkerCore at_root(options, nullptr);
    auto job = at_root.OpenJob(Open(root_ + "/data"), "client-a", &opened);
    ASSERT_TRUE(job.ok()) << job.status();
    at_root.CloseJob(*job, "client-a");
  }
  for (const std::string& path :
       {dir_.Join("outside"), root_ + "/../outside", std::string("data"), std::string("/")}) {
    auto job = core_->OpenJob(Open(path), "client-a", &opened);
    EXPECT_EQ(job.status().code(), absl::StatusCode::kPermissionDenied) << path;
    EXPECT_THAT(job.status().message(), HasSubstr("data root")) << path;
  }
  // A symlinked folder inside the root that points outside it.
  std::filesystem::create_directory_symlink(dir_.Join("outside"), root_ + "/link");
  auto linked = core_->OpenJob(Open(root_ + "/link"), "client-a", &opened);
  EXPECT_EQ(linked.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(WorkerCoreTest, ASymlinkedFileThatEscapesIsAPerSampleRefusal) {
  std::filesystem::create_symlink(dir_.Join("outside/class000/img000000.jpg"),
                                  root_ + "/data/class000/escape.jpg");
  proto::JobOpened opened;
  auto job = core_->OpenJob(Open(root_ + "/data"), "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();
  proto::DatasetSpec spec;
  spec.set_path(root_ + "/data");
  auto ds = OpenDataset(spec);
  int64_t escape = -1;
  for (int64_t i = 0; i < (*ds)->size(); ++i) {
    if ((*ds)->SamplePath(i).find("escape.jpg") != std::string::npos) escape = i;
  }
  ASSERT_GE(escape, 0);
  const int64_t other = escape == 0 ? 1 : 0;
  const ItemOutput output = RunItem(*job, {escape, other}, 1);
  const proto::ItemResult& r = output.result;
  EXPECT_EQ(r.samples(0).code(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(r.samples(0).error(), HasSubstr("escape.jpg"));
  EXPECT_THAT(r.samples(0).error(), HasSubstr("outside the data root"));
  EXPECT_EQ(r.samples(1).code(), 0) << r.samples(1).error();
  core_->CloseJob(*job, "client-a");
}

// No plugin is loaded in this process: a job whose stage 2 is a plugin's op
// opens with the stages before it, says why, and refuses items cut past it
// with FAILED_PRECONDITION naming the op.
TEST_F(WorkerCoreTest, AJobWithAnOpNotLoadedHereRunsUpToItAndRefusesPast) {
  proto::JobOpen open = Open(root_ + "/data");
  *open.mutable_pipeline() = *LoadPipelineSpec(
      "stages { decode {} } stages { center_crop { size: 16 } } "
      "stages { custom { name: \"cutout\" } } stages { normalize {} }");
  proto::JobOpened opened;
  auto job = core_->OpenJob(open, "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(opened.num_stages(), 2);
  EXPECT_THAT(opened.unavailable(), HasSubstr("stage 2: custom op 'cutout' is not loaded here"));
  proto::WorkItem item;
  item.set_item_id(7);
  item.set_cut(3);
  item.add_indices(0);
  const absl::Status past = core_->Submit(*job, item, [](ItemOutput) {});
  EXPECT_EQ(past.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(past.message(), HasSubstr("custom op 'cutout'"));
  const ItemOutput output = RunItem(*job, {0, 1}, 2);
  ASSERT_EQ(output.result.samples_size(), 2);
  EXPECT_EQ(output.result.samples(0).code(), 0) << output.result.samples(0).error();
  core_->CloseJob(*job, "client-a");
}

TEST_F(WorkerCoreTest, MalformedJobsAreRefusedWithTheField) {
  proto::JobOpened opened;
  proto::JobOpen bad_pipeline = Open(root_ + "/data");
  bad_pipeline.mutable_pipeline()->mutable_stages(1)->mutable_random_resized_crop()->set_scale_min(
      2);
  auto a = core_->OpenJob(bad_pipeline, "client-a", &opened);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("stage 1 (random_resized_crop): scale_min"));

  proto::JobOpen wrong_index = Open(root_ + "/data");
  wrong_index.set_dataset_fingerprint(wrong_index.dataset_fingerprint() + 1);
  auto b = core_->OpenJob(wrong_index, "client-a", &opened);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(b.status().message(), HasSubstr("differs"));

  proto::JobOpen many_scans = Open(root_ + "/data");
  many_scans.set_max_jpeg_scans(kDefaultMaxJpegScans + 1);
  EXPECT_THAT(core_->OpenJob(many_scans, "client-a", &opened).status().message(),
              HasSubstr("max_jpeg_scans 101 is outside [0, 100] (this worker's --max-jpeg-scans)"));
  many_scans.set_max_jpeg_scans(-1);
  EXPECT_EQ(core_->OpenJob(many_scans, "client-a", &opened).status().code(),
            absl::StatusCode::kInvalidArgument);

  // The audio limits: no more than the worker's, NaN refused.
  proto::JobOpen long_audio = Open(root_ + "/data");
  long_audio.set_max_audio_seconds(601);
  EXPECT_THAT(core_->OpenJob(long_audio, "client-a", &opened).status().message(),
              HasSubstr("max_audio_seconds 601 is outside [0, 600] (this worker's "
                        "--max-audio-seconds)"));
  long_audio.set_max_audio_seconds(std::nan(""));
  EXPECT_EQ(core_->OpenJob(long_audio, "client-a", &opened).status().code(),
            absl::StatusCode::kInvalidArgument);
  long_audio.set_max_audio_seconds(0);
  long_audio.set_max_audio_channels(3);
  EXPECT_THAT(core_->OpenJob(long_audio, "client-a", &opened).status().message(),
              HasSubstr("max_audio_channels 3 is outside [0, 2]"));

  // The video limits likewise.
  proto::JobOpen long_video = Open(root_ + "/data");
  long_video.set_max_video_seconds(3601);
  EXPECT_THAT(core_->OpenJob(long_video, "client-a", &opened).status().message(),
              HasSubstr("max_video_seconds 3601 is outside [0, 3600] (this worker's "
                        "--max-video-seconds)"));
  long_video.set_max_video_seconds(std::nan(""));
  EXPECT_EQ(core_->OpenJob(long_video, "client-a", &opened).status().code(),
            absl::StatusCode::kInvalidArgument);
  long_video.set_max_video_seconds(0);
  long_video.set_max_video_frames(-1);
  EXPECT_THAT(core_->OpenJob(long_video, "client-a", &opened).status().message(),
              HasSubstr("max_video_frames -1 is outside [0, 1000] (this worker's "
                        "--max-video-frames)"));

  proto::JobOpen too_big = Open(root_ + "/data");
  too_big.set_max_pixels(int64_t{1} << 40);
  EXPECT_THAT(core_->OpenJob(too_big, "client-a", &opened).status().message(),
              HasSubstr("max_pixels"));

  proto::JobOpen missing = Open(root_ + "/nothing-here");
  EXPECT_EQ(core_->OpenJob(missing, "client-a", &opened).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(WorkerCoreTest, StreamLimitAndItemValidation) {
  proto::JobOpened opened;
  auto a = core_->OpenJob(Open(root_ + "/data"), "client-a", &opened);
  auto b = core_->OpenJob(Open(root_ + "/data"), "client-a", &opened);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = core_->OpenJob(Open(root_ + "/data"), "client-a", &opened);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("--max-streams"));
  core_->CloseJob(*b, "client-a");
  EXPECT_TRUE(core_->OpenJob(Open(root_ + "/data"), "client-a", &opened).ok());

  // Per client host: with 1 allowed, a second stream from the same host is
  // refused while one from another host is not (the total is 2 here).
  WorkerOptions per_client;
  per_client.data_root = root_;
  per_client.threads = 1;
  per_client.max_streams_per_client = 1;
  WorkerCore shared(per_client, nullptr);
  auto first = shared.OpenJob(Open(root_ + "/data"), "ipv4:10.0.0.1", &opened);
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = shared.OpenJob(Open(root_ + "/data"), "ipv4:10.0.0.1", &opened);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(again.status().message(), HasSubstr("from ipv4:10.0.0.1"));
  EXPECT_THAT(again.status().message(), HasSubstr("--max-streams-per-client"));
  EXPECT_TRUE(shared.OpenJob(Open(root_ + "/data"), "ipv4:10.0.0.2", &opened).ok());
  shared.CloseJob(*first, "ipv4:10.0.0.1");
  EXPECT_TRUE(shared.OpenJob(Open(root_ + "/data"), "ipv4:10.0.0.1", &opened).ok());

  auto submit = [&](int cut, std::vector<int64_t> indices) {
    proto::WorkItem item;
    item.set_cut(cut);
    for (int64_t i : indices) item.add_indices(i);
    return core_->Submit(*a, item, [](ItemOutput) {});
  };
  EXPECT_THAT(submit(5, {0}).message(), HasSubstr("cut 5 is outside [0, 4]"));
  EXPECT_THAT(submit(1, {8}).message(), HasSubstr("index 8 is outside the dataset [0, 8)"));
  EXPECT_THAT(submit(1, {}).message(), HasSubstr("has 0 samples"));
  // Echoed copies: one per sample, each below 65536.
  proto::WorkItem copies;
  copies.set_cut(1);
  copies.add_indices(0);
  copies.add_indices(1);
  copies.add_copies(0);
  EXPECT_THAT(core_->Submit(*a, copies, [](ItemOutput) {}).message(),
              HasSubstr("has 1 copies for 2 samples"));
  copies.add_copies(70000);
  EXPECT_THAT(core_->Submit(*a, copies, [](ItemOutput) {}).message(),
              HasSubstr("copy 70000 is not below 65536"));
  // An item's echo factor (--echo auto) is at most the job's cap (here a
  // job without echoing: 1).
  proto::WorkItem echoed;
  echoed.set_cut(1);
  echoed.add_indices(0);
  echoed.set_echo(4);
  EXPECT_THAT(core_->Submit(*a, echoed, [](ItemOutput) {}).message(),
              HasSubstr("echo 4 is over the job's 1"));
  // And a job's echo fields.
  proto::JobOpen echo = Open(root_ + "/data");
  echo.set_echo(1 << 20);
  EXPECT_THAT(shared.OpenJob(echo, "ipv4:10.0.0.3", &opened).status().message(),
              HasSubstr("echo 1048576 is outside [0, 65536)"));
  echo.set_echo(2);
  echo.set_echo_at(-4);
  EXPECT_THAT(shared.OpenJob(echo, "ipv4:10.0.0.3", &opened).status().message(),
              HasSubstr("echo_at -4 is not a stage boundary"));
}

// Files added to a dataset while job A runs: a new job brings the new
// fingerprint and is served (it once failed FAILED_PRECONDITION until A
// ended), and A keeps reading the index it opened.
TEST_F(WorkerCoreTest, AJobOnAChangedDatasetIsServedWhileAnOlderOneRuns) {
  WorkerOptions options;
  options.data_root = root_;
  options.threads = 1;
  options.min_reindex_seconds = 0;
  WorkerCore core(options, nullptr);
  proto::JobOpened opened;
  auto a = core.OpenJob(Open(root_ + "/data"), "client-a", &opened);
  ASSERT_TRUE(a.ok()) << a.status();
  testing::WriteFile(root_ + "/data/class000/added.jpg", testing::Jpeg(64, 48));
  auto b = core.OpenJob(Open(root_ + "/data"), "client-b", &opened);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->dataset().size(), (*a)->dataset().size() + 1);
  EXPECT_NE((*b)->dataset().fingerprint(), (*a)->dataset().fingerprint());
  core.CloseJob(*a, "client-a");
  core.CloseJob(*b, "client-b");
}

// An item sent away from its samples' home (stolen from a busy home, or a
// hedged copy) reads this worker's cache but keeps nothing in it: those
// values belong in their home's cache.
TEST_F(WorkerCoreTest, AnItemSentAwayFromItsHomeReadsTheCacheButKeepsNothingInIt) {
  WorkerCore core(CachingOptions(), nullptr);
  proto::JobOpen open = Open(root_ + "/data", "imagenet-eval");
  open.set_cache_at(2);
  proto::JobOpened opened;
  auto job = core.OpenJob(open, "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();
  auto run = [&](bool away) { return RunItem(*job, {1, 2, 5}, 4, &core, away); };
  const ItemOutput away = run(true);
  EXPECT_EQ(away.result.cache().misses(), 3);
  EXPECT_EQ(run(true).result.cache().misses(), 3) << "an away item's values were kept";
  const ItemOutput home = run(false);
  EXPECT_EQ(home.result.cache().misses(), 3);
  EXPECT_EQ(Payloads(home), Payloads(away));
  // What its home kept, an away item is served from.
  const ItemOutput served = run(true);
  EXPECT_EQ(served.result.cache().hits(), 3);
  EXPECT_EQ(Payloads(served), Payloads(away));
  core.CloseJob(*job, "client-a");
}

TEST_F(WorkerCoreTest, ACacheServesLaterItemsAndOnlyAtDeterministicBoundaries) {
  WorkerOptions options = CachingOptions();
  WorkerCore core(options, nullptr);
  // imagenet-eval cached after its resize (boundary 2).
  proto::JobOpen open = Open(root_ + "/data", "imagenet-eval");
  open.set_cache_at(2);
  proto::JobOpened opened;
  auto job = core.OpenJob(open, "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();
  auto run = [&](int cut) { return RunItem(*job, {1, 2, 5}, cut, &core); };
  const ItemOutput first = run(4);
  EXPECT_EQ(first.result.cache().misses(), 3);
  EXPECT_EQ(first.result.cache().hits(), 0);
  const ItemOutput second = run(4);
  EXPECT_EQ(second.result.cache().hits(), 3);
  EXPECT_EQ(Payloads(second), Payloads(first));
  for (const proto::SampleResult& s : second.result.samples()) {
    EXPECT_TRUE(s.cache_hit());
    EXPECT_EQ(s.first_stage(), 2);
    EXPECT_EQ(s.stages_size(), 2);  // center_crop and normalize only
  }
  // An item cut before the boundary does not use the cache.
  const ItemOutput early = run(1);
  EXPECT_FALSE(early.result.has_cache());
  EXPECT_FALSE(early.result.samples(0).cache_hit());
  core.CloseJob(*job, "client-a");

  // A boundary whose values change with the epoch is refused, naming why.
  proto::JobOpen random = Open(root_ + "/data", "imagenet-train");
  random.set_cache_at(1);
  const auto refused = core.OpenJob(random, "client-a", &opened);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("cache_at 1: the values there differ from epoch to epoch: stage 0 "
                        "(decode) decodes the region that stage 1 (random_resized_crop) draws"));
  random.set_cache_at(9);
  EXPECT_THAT(core.OpenJob(random, "client-a", &opened).status().message(),
              HasSubstr("cache_at 9 is not a stage boundary"));

  // A client's word on materialized data is checked too: a boundary before
  // the first (the worker would run stage -1) or a foreign prefix.
  proto::JobOpen materialized = Open(root_ + "/data", "imagenet-eval");
  materialized.mutable_dataset()->mutable_materialized()->set_upto(-1);
  materialized.mutable_dataset()->mutable_materialized()->set_encoding("raw");
  EXPECT_THAT(core.OpenJob(materialized, "client-a", &opened).status().message(),
              HasSubstr("materialized upto -1 is not a stage boundary"));
  materialized.mutable_dataset()->mutable_materialized()->set_upto(2);
  EXPECT_THAT(core.OpenJob(materialized, "client-a", &opened).status().message(),
              HasSubstr("does not begin with exactly those stages"));
}

// A binary PPM of `side` x `side` pixels, all `level`: its size does not
// depend on the pixels, so two folders of these can hold the same names,
// labels and sizes with other pictures.
std::vector<uint8_t> FlatPpm(int side, uint8_t level) {
  const std::string header = absl::StrCat("P6\n", side, " ", side, "\n255\n");
  std::vector<uint8_t> out(header.begin(), header.end());
  out.resize(out.size() + static_cast<size_t>(3 * side * side), level);
  return out;
}

// Round 3 of the hostile review: a job over another folder with the same
// names, labels and sizes filled a caching worker, and the victim's job then
// got the attacker's pixels as cache hits. A cache space names the dataset's
// location, and each entry its file's version, so neither another folder nor
// a file rewritten in place at the same size is ever served.
TEST_F(WorkerCoreTest, ACacheNeverServesAnotherFoldersOrAStaleFilesValues) {
  for (const char* who : {"victim", "attacker"}) {
    for (int i = 0; i < 3; ++i) {
      testing::WriteFile(absl::StrCat(root_, "/", who, "/c0/", i, ".ppm"),
                         FlatPpm(40, std::string(who) == "victim" ? 50 + i : 200));
    }
  }
  WorkerOptions options = CachingOptions();
  WorkerCore core(options, nullptr);
  WorkerCore uncached(
      [&] {
        WorkerOptions plain = options;
        plain.cache = nullptr;
        return plain;
      }(),
      nullptr);
  auto open = [&](WorkerCore& on, const char* who) {
    proto::JobOpen o = Open(absl::StrCat(root_, "/", who), "imagenet-eval");
    o.set_cache_at(2);
    proto::JobOpened opened;
    auto job = on.OpenJob(o, who, &opened);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  };
  auto attacker = open(core, "attacker"), victim = open(core, "victim");
  ASSERT_EQ(attacker->dataset().fingerprint(), victim->dataset().fingerprint())
      << "the folders must look alike to the index for this test to mean anything";
  EXPECT_EQ(RunItem(attacker, {0, 1, 2}, 4, &core).result.cache().misses(), 3);
  const ItemOutput got = RunItem(victim, {0, 1, 2}, 4, &core);
  EXPECT_EQ(got.result.cache().hits(), 0) << "the attacker's values were served";
  EXPECT_EQ(Payloads(got), Payloads(RunItem(open(uncached, "victim"), {0, 1, 2}, 4, &uncached)));
  EXPECT_EQ(RunItem(victim, {0, 1, 2}, 4, &core).result.cache().hits(), 3);

  // The victim's file 1 rewritten in place, same size, other pixels.
  const std::string file = absl::StrCat(root_, "/victim/c0/1.ppm");
  const std::vector<uint8_t> rewritten = FlatPpm(40, 99);
  // The kernel stamps times from a coarse clock: rewritten again until the
  // change time moves, as it does for any write a tick after the last.
  struct stat before, now;
  ASSERT_EQ(stat(file.c_str(), &before), 0);
  do {
    FILE* f = fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fwrite(rewritten.data(), 1, rewritten.size(), f), rewritten.size());
    fclose(f);
    ASSERT_EQ(stat(file.c_str(), &now), 0);
  } while (now.st_ctim.tv_sec == before.st_ctim.tv_sec &&
           now.st_ctim.tv_nsec == before.st_ctim.tv_nsec);
  ASSERT_EQ(now.st_size, before.st_size);
  const ItemOutput after = RunItem(victim, {0, 1, 2}, 4, &core);
  EXPECT_EQ(after.result.cache().hits(), 2);
  EXPECT_EQ(after.result.cache().misses(), 1);
  EXPECT_EQ(Payloads(after), Payloads(RunItem(open(uncached, "victim"), {0, 1, 2}, 4, &uncached)));
  EXPECT_EQ(options.cache->stats().stale, 1);
  core.CloseJob(victim, "victim");
  core.CloseJob(attacker, "attacker");
}

// A job chose its own file limit, and the worker had none: 2^40 read a
// 1.5 GB file into memory. A job may ask for less than the worker's
// --max-file-bytes (its reads then fail past it), never more.
TEST_F(WorkerCoreTest, AJobReadsNoMoreThanTheWorkersFileLimit) {
  WorkerOptions options;
  options.data_root = root_;
  options.threads = 1;
  options.max_file_bytes_limit = 1 << 20;
  WorkerCore core(options, nullptr);
  proto::JobOpened opened;
  proto::JobOpen greedy = Open(root_ + "/data");
  greedy.mutable_dataset()->set_max_file_bytes(int64_t{1} << 40);
  const auto refused = core.OpenJob(greedy, "client-a", &opened);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("dataset.max_file_bytes 1099511627776 is outside [0, 1048576] (this "
                        "worker's --max-file-bytes)"));
  proto::JobOpen modest = Open(root_ + "/data");
  modest.mutable_dataset()->set_max_file_bytes(100);
  auto job = core.OpenJob(modest, "client-a", &opened);
  ASSERT_TRUE(job.ok()) << job.status();
  const ItemOutput out = RunItem(*job, {0, 1}, 4, &core);
  ASSERT_EQ(out.result.samples_size(), 2);
  for (const proto::SampleResult& r : out.result.samples()) {
    EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
    EXPECT_THAT(r.error(), HasSubstr("over the job's --max-file-bytes 100"));
  }
  core.CloseJob(*job, "client-a");
}

// The ranks of one training job (one job_id) share one job here: one
// pipeline and dataset open, one budget of items; a stream naming the job
// with other options is refused, naming the difference.
TEST_F(WorkerCoreTest, RanksOfOneJobShareItAndItsBudget) {
  WorkerOptions options;
  options.data_root = root_;
  options.threads = 1;
  options.max_items_per_stream = 1;  // the job's budget: one item at a time
  // Half of it for results: one imagenet-train sample's.
  options.max_memory_bytes = 2 * (602112 + 1000);
  WorkerCore core(options, nullptr);
  proto::JobOpen open = Open(root_ + "/data");
  open.set_job_id("train-42");
  open.set_world_size(3);
  proto::JobOpened opened;
  auto rank0 = core.OpenJob(open, "host-a", &opened);
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  open.set_rank(2);
  auto rank2 = core.OpenJob(open, "host-b", &opened);
  ASSERT_TRUE(rank2.ok()) << rank2.status();
  EXPECT_EQ(rank0->get(), rank2->get());
  EXPECT_EQ(core.active_jobs(), 1);
  EXPECT_EQ(core.active_streams(), 2);

  // With mutual TLS a job belongs to the certificate that opened it: the
  // same options from another certificate are refused, not joined.
  proto::JobOpen certified = open;
  certified.set_job_id("train-certified");
  auto tenant_a = core.OpenJob(certified, "host-a", &opened, "tenant-a");
  ASSERT_TRUE(tenant_a.ok()) << tenant_a.status();
  const auto tenant_b = core.OpenJob(certified, "host-b", &opened, "tenant-b");
  EXPECT_EQ(tenant_b.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(tenant_b.status().message(),
              HasSubstr("job train-certified is open here for another client certificate"));
  auto again = core.OpenJob(certified, "host-c", &opened, "tenant-a");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->get(), tenant_a->get());
  core.CloseJob(*again, "host-c");
  core.CloseJob(*tenant_a, "host-a");

  // The refusal names the fields that differ, never the open job's values:
  // a client rebuilt a job's options from them, one refusal at a time.
  proto::JobOpen other = open;
  other.set_seed(6);
  other.mutable_dataset()->set_path(root_ + "/elsewhere");
  auto refused = core.OpenJob(other, "host-c", &opened);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("job train-42 is open here with other options"),
                    HasSubstr("(dataset.path, seed differ)"), HasSubstr("--job")));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr(root_)));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("5")));
  open.set_rank(3);
  EXPECT_THAT(core.OpenJob(open, "host-c", &opened).status().message(),
              HasSubstr("rank 3 is outside [0, world_size 3)"));

  // Rank 0's first item runs, and its result is kept: the memory budget is
  // full. Its second is admitted to the job and waits for memory; rank 2's
  // item is then over the job's budget and held, though its own stream has
  // credit.
  auto item = [](uint64_t id, int64_t index) {
    proto::WorkItem w;
    w.set_item_id(id);
    w.set_cut(4);
    w.add_indices(index);
    return w;
  };
  absl::Notification first_done;
  ItemOutput first;
  ASSERT_TRUE(core.Submit(*rank0, item(1, 0),
                          [&](ItemOutput o) {
                            first = std::move(o);
                            first_done.Notify();
                          })
                  .ok());
  first_done.WaitForNotification();
  absl::Notification second_done, third_done;
  ASSERT_TRUE(core.Submit(*rank0, item(2, 1), [&](ItemOutput) { second_done.Notify(); }).ok());
  ASSERT_TRUE(core.Submit(*rank2, item(3, 2), [&](ItemOutput) { third_done.Notify(); }).ok());
  EXPECT_EQ((*rank0)->held_items(), 1);
  first = ItemOutput();  // its reply is "written": the rest run, in turn
  second_done.WaitForNotification();
  third_done.WaitForNotification();
  EXPECT_EQ((*rank0)->held_items(), 0);

  // Ranks opening at once each build the job, and all but one drop theirs
  // for the one that registered first.
  std::vector<std::shared_ptr<WorkerJob>> racers(6);
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < racers.size(); ++i) {
      threads.emplace_back([&, i] {
        proto::JobOpen race = Open(root_ + "/data");
        race.set_job_id("train-43");
        race.set_world_size(6);
        race.set_rank(static_cast<int>(i));
        proto::JobOpened race_opened;
        auto j = core.OpenJob(race, absl::StrCat("racer-", i), &race_opened);
        if (j.ok()) racers[i] = *j;
      });
    }
    for (std::thread& t : threads) t.join();
  }
  for (size_t i = 0; i < racers.size(); ++i) {
    ASSERT_NE(racers[i], nullptr);
    EXPECT_EQ(racers[i], racers[0]);
  }
  EXPECT_EQ(core.active_jobs(), 2);
  for (size_t i = 0; i < racers.size(); ++i) core.CloseJob(racers[i], absl::StrCat("racer-", i));

  core.CloseJob(*rank0, "host-a");
  EXPECT_EQ(core.active_jobs(), 1);  // rank 2 still streams
  core.CloseJob(*rank2, "host-b");
  EXPECT_EQ(core.active_jobs(), 0);
}

}  // namespace
}  // namespace prepflow
