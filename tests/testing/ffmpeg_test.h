// A test fixture for tests of video code on clips the ffmpeg tool makes at
// test time (skipped where the tool is missing; scripts/setup.sh installs
// it), in a temporary folder of the test's own.
#ifndef PREPFLOW_TESTS_TESTING_FFMPEG_TEST_H_
#define PREPFLOW_TESTS_TESTING_FFMPEG_TEST_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace prepflow::testing {

class FfmpegTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("ffmpeg -version > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "needs the ffmpeg tool (scripts/setup.sh installs it)";
    }
  }

  // Runs ffmpeg with `args` writing `name` in the temporary folder; its
  // bytes. (-nostdin: ffmpeg reads keys from a terminal, and waits for a
  // stdin that never ends.)
  std::vector<uint8_t> Make(const std::string& args, const std::string& name) {
    const std::string out = dir_.Join(name);
    const std::string command =
        absl::StrCat("ffmpeg -nostdin -loglevel error -y ", args, " '", out, "' > /dev/null 2>&1");
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return ReadFile(out);
  }

  // A 2 s, 25 fps, 32x32 lossless H.264 clip whose frame k of 50 has luma
  // 16 + 4k: a frame's brightness tells which it is (RampFrames).
  std::vector<uint8_t> MakeRamp(const std::string& name = "ramp.mkv") {
    return Make(
        "-f lavfi -i color=c=black:size=32x32:rate=25 -t 2 -vf geq=lum='16+4*N':cb=128:cr=128 "
        "-c:v libx264 -qp 0 -pix_fmt yuv444p",
        name);
  }

  // Which ramp frame each of a clip's `frames` frames (RGB, `size` bytes in
  // all) is, from its first red byte (limited-range luma to RGB).
  static std::vector<int> RampFrames(const uint8_t* data, size_t size, int64_t frames) {
    std::vector<int> out;
    const size_t bytes = size / frames;
    for (int64_t t = 0; t < frames; ++t) {
      out.push_back(static_cast<int>(std::lround(data[bytes * t] * 219.0 / 255 / 4)));
    }
    return out;
  }

  TempDir dir_;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_FFMPEG_TEST_H_
