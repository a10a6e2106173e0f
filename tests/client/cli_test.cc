// The `prepflow` command as other tools use it: real process, exit codes,
// the --json contract, error messages.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pipeline/data/synthetic.h"
#include "tests/testing/test_util.h"
#include "tests/testing/worker_process.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
  nlohmann::json LastJson() const {
    std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
    EXPECT_FALSE(lines.empty());
    return lines.empty() ? nlohmann::json() : nlohmann::json::parse(lines.back());
  }
};

// Every run has a deadline: a hang fails the test with exit code 124 or 137
// (timeout's) in seconds, not at ctest's timeout.
constexpr int kDeadlineSeconds = 120;

// `cwd`: the folder to run in (default: this process's).
CliRun Prepflow(const std::string& args, const TempDir& dir, const std::string& cwd = "") {
  const std::string err_path = dir.Join("stderr.txt");
  const std::string cmd = absl::StrCat(cwd.empty() ? "" : absl::StrCat("cd '", cwd, "' && "),
                                       "timeout -k 5 ", kDeadlineSeconds, " ", PREPFLOW_BIN_DIR,
                                       "/prepflow ", args, " 2>", err_path, " </dev/null");
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::vector<uint8_t> err = testing::ReadFile(err_path);
  r.err.assign(err.begin(), err.end());
  EXPECT_NE(r.exit_code, 124) << "prepflow " << args << " ran past its deadline";
  EXPECT_NE(r.exit_code, 137) << "prepflow " << args << " ran past its deadline";
  return r;
}

// Waits (up to the deadline) until the file at `path` contains `text`.
bool WaitForText(const std::string& path, const std::string& text) {
  for (int i = 0; i < kDeadlineSeconds * 10; ++i) {
    const std::vector<uint8_t> bytes = testing::ReadFile(path);
    if (std::string(bytes.begin(), bytes.end()).find(text) != std::string::npos) return true;
    usleep(100'000);
  }
  return false;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticFolderOptions o;
    o.classes = 3;
    o.images_per_class = 5;
    o.max_side = 400;
    ASSERT_TRUE(WriteSyntheticImageFolder(dir_.Join("data"), o).ok());
  }
  TempDir dir_;
};

TEST_F(CliTest, RunJsonContract) {
  const CliRun r = Prepflow(
      absl::StrCat("run --data ", dir_.Join("data"), " --threads 2 --batch 4 --json"), dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.LastJson();
  EXPECT_EQ(j["images"], 15);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_GT(j["seconds"].get<double>(), 0);
  EXPECT_GT(j["images_per_s"].get<double>(), 0);
  const std::string checksum = j["checksum"];
  EXPECT_EQ(checksum.size(), 16u);
  EXPECT_EQ(checksum.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(j["stages"].size(), 5u);

  // Same checksum on one thread with another batch size.
  const CliRun r1 = Prepflow(
      absl::StrCat("run --data ", dir_.Join("data"), " --threads 1 --batch 3 --json"), dir_);
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(r1.LastJson()["checksum"], checksum);
}

TEST_F(CliTest, VersionIsTheProjects) {
  for (const char* spelling : {"--version", "version"}) {
    const CliRun r = Prepflow(spelling, dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, absl::StrCat("prepflow ", PREPFLOW_PROJECT_VERSION, "\n"));
  }
}

// --fidelity on the commands that build a pipeline without a job: a bad
// value is a usage error naming the flag.
TEST_F(CliTest, ABadFidelityIsAUsageErrorNamingTheFlag) {
  for (const std::string command : {"profile", "strategies", "materialize --out nowhere"}) {
    const CliRun r =
        Prepflow(absl::StrCat(command, " --data ", dir_.Join("data"), " --fidelity slow"), dir_);
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_THAT(r.err, HasSubstr("--fidelity: expected exact or fast, got 'slow'")) << command;
  }
}

// A disk cache outlives the job: the next job finds every sample there.
TEST_F(CliTest, ADiskCacheServesTheNextJob) {
  const std::string run = absl::StrCat("run --data ", dir_.Join("data"), " --threads 2 --json ",
                                       "--cache-dir ", dir_.Join("cache"), " --cache-at ");
  const CliRun first = Prepflow(run + "auto", dir_);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const nlohmann::json a = first.LastJson();
  EXPECT_EQ(a["cache_at"], 0);
  EXPECT_EQ(a["cache_misses"], 15);
  EXPECT_EQ(a["cache_hits"], 0);
  EXPECT_GT(a["cache_disk_bytes"].get<int64_t>(), 15 * 100);
  EXPECT_EQ(a["storage_bytes_read_per_epoch"], nlohmann::json::array({0}));  // local files
  const CliRun second = Prepflow(run + "0", dir_);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json b = second.LastJson();
  EXPECT_EQ(b["cache_hits"], 15);
  EXPECT_EQ(b["checksum"], a["checksum"]);
  const CliRun random = Prepflow(run + "2", dir_);
  EXPECT_NE(random.exit_code, 0);
  EXPECT_THAT(random.err, HasSubstr("--cache-at 2: the values there differ from epoch to epoch"));
  const CliRun bad = Prepflow(run + "soon", dir_);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--cache-at: 'soon' is neither auto nor a stage boundary"));
}

TEST_F(CliTest, MaterializeOnceThenRunTheRest) {
  const std::string eval = " --pipeline imagenet-eval --threads 2 --json";
  const CliRun source = Prepflow(absl::StrCat("run --data ", dir_.Join("data"), eval), dir_);
  ASSERT_EQ(source.exit_code, 0) << source.err;
  const CliRun made =
      Prepflow(absl::StrCat("materialize --data ", dir_.Join("data"),
                            " --pipeline imagenet-eval --out ", dir_.Join("mat"), " --json"),
               dir_);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(made.LastJson()["samples"], 15);
  EXPECT_EQ(made.LastJson()["upto"], 4);  // imagenet-eval draws nothing: all of it
  EXPECT_EQ(made.LastJson()["encoding"], "raw");
  const CliRun all = Prepflow(absl::StrCat("run --data ", dir_.Join("mat"), eval), dir_);
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.LastJson()["checksum"], source.LastJson()["checksum"]);
  const CliRun png = Prepflow(absl::StrCat("materialize --data ", dir_.Join("data"),
                                           " --pipeline imagenet-eval --upto 3 --encoding png "
                                           "--out ",
                                           dir_.Join("mat3"), " --json"),
                              dir_);
  ASSERT_EQ(png.exit_code, 0) << png.err;
  const CliRun rest = Prepflow(absl::StrCat("run --data ", dir_.Join("mat3"), eval), dir_);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_EQ(rest.LastJson()["checksum"], source.LastJson()["checksum"]);
  // A manifest that is not one (damaged, or planted): the job stops, naming it.
  std::ofstream(dir_.Join("mat3/materialized.pbtxt")) << "upto: -3 encoding: \"raw\"";
  const CliRun planted = Prepflow(absl::StrCat("run --data ", dir_.Join("mat3"), eval), dir_);
  EXPECT_EQ(planted.exit_code, 1);
  EXPECT_THAT(planted.err, HasSubstr("materialized.pbtxt: not a materialized dataset's manifest"));
  std::ofstream(dir_.Join("mat3/materialized.pbtxt")) << "upto: {{{";
  EXPECT_THAT(Prepflow(absl::StrCat("run --data ", dir_.Join("mat3"), eval), dir_).err,
              HasSubstr("not a materialized dataset's manifest"));
  const CliRun bad = Prepflow(absl::StrCat("materialize --data ", dir_.Join("data"),
                                           " --encoding gif --out ", dir_.Join("x")),
                              dir_);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--encoding: 'gif' is not raw, png or jpeg:Q"));
}

TEST_F(CliTest, StrategiesWeighEveryMaterializationPoint) {
  const std::string base = absl::StrCat("strategies --data ", dir_.Join("data"),
                                        " --pipeline imagenet-eval --epochs 5 --cores 2 --json");
  const CliRun r = Prepflow(base, dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = r.LastJson();
  // The source, then boundaries 1 to 4 in raw, png and jpeg:90.
  ASSERT_EQ(j["strategies"].size(), 1u + 4 * 3);
  EXPECT_EQ(j["strategies"][0]["encoding"], "source");
  EXPECT_GT(j["strategies"][0]["online_samples_per_s"].get<double>(), 0);
  // A tensor cannot be a picture.
  EXPECT_THAT(j["strategies"][11]["unusable"].get<std::string>(), HasSubstr("holds images"));
  ASSERT_TRUE(j["recommended"].is_object());
  // When storage binds hard, the fewest bytes win.
  const CliRun slow = Prepflow(base + " --storage-mbps 0.01", dir_);
  ASSERT_EQ(slow.exit_code, 0) << slow.err;
  const nlohmann::json k = slow.LastJson();
  double least = 1e300;
  for (const auto& row : k["strategies"]) {
    if (row.contains("stored_bytes")) least = std::min(least, row["stored_bytes"].get<double>());
  }
  EXPECT_EQ(k["recommended"]["stored_bytes"].get<double>(), least);
}

TEST_F(CliTest, PackedShardsGiveTheSameChecksum) {
  const CliRun pack = Prepflow(absl::StrCat("pack --data ", dir_.Join("data"), " --out ",
                                            dir_.Join("shards"), " --shard-samples 4 --json"),
                               dir_);
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  EXPECT_EQ(pack.LastJson()["shards"], 4);
  const CliRun a = Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --json"), dir_);
  const CliRun b = Prepflow(absl::StrCat("run --data ", dir_.Join("shards"), " --json"), dir_);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.LastJson()["format"], "wds");
  EXPECT_EQ(a.LastJson()["checksum"], b.LastJson()["checksum"]);
}

TEST_F(CliTest, BadFileSkipOrFail) {
  testing::WriteFile(dir_.Join("data/class001/broken.jpg"), {0xFF, 0xD8, 0xFF, 0x00, 0x13});
  const CliRun skip = Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --json"), dir_);
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_EQ(skip.LastJson()["images"], 15);
  EXPECT_EQ(skip.LastJson()["errors"], 1);
  EXPECT_THAT(skip.err, HasSubstr("broken.jpg"));

  const CliRun fail =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --on-error fail --json"), dir_);
  EXPECT_EQ(fail.exit_code, 1);
  EXPECT_THAT(fail.err, HasSubstr("class001/broken.jpg"));
  EXPECT_THAT(fail.LastJson()["error"].get<std::string>(), HasSubstr("broken.jpg"));
}

TEST_F(CliTest, UsageErrorsNameTheFlag) {
  const CliRun unknown = Prepflow("run --data x --bogus 3", dir_);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown flag --bogus"));
  // torch's word gets a suggestion, not a page of usage.
  const CliRun torch_word = Prepflow("run --data x --batch-size 8", dir_);
  EXPECT_EQ(torch_word.exit_code, 2);
  EXPECT_THAT(torch_word.err, HasSubstr("unknown flag --batch-size; did you mean --batch?"));
  EXPECT_THAT(torch_word.err, ::testing::Not(HasSubstr("--max-pixels")));
  const CliRun bad_value = Prepflow("run --data x --batch many", dir_);
  EXPECT_EQ(bad_value.exit_code, 2);
  EXPECT_THAT(bad_value.err, HasSubstr("--batch: 'many'"));
  const CliRun missing = Prepflow("run", dir_);
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--data (or --mix) is required"));
  const CliRun on_error =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --on-error maybe"), dir_);
  EXPECT_EQ(on_error.exit_code, 2);
  EXPECT_THAT(on_error.err, HasSubstr("--on-error: 'maybe'"));
  const CliRun no_data = Prepflow(absl::StrCat("run --data ", dir_.Join("nowhere")), dir_);
  EXPECT_EQ(no_data.exit_code, 1);
  EXPECT_THAT(no_data.err, HasSubstr(dir_.Join("nowhere")));
  const CliRun scans =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --max-jpeg-scans 0"), dir_);
  EXPECT_EQ(scans.exit_code, 2);
  EXPECT_THAT(scans.err, HasSubstr("--max-jpeg-scans: must be at least 1, got 0"));
  const CliRun pipeline =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --pipeline nope"), dir_);
  EXPECT_EQ(pipeline.exit_code, 2);
  EXPECT_THAT(pipeline.err, HasSubstr("--pipeline"));
  const CliRun labels =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --labels zone"), dir_);
  EXPECT_EQ(labels.exit_code, 2);
  EXPECT_THAT(labels.err, HasSubstr("--labels: 'zone' is not key=value"));
  const CliRun weight = Prepflow(
      absl::StrCat("run --data ", dir_.Join("data"), " --scheduler localhost:1 --weight 0"), dir_);
  EXPECT_EQ(weight.exit_code, 2);
  EXPECT_THAT(weight.err, HasSubstr("--weight: must be positive"));
  for (const char* outage : {"-1", "nan", "1e9"}) {
    const CliRun bad = Prepflow(
        absl::StrCat("run --data ", dir_.Join("data"), " --storage-outage-seconds ", outage), dir_);
    EXPECT_NE(bad.exit_code, 0) << outage;
    EXPECT_THAT(bad.err, HasSubstr("--storage-outage-seconds: must be 0 to 86400")) << outage;
  }
  for (const char* threads : {"1025", "-1"}) {
    const CliRun bad =
        Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --threads ", threads), dir_);
    EXPECT_EQ(bad.exit_code, 2) << threads;
    EXPECT_THAT(bad.err, HasSubstr("--threads: must be 0 to 1024")) << threads;
  }
  const CliRun nowhere =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --offload remote"), dir_);
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_THAT(nowhere.err, HasSubstr("--scheduler host:port"));
  EXPECT_EQ(Prepflow("frobnicate", dir_).exit_code, 2);
  const CliRun help = Prepflow("run --help", dir_);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--on-error"));
}

// docs/options.md is generated from the option table; regenerate it with
//   build/bin/prepflow options --markdown > docs/options.md
TEST_F(CliTest, OptionsListsEveryOptionAndDocsOptionsMdIsCurrent) {
  const CliRun text = Prepflow("options", dir_);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("--batch / batch_size (default 64)  an integer\n"
                                  "    samples per batch\n"));
  const CliRun markdown = Prepflow("options --markdown", dir_);
  EXPECT_EQ(markdown.exit_code, 0) << markdown.err;
  const std::vector<uint8_t> doc = testing::ReadFile(PREPFLOW_SOURCE_DIR "/docs/options.md");
  EXPECT_EQ(markdown.out, std::string(doc.begin(), doc.end()))
      << "docs/options.md is stale: build/bin/prepflow options --markdown > docs/options.md";
}

// docs/ops.md is generated from the schema; regenerate it with
//   build/bin/prepflow ops --markdown > docs/ops.md
TEST_F(CliTest, OpsListsTheVocabularyAndDocsOpsMdIsCurrent) {
  const CliRun text = Prepflow("ops", dir_);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("random_resized_crop  (image -> image; random; torchvision "
                                  "RandomResizedCrop)"));
  const CliRun json = Prepflow("ops --json", dir_);
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.LastJson()["ops"][0]["name"], "decode");
  const CliRun markdown = Prepflow("ops --markdown", dir_);
  EXPECT_EQ(markdown.exit_code, 0) << markdown.err;
  const std::vector<uint8_t> doc = testing::ReadFile(PREPFLOW_SOURCE_DIR "/docs/ops.md");
  EXPECT_EQ(markdown.out, std::string(doc.begin(), doc.end()))
      << "docs/ops.md is stale: build/bin/prepflow ops --markdown > docs/ops.md";
}

TEST_F(CliTest, PluginsListTheirOpsAndRunInPipelines) {
  const std::string plugin = PREPFLOW_CUTOUT_PLUGIN;
  const CliRun ops = Prepflow("ops --plugin " + plugin, dir_);
  EXPECT_EQ(ops.exit_code, 0) << ops.err;
  EXPECT_THAT(ops.out, HasSubstr("cutout  (random)  from " + plugin));
  const CliRun json = Prepflow("ops --json --plugin " + plugin, dir_);
  EXPECT_EQ(json.LastJson()["plugin_ops"][0]["name"], "cutout");

  const std::string pipeline = PREPFLOW_SOURCE_DIR "/examples/plugin/cutout.txt";
  const std::string run = absl::StrCat("run --json --epochs 1 --batch 5 --threads 1 --data ",
                                       dir_.Join("data"), " --pipeline ", pipeline);
  const CliRun with = Prepflow(run + " --plugin " + plugin, dir_);
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(with.LastJson()["images"], 15);
  EXPECT_EQ(with.LastJson()["pipeline"], "cutout-train");

  const CliRun without = Prepflow(run, dir_);
  EXPECT_EQ(without.exit_code, 2);
  EXPECT_THAT(without.err, HasSubstr("custom op 'cutout' is not loaded (load its plugin with "
                                     "--plugin FILE; none is loaded)"));
  const CliRun missing = Prepflow(run + " --plugin /nonexistent/libx.so", dir_);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("--plugin: plugin /nonexistent/libx.so: no such file"));
}

// The example pipelines run as written.
TEST_F(CliTest, TheExamplePipelinesRun) {
  const CliRun run = Prepflow(
      absl::StrCat("run --json --epochs 1 --batch 5 --threads 1 --data ", dir_.Join("data"),
                   " --pipeline ", PREPFLOW_SOURCE_DIR, "/examples/pipelines/simclr.pipeline"),
      dir_);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.LastJson()["images"], 15);
  EXPECT_EQ(run.LastJson()["pipeline"], "simclr");
}

TEST_F(CliTest, PlanFromMeasurementsAndFromADataset) {
  // The hand-solved case of planner_test: 30 MB/s (240 Mbit/s) moves the cut
  // to the 150 KB boundary.
  const CliRun given = Prepflow(
      "plan --stage-ms 8,1,1 --stage-bytes 600000,150000,600000 --remote-cores 4 "
      "--bandwidth-mbps 240 --receive-ns-per-byte 0 --send-ns-per-byte 0 --json",
      dir_);
  ASSERT_EQ(given.exit_code, 0) << given.err;
  const nlohmann::json g = given.LastJson();
  EXPECT_NEAR(g["throughput"].get<double>(), 280, 1e-6);
  EXPECT_NEAR(g["rate_per_cut"][2].get<double>(), 200, 1e-6);
  EXPECT_EQ(g["workers"], 2);
  EXPECT_THAT(g["explanation"].get<std::string>(), HasSubstr("bound by local CPU and network"));
  // Storage reads bind at 100 samples/s a side (100 KB at 80 Mbit/s): two
  // copies a load meet a demand of 250, one does not.
  const CliRun echo = Prepflow(
      "plan --stage-ms 8,2 --stage-bytes 600000,150000 --remote-cores 8 --read-bytes 100000 "
      "--storage-mbps 80 --worker-storage-mbps 80 --demand 250 --echo auto --json",
      dir_);
  ASSERT_EQ(echo.exit_code, 0) << echo.err;
  EXPECT_NEAR(echo.LastJson()["throughput"].get<double>(), 250, 1e-6);
  EXPECT_THAT(echo.LastJson()["explanation"].get<std::string>(), HasSubstr("2 copies each"));
  // With stage 1 local-only (a plugin's op the workers lack), cut 1 is the last.
  const CliRun capped = Prepflow(
      "plan --stage-ms 8,1,1 --stage-bytes 600000,150000,600000 --remote-cores 4 "
      "--bandwidth-mbps 240 --receive-ns-per-byte 0 --send-ns-per-byte 0 --max-cut 1 --json",
      dir_);
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  const nlohmann::json c = capped.LastJson();
  EXPECT_EQ(c["rate_per_cut"][2].get<double>(), 0);
  EXPECT_EQ(c["rate_per_cut"][3].get<double>(), 0);
  EXPECT_THAT(c["explanation"].get<std::string>(),
              HasSubstr("no cut past 1 (--max-cut: stage 1 and after run here)"));

  const CliRun profiled = Prepflow(
      absl::StrCat("plan --data ", dir_.Join("data"), " --samples 8 --remote-cores 2 --json"),
      dir_);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  const nlohmann::json p = profiled.LastJson();
  EXPECT_EQ(p["stages"].size(), 4u);
  EXPECT_GT(p["throughput"].get<double>(), 0);
  EXPECT_GT(p["remote_fraction"].get<double>(), 0);  // 2 idle remote cores are worth using

  const CliRun none = Prepflow("plan", dir_);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("give --data, or --stage-ms"));
  const CliRun bad = Prepflow("plan --stage-ms 1,x --stage-bytes 1,2", dir_);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--stage-ms: 'x'"));
  // plan --data profiles with the same flags as profile, limits included.
  const CliRun limit = Prepflow(
      absl::StrCat("plan --data ", dir_.Join("data"), " --max-pixels 0 --remote-cores 2"), dir_);
  EXPECT_EQ(limit.exit_code, 2);
  EXPECT_THAT(limit.err, HasSubstr("max_pixels: must be positive"));
}

TEST_F(CliTest, ProfileAndDemo) {
  const CliRun profile =
      Prepflow(absl::StrCat("profile --data ", dir_.Join("data"), " --samples 8 --json"), dir_);
  ASSERT_EQ(profile.exit_code, 0) << profile.err;
  const nlohmann::json j = profile.LastJson();
  EXPECT_EQ(j["samples"], 8);
  ASSERT_EQ(j["stages"].size(), 5u);
  EXPECT_EQ(j["stages"][1]["name"], "decode");
  EXPECT_GT(j["stages"][1]["cpu_ms_per_sample"].get<double>(), 0);
  EXPECT_EQ(j["stages"][4]["bytes_per_sample"].get<double>(), 3 * 224 * 224 * 4);

  const CliRun demo = Prepflow("demo --images 16 --threads 2 --json", dir_);
  ASSERT_EQ(demo.exit_code, 0) << demo.err;
  const nlohmann::json d = demo.LastJson();
  EXPECT_EQ(d["images"], 16);
  EXPECT_EQ(d["errors"], 0);
  EXPECT_EQ(d["remote_images"], 16);  // the offloaded run, on two started workers
  EXPECT_EQ(d["workers"].size(), 2u);
  EXPECT_EQ(d["local"]["remote_images"], 0);
  EXPECT_EQ(d["local"]["checksum"], d["checksum"]);
  EXPECT_TRUE(d["checksums_equal"].get<bool>());
  // Without --json, the offloaded run shows what its stages cost on the
  // workers, where they ran.
  const CliRun text = Prepflow("demo --images 16 --threads 2", dir_);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const size_t workers = text.out.find("stages on the workers:");
  ASSERT_NE(workers, std::string::npos) << text.out;
  const std::string table = text.out.substr(workers);
  const size_t decode = table.find("decode");
  ASSERT_NE(decode, std::string::npos);
  double ms = 0;
  ASSERT_EQ(std::sscanf(table.c_str() + decode, "decode %lf", &ms), 1);
  EXPECT_GT(ms, 0);
}

// Files an attacker or a careless operator may leave in a dataset: a shard
// whose member size wraps past 2^64, a FIFO named like an image, names that
// are not UTF-8 or hold a newline. Each fails its own sample, nothing hangs,
// A relative shard pattern runs here and on a worker, which is sent it
// made absolute (there is no file by that name to resolve).
TEST_F(CliTest, ARelativeShardPatternRunsOnWorkers) {
  const CliRun pack = Prepflow(absl::StrCat("pack --data ", dir_.Join("data"), " --out ",
                                            dir_.Join("shards"), " --shard-samples 4"),
                               dir_);
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  testing::WorkerProcess worker(dir_.path());
  for (const std::string& where :
       {std::string(""), absl::StrCat(" --offload remote --workers ", worker.address())}) {
    const CliRun r = Prepflow(
        absl::StrCat("run --data 'shards/shard-{000001..000002}.tar' --batch 4 --json", where),
        dir_, dir_.path());
    ASSERT_EQ(r.exit_code, 0) << where << r.err;
    const nlohmann::json j = r.LastJson();
    EXPECT_EQ(j["images"], 8) << where;
    EXPECT_EQ(j["errors"], 0) << where;
    EXPECT_EQ(j["remote_images"], where.empty() ? 0 : 8) << where;
  }
}

// locally and on a worker, and --json's line still parses.
TEST_F(CliTest, HostileFilesNeitherHangNorCrash) {
  testing::WriteFile(dir_.Join("wrap.tar"), testing::TarWithWrappingMember(testing::Jpeg(64, 48)));
  ASSERT_EQ(mkfifo(dir_.Join("data/class001/fifo.jpg").c_str(), 0644), 0);
  const std::vector<uint8_t> broken = {0xFF, 0xD8, 0xFF, 0x00};
  testing::WriteFile(dir_.Join("data/class002/\xff\xfe-latin1.jpg"), broken);
  testing::WriteFile(dir_.Join("data/class002/x\n[2026-01-01 00:00:00.000 I] forged.jpg"), broken);
  testing::WorkerProcess worker(dir_.path());

  for (const std::string& where :
       {std::string(""), absl::StrCat(" --offload remote --workers ", worker.address())}) {
    const CliRun tar = Prepflow(
        absl::StrCat("run --data ", dir_.Join("wrap.tar"), " --batch 1 --json", where), dir_);
    ASSERT_EQ(tar.exit_code, 0) << where << tar.err;
    nlohmann::json j = tar.LastJson();
    EXPECT_EQ(j["images"], 1) << where;
    EXPECT_EQ(j["errors"], 1) << where;
    EXPECT_THAT(j["first_errors"][0]["error"].get<std::string>(),
                HasSubstr("wrap.tar: bad tar header (checksum or size) at offset"));

    const CliRun files =
        Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --json", where), dir_);
    ASSERT_EQ(files.exit_code, 0) << where << files.err;
    j = files.LastJson();
    EXPECT_EQ(j["images"], 15) << where;
    EXPECT_EQ(j["errors"], 3) << where;
    EXPECT_THAT(j.dump(), HasSubstr("fifo.jpg is not a regular file"));
    EXPECT_THAT(j.dump(), HasSubstr("\\\\xff\\\\xfe-latin1.jpg"));  // escaped, in JSON
    EXPECT_THAT(files.err, HasSubstr("\\xff\\xfe-latin1.jpg"));
    EXPECT_THAT(files.err, HasSubstr("x\\x0a[2026-01-01"));
    EXPECT_THAT(files.err, Not(HasSubstr("\n[2026-01-01 00:00:00.000 I] forged")))
        << "a file name forged a log line";
    if (!where.empty()) {
      EXPECT_EQ(j["remote_images"], 15);
    }
  }
}

// More threads than the process may start (here: under a 1.5 GB address
// space, as in a container) is an error with its JSON line; a thread that
// failed to start, or the workspaces of those that did, aborted the run
// (exit 134, no JSON). Address-space limits and the sanitizers' shadow memory
// do not mix: plain builds only.
TEST_F(CliTest, MoreThreadsThanTheProcessMayStartIsAnError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "an address-space limit under a sanitizer";
#endif
  const std::string cmd =
      absl::StrCat("bash -c 'ulimit -v 1500000; exec ", PREPFLOW_BIN_DIR, "/prepflow run --data ",
                   dir_.Join("data"), " --threads 1000 --json' 2>", dir_.Join("threads.err"));
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const nlohmann::json j = nlohmann::json::parse(out.substr(out.rfind('{')));
  const std::string error = j["error"].get<std::string>();
  EXPECT_TRUE(absl::StrContains(error, "--threads 1000: only") ||
              absl::StrContains(error, "out of memory setting up the run"))
      << error;
}

// A pack that cannot write (here: over the file-size limit, as on a full
// disk) fails naming the shard and leaves no partial .tmp shard behind.
TEST_F(CliTest, AFailedPackLeavesNoTemporaryShard) {
  const std::string out = dir_.Join("shards");
  const std::string cmd = absl::StrCat(
      "bash -c 'trap \"\" XFSZ; ulimit -f 16; exec ", PREPFLOW_BIN_DIR, "/prepflow pack --data ",
      dir_.Join("data"), " --out ", out, " --shard-samples 4' 2>", dir_.Join("pack.err"));
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::vector<uint8_t> err = testing::ReadFile(dir_.Join("pack.err"));
  EXPECT_THAT(std::string(err.begin(), err.end()), HasSubstr(".tar.tmp"));
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    const std::string ext = e.path().extension();
    EXPECT_TRUE(ext == ".tar" || ext == ".idx") << "left behind: " << e.path();
  }
}

// pack refuses a folder that holds anything: shards left there would be read
// back with the new ones. --overwrite replaces its shards (and only them). A
// stale shard beside new ones is a clear error when read. prepflow index
// writes the very sidecars pack writes.
TEST_F(CliTest, PackRefusesAFullFolderAndIndexWritesWhatPackWrites) {
  const std::string out = dir_.Join("shards");
  const std::string pack =
      absl::StrCat("pack --data ", dir_.Join("data"), " --out ", out, " --shard-samples 4");
  ASSERT_EQ(Prepflow(pack, dir_).exit_code, 0);  // 15 samples: shards 000000 to 000003
  const std::vector<uint8_t> sidecar = testing::ReadFile(dir_.Join("shards/shard-000001.tar.idx"));
  ASSERT_FALSE(sidecar.empty());

  const CliRun again = Prepflow(pack, dir_);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr(absl::StrCat(out, " is not empty")));
  EXPECT_THAT(again.err, HasSubstr("--overwrite"));

  // A stale shard from a pack with other keys' layout: shard 1 copied as 4.
  std::filesystem::copy_file(dir_.Join("shards/shard-000001.tar"),
                             dir_.Join("shards/shard-000004.tar"));
  testing::WriteFile(dir_.Join("shards/notes.txt"), {'k', 'e', 'e', 'p'});
  const CliRun stale = Prepflow(absl::StrCat("run --data ", out, " --json"), dir_);
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_THAT(stale.LastJson()["error"].get<std::string>(),
              HasSubstr("sample key '000000004' appears twice"));

  ASSERT_EQ(Prepflow(absl::StrCat(pack, " --overwrite --shard-samples 8"), dir_).exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("shards/shard-000004.tar")));
  EXPECT_FALSE(std::filesystem::exists(dir_.Join("shards/shard-000002.tar.idx")));
  EXPECT_TRUE(std::filesystem::exists(dir_.Join("shards/notes.txt")));
  const CliRun fresh = Prepflow(absl::StrCat("run --data ", out, " --json"), dir_);
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(fresh.LastJson()["images"], 15);

  const std::vector<uint8_t> packed = testing::ReadFile(dir_.Join("shards/shard-000001.tar.idx"));
  std::filesystem::remove(dir_.Join("shards/shard-000001.tar.idx"));
  const CliRun index = Prepflow(
      absl::StrCat("index --data '", dir_.Join("shards/shard-{000000..000001}.tar"), "' --json"),
      dir_);
  ASSERT_EQ(index.exit_code, 0) << index.err;
  EXPECT_EQ(index.LastJson()["shards"], 2);
  EXPECT_EQ(testing::ReadFile(dir_.Join("shards/shard-000001.tar.idx")), packed);
  const CliRun broken =
      Prepflow(absl::StrCat("index --data ", dir_.Join("shards/notes.txt")), dir_);
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_THAT(broken.err, HasSubstr("notes.txt"));
}

// Whatever goes wrong, --json's last line is one JSON object, with "error".
TEST_F(CliTest, JsonEndsWithOneLineEvenOnFailure) {
  const CliRun missing =
      Prepflow(absl::StrCat("run --data ", dir_.Join("nowhere"), " --json"), dir_);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.LastJson()["error"].get<std::string>(), HasSubstr(dir_.Join("nowhere")));
  // A file where a folder belongs fails as a missing folder does: the flags
  // were fine, the dataset cannot be opened.
  testing::WriteFile(dir_.Join("a.jpg"), {0xFF, 0xD8});
  const CliRun file = Prepflow(absl::StrCat("run --data ", dir_.Join("a.jpg"), " --json"), dir_);
  EXPECT_EQ(file.exit_code, 1);
  EXPECT_THAT(file.LastJson()["error"].get<std::string>(),
              HasSubstr(absl::StrCat(dir_.Join("a.jpg"), " is a file, not a folder")));
  const CliRun usage = Prepflow("run --data x --bogus 3 --json", dir_);
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.LastJson()["error"].get<std::string>(), HasSubstr("unknown flag --bogus"));
  EXPECT_EQ(usage.LastJson()["exit_code"], 2);
  const CliRun refused = Prepflow(absl::StrCat("run --data ", dir_.Join("data"),
                                               " --offload remote --workers 127.0.0.1:1 "
                                               "--json"),
                                  dir_);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.LastJson()["error"].get<std::string>(), HasSubstr("no worker is reachable"));
  const CliRun pack = Prepflow(
      absl::StrCat("pack --data ", dir_.Join("nowhere"), " --out ", dir_.Join("o"), " --json"),
      dir_);
  EXPECT_EQ(pack.exit_code, 1);
  EXPECT_EQ(pack.LastJson()["command"], "pack");
}

// --offload remote with no reachable worker fails clearly, unless the job
// may fall back; a worker address without a port is a usage error.
TEST_F(CliTest, RemoteWithoutWorkersFailsUnlessToldToFallBack) {
  const std::string run = absl::StrCat("run --data ", dir_.Join("data"), " --offload remote ");
  const CliRun refused = Prepflow(run + "--workers 127.0.0.1:1", dir_);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("no worker is reachable (127.0.0.1:1"));
  EXPECT_THAT(refused.err, HasSubstr("--fallback-local"));
  const CliRun fallback = Prepflow(run + "--workers 127.0.0.1:1 --fallback-local --json", dir_);
  EXPECT_EQ(fallback.exit_code, 0) << fallback.err;
  EXPECT_EQ(fallback.LastJson()["local_images"], 15);
  const CliRun no_port = Prepflow(run + "--workers localhost", dir_);
  EXPECT_EQ(no_port.exit_code, 2);
  EXPECT_THAT(no_port.err, HasSubstr("--workers: 'localhost' is not host:port"));
}

// SIGHUP (a closed terminal) neither ends a run nor a worker: both log it and
// go on; SIGTERM still stops them.
TEST_F(CliTest, HangUpIsLoggedAndIgnored) {
  testing::WorkerProcess worker(dir_.path());
  worker.Signal(SIGHUP);
  const CliRun remote =
      Prepflow(absl::StrCat("run --data ", dir_.Join("data"), " --offload remote --workers ",
                            worker.address(), " --json"),
               dir_);
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_EQ(remote.LastJson()["remote_images"], 15) << "the worker still serves after SIGHUP";

  const std::string err_path = dir_.Join("long-run.err");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen(err_path.c_str(), "w", stderr);
    freopen("/dev/null", "w", stdout);
    const std::string bin = absl::StrCat(PREPFLOW_BIN_DIR, "/prepflow");
    const std::string data = dir_.Join("data");
    execl(bin.c_str(), bin.c_str(), "run", "--data", data.c_str(), "--epochs", "1000000",
          "--metrics-port", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Logged once the run is under way, after the handler is in place.
  ASSERT_TRUE(WaitForText(err_path, "serving metrics"));
  kill(pid, SIGHUP);
  EXPECT_TRUE(WaitForText(err_path, "SIGHUP ignored"));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM) << "the run must outlive SIGHUP";
}

}  // namespace
}  // namespace prepflow
