// Shard indexes (made by a pass, written as sidecars, read back, refused when
// hostile or stale), windowed reads, and which URLs a worker may read.
#include "pipeline/data/shard_index.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/byte_source.h"
#include "pipeline/data/tar.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;

// Bytes in memory, counting the reads that reach them.
class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  const std::string& name() const override { return name_; }
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override {
    ++reads;
    if (offset > bytes_.size() || length > bytes_.size() - offset) {
      return absl::DataLossError("past the end");
    }
    std::copy(bytes_.begin() + offset, bytes_.begin() + offset + length, dst);
    return absl::OkStatus();
  }
  mutable std::atomic<int> reads{0};

 private:
  const std::string name_ = "mem.tar";
  std::vector<uint8_t> bytes_;
};

// A shard of `n` samples (key.jpg of 700 bytes, key.cls) and odd names.
std::vector<uint8_t> Shard(const TempDir& dir, int n) {
  TarWriter w;
  const std::string path = dir.Join("s.tar");
  EXPECT_TRUE(w.Open(path).ok());
  const std::vector<uint8_t> image(700, 0xAB);
  for (int i = 0; i < n; ++i) {
    const std::string key = absl::StrCat("k", i);
    EXPECT_TRUE(w.Add(absl::StrCat(key, ".jpg"), image.data(), image.size()).ok());
    const std::string label = absl::StrCat(" ", i % 3, "\n");
    EXPECT_TRUE(w.Add(absl::StrCat(key, ".cls"), label.data(), label.size()).ok());
  }
  const std::string odd = "x";
  EXPECT_TRUE(w.Add("tab\there%20.jpg", odd.data(), odd.size()).ok());
  EXPECT_TRUE(w.Add("new\nline.cls", odd.data(), odd.size()).ok());
  EXPECT_TRUE(w.Close().ok());
  return testing::ReadFile(path);
}

TEST(ShardIndexTest, APassFindsEveryMemberAndLabelAndTheSidecarSaysTheSame) {
  TempDir dir;
  MemorySource source(Shard(dir, 40));
  absl::StatusOr<ShardIndex> index = IndexShard(source);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_TRUE(index->broken.ok());
  ASSERT_EQ(index->members.size(), 82u);
  EXPECT_EQ(index->members[0].name, "k0.jpg");
  EXPECT_EQ(index->members[0].offset, 512u);
  EXPECT_EQ(index->members[0].size, 700u);
  EXPECT_EQ(index->members[3].text, "1");  // " 1\n", stripped
  EXPECT_EQ(index->members[80].name, "tab\there%20.jpg");

  const std::string text = FormatShardIndex(*index);
  EXPECT_THAT(text, HasSubstr("tab%09here%2520.jpg"));
  EXPECT_THAT(text, HasSubstr("new%0Aline.cls\tx\n"));
  absl::StatusOr<ShardIndex> back = ParseShardIndex(text, "s.tar.idx", source.size());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->members.size(), index->members.size());
  for (size_t i = 0; i < back->members.size(); ++i) {
    EXPECT_EQ(back->members[i].name, index->members[i].name);
    EXPECT_EQ(back->members[i].offset, index->members[i].offset);
    EXPECT_EQ(back->members[i].size, index->members[i].size);
    EXPECT_EQ(back->members[i].text, index->members[i].text);
  }
}

TEST(ShardIndexTest, AWindowMakesTheHeaderPassAFewLargeReads) {
  TempDir dir;
  MemorySource source(Shard(dir, 200));  // 500 KB, 402 members
  WindowedSource windowed(source, 64 << 10);
  absl::StatusOr<ShardIndex> index = IndexShard(windowed);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->members.size(), 402u);
  EXPECT_LE(source.reads.load(), static_cast<int>(source.size() / (64 << 10)) + 1)
      << "one read per 64 KB window";
  source.reads = 0;
  ASSERT_TRUE(IndexShard(source).ok());
  EXPECT_GE(source.reads.load(), 400) << "without a window, one read per header";
}

TEST(ShardIndexTest, AReadFailureIsAnErrorAndABrokenArchiveIsNot) {
  TempDir dir;
  std::vector<uint8_t> bytes = Shard(dir, 4);
  bytes[512 + 1024 + 148] ^= 1;  // the second member's header checksum
  MemorySource broken(bytes);
  absl::StatusOr<ShardIndex> index = IndexShard(broken);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->members.size(), 1u);
  EXPECT_TRUE(absl::IsDataLoss(index->broken)) << index->broken;

  class Failing : public MemorySource {
   public:
    using MemorySource::MemorySource;
    absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override {
      if (offset > 2000) return absl::UnavailableError("mem.tar: connection reset");
      return MemorySource::ReadAt(offset, length, dst);
    }
  } failing(Shard(dir, 4));
  EXPECT_TRUE(absl::IsUnavailable(IndexShard(failing).status()));
}

TEST(ShardIndexTest, HostileOrStaleSidecarsAreRefusedNamingTheLine) {
  const std::string good = "prepflow-shard-index 1\nshard-bytes 10240\n512\t700\tk0.jpg\n";
  ASSERT_TRUE(ParseShardIndex(good, "s.idx", 10240).ok());
  struct Case {
    std::string text;
    uint64_t shard_bytes;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"", 10240, "line 1: not a prepflow shard index"},
           {"prepflow-shard-index 2\nshard-bytes 1\n", 1, "line 1: not a prepflow shard index"},
           {absl::StrReplaceAll(good, {{"shard-bytes", "bytes"}}), 10240, "line 2"},
           {good, 10241, "another version of the shard (run prepflow index again)"},
           {absl::StrReplaceAll(good, {{"512\t700", "10000\t700"}}), 10240,
            "line 3: member k0.jpg (700 bytes at offset 10000) runs past the shard's end"},
           {absl::StrReplaceAll(good, {{"512\t700", "512\t18446744073709551615"}}), 10240,
            "runs past the shard's end"},
           {absl::StrReplaceAll(good, {{"512\t700", "-5\t700"}}), 10240, "line 3: expected"},
           {absl::StrReplaceAll(good, {{"k0.jpg", "k0%zz.jpg"}}), 10240, "line 3: expected"},
           {absl::StrReplaceAll(good, {{"k0.jpg", ""}}), 10240, "line 3: expected"},
           {good.substr(0, good.size() - 1), 10240, "does not end with a newline"},
           {absl::StrCat(good, "512\t1\tk1.cls\t", std::string(40, '7'), "\n"), 10240,
            "line 4: text is too long for its member"},
           // One picture listed under many keys would be many samples.
           {absl::StrCat(good, "512\t700\tk1.jpg\n"), 10240,
            "line 4: member k1.jpg (at offset 512) overlaps or precedes the one before"},
           {absl::StrCat(good, "1000\t10\tk1.jpg\n"), 10240, "line 4: member k1.jpg"},
       }) {
    absl::StatusOr<ShardIndex> index = ParseShardIndex(c.text, "s.idx", c.shard_bytes);
    ASSERT_FALSE(index.ok()) << c.text;
    EXPECT_TRUE(absl::IsDataLoss(index.status())) << index.status();
    EXPECT_THAT(std::string(index.status().message()), HasSubstr("s.idx")) << c.text;
    EXPECT_THAT(std::string(index.status().message()), HasSubstr(c.error)) << c.text;
  }
}

// A sidecar of millions of tiny lines, or a shard of millions of members, is
// refused before its index outgrows memory.
TEST(ShardIndexTest, TooManyMembersAreRefused) {
  std::string text = "prepflow-shard-index 1\nshard-bytes 1024\n";
  for (size_t i = 0; i <= kMaxShardMembers; ++i) text += "0\t0\tx\n";
  absl::StatusOr<ShardIndex> parsed = ParseShardIndex(text, "big.idx", 1024);
  ASSERT_TRUE(absl::IsDataLoss(parsed.status())) << parsed.status();
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("over 4194304 members"));

  // A source that claims a shard of 2^22 + 1 empty members, each a header.
  class Members : public ByteSource {
   public:
    const std::string& name() const override { return name_; }
    uint64_t size() const override { return (kMaxShardMembers + 1) * 512; }
    absl::Status ReadAt(uint64_t offset, size_t length, uint8_t* dst) const override {
      // Every block is the same valid header of an empty file named "m".
      static const std::vector<uint8_t> header = [] {
        std::vector<uint8_t> h(512, 0);
        h[0] = 'm';
        std::memcpy(&h[100], "0000644", 7);
        std::memcpy(&h[124], "00000000000", 11);
        h[156] = '0';
        std::memset(&h[148], ' ', 8);
        unsigned sum = 0;
        for (uint8_t b : h) sum += b;
        std::snprintf(reinterpret_cast<char*>(&h[148]), 8, "%06o", sum);
        return h;
      }();
      for (size_t i = 0; i < length; ++i) dst[i] = header[(offset + i) % 512];
      return absl::OkStatus();
    }

   private:
    std::string name_ = "huge.tar";
  } members;
  WindowedSource windowed(members, 8 << 20);
  absl::StatusOr<ShardIndex> index = IndexShard(windowed);
  ASSERT_TRUE(absl::IsResourceExhausted(index.status())) << index.status();
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("huge.tar has over"));
}

TEST(UrlTest, AUrlIsASchemeAndAuthority) {
  EXPECT_TRUE(IsUrl("s3://bucket/x"));
  EXPECT_TRUE(IsUrl("https://h/x.tar"));
  EXPECT_FALSE(IsUrl("/data/x.tar"));
  EXPECT_FALSE(IsUrl("shards/a://b"));
  EXPECT_FALSE(IsUrl("://x"));
  EXPECT_FALSE(IsUrl("1x://x"));
}

TEST(UrlTest, OnlyUrlsBelowAnAllowedPrefixMayBeRead) {
  const std::vector<std::string> prefixes = {"https://data.example.com/shards",
                                             "s3://bucket/train/"};
  for (const std::string url : {"https://data.example.com/shards/a.tar",
                                "https://data.example.com/shards", "s3://bucket/train/x/y.tar"}) {
    EXPECT_TRUE(CheckUrlAllowed(url, prefixes).ok()) << url;
  }
  for (const std::string url : {
           "https://data.example.com/shards-private/a.tar",  // not at a boundary
           "https://data.example.com.evil.org/shards/a.tar",
           "https://data.example.com/shards/../secret",      // squashed by libcurl
           "https://data.example.com/shards/%2e%2e/secret",  // the same, encoded
           "https://data.example.com/shards/..%2Fsecret",
           "https://data.example.com/shards/./a.tar",
           "https://data.example.com/shards/a\\..\\b",
           "https://user:pw@data.example.com/shards/a.tar",
           "https://data.example.com/shards/a.tar#frag",
           "https://data.example.com/shards/a\n.tar",
           "https://data.example.com/shards/a b.tar",
           "s3://bucket/training/a.tar",
           "s3://other/train/a.tar",
           "http://data.example.com/shards/a.tar",
       }) {
    const absl::Status s = CheckUrlAllowed(url, prefixes);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << url << ": " << s;
  }
  const absl::Status none = CheckUrlAllowed("s3://bucket/train/a.tar", {});
  EXPECT_TRUE(absl::IsPermissionDenied(none));
  EXPECT_THAT(std::string(none.message()), HasSubstr("no --allow-url-prefix"));
  EXPECT_THAT(std::string(none.message()), HasSubstr("s3://bucket/train/a.tar"));
}

}  // namespace
}  // namespace prepflow
