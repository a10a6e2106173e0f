// `prepflow demo`.
#include <limits.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/flags.h"
#include "client/cli/commands.h"
#include "client/cli/run_flags.h"
#include "client/worker_process.h"
#include "nlohmann/json.hpp"
#include "pipeline/core/checksum.h"
#include "pipeline/data/synthetic.h"
#include "storage/options.h"

namespace prepflow::cli {

namespace {

// The demo's second run: `local_workers` prepflow-worker processes on
// loopback, the same job offloaded to them, and its checksum against the
// local run's. Returns the exit code; `result` gets the --json summary.
int RunDemoOffloaded(Console& console, RunFlags& rf, const OffloadMode& offload_mode,
                     int local_workers, int worker_threads, const RunOutcome& local, Json* result) {
  int code = kOk;
  // Workers read the dataset themselves: their data root is its folder.
  char real[PATH_MAX];
  const std::string root = realpath(rf.data.c_str(), real) != nullptr ? real : rf.data;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  std::vector<std::string> addresses;
  for (int i = 0; i < local_workers && code == kOk; ++i) {
    std::vector<std::string> args = {"--threads", absl::StrCat(worker_threads)};
    if (!rf.plugins.empty()) args.insert(args.end(), {"--plugin", rf.plugins});
    auto w = WorkerProcess::Start(SiblingBinary("prepflow-worker"), root, args);
    if (!w.ok()) {
      code = console.Failure("demo", w.status());
      break;
    }
    addresses.push_back((*w)->address());
    workers.push_back(*std::move(w));
  }
  if (code == kOk) {
    rf.options.offload = offload_mode;
    rf.options.workers = addresses;
    auto remote_options = rf.ToOptions();
    if (!remote_options.ok()) {
      code = console.Failure("demo", remote_options.status());
    } else {
      if (!rf.json) {
        std::printf("\n== offloaded (%s) to %d prepflow-worker processes: %s ==\n",
                    OffloadModeString(offload_mode).c_str(), local_workers,
                    absl::StrJoin(addresses, ",").c_str());
      }
      RunOutcome remote = ExecuteRun(console, "demo", *remote_options, rf.json);
      code = remote.exit_code;
      const bool equal = remote.checksum == local.checksum;
      if (code == kOk && !equal) {
        code = console.Failure("demo", absl::InternalError(absl::StrCat(
                                           "checksums differ: local ", ChecksumHex(local.checksum),
                                           ", offloaded ", ChecksumHex(remote.checksum))));
      }
      if (rf.json && !remote.summary.is_null()) {
        *result = remote.summary;
        (*result)["local"] = local.summary;
        (*result)["checksums_equal"] = equal;
      } else if (!rf.json && code == kOk) {
        std::printf("\nchecksums equal: %s both ways, wherever each sample ran\n",
                    ChecksumHex(local.checksum).c_str());
      }
    }
  }
  return code;
}

}  // namespace

int DemoCommand(Console& console, int argc, char** argv) {
  RunFlags rf;
  rf.options.offload = OffloadMode{OffloadMode::kRemote};
  int images = 256, local_workers = 2, worker_threads = 1;
  bool keep = false;
  FlagSet flags("prepflow demo",
                "Generates a small photo-like ImageFolder in a temporary folder (or uses --data), "
                "runs the imagenet-train pipeline over it on this machine, then again offloaded to "
                "prepflow-worker processes it starts on loopback, and compares the checksums.");
  rf.Register(flags, false);
  flags.Int("images", &images, "images to generate when --data is not given");
  flags.Int("local-workers", &local_workers,
            "prepflow-worker processes to start for the offloaded run (0: local run only)");
  flags.Int("worker-threads", &worker_threads, "threads of each started worker");
  flags.Bool("keep", &keep, "keep the generated dataset");
  if (std::optional<int> exit = console.ParseFlags(flags, argc, argv)) return *exit;
  if (local_workers < 0 || worker_threads < 1) {
    return console.UsageError(
        "prepflow demo: --local-workers must be >= 0 and --worker-threads >= 1", flags);
  }
  std::string generated;
  if (rf.data.empty()) {
    if (images < 1) return console.UsageError("prepflow demo: --images must be at least 1", flags);
    char tmpl[] = "/tmp/prepflow-demo-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return console.Failure("demo",
                             absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno))));
    }
    generated = tmpl;
    SyntheticFolderOptions so;
    so.classes = 8;
    so.images_per_class = (images + so.classes - 1) / so.classes;
    if (!rf.json) {
      std::printf("generating %d photo-like images in %s ...\n", so.classes * so.images_per_class,
                  generated.c_str());
    }
    auto n = WriteSyntheticImageFolder(generated + "/data", so);
    if (!n.ok()) return console.Failure("demo", n.status());
    rf.data = generated + "/data";
  }
  auto cleanup = [&] {
    if (generated.empty()) return;
    if (keep) {
      if (!rf.json) std::printf("kept the generated dataset in %s\n", rf.data.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(generated, ec);
    }
  };
  const OffloadMode offload_mode = rf.options.offload.value_or(OffloadMode());
  rf.options.offload = OffloadMode();
  rf.options.workers.clear();
  auto local_options = rf.ToOptions();
  if (!local_options.ok()) {
    cleanup();
    return console.Failure("demo", local_options.status());
  }
  if (!rf.json) std::printf("\n== on this machine only ==\n");
  RunOutcome local = ExecuteRun(console, "demo", *local_options, rf.json);
  Json result = local.summary;
  int code = local.exit_code;
  if (code == kOk && local_workers > 0) {
    code =
        RunDemoOffloaded(console, rf, offload_mode, local_workers, worker_threads, local, &result);
  }
  if (rf.json && !result.is_null()) console.PrintJson(result);
  cleanup();
  return code;
}

}  // namespace prepflow::cli
