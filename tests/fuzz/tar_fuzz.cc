// Fuzz target: arbitrary bytes as a WebDataset shard. Indexing it (every
// header, GNU long names, pax records, labels) and reading every sample it
// lists must end with an index or an error Status: never a crash, a hang
// (the scan once looped forever on a size that wrapped offset + size past
// 2^64), or memory beyond what the file holds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "pipeline/data/dataset.h"
#include "pipeline/data/tar.h"
#include "tests/fuzz/fuzz_seeds.h"

namespace {

// A shard written by TarWriter with `members`, read back as bytes.
std::string Shard(const std::string& dir,
                  const std::vector<std::pair<std::string, std::string>>& members) {
  const std::string path = dir + "/.shard.tar";
  prepflow::TarWriter w;
  if (!w.Open(path).ok()) std::abort();
  for (const auto& [name, data] : members) {
    if (!w.Add(name, data.data(), data.size()).ok()) std::abort();
  }
  if (!w.Close().ok()) std::abort();
  return prepflow::fuzz::TakeFile(path);
}

}  // namespace

// Seeds: shards of image/label pairs as `prepflow pack` writes them, one
// with a bad label, one cut short, and one with a pax header.
void WriteSeeds(const std::string& dir) {
  const std::string good = Shard(dir, {{"000000000.jpg", std::string(700, 'j')},
                                       {"000000000.cls", "3"},
                                       {"000000001.png", std::string(40, 'p')},
                                       {"000000001.cls", "1"}});
  prepflow::fuzz::WriteSeed(dir, "pairs", good);
  prepflow::fuzz::WriteSeed(dir, "bad-label", Shard(dir, {{"k.jpg", "x"}, {"k.cls", "cat"}}));
  prepflow::fuzz::WriteSeed(dir, "truncated", good.substr(0, 1100));
  // A pax extended header giving the next member's path and size.
  std::string pax(512, '\0');
  const std::string records = "30 path=a/very/long/name.jpg\n11 size=5\n";
  std::string with_pax = Shard(dir, {{"PaxHeader", records}, {"x.jpg", "12345"}});
  with_pax[156] = 'x';  // the first member's type: a pax header
  // Its checksum, recomputed.
  std::fill(with_pax.begin() + 148, with_pax.begin() + 156, ' ');
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(with_pax[i]);
  char text[8];
  std::snprintf(text, sizeof(text), "%06o", sum);
  std::copy(text, text + 7, with_pax.begin() + 148);
  prepflow::fuzz::WriteSeed(dir, "pax", with_pax);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = prepflow::fuzz::TempRoot("tar");
  prepflow::fuzz::OpenAndReadAll(dir, "shard.tar", prepflow::proto::DatasetSpec::FORMAT_WEBDATASET,
                                 data, size);
  return 0;
}
