// Photo-like synthetic images, for the demo and for tests that must not
// depend on external data: smooth gradients, soft-edged shapes and sensor-like
// noise, so JPEG sizes and decode costs resemble real photographs more than
// flat test patterns do.
//
// Thread-safety: pure functions (WriteSyntheticImageFolder writes files).
#ifndef PREPFLOW_PIPELINE_DATA_SYNTHETIC_H_
#define PREPFLOW_PIPELINE_DATA_SYNTHETIC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prepflow {

enum class SyntheticFormat { kJpeg, kProgressiveJpeg, kGrayJpeg, kPng };

// An encoded w x h image drawn from `seed`; `hue` (0-179) tints it.
std::vector<uint8_t> SyntheticImage(int width, int height, uint64_t seed, int hue,
                                    SyntheticFormat format, int quality = 90);

struct SyntheticFolderOptions {
  int classes = 4;
  int images_per_class = 16;
  int min_side = 160;  // long side drawn from [min_side, max_side]
  int max_side = 480;
  uint64_t seed = 1;
  // Every 8th image is progressive, every 11th grayscale, every 13th a PNG
  // (named .jpg when png_as_jpg, as scraped datasets sometimes are).
  bool mixed_formats = true;
  bool png_as_jpg = false;
};

// Writes an ImageFolder (dir/classNNN/imgNNNNNN.jpg) and returns the number
// of images written. Errors name the file that could not be written.
absl::StatusOr<int64_t> WriteSyntheticImageFolder(const std::string& dir,
                                                  const SyntheticFolderOptions& options);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_DATA_SYNTHETIC_H_
