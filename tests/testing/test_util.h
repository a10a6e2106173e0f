// Helpers for prepflow's tests: scratch folders and generated inputs, so that
// no test depends on data outside the repository.
#ifndef PREPFLOW_TESTS_TESTING_TEST_UTIL_H_
#define PREPFLOW_TESTS_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "pipeline/core/op.h"
#include "pipeline/core/sample.h"
#include "pipeline/pipeline.h"

namespace prepflow::testing {

// A fresh folder under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> ReadFile(const std::string& path);

// A photo-like baseline JPEG.
std::vector<uint8_t> Jpeg(int width, int height, uint64_t seed = 1, int quality = 90);
// A CMYK JPEG with an Adobe marker (inverted, as Photoshop writes it), every
// pixel set to (c, m, y, k) as stored.
std::vector<uint8_t> CmykJpeg(int width, int height, uint8_t c, uint8_t m, uint8_t y, uint8_t k);
// A grayscale progressive JPEG of 192 scans (every AC coefficient in a band
// of its own, each in three passes of successive approximation): a "scan
// bomb" that costs a pass over the image per scan.
std::vector<uint8_t> ManyScanJpeg(int width, int height);
// A PNG of a solid colour with `channels` = 1, 3 or 4 (RGBA) and `depth` 8 or 16.
std::vector<uint8_t> SolidPng(int width, int height, int channels, int depth, uint8_t r, uint8_t g,
                              uint8_t b);

// One ustar header block for a regular file `name` whose 12-byte size field
// is `size_field` as given (octal text, or GNU base-256 with the top bit set),
// with a valid checksum: for crafting hostile archives.
std::vector<uint8_t> TarHeader(const std::string& name, const std::vector<uint8_t>& size_field);
// A shard holding 000.jpg (`jpeg`) and 000.cls ("1"), then a member 001.jpg
// whose size, 2^64 - 512, makes offset + size wrap past 2^64, and the
// end-of-archive blocks.
std::vector<uint8_t> TarWithWrappingMember(const std::vector<uint8_t>& jpeg);

// Runs stages [0, end) of `pipeline` on `bytes` as sample (epoch, index);
// returns the output as bytes (the status is checked with EXPECT).
struct Output {
  absl::Status status;
  std::vector<uint8_t> bytes;
  Shape shape;
  ValueKind kind = ValueKind::kEncoded;
  ImageView view;
};
Output RunPipeline(const Pipeline& pipeline, const std::vector<uint8_t>& bytes, int64_t index = 0,
                   uint64_t epoch = 0, int end = -1);

// Pipeline::Create's status for `stages { decode {} } stages { <stage> }`:
// how an op's validation answers a spec.
absl::Status CreateAfterDecode(const std::string& stage);

// A spec an op must refuse, and a part of the message that names the field.
struct SpecError {
  const char* stage;
  const char* message;
};
// Expects CreateAfterDecode(stage) to fail with each message.
void ExpectSpecErrors(std::initializer_list<SpecError> cases);

// Runs `p` on `bytes` (as sample 3 of epoch 1) split at every cut, the
// value crossing the wire, and expects the bytes and shape of a run in one
// piece (`shape`).
void ExpectEveryCutSame(const Pipeline& p, const std::vector<uint8_t>& bytes,
                        const std::vector<int64_t>& shape);

// A pipeline from text-format stages; fails the test on error.
std::unique_ptr<Pipeline> MakePipeline(const std::string& text, uint64_t seed = 0,
                                       DecodeOptions decode = DecodeOptions());

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_TEST_UTIL_H_
