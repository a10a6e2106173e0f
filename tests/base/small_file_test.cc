// ReadSmallRegularFile: a file it is given may be anything; only a small
// regular file is read, and nothing blocks.
#include "base/small_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

class SmallFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/prepflow-small-file-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(SmallFileTest, ReadsASmallRegularFileWhole) {
  std::ofstream(dir_ + "/f") << "1234\n";
  const absl::StatusOr<std::string> text = ReadSmallRegularFile(dir_ + "/f", 5);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "1234\n");
}

TEST_F(SmallFileTest, RefusesWhatIsMissingLargeOrNotAFileWithoutBlocking) {
  EXPECT_TRUE(absl::IsNotFound(ReadSmallRegularFile(dir_ + "/none", 5).status()));
  std::ofstream(dir_ + "/big") << "123456";
  EXPECT_THAT(ReadSmallRegularFile(dir_ + "/big", 5).status().message(),
              HasSubstr("not a regular file of at most 5 bytes"));
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadSmallRegularFile(dir_ + "/fifo", 5).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadSmallRegularFile("/dev/zero", 5).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(ReadSmallRegularFile(dir_, 5).status()));
}

}  // namespace
}  // namespace prepflow
