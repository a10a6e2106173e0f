// Brace expansion of shard lists: WebDataset's patterns, bash's answers for
// the forms both share, and hostile patterns refused cheaply.
#include "pipeline/data/braces.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Expand(const std::string& pattern) {
  absl::StatusOr<std::vector<std::string>> names = ExpandBraces(pattern);
  EXPECT_TRUE(names.ok()) << pattern << ": " << names.status();
  return names.ok() ? *names : std::vector<std::string>{};
}

// What bash makes of `pattern` (no spaces or shell specials in it).
std::vector<std::string> Bash(const std::string& pattern) {
  std::string out;
  FILE* f = popen(("bash -c 'printf \"%s\\n\" " + pattern + "'").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  return lines;
}

TEST(Braces, WebDatasetShardRanges) {
  EXPECT_THAT(Expand("s3://b/shard-{000000..000003}.tar"),
              ElementsAre("s3://b/shard-000000.tar", "s3://b/shard-000001.tar",
                          "s3://b/shard-000002.tar", "s3://b/shard-000003.tar"));
  EXPECT_EQ(Expand("shard-{000000..000099}.tar").size(), 100u);
  EXPECT_EQ(Expand("shard-{000000..000099}.tar")[99], "shard-000099.tar");
  EXPECT_THAT(Expand("x{9..11}"), ElementsAre("x9", "x10", "x11"));  // no padding asked for
  EXPECT_THAT(Expand("x{08..10}"), ElementsAre("x08", "x09", "x10"));
}

TEST(Braces, ListsStepsLettersAndSeveralBraces) {
  EXPECT_THAT(Expand("{train,val}/a.tar"), ElementsAre("train/a.tar", "val/a.tar"));
  EXPECT_THAT(Expand("{0..10..5}"), ElementsAre("0", "5", "10"));
  EXPECT_THAT(Expand("{3..1}"), ElementsAre("3", "2", "1"));
  EXPECT_THAT(Expand("{a..c}"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Expand("{a,b{1,2}}"), ElementsAre("a", "b1", "b2"));
  // The leftmost brace varies slowest.
  EXPECT_THAT(Expand("{0..1}-{x,y}"), ElementsAre("0-x", "0-y", "1-x", "1-y"));
  // What is not a list or a range stays literal; escapes are literal.
  EXPECT_THAT(Expand("a{}b"), ElementsAre("a{}b"));
  EXPECT_THAT(Expand("a{x}b"), ElementsAre("a{x}b"));
  EXPECT_THAT(Expand("a\\{0..1\\}"), ElementsAre("a{0..1}"));
  EXPECT_THAT(Expand("plain.tar"), ElementsAre("plain.tar"));
  EXPECT_FALSE(HasBraces("plain.tar"));
  EXPECT_FALSE(HasBraces("a\\{b"));
  EXPECT_TRUE(HasBraces("a{0..1}"));
}

TEST(Braces, AgreesWithBash) {
  for (const char* pattern :
       {"shard-{000..012}.tar", "{a,b}{1..3}", "d/{x,y{0..2..2},z}/f-{07..10}", "{z..w}",
        "p{10..0..3}q", "{A..C}-{1,2}"}) {
    EXPECT_EQ(Expand(pattern), Bash(pattern)) << pattern;
  }
}

TEST(Braces, BadAndHostilePatternsAreRefusedCheaply) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"shard-{0..3.tar", "is never closed"},
      {"shard-0..3}.tar", "closes no '{'"},
      {"{1..a}", "both integers or both letters"},
      {"{1..5..0}", "non-zero integer"},
      {"{1..2..3..4}", "not a range"},
      {"{0..99999999999999}", "names more than 1000000 files"},
      {"{0..999}{0..999}{0..9}", "names more than 1000000 files"},
      {"{0..9223372036854775807}", "both integers or both letters"},
      {std::string(5000, 'a'), "at most 4096"},
      // 100000 names of 4005 bytes each: 400 MB of names.
      {std::string(4000, 'a') + "{00000..99999}", "more than 67108864 bytes of names"},
      {std::string(40, '{') + "a,b" + std::string(40, '}'), "nested over 32 deep"},
  };
  for (const auto& [pattern, error] : cases) {
    absl::StatusOr<std::vector<std::string>> names = ExpandBraces(pattern);
    ASSERT_FALSE(names.ok()) << pattern;
    EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(names.status().message(), HasSubstr(error)) << pattern;
  }
  EXPECT_EQ(ExpandBraces("{0..9}", 10)->size(), 10u);
  EXPECT_FALSE(ExpandBraces("{0..10}", 10).ok());
}

}  // namespace
}  // namespace prepflow
