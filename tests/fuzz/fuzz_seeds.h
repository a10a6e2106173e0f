// Writing seed inputs for the fuzz targets (tests/fuzz/corpus/<target>/).
#ifndef PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_
#define PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

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

}  // namespace prepflow::fuzz

#endif  // PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_
