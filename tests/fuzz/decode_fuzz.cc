// Fuzz target: arbitrary bytes as a sample's encoded file, through the
// imagenet-train pipeline (header parse, decode, crop, flip, normalize).
// Whatever the bytes, the result is OK or an error Status; never a crash, a
// hang, or memory read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "pipeline/core/sample.h"
#include "pipeline/data/synthetic.h"
#include "pipeline/pipeline.h"
#include "tests/fuzz/fuzz_seeds.h"

// Seeds: small generated JPEGs, and one cut short.
void WriteSeeds(const std::string& dir) {
  const std::string tmp = dir + "/.gen";
  prepflow::SyntheticFolderOptions o;
  o.classes = 1;
  o.images_per_class = 3;
  o.min_side = 24;
  o.max_side = 48;
  if (!prepflow::WriteSyntheticImageFolder(tmp, o).ok()) std::abort();
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    prepflow::fuzz::WriteSeed(dir, "jpeg" + std::to_string(n++), bytes);
    if (n == 1) prepflow::fuzz::WriteSeed(dir, "truncated", bytes.substr(0, bytes.size() / 2));
  }
  std::filesystem::remove_all(tmp);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const prepflow::Pipeline* pipeline = [] {
    prepflow::PipelineOptions options;
    options.decode.max_pixels = 4'000'000;  // keep each input fast
    auto p = prepflow::Pipeline::Create(*prepflow::LoadPipelineSpec("imagenet-train"), options);
    if (!p.ok()) std::abort();
    return p->release();
  }();
  prepflow::fuzz::RunOnBytes(*pipeline, data, size);
  return 0;
}
