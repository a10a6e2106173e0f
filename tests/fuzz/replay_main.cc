// Runs a fuzz target's LLVMFuzzerTestOneInput over files, without libFuzzer:
// the seed corpus and every crasher kept as a regression (tests/fuzz/). A
// normal build runs it in ctest; a crash or sanitizer report fails it.
//
//   <target>_replay DIR_OR_FILE...
//   <target>_replay --write-seeds DIR   writes the target's seed corpus
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Each target's seeds, made with the real encoders (fuzz_seeds.h).
void WriteSeeds(const std::string& dir);

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
    std::filesystem::create_directories(argv[2]);
    WriteSeeds(argv[2]);
    return 0;
  }
  int files = 0;
  auto run = [&](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++files;
  };
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      // Dot files (.gitkeep, which keeps an empty folder in git) are not inputs.
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') run(e.path());
      }
    } else if (std::filesystem::exists(p)) {
      run(p);
    } else {
      // A corpus that is not there would make this replay pass on nothing.
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 1;
    }
  }
  // The empty input too: the one a target must always survive.
  LLVMFuzzerTestOneInput(nullptr, 0);
  std::printf("replayed %d inputs\n", files + 1);
  return 0;
}
