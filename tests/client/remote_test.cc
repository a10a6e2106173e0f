// The Loader with real prepflow-worker processes on loopback: placement never
// changes results, and every sample is delivered exactly once whatever a
// worker does.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/loader.h"
#include "client/metrics.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pipeline/data/pack.h"
#include "pipeline/data/synthetic.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/reuse/materialize.h"
#include "prometheus/text_serializer.h"
#include "proto/worker.grpc.pb.h"
#include "tests/testing/loader_util.h"
#include "tests/testing/remote_fixture.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::prepflow::testing::WorkerProcess;
using ::testing::HasSubstr;

using RunResult = testing::Drained;
using ::prepflow::testing::RemoteTest;

TEST_F(RemoteTest, EveryPlacementGivesTheLocalChecksum) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  const uint64_t local = LocalChecksum();
  for (const std::string mode :
       {"remote", "cut=0", "cut=1", "cut=2", "cut=3", "cut=4", "cut=1,remote_fraction=0.5"}) {
    // Hedging off: whether a healthy run hedges depends on how busy the
    // machine is (a bound of 2 failed once under two CPU hogs); hedging's
    // timing is pinned on a fake clock (RemotePoolTest) instead.
    LoaderOptions o = Options({a.address(), b.address()}, mode);
    o.hedge_after = 0;
    const RunResult r = RunWith(o);
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, local) << mode;
    EXPECT_EQ(r.stats.hedged_items, 0) << mode;
    EXPECT_EQ(r.stats.reissued_items, 0) << mode;
    if (mode == "cut=1,remote_fraction=0.5") {
      EXPECT_GT(r.stats.remote_images, 20) << mode;
      EXPECT_GT(r.stats.local_images, 20) << mode;
    } else {
      EXPECT_EQ(r.stats.remote_images, 96) << mode;
    }
    EXPECT_EQ(r.stats.workers_alive, 2) << mode;
  }
}

// --fidelity fast is resolved into the spec before it is sent, so workers
// resize as the trainer does: the same (fast) checksum at every cut, and not
// the exact one.
TEST_F(RemoteTest, TheLoadersFidelityTravelsToWorkers) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions local = Options({}, "off");
  local.fidelity = proto::FIDELITY_FAST;
  const uint64_t fast = RunWith(local).stats.checksum;
  EXPECT_NE(fast, LocalChecksum());
  for (const std::string mode : {"remote", "cut=1", "cut=2"}) {
    LoaderOptions o = Options({a.address()}, mode);
    o.fidelity = proto::FIDELITY_FAST;
    o.hedge_after = 0;
    const RunResult r = RunWith(o);
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, fast) << mode;
    EXPECT_EQ(r.stats.remote_images, 96) << mode;
  }
}

// Caches at a boundary past the decode (a pipeline that resizes first): the
// resized images kept here and on the workers, from epoch to epoch, give the
// uncached checksum at every cut, exactly once.
TEST_F(RemoteTest, CachedValuesGiveTheUncachedChecksumAtEveryCut) {
  const char* kResizeFirst = R"pb(
    name: "resize-first"
    stages { decode {} }
    stages { resize { shorter_side: 64 } }
    stages { random_crop { size: 56 } }
    stages { random_horizontal_flip {} }
    stages { normalize {} }
  )pb";
  LoaderOptions plain = Options({}, "off");
  plain.pipeline = *LoadPipelineSpec(kResizeFirst);
  plain.epochs = 2;
  const uint64_t uncached = RunWith(plain).stats.checksum;
  WorkerProcess a(dir_->Join("root"), {"--threads", "1", "--cache-bytes", "33554432"});
  for (const std::string mode : {"off", "cut=1", "cut=2", "cut=3", "remote"}) {
    LoaderOptions o = Options({a.address()}, mode);
    o.pipeline = plain.pipeline;
    o.epochs = 2;
    o.cache.ram_bytes = 32 << 20;
    const RunResult r = RunWith(o);
    ExpectExactlyOnce(r, 96, 2);
    EXPECT_EQ(r.stats.checksum, uncached) << mode;
    EXPECT_EQ(r.stats.cache_at, 2) << mode;
    // cut=1 stops before the boundary: only the trainer's cache is used,
    // and for none of the samples (each runs its suffix here).
    if (mode != "cut=1") {
      EXPECT_GE(r.stats.cache_hits, 96) << mode;
    }
  }
  // A boundary whose values change with the epoch is refused, naming why.
  LoaderOptions bad = plain;
  bad.cache.ram_bytes = 1 << 20;
  bad.cache_at = 3;
  EXPECT_THAT(Loader::Create(bad).status().message(),
              HasSubstr("--cache-at 3: the values there differ from epoch to epoch (stage 2 "
                        "(random_crop) before it draws random numbers); the last boundary that "
                        "may be cached is 2"));
}

// A pipeline that resizes first: its decode and resize are deterministic
// (the cache and echo boundary is 2), the crop and flip draw per copy.
proto::PipelineSpec ResizeFirst() {
  return *LoadPipelineSpec(R"pb(
    stages { decode {} }
    stages { resize { shorter_side: 64 } }
    stages { random_crop { size: 56 } }
    stages { random_horizontal_flip {} }
    stages { normalize {} }
  )pb");
}

// Data echoing: every sample yields three copies per epoch, each delivered
// exactly once, each with its own draws after the echo boundary, and every
// copy's bytes are the same wherever its stages ran.
TEST_F(RemoteTest, EchoedCopiesAreExactlyOnceDistinctAndPlacementIndependent) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  auto options = [&](const std::string& mode) {
    LoaderOptions o = Options({a.address(), b.address()}, mode);
    o.pipeline = ResizeFirst();
    o.echo = 3;
    o.echo_window = 16;
    return o;
  };
  const RunResult here = RunWith(options("off"));
  ASSERT_EQ(here.copy_deliveries.size(), 3u * 96);
  for (const auto& [key, count] : here.copy_deliveries) EXPECT_EQ(count, 1) << key.first;
  EXPECT_EQ(here.stats.images, 3 * 96);
  EXPECT_EQ(here.stats.fresh_samples, 96);
  EXPECT_EQ(here.stats.echoed_samples, 192);
  EXPECT_EQ(here.stats.echo_at, 2);  // the cache boundary: after the resize
  // Three crops and flips of 81 x 2: now and then two copies agree.
  int distinct = 0;
  for (int64_t i = 0; i < 96; ++i) {
    distinct += std::set<uint64_t>{here.copy_hashes.at({i, 0}), here.copy_hashes.at({i, 1}),
                                   here.copy_hashes.at({i, 2})}
                    .size() == 3;
  }
  EXPECT_GE(distinct, 85);
  // The read and the decode ran once per sample, not once per copy.
  EXPECT_EQ(here.stats.stages[1].samples, 96);
  for (const std::string mode : {"cut=1", "cut=2", "cut=3", "remote"}) {
    const RunResult r = RunWith(options(mode));
    EXPECT_EQ(r.copy_hashes, here.copy_hashes) << mode;
    EXPECT_EQ(r.stats.checksum, here.stats.checksum) << mode;
    for (const auto& [key, count] : r.copy_deliveries) EXPECT_EQ(count, 1) << mode;
  }
  // A boundary the copies cannot share is refused, naming why.
  LoaderOptions bad = options("off");
  bad.pipeline = *LoadPipelineSpec("imagenet-train");
  bad.echo_at = 1;
  EXPECT_THAT(Loader::Create(bad).status().message(),
              HasSubstr("--echo-at 1: copies cannot share the value there (stage 0 (decode) "
                        "decodes the region that stage 1 (random_resized_crop) draws at random)"));
}

// --echo auto: each epoch's factor is the planner's, chosen as its order is
// made (the first epoch, with nothing measured, fresh samples only); an
// epoch of factor E delivers every (sample, copy < E) exactly once, and the
// copies' bytes are the same here and on workers. The demand is fixed and
// out of reach, and the stages before the echo boundary (read, decode,
// resize) cost many times those after it (a 56 px crop, a flip, a
// normalize), so every copy up to --max-echo adds throughput: the planner
// asks for all three, here and with the workers.
TEST_F(RemoteTest, AutoEchoPicksEachEpochsFactorAndStaysExactlyOnce) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  auto options = [&](const std::string& mode) {
    LoaderOptions o = Options({a.address()}, mode);
    o.pipeline = ResizeFirst();
    o.echo_auto = true;
    o.max_echo = 3;
    o.demand = 1e9;
    o.epochs = 3;
    o.echo_window = 16;
    // Epochs of 12 batches: 0.5 s of batches ahead would start the next
    // epoch, its echo chosen, before the measurements that choose it.
    o.prefetch_seconds = 0;
    return o;
  };
  const RunResult here = RunWith(options("off"));
  ASSERT_TRUE(here.status.ok()) << here.status;
  EXPECT_EQ(here.stats.echo_factor_per_epoch, (std::vector<int64_t>{1, 3, 3}));
  EXPECT_EQ(here.echo_by_epoch, (std::map<uint64_t, int>{{0, 1}, {1, 3}, {2, 3}}));
  EXPECT_EQ(here.stats.echo_factor, 3);
  ASSERT_EQ(here.epoch_copy_deliveries.size(), 96u * (1 + 3 + 3));
  for (const auto& [key, count] : here.epoch_copy_deliveries) {
    EXPECT_EQ(count, 1) << std::get<0>(key) << " " << std::get<1>(key);
    EXPECT_LT(std::get<2>(key), static_cast<uint32_t>(here.echo_by_epoch.at(std::get<0>(key))));
  }
  EXPECT_EQ(here.stats.fresh_samples, 3 * 96);
  EXPECT_EQ(here.stats.echoed_samples, 2 * 2 * 96);
  const RunResult remote = RunWith(options("remote"));
  ASSERT_TRUE(remote.status.ok()) << remote.status;
  EXPECT_EQ(remote.echo_by_epoch, here.echo_by_epoch);
  EXPECT_EQ(remote.epoch_copy_hashes, here.epoch_copy_hashes);
  for (const auto& [key, count] : remote.epoch_copy_deliveries) EXPECT_EQ(count, 1);
  // A resumed run names the factor of the epoch it resumes in.
  LoaderOptions resumed = options("off");
  resumed.first_epoch = 1;
  resumed.epochs = 1;
  resumed.skip_batches = 5;
  resumed.start_echo = 3;
  const RunResult rest = RunWith(resumed);
  EXPECT_EQ(rest.echo_by_epoch, (std::map<uint64_t, int>{{1, 3}}));
  for (const auto& [key, hash] : rest.epoch_copy_hashes)
    EXPECT_EQ(here.epoch_copy_hashes.at(key), hash);
  EXPECT_EQ(rest.epoch_copy_deliveries.size(), 3u * 96 - 5 * 8);
  resumed.start_echo = 4;
  EXPECT_THAT(Loader::Create(resumed).status().message(),
              HasSubstr("--start-echo: must be 0 to --max-echo (3), got 4"));
}

// Materialized data: imagenet-eval's decode and resize run once, kept as
// shards; the job continues from there with the unmaterialized checksum
// (lossless encodings), locally and at every cut on workers.
TEST_F(RemoteTest, MaterializedDataGivesTheSourceChecksumAtEveryCut) {
  LoaderOptions source = Options({}, "off");
  source.pipeline = *LoadPipelineSpec("imagenet-eval");
  source.epochs = 2;
  const uint64_t expected = RunWith(source).stats.checksum;
  proto::DatasetSpec spec;
  spec.set_path(dir_->Join("root/data"));
  auto dataset = OpenDataset(spec);
  ASSERT_TRUE(dataset.ok());
  auto pipeline = Pipeline::Create(source.pipeline, PipelineOptions());
  ASSERT_TRUE(pipeline.ok());
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  for (const std::string encoding : {"raw", "png"}) {
    MaterializeOptions mo;
    mo.upto = 2;
    mo.encoding = encoding;
    mo.pack.out_dir = dir_->Join("root/eval-" + encoding);
    mo.pack.samples_per_shard = 40;
    mo.pack.threads = 2;
    auto made = Materialize(**dataset, **pipeline, source.pipeline, mo, nullptr);
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_EQ(made->samples(), 96);
    for (const std::string mode : {"off", "cut=1", "cut=3", "remote"}) {
      LoaderOptions o = Options({a.address()}, mode);
      o.dataset.set_path(mo.pack.out_dir);
      o.pipeline = source.pipeline;
      o.epochs = 2;
      const RunResult r = RunWith(o);
      ExpectExactlyOnce(r, 96, 2);
      EXPECT_EQ(r.stats.checksum, expected) << encoding << " " << mode;
      // Nothing ran before the boundary: no decode, no resize.
      EXPECT_EQ(r.stats.stages[1].samples + r.stats.remote_stages[1].samples, 0) << mode;
    }
  }
  // Another pipeline cannot continue it.
  LoaderOptions other = Options({}, "off");
  other.dataset.set_path(dir_->Join("root/eval-raw"));
  EXPECT_THAT(Loader::Create(other).status().message(),
              HasSubstr("was materialized after stages [0, 2) = decode -> resize"));
  // A random boundary, or pictures of what is not an image, are refused.
  MaterializeOptions bad;
  bad.pack.out_dir = dir_->Join("bad");
  auto train = Pipeline::Create(*LoadPipelineSpec("imagenet-train"), PipelineOptions());
  bad.upto = 1;
  EXPECT_THAT(
      std::string(Materialize(**dataset, **train, *LoadPipelineSpec("imagenet-train"), bad, nullptr)
                      .status()
                      .message()),
      HasSubstr("--upto 1: the values there differ from epoch to epoch"));
  bad.upto = 4;
  bad.encoding = "png";
  EXPECT_THAT(
      std::string(
          Materialize(**dataset, **pipeline, source.pipeline, bad, nullptr).status().message()),
      HasSubstr("--encoding png holds images; the value here is a tensor"));
}

// A manifest edited to claim a later boundary of the same type, with that
// boundary's stages and fingerprint (anyone who knows the pipeline can
// compute it), was believed: data materialized after decode ran from after
// resize on, every sample silently unresized. Each member is tagged with
// the prefix that made it, and the trainer and the worker both check it.
TEST_F(RemoteTest, AManifestClaimingALaterBoundaryIsRefused) {
  proto::DatasetSpec spec;
  spec.set_path(dir_->Join("root/data"));
  auto dataset = OpenDataset(spec);
  ASSERT_TRUE(dataset.ok());
  const proto::PipelineSpec eval = *LoadPipelineSpec("imagenet-eval");
  auto pipeline = Pipeline::Create(eval, PipelineOptions());
  ASSERT_TRUE(pipeline.ok());
  MaterializeOptions mo;
  mo.upto = 1;  // decoded images; boundary 2 (resized) holds images too
  mo.pack.out_dir = dir_->Join("root/claims");
  mo.pack.samples_per_shard = 48;
  mo.pack.threads = 2;
  auto made = Materialize(**dataset, **pipeline, eval, mo, nullptr);
  ASSERT_TRUE(made.ok()) << made.status();
  LoaderOptions o = Options({}, "off");
  o.dataset.set_path(mo.pack.out_dir);
  o.pipeline = eval;
  ASSERT_TRUE(Loader::Create(o).ok());  // as made, it runs

  proto::Materialized forged = *made;
  forged.set_upto(2);
  forged.set_prefix_fingerprint((*pipeline)->PrefixFingerprint(2));
  *forged.mutable_prefix()->add_stages() = eval.stages(1);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(forged, &text));
  std::ofstream(mo.pack.out_dir + "/" + kManifestName) << text;
  const absl::Status refused = Loader::Create(o).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("was not made by the stages materialized.pbtxt names"));

  // A client that sends the forged claim itself is refused by the worker.
  WorkerProcess w(dir_->Join("root"), {"--threads", "1"});
  auto stub =
      proto::Worker::NewStub(grpc::CreateChannel(w.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->Process(&context);
  proto::ClientMessage open;
  proto::JobOpen* job = open.mutable_open();
  job->set_job_id("forged");
  job->mutable_dataset()->set_path(mo.pack.out_dir);
  *job->mutable_dataset()->mutable_materialized() = forged;
  *job->mutable_pipeline() = eval;
  auto shards = OpenDataset(job->dataset());
  ASSERT_TRUE(shards.ok()) << shards.status();
  job->set_dataset_size((*shards)->size());
  job->set_dataset_fingerprint((*shards)->fingerprint());
  ASSERT_TRUE(stream->Write(open));
  proto::WorkerMessage answer;
  if (stream->Read(&answer) && answer.has_opened()) {
    ADD_FAILURE() << "the worker opened the job";
    context.TryCancel();
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("was not made by the stages"));
}

// A shard pattern travels to workers as written (made absolute), and each
// worker expands it below its data root: the same samples, the same checksum.
TEST_F(RemoteTest, AShardPatternIsExpandedByWorkersToo) {
  proto::DatasetSpec folder;
  folder.set_path(dir_->Join("root/data"));
  auto src = OpenDataset(folder);
  ASSERT_TRUE(src.ok()) << src.status();
  PackOptions pack;
  pack.out_dir = dir_->Join("root/shards");
  pack.samples_per_shard = 25;  // 96 samples: shards 000000 to 000003
  ASSERT_TRUE(PackWebDataset(**src, pack, nullptr).ok());
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions local = Options({}, "off");
  local.dataset.set_path(dir_->Join("root/shards"));
  const uint64_t expected = RunWith(local).stats.checksum;
  EXPECT_EQ(expected, LocalChecksum());  // pack keeps order and labels
  for (const std::string mode : {"remote", "cut=2"}) {
    LoaderOptions o = Options({a.address()}, mode);
    o.dataset.set_path(dir_->Join("root/shards/shard-{000000..000003}.tar"));
    const RunResult r = RunWith(o);
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, expected) << mode;
    EXPECT_EQ(r.stats.remote_images, 96) << mode;
  }
  // Two shards by pattern: 50 samples, all from workers.
  LoaderOptions some = Options({a.address()}, "remote");
  some.dataset.set_path(dir_->Join("root/shards/shard-{000001,000002}.tar"));
  const RunResult r = RunWith(some);
  ExpectExactlyOnce(r, 50);
  EXPECT_EQ(r.stats.remote_images, 50);
}

// The example plugin's cutout between the flip and normalize. A worker with
// the plugin runs any cut; one without it runs the stages before cutout,
// and the rest runs here; the checksum is the local run's either way.
TEST_F(RemoteTest, PluginOpsRunOnWorkersThatHaveThemAndHereOtherwise) {
  ASSERT_TRUE(LoadPlugin(PREPFLOW_CUTOUT_PLUGIN).ok());
  auto spec = LoadPipelineSpec(
      "stages { decode {} } stages { random_resized_crop { size: 64 } } "
      "stages { random_horizontal_flip {} } "
      "stages { custom { name: \"cutout\" params { key: \"size\" value: \"24\" } } } "
      "stages { normalize {} }");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto with_cutout = [&](const std::vector<std::string>& workers, const std::string& mode) {
    LoaderOptions o = Options(workers, mode);
    o.pipeline = *spec;
    return o;
  };
  const uint64_t local = RunWith(with_cutout({}, "off")).stats.checksum;
  EXPECT_NE(local, LocalChecksum());  // cutout changed something
  WorkerProcess with_plugin(dir_->Join("root"),
                            {"--threads", "1", "--plugin", PREPFLOW_CUTOUT_PLUGIN});
  WorkerProcess without(dir_->Join("root"), {"--threads", "1"});
  for (const auto& [workers, mode] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{with_plugin.address()}, "remote"},
           {{without.address()}, "remote"},
           {{without.address()}, "cut=4"},
           {{with_plugin.address(), without.address()}, "remote"},
           {{without.address()}, "auto"}}) {
    const std::string what = absl::StrCat(absl::StrJoin(workers, ","), " ", mode);
    const RunResult r = RunWith(with_cutout(workers, mode));
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, local) << what;
    EXPECT_EQ(r.stats.reissued_items, 0) << what;
    EXPECT_EQ(r.stats.workers_alive, static_cast<int>(workers.size())) << what;
    if (mode != "auto") {
      EXPECT_EQ(r.stats.remote_images, 96) << what;
    }
  }
}

// With workers, the batches ahead cover --prefetch-seconds of delivery at
// the rate so far, at most 32, past --prefetch and the workers' items in
// flight: one side's pause does not idle the other. 0 leaves those alone.
TEST_F(RemoteTest, BatchesAheadCoverPrefetchSecondsOfDelivery) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  const uint64_t local = LocalChecksum();
  for (const double seconds : {0.0, 60.0}) {
    LoaderOptions o = Options({a.address()}, "cut=1,remote_fraction=0.5");
    o.prefetch_batches = 1;
    o.prefetch_seconds = seconds;
    int most = 0;
    const RunResult r = RunWith(
        o, [](Loader&) {},
        [&most](const Loader& l) {
          most = std::max(most, l.prefetch_batches());
          return false;  // only watches
        });
    ExpectExactlyOnce(r, 96);
    EXPECT_EQ(r.stats.checksum, local) << seconds;
    // Items of 2 samples in batches of 8: 2 + the items in flight's batches.
    if (seconds == 0) {
      EXPECT_LE(most, 4);
    } else {
      EXPECT_EQ(most, 32);
    }
  }
  // Held to 256 MiB of batches: batches of 48 crops of 602,112 bytes (28.9
  // MB) stop at 9, however many seconds are asked for.
  LoaderOptions big = Options({a.address()}, "cut=1,remote_fraction=0.5");
  big.batch_size = 48;
  big.prefetch_seconds = 60;
  int most = 0;
  const RunResult r = RunWith(
      big, [](Loader&) {},
      [&most](const Loader& l) {
        most = std::max(most, l.prefetch_batches());
        return false;
      });
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(most, 9);
}

TEST_F(RemoteTest, AutoPlansFromMeasurementsAndKeepsTheChecksum) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions o = Options({a.address(), b.address()}, "auto");
  o.replan_seconds = 0.01;
  o.replan_link_wait_seconds = 0;  // a short run: plan as soon as the stages are measured
  const RunResult r = RunWith(o);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
  EXPECT_EQ(r.stats.offload, "auto");
  // The first batches run here and measure; with two idle remote cores and
  // no limit on demand or bandwidth the plan sends work out.
  EXPECT_GE(r.stats.plan_changes, 1);
  EXPECT_THAT(r.stats.plan, HasSubstr("samples/s"));
  EXPECT_THAT(r.stats.plan_reason, ::testing::ContainsRegex("offloading predicts|all local"));
  EXPECT_GT(r.stats.remote_images, 0);
  ASSERT_EQ(r.stats.epoch_seconds.size(), static_cast<size_t>(o.epochs));
  double seconds = 0;
  for (double e : r.stats.epoch_seconds) seconds += e;
  EXPECT_LE(seconds, r.stats.seconds);
  EXPECT_GT(seconds, 0);
  ASSERT_EQ(r.stats.plan_fractions.size(), 6u);  // local, remote cut 0..4
  EXPECT_EQ(r.stats.plan_fractions[1], 0);       // the planner never sends raw files
  // Each stream's link probe came before its results (loopback: fast).
  double probed = 0;
  for (const LoaderStats::WorkerStats& ws : r.stats.workers)
    probed = std::max(probed, ws.link_probe);
  EXPECT_GT(probed, 1e6);
}

TEST_F(RemoteTest, AutoReplansWhenAWorkerGoes) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  WorkerProcess b(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions o = Options({a.address(), b.address()}, "auto");
  o.epochs = 3;
  o.replan_seconds = 3600;  // only the worker leaving can trigger the new plan
  o.replan_drift = 1e9;
  o.replan_link_wait_seconds = 0;
  int64_t changes_before = -1;
  const RunResult r = RunWith(
      o,
      [&](Loader& loader) {
        EXPECT_THAT(loader.Stats().plan, HasSubstr("(2 workers)"));
        changes_before = loader.Stats().plan_changes;
        b.Signal(SIGKILL);
        b.Wait();
        // Until the pool has seen it go: a plan made before that (a
        // measurement's) would still count two workers.
        for (int i = 0; i < 3000 && loader.Stats().workers_alive != 1; ++i) {
          absl::SleepFor(absl::Milliseconds(10));
        }
      },
      [](const Loader& loader) { return loader.Stats().plan_changes > 0; });
  ExpectExactlyOnce(r, 96, 3);
  EXPECT_EQ(r.stats.checksum, LocalChecksum(3));
  EXPECT_EQ(r.stats.workers_alive, 1);
  // Two workers' cores, then one: the split moves far past the hysteresis.
  ASSERT_GT(changes_before, 0) << "no plan before the kill";
  EXPECT_GT(r.stats.plan_changes, changes_before);
  EXPECT_THAT(r.stats.plan, HasSubstr("(1 worker)"));
}

TEST_F(RemoteTest, MetricsShowThePlacementAndEachWorker) {
  WorkerProcess a(dir_->Join("root"), {"--threads", "1"});
  auto loader = Loader::Create(Options({a.address()}, "cut=2,remote_fraction=0.5"));
  ASSERT_TRUE(loader.ok()) << loader.status();
  const RunResult r = testing::Drain(**loader);
  ExpectExactlyOnce(r, 96);
  const std::string text =
      prometheus::TextSerializer().Serialize(LoaderMetrics(loader->get()).Collect());
  const std::string job = absl::StrCat("job_id=\"", (*loader)->job_id(), "\",rank=\"0\"");
  EXPECT_THAT(text, HasSubstr(absl::StrCat("prepflow_client_samples_total{", job,
                                           ",placement=\"remote\"} ", r.stats.remote_images)));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("prepflow_client_samples_total{", job,
                                           ",placement=\"local\"} ", r.stats.local_images)));
  EXPECT_THAT(
      text, HasSubstr(absl::StrCat("prepflow_client_plan_fraction{", job, ",path=\"cut=2\"} 0.5")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("prepflow_client_remote_fraction{", job, "} 0.5")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("prepflow_client_cut{", job, "} 2")));
  EXPECT_THAT(text,
              HasSubstr(absl::StrCat("prepflow_client_worker_samples_total{", job, ",worker=\"",
                                     a.address(), "\"} ", r.stats.remote_images)));
  EXPECT_THAT(text, HasSubstr("# TYPE prepflow_client_wait_seconds_total counter"));
  EXPECT_THAT(text, HasSubstr("prepflow_client_stage_cpu_seconds_total{"));
}

// A job that asked for remote work fails when no worker can be reached,
// naming the address and the way out; told it may fall back, it runs locally.
TEST_F(RemoteTest, UnreachableWorkersFailUnlessToldToFallBack) {
  LoaderOptions o = Options({"127.0.0.1:1"}, "remote");
  o.connect_timeout_seconds = 5;
  auto refused = Loader::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("no worker is reachable (127.0.0.1:1 "));
  EXPECT_THAT(refused.status().message(), HasSubstr("--fallback-local"));
  EXPECT_THAT(Loader::Create(Options({"workerhost"}, "remote")).status().message(),
              HasSubstr("'workerhost' is not host:port"));

  o.fallback_local = true;
  const RunResult r = RunWith(o);
  ExpectExactlyOnce(r, 96);
  EXPECT_EQ(r.stats.remote_images, 0);
  EXPECT_EQ(r.stats.checksum, LocalChecksum());
}

// A Linux path is any bytes: a dataset root that is not UTF-8, and a
// dangling link whose name (and error) is not either, run on a worker as
// here. The root made the
// job open unparseable (a proto3 string must be UTF-8), and the broken
// file's error the worker's reply, which dropped the worker.
TEST_F(RemoteTest, NamesThatAreNotUtf8TravelToWorkersAndBack) {
  namespace fs = std::filesystem;
  const std::string root = dir_->Join("root/data-\xff");
  fs::copy(dir_->Join("root/data"), root, fs::copy_options::recursive);
  const std::string broken =
      fs::path(root) / fs::directory_iterator(root)->path().filename() / "broken-\xfe.jpg";
  fs::create_symlink(root + "/nowhere-\xfe.jpg", broken);  // its error names it
  WorkerProcess worker(dir_->Join("root"), {"--threads", "1"});
  LoaderOptions o = Options({worker.address()}, "remote");
  o.dataset.set_path(root);
  const RunResult r = RunWith(o);
  LoaderOptions here = o;
  here.offload = *ParseOffload("off");
  const RunResult local = RunWith(here);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.stats.images, 96);
  EXPECT_EQ(r.stats.remote_images, 96);
  EXPECT_EQ(r.stats.errors, 1);
  EXPECT_EQ(r.stats.checksum, local.stats.checksum);
  EXPECT_EQ(r.stats.workers_alive, 1);
  ASSERT_EQ(r.stats.first_errors.size(), 1u);
  EXPECT_EQ(r.stats.first_errors[0].path, broken);
}

}  // namespace
}  // namespace prepflow
