// Writing seed inputs for the fuzz targets (tests/fuzz/corpus/<target>/).
#ifndef PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_
#define PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_

#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pipeline/data/dataset.h"
#include "pipeline/pipeline.h"

namespace prepflow::fuzz {

inline void WriteSeed(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

// Runs `pipeline` on `size` bytes as one sample's encoded file, the bytes in
// a buffer of their own as a dataset read would leave them. The status is
// the target's to ignore: only crashes, hangs and leaks count.
inline void RunOnBytes(const Pipeline& pipeline, const uint8_t* data, size_t size) {
  static Workspace* ws = new Workspace;
  uint8_t* copy = ws->encoded.Reserve(size + 1);
  if (size > 0) std::memcpy(copy, data, size);
  Sample s;
  s.index = 1;
  s.kind = ValueKind::kEncoded;
  s.data = copy;
  s.size = size;
  s.shape = {static_cast<int64_t>(size)};
  (void)pipeline.Run(0, pipeline.num_stages(), s, *ws);
}

// The bytes of the file at `path`, which is then removed (a seed made on
// disk by a tool).
inline std::string TakeFile(const std::string& path) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove(path);
  return bytes;
}

// A folder of the target's own under /tmp ("prepflow-fuzz-<name>-XXXXXX"),
// removed at exit.
inline std::string TempRoot(const std::string& name) {
  std::string path = "/tmp/prepflow-fuzz-" + name + "-XXXXXX";
  if (mkdtemp(path.data()) == nullptr) std::abort();
  static std::vector<std::string>* roots = [] {
    static auto* all = new std::vector<std::string>;
    std::atexit([] {
      for (const std::string& r : *all) std::filesystem::remove_all(r);
    });
    return all;
  }();
  roots->push_back(path);
  return path;
}

// Writes `size` bytes as `dir`/`file`, opens it as a dataset of `format`
// confined to `dir` (1 MiB a file) and reads every sample it lists.
inline void OpenAndReadAll(const std::string& dir, const std::string& file,
                           proto::DatasetSpec::Format format, const uint8_t* data, size_t size) {
  const std::string path = dir + "/" + file;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  proto::DatasetSpec spec;
  spec.set_path(path);
  spec.set_format(format);
  spec.set_max_file_bytes(1 << 20);
  DatasetOptions options;
  options.confine_to = dir;
  auto ds = OpenDataset(spec, options);
  if (!ds.ok()) return;
  Buffer buf;
  for (int64_t i = 0; i < (*ds)->size(); ++i) {
    size_t n = 0;
    (void)(*ds)->Read(i, &buf, &n);
    (void)(*ds)->SamplePath(i);
    if ((*ds)->has_texts()) (void)(*ds)->text(i);
    if ((*ds)->has_durations()) (void)(*ds)->duration(i);
    (void)(*ds)->window(i);
  }
}

}  // namespace prepflow::fuzz

#endif  // PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_
