// A test fixture for tests of video code on clips the ffmpeg tool makes at
// test time (skipped where the tool is missing; scripts/setup.sh installs
// it), in a temporary folder of the test's own.
#ifndef PREPFLOW_TESTS_TESTING_FFMPEG_TEST_H_
#define PREPFLOW_TESTS_TESTING_FFMPEG_TEST_H_

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

  TempDir dir_;
};

}  // namespace prepflow::testing

#endif  // PREPFLOW_TESTS_TESTING_FFMPEG_TEST_H_
