// FlagSet: the parser every main and benchmark uses.
#include "base/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace prepflow::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// argv for Parse: "cmd" then `args`.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : strings_(std::move(args)) {
    strings_.insert(strings_.begin(), "cmd");
    for (std::string& s : strings_) pointers_.push_back(s.data());
  }
  int argc() { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

struct Flags {
  std::string name = "x";
  int64_t count = 3;
  double rate = 0.5;
  bool verbose = false;
  bool cache = true;
  FlagSet set{"prepflow test", "a test command"};
  Flags() {
    set.String("name", &name, "a name");
    set.Int("count", &count, "a count");
    set.Double("rate", &rate, "a rate");
    set.Bool("verbose", &verbose, "talk more");
    set.Bool("cache", &cache, "keep a cache");
  }
  absl::Status Parse(std::vector<std::string> args) {
    Argv a(std::move(args));
    return set.Parse(a.argc(), a.argv(), 1);
  }
};

TEST(FlagSetTest, TakesBothSpellingsAndBooleans) {
  Flags f;
  ASSERT_TRUE(
      f.Parse({"--name", "a", "--count=7", "--rate", "2.5", "--verbose", "--no-cache"}).ok());
  EXPECT_EQ(f.name, "a");
  EXPECT_EQ(f.count, 7);
  EXPECT_EQ(f.rate, 2.5);
  EXPECT_TRUE(f.verbose);
  EXPECT_FALSE(f.cache);
  ASSERT_TRUE(f.Parse({"--cache=true", "--verbose=false"}).ok());
  EXPECT_TRUE(f.cache);
  EXPECT_FALSE(f.verbose);
}

TEST(FlagSetTest, ErrorsNameTheCommandAndTheFlag) {
  Flags f;
  absl::Status s = f.Parse({"--colour", "red"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("prepflow test: unknown flag --colour"));
  EXPECT_THAT(s.message(), HasSubstr("known: --name --count --rate --verbose --cache"));
  EXPECT_THAT(f.Parse({"--count", "many"}).message(),
              HasSubstr("prepflow test: --count: 'many' is not a valid value"));
  EXPECT_THAT(f.Parse({"--name"}).message(), HasSubstr("flag --name needs a value"));
  EXPECT_THAT(f.Parse({"stray"}).message(), HasSubstr("unexpected argument 'stray'"));
  EXPECT_THAT(f.Parse({"stray"}).message(), Not(HasSubstr("quote it")));
  // An unquoted brace pattern, expanded by the shell: the hint says to quote.
  EXPECT_THAT(f.Parse({"--name", "shard-000000.tar", "shard-000001.tar"}).message(),
              HasSubstr("unexpected argument 'shard-000001.tar' (flags start with --; if the "
                        "shell expanded a pattern given to --name into several words, quote "
                        "it: --name 'shard-{000000..000009}.tar')"));
  // A near miss gets a suggestion instead of the list: a typo, or a name
  // that begins with a known one (torch's --batch-size for --batch).
  EXPECT_THAT(f.Parse({"--cuont", "1"}).message(),
              HasSubstr("unknown flag --cuont; did you mean --count? (prepflow test --help"));
  EXPECT_THAT(f.Parse({"--verbose-mode"}).message(), HasSubstr("did you mean --verbose?"));
  EXPECT_THAT(f.Parse({"--name-of-it", "x"}).message(), HasSubstr("did you mean --name?"));
  // --no- only negates booleans.
  EXPECT_THAT(f.Parse({"--no-count"}).message(), HasSubstr("unknown flag --no-count"));
  EXPECT_EQ(f.count, 3);  // nothing assigned from the failures
}

TEST(FlagSetTest, ParseKnownPassesOverTheRest) {
  Flags f;
  Argv a({"--colour", "red", "--verbose", "--count", "x", "stray"});
  f.set.ParseKnown(a.argc(), a.argv(), 1);
  EXPECT_TRUE(f.verbose);
  EXPECT_EQ(f.count, 3);
}

TEST(FlagSetTest, UsageListsEveryFlagWithItsDefault) {
  Flags f;
  const std::string usage = f.set.Usage();
  EXPECT_THAT(usage, HasSubstr("usage: prepflow test [flags]\na test command"));
  EXPECT_THAT(usage, HasSubstr("--count"));
  EXPECT_THAT(usage, HasSubstr("a count (default 3)"));
  EXPECT_THAT(usage, HasSubstr("keep a cache (default true)"));
  EXPECT_THAT(usage, Not(HasSubstr("talk more (default")));  // false booleans say nothing
}

TEST(FlagSetTest, ParseOrExitGivesTheExitCode) {
  Flags f;
  Argv bad({"--colour"});
  EXPECT_EQ(f.set.ParseOrExit(bad.argc(), bad.argv(), 1), 2);
  Flags g;
  Argv good({"--count", "4"});
  EXPECT_EQ(g.set.ParseOrExit(good.argc(), good.argv(), 1), std::nullopt);
  EXPECT_EQ(g.count, 4);
}

TEST(ParseKeyValuesTest, ParsesPairsAndNamesTheFlagOnError) {
  auto kv = ParseKeyValues("zone=a,rack=3", "--labels");
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)["zone"], "a");
  EXPECT_EQ((*kv)["rack"], "3");
  EXPECT_THAT(ParseKeyValues("zone", "--labels").status().message(),
              HasSubstr("--labels: 'zone' is not key=value"));
}

}  // namespace
}  // namespace prepflow::cli
