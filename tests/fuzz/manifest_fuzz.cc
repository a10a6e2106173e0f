// Fuzz target: arbitrary bytes as a manifest, JSON Lines (NeMo's, or of
// videos with start and end times) and CSV (a header row, quoted fields), in
// a data root holding three small files. Opening it (every line parsed and
// checked) and reading every sample it lists must end with a dataset or an
// error Status naming the line: never a crash, a hang, deep recursion
// (nested brackets), or a read outside the data root.
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
  prepflow::fuzz::WriteSeed(dir, "video",
                            "{\"video_filepath\": \"c.mp4\", \"label\": 3, \"start\": 1.5, "
                            "\"end\": 4}\n{\"path\": \"c.mp4\", \"label\": 0}\n");
  prepflow::fuzz::WriteSeed(
      dir, "csv",
      "\xEF\xBB\xBFpath,label,start,end\r\nc.mp4,\"jump, \"\"high\"\"\",0.5,2\r\n"
      "c.mp4,run,,\n\"c.mp4\nx\",a,1,\n");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string root = prepflow::fuzz::TempRoot("manifest");
    std::filesystem::create_directories(root + "/sub");
    std::ofstream(root + "/a.wav") << "RIFF";
    std::ofstream(root + "/sub/b.flac") << "fLaC";
    std::ofstream(root + "/c.mp4") << "ftyp";
    return root;
  }();
  for (const char* name : {"m.jsonl", "m.csv"}) {
    prepflow::fuzz::OpenAndReadAll(dir, name, prepflow::proto::DatasetSpec::FORMAT_MANIFEST, data,
                                   size);
  }
  return 0;
}
