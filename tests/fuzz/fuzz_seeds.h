// Writing seed inputs for the fuzz targets (tests/fuzz/corpus/<target>/).
#ifndef PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_
#define PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_

#include <fstream>
#include <string>

namespace prepflow::fuzz {

inline void WriteSeed(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

}  // namespace prepflow::fuzz

#endif  // PREPFLOW_TESTS_FUZZ_FUZZ_SEEDS_H_
