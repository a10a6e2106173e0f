// The baseline the local pipeline must beat: read each file of a dataset and
// decode the whole image to RGB with libjpeg-turbo (TurboJPEG, default
// accurate IDCT and fancy upsampling), nothing else. One thread.
//
//   decode_loop --data DIR [--epochs N]      prints one JSON line
#include <turbojpeg.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "base/flags.h"
#include "pipeline/core/profiler.h"
#include "pipeline/data/dataset.h"

int main(int argc, char** argv) {
  std::string data;
  int epochs = 1;
  prepflow::cli::FlagSet flags("decode_loop",
                               "Reads and fully decodes every file of a dataset, one thread.");
  flags.String("data", &data, "an ImageFolder or WebDataset shards");
  flags.Int("epochs", &epochs, "passes over the dataset");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv, 1)) return *exit;
  if (data.empty()) {
    std::fprintf(stderr, "decode_loop: --data is required\n");
    return 2;
  }
  prepflow::proto::DatasetSpec spec;
  spec.set_path(data);
  auto ds = prepflow::OpenDataset(spec);
  if (!ds.ok()) {
    std::fprintf(stderr, "decode_loop: %s\n", std::string(ds.status().message()).c_str());
    return 1;
  }
  tjhandle tj = tjInitDecompress();
  prepflow::Buffer file;
  std::vector<unsigned char> rgb;
  int64_t images = 0, errors = 0;
  double megapixels = 0;
  const int64_t t0 = prepflow::WallNanos();
  const int64_t c0 = prepflow::ProcessCpuNanos();
  for (int e = 0; e < epochs; ++e) {
    for (int64_t i = 0; i < (*ds)->size(); ++i) {
      size_t size = 0;
      if (!(*ds)->Read(i, &file, &size).ok()) {
        ++errors;
        continue;
      }
      int w = 0, h = 0, subsamp = 0, colorspace = 0;
      if (tjDecompressHeader3(tj, file.data(), size, &w, &h, &subsamp, &colorspace) != 0) {
        ++errors;
        continue;
      }
      rgb.resize(static_cast<size_t>(w) * h * 3);
      if (tjDecompress2(tj, file.data(), size, rgb.data(), w, 0, h, TJPF_RGB, 0) != 0) {
        ++errors;
        continue;
      }
      ++images;
      megapixels += w * static_cast<double>(h) * 1e-6;
    }
  }
  const double seconds = (prepflow::WallNanos() - t0) * 1e-9;
  const double cpu_seconds = (prepflow::ProcessCpuNanos() - c0) * 1e-9;
  tjDestroy(tj);
  std::printf(
      "{\"program\":\"decode_loop\",\"images\":%lld,\"errors\":%lld,\"seconds\":%.6f,"
      "\"images_per_s\":%.3f,\"cpu_seconds\":%.6f,\"images_per_cpu_s\":%.3f,"
      "\"megapixels_per_s\":%.3f}\n",
      static_cast<long long>(images), static_cast<long long>(errors), seconds, images / seconds,
      cpu_seconds, images / cpu_seconds, megapixels / seconds);
  return 0;
}
