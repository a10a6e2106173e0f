// Fuzz target: arbitrary bytes as a JSON Lines manifest (NeMo's), in a data
// root holding two small files. Opening it (every line parsed and checked)
// and reading every sample it lists must end with a dataset or an error
// Status naming the line: never a crash, a hang, deep recursion (nested
// brackets), or a read outside the data root.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "pipeline/data/dataset.h"
#include "tests/fuzz/fuzz_seeds.h"

void WriteSeeds(const std::string& dir) {
  prepflow::fuzz::WriteSeed(
      dir, "nemo",
      "{\"audio_filepath\": \"a.wav\", \"duration\": 1.5, \"text\": \"go ahead\"}\n"
      "{\"audio_filepath\": \"sub/b.flac\", \"duration\": 0.25, \"text\": \"n\\u00famero\"}\n");
  prepflow::fuzz::WriteSeed(dir, "labels",
                            "{\"audio_filepath\": \"a.wav\", \"label\": \"yes\"}\n\n"
                            "{\"audio_filepath\": \"/etc/passwd\", \"label\": \"no\"}\r\n");
  prepflow::fuzz::WriteSeed(dir, "bad-line",
                            "{\"audio_filepath\": \"a.wav\"}\n{\"audio_filepath\": 5, "
                            "\"offset\": 1}\n[[[[\n");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/prepflow-fuzz-manifest-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    static std::string root = tmpl;
    std::filesystem::create_directories(root + "/sub");
    std::ofstream(root + "/a.wav") << "RIFF";
    std::ofstream(root + "/sub/b.flac") << "fLaC";
    std::atexit([] { std::filesystem::remove_all(root); });
    return root;
  }();
  const std::string path = dir + "/m.jsonl";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  prepflow::proto::DatasetSpec spec;
  spec.set_path(path);
  spec.set_format(prepflow::proto::DatasetSpec::FORMAT_MANIFEST);
  spec.set_max_file_bytes(1 << 20);
  prepflow::DatasetOptions options;
  options.confine_to = dir;
  auto ds = prepflow::OpenDataset(spec, options);
  if (!ds.ok()) return 0;
  prepflow::Buffer buf;
  for (int64_t i = 0; i < (*ds)->size(); ++i) {
    size_t n = 0;
    (void)(*ds)->Read(i, &buf, &n);
    (void)(*ds)->SamplePath(i);
    if ((*ds)->has_texts()) (void)(*ds)->text(i);
    if ((*ds)->has_durations()) (void)(*ds)->duration(i);
  }
  return 0;
}
