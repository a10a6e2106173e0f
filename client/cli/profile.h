// One thread's profile of a seeded subset of a dataset: what `prepflow
// profile` prints and what `prepflow plan` and `prepflow strategies` plan with.
//
// Thread-safety: called from main's thread only.
#ifndef PREPFLOW_CLIENT_CLI_PROFILE_H_
#define PREPFLOW_CLIENT_CLI_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "client/cli/console.h"
#include "pipeline/core/image_decode.h"
#include "pipeline/core/profiler.h"

namespace prepflow::cli {

// One thread's profile of a seeded subset of a dataset: each stage's CPU
// time and output size per sample ("read" first).
struct Profile {
  std::string pipeline, pipeline_debug, dataset;
  int64_t samples = 0, errors = 0;
  double seconds = 0;
  std::vector<StageStats> stages;
};

// What `prepflow profile` and `prepflow plan --data` profile.
struct ProfileFlags {
  std::string data, format = "auto", pipeline = "imagenet-train", plugins, fidelity = "exact";
  int64_t samples = 0;
  uint64_t seed = 0;
  int64_t max_pixels = DecodeOptions().max_pixels;

  void Register(FlagSet& f, const char* data_help, const char* samples_help) {
    f.String("data", &data, data_help);
    f.String("format", &format, "auto | imagefolder | wds");
    f.String("pipeline", &pipeline, kPipelineHelp);
    f.String("plugin", &plugins, kPluginHelp);
    f.String("fidelity", &fidelity, kFidelityHelp);
    f.Int("samples", &samples, samples_help);
    f.Uint("seed", &seed, "job seed");
    f.Int("max-pixels", &max_pixels, "refuse images whose header claims more pixels");
  }
};

// Profiles pf.samples samples of pf.data (a seeded subset) on one thread.
absl::StatusOr<Profile> ProfileDataset(const ProfileFlags& pf);

}  // namespace prepflow::cli

#endif  // PREPFLOW_CLIENT_CLI_PROFILE_H_
