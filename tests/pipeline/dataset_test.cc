#include "pipeline/data/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/pack.h"
#include "pipeline/data/tar.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::prepflow::testing::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Dataset> Open(const std::string& path,
                              proto::DatasetSpec::Format format = proto::DatasetSpec::FORMAT_AUTO) {
  proto::DatasetSpec spec;
  spec.set_path(path);
  spec.set_format(format);
  auto ds = OpenDataset(spec);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? *std::move(ds) : nullptr;
}

std::string Bytes(const Dataset& ds, int64_t i) {
  Buffer buf;
  size_t size = 0;
  EXPECT_TRUE(ds.Read(i, &buf, &size).ok());
  return std::string(reinterpret_cast<const char*>(buf.data()), size);
}

std::vector<uint8_t> Text(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::vector<std::string> Paths(const Dataset& ds) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < ds.size(); ++i)
    out.push_back(ds.SamplePath(i).substr(ds.root().size() + 1));
  return out;
}

TEST(ImageFolder, OrdersLikeTorchvision) {
  TempDir dir;
  // Classes sorted by name; within a class, os.walk tuples sorted by
  // directory path, files sorted; only image extensions (case-insensitive).
  for (const char* f : {"b/2.jpg", "b/10.JPG", "b/sub/1.png", "b/sub-x/0.jpeg", "b/notes.txt",
                        "b/sub/deeper/5.jpg", "a/z.webp", "a/y.bmp", "c/.hidden.jpg"}) {
    WriteFile(dir.Join(f), Text(f));
  }
  mkdir(dir.Join("empty").c_str(), 0755);
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  EXPECT_STREQ(ds->format(), "imagefolder");
  EXPECT_THAT(ds->classes(), ElementsAre("a", "b", "c", "empty"));
  // "b/sub" < "b/sub-x" < "b/sub/deeper" as strings ('-' sorts before '/'):
  // not the order a depth-first walk would give.
  EXPECT_THAT(Paths(*ds), ElementsAre("a/y.bmp", "a/z.webp", "b/10.JPG", "b/2.jpg", "b/sub/1.png",
                                      "b/sub-x/0.jpeg", "b/sub/deeper/5.jpg", "c/.hidden.jpg"));
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < ds->size(); ++i) labels.push_back(ds->label(i));
  EXPECT_THAT(labels, ElementsAre(0, 0, 1, 1, 1, 1, 1, 2));
  EXPECT_EQ(Bytes(*ds, 3), "b/2.jpg");
}

TEST(ImageFolder, ErrorsNameThePath) {
  TempDir dir;
  proto::DatasetSpec spec;
  spec.set_path(dir.Join("missing"));
  auto missing = OpenDataset(spec);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.Join("missing")));

  spec.set_path(dir.path());
  EXPECT_THAT(OpenDataset(spec).status().message(), HasSubstr("no class folders"));
  WriteFile(dir.Join("cls/readme.txt"), Text("x"));
  EXPECT_THAT(OpenDataset(spec).status().message(), HasSubstr("no image files"));

  WriteFile(dir.Join("cls/a.jpg"), Text("abc"));
  auto ds = Open(dir.path());
  ASSERT_NE(ds, nullptr);
  unlink(dir.Join("cls/a.jpg").c_str());
  Buffer buf;
  size_t size;
  const absl::Status gone = ds->Read(0, &buf, &size);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.message(), HasSubstr(dir.Join("cls/a.jpg")));
}

TEST(WebDataset, PackKeepsOrderLabelsAndBytes) {
  TempDir dir;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 5; ++i) {
      WriteFile(dir.Join(absl::StrCat("src/c", c, "/", i, c == 1 ? ".png" : ".jpg")),
                Text(absl::StrCat("image ", c, "/", i)));
    }
  }
  auto src = Open(dir.Join("src"));
  ASSERT_NE(src, nullptr);
  PackOptions options;
  options.out_dir = dir.Join("shards");
  options.samples_per_shard = 4;
  int calls = 0;
  auto stats = PackWebDataset(*src, options, [&](const PackStats&) { ++calls; });
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->samples, 15);
  EXPECT_EQ(stats->shards, 4);
  EXPECT_EQ(calls, 15);

  auto wds = Open(dir.Join("shards"));
  ASSERT_NE(wds, nullptr);
  EXPECT_STREQ(wds->format(), "wds");
  ASSERT_EQ(wds->size(), src->size());
  for (int64_t i = 0; i < src->size(); ++i) {
    EXPECT_EQ(wds->label(i), src->label(i));
    EXPECT_EQ(Bytes(*wds, i), Bytes(*src, i));
    EXPECT_EQ(wds->Extension(i), src->Extension(i));
  }
  EXPECT_THAT(wds->SamplePath(5), HasSubstr("shard-000001.tar:000000005.png"));
  // A sample's first bytes and whole size (what a header probe reads), from
  // a file and from a shard member alike.
  for (const Dataset* ds : {src.get(), wds.get()}) {
    for (int64_t i = 0; i < ds->size(); ++i) {
      const std::string all = Bytes(*ds, i);
      for (const size_t head : {size_t{0}, size_t{5}, all.size() + 100}) {
        Buffer buf;
        size_t size = 99;
        uint64_t whole = 0;
        ASSERT_TRUE(ds->ReadHead(i, head, &buf, &size, &whole).ok()) << ds->SamplePath(i);
        EXPECT_EQ(whole, all.size());
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), size), all.substr(0, head))
            << ds->SamplePath(i) << " head " << head;
      }
    }
  }
  // The class names travel in the shards (key.class).
  EXPECT_EQ(wds->classes(), src->classes());
  // One shard file alone is a dataset too; it names only the classes it
  // holds, which are not 0..n-1 here, so it has no class list.
  auto one = Open(dir.Join("shards/shard-000003.tar"));
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->size(), 3);
  EXPECT_EQ(one->label(0), 2);
  EXPECT_TRUE(one->classes().empty());
}

// Class names that contradict each other are not used, with a warning.
TEST(WebDataset, ContradictoryClassNamesAreDropped) {
  TempDir dir;
  TarWriter w;
  ASSERT_TRUE(w.Open(dir.Join("s.tar")).ok());
  const std::string image = "x", zero = "0", cat = "cat", dog = "dog";
  for (const auto& [key, name] : {std::pair<std::string, std::string>{"a", cat}, {"b", dog}}) {
    ASSERT_TRUE(w.Add(key + ".jpg", image.data(), image.size()).ok());
    ASSERT_TRUE(w.Add(key + ".cls", zero.data(), zero.size()).ok());
    ASSERT_TRUE(w.Add(key + ".class", name.data(), name.size()).ok());
  }
  ASSERT_TRUE(w.Close().ok());
  auto ds = Open(dir.Join("s.tar"));
  ASSERT_NE(ds, nullptr);
  EXPECT_TRUE(ds->classes().empty());
  ASSERT_EQ(ds->index_warnings().size(), 1u);
  EXPECT_THAT(ds->index_warnings()[0], HasSubstr("label 0 is named both 'cat' and 'dog'"));
}

// 15 images in 3 classes, packed 4 to a shard: shards 000000 to 000003.
std::string PackedShards(const TempDir& dir) {
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 5; ++i) {
      WriteFile(dir.Join(absl::StrCat("src/c", c, "/", i, ".jpg")),
                Text(absl::StrCat("image ", c, "/", i)));
    }
  }
  auto src = Open(dir.Join("src"));
  EXPECT_EQ(mkdir(dir.Join("data").c_str(), 0755), 0);
  PackOptions options;
  options.out_dir = dir.Join("data/shards");
  options.samples_per_shard = 4;
  EXPECT_TRUE(PackWebDataset(*src, options, nullptr).ok());
  return options.out_dir;
}

TEST(WebDataset, ABracePatternNamesShards) {
  TempDir dir;
  const std::string shards = PackedShards(dir);
  auto all = Open(absl::StrCat(shards, "/shard-{000000..000003}.tar"));
  auto folder = Open(shards);
  ASSERT_NE(all, nullptr);
  ASSERT_NE(folder, nullptr);
  // Every shard by pattern is the folder: the same root, samples and
  // fingerprint, so a worker given either agrees with a client given the other.
  EXPECT_EQ(all->root(), folder->root());
  EXPECT_EQ(all->fingerprint(), folder->fingerprint());
  ASSERT_EQ(all->size(), 15);
  EXPECT_EQ(Bytes(*all, 14), Bytes(*folder, 14));
  // A subset, in the pattern's order.
  auto some = Open(absl::StrCat(shards, "/shard-{000003,000001}.tar"));
  ASSERT_NE(some, nullptr);
  ASSERT_EQ(some->size(), 3 + 4);
  EXPECT_THAT(some->SamplePath(0), HasSubstr("shard-000003.tar:000000012.jpg"));
  EXPECT_THAT(some->SamplePath(3), HasSubstr("shard-000001.tar:000000004.jpg"));
  EXPECT_NE(some->fingerprint(), all->fingerprint());
  // Shards in several folders share the deepest folder above them.
  ASSERT_EQ(rename(absl::StrCat(shards, "/shard-000003.tar").c_str(),
                   dir.Join("data/shard-000003.tar").c_str()),
            0);
  auto spread = Open(dir.Join("data/{shards/shard-000000,shard-000003}.tar"));
  ASSERT_NE(spread, nullptr);
  EXPECT_EQ(spread->root(), dir.Join("data"));
  EXPECT_EQ(spread->size(), 4 + 3);
}

TEST(WebDataset, BadShardPatternsNameTheProblem) {
  TempDir dir;
  const std::string shards = PackedShards(dir);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {shards + "/shard-{000000..000009}.tar", "shard-000004.tar"},  // missing: named
      {shards + "/shard-{000000..000001}.png", "not a .tar shard"},
      {shards + "/shard-{000000..000001.tar", "is never closed"},
      {shards + "/shard-{0..99999999}.tar", "names more than 1000000 files"},
  };
  for (const auto& [pattern, error] : cases) {
    proto::DatasetSpec spec;
    spec.set_path(pattern);
    auto ds = OpenDataset(spec);
    ASSERT_FALSE(ds.ok()) << pattern;
    EXPECT_THAT(ds.status().message(), HasSubstr(error)) << pattern;
  }
  proto::DatasetSpec spec;
  spec.set_path(shards + "/shard-{000000..000001}.tar");
  spec.set_format(proto::DatasetSpec::FORMAT_IMAGEFOLDER);
  EXPECT_THAT(OpenDataset(spec).status().message(), HasSubstr("--format wds"));
  // Below a data root, a pattern that reaches out of it is refused, as a
  // path would be.
  WriteFile(dir.Join("outside.tar"), Text("x"));
  DatasetOptions confined;
  confined.confine_to = dir.Join("data");
  spec.set_format(proto::DatasetSpec::FORMAT_AUTO);
  spec.set_path(shards + "/{shard-000000.tar,../../outside.tar}");
  auto escaped = OpenDataset(spec, confined);
  ASSERT_FALSE(escaped.ok());
  EXPECT_EQ(escaped.status().code(), absl::StatusCode::kPermissionDenied) << escaped.status();
  spec.set_path(shards + "/shard-{000000..000001}.tar");
  auto inside = OpenDataset(spec, confined);
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ((*inside)->size(), 8);
}

// A mixture (DatasetSpec.mix): its sources' samples in order, each read
// from its source; a worker's confinement holds for every source; a spec
// with more sources than any mixture needs is refused before any is opened.
TEST(Mixture, ReadsItsSourcesInOrderAndRefusesWhatIsOutOfBounds) {
  TempDir dir;
  WriteFile(dir.Join("data/a/cat/1.jpg"), Text("a1"));
  WriteFile(dir.Join("data/a/cat/2.jpg"), Text("a2"));
  WriteFile(dir.Join("data/b/dog/1.jpg"), Text("b1"));
  proto::DatasetSpec spec;
  for (const char* source : {"data/a", "data/b"}) {
    proto::MixSource* m = spec.add_mix();
    m->set_path(dir.Join(source));
    m->set_weight(1);
  }
  auto ds = OpenDataset(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_THAT((*ds)->mix_sizes(), ElementsAre(2, 1));
  EXPECT_EQ(Bytes(**ds, 1), "a2");
  EXPECT_EQ(Bytes(**ds, 2), "b1");
  EXPECT_THAT((*ds)->SamplePath(2), HasSubstr("b/dog/1.jpg"));
  DatasetOptions confined;
  confined.confine_to = dir.Join("data/a");
  auto outside = OpenDataset(spec, confined);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied) << outside.status();
  EXPECT_THAT(std::string(outside.status().message()), HasSubstr("--mix: source 1"));
  while (spec.mix_size() <= kMaxMixSources) *spec.add_mix() = spec.mix(0);
  auto many = OpenDataset(spec);
  EXPECT_THAT(std::string(many.status().message()), HasSubstr("at most 1024 sources"));
}

TEST(WebDataset, ReadsArchivesWrittenByGnuTar) {
  if (system("tar --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no tar";
  TempDir dir;
  const std::string long_dir = std::string(120, 'd');  // forces GNU/pax long names
  WriteFile(dir.Join("in/" + long_dir + "/s1.jpg"), Text("one"));
  WriteFile(dir.Join("in/" + long_dir + "/s1.cls"), Text("7\n"));
  WriteFile(dir.Join("in/" + long_dir + "/s2.JPEG"), Text("two"));
  WriteFile(dir.Join("in/" + long_dir + "/s2.cls"), Text("3"));
  WriteFile(dir.Join("in/" + long_dir + "/s3.json"), Text("{}"));  // no image: not a sample
  for (const char* fmt : {"gnu", "pax", "ustar"}) {
    const std::string tar = dir.Join(absl::StrCat(fmt, ".tar"));
    const std::string cmd = absl::StrCat("cd ", dir.Join("in"), " && tar --format=", fmt,
                                         " --sort=name -cf ", tar, " ", long_dir, " 2>/dev/null");
    if (system(cmd.c_str()) != 0) {
      EXPECT_STREQ(fmt, "ustar") << "tar refused the long name only in ustar";
      continue;
    }
    auto ds = Open(tar, proto::DatasetSpec::FORMAT_WEBDATASET);
    ASSERT_NE(ds, nullptr) << fmt;
    ASSERT_EQ(ds->size(), 2) << fmt;
    EXPECT_EQ(ds->label(0), 7);
    EXPECT_EQ(Bytes(*ds, 0), "one");
    EXPECT_EQ(ds->label(1), 3);
    EXPECT_EQ(Bytes(*ds, 1), "two");
  }
}

absl::Status ReadStatus(const Dataset& ds, int64_t i) {
  Buffer buf;
  size_t size = 0;
  return ds.Read(i, &buf, &size);
}

// What is wrong inside a shard fails the samples it concerns, each naming
// the shard and member; the rest of the dataset stays readable, so
// --on-error skip goes on and fail stops with that message.
TEST(WebDataset, CorruptShardsAndLabelsFailTheirSamplesOnly) {
  TempDir dir;
  {
    TarWriter w;
    ASSERT_TRUE(w.Open(dir.Join("bad-label.tar")).ok());
    ASSERT_TRUE(w.Add("j.jpg", "y", 1).ok());
    ASSERT_TRUE(w.Add("j.cls", "2", 1).ok());
    ASSERT_TRUE(w.Add("k.jpg", "x", 1).ok());
    ASSERT_TRUE(w.Add("k.cls", "cat", 3).ok());
    ASSERT_TRUE(w.Close().ok());
  }
  auto labels = Open(dir.Join("bad-label.tar"));
  ASSERT_NE(labels, nullptr);
  ASSERT_EQ(labels->size(), 2);
  EXPECT_EQ(Bytes(*labels, 0), "y");
  EXPECT_EQ(labels->label(0), 2);
  const absl::Status bad = ReadStatus(*labels, 1);
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad.message(), HasSubstr("bad-label.tar:k.cls: label"));

  {
    TarWriter w;
    ASSERT_TRUE(w.Open(dir.Join("corrupt.tar")).ok());
    ASSERT_TRUE(w.Add("a.jpg", "abc", 3).ok());
    ASSERT_TRUE(w.Add("b.jpg", "def", 3).ok());
    ASSERT_TRUE(w.Close().ok());
  }
  std::fstream f(dir.Join("corrupt.tar"), std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(1024 + 10);  // inside the second header
  f.put('!');
  f.close();
  auto corrupt = Open(dir.Join("corrupt.tar"));
  ASSERT_NE(corrupt, nullptr);
  ASSERT_EQ(corrupt->size(), 2);
  EXPECT_EQ(Bytes(*corrupt, 0), "abc");
  const absl::Status rest = ReadStatus(*corrupt, 1);
  EXPECT_EQ(rest.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(rest.message(), HasSubstr("corrupt.tar: bad tar header"));
  EXPECT_THAT(rest.message(), HasSubstr("offset 1024"));

  // A member claiming more bytes than the file holds (a truncated shard).
  {
    TarWriter w;
    ASSERT_TRUE(w.Open(dir.Join("big.tar")).ok());
    ASSERT_TRUE(w.Add("a.jpg", "abc", 3).ok());
    const std::string big(5000, 'x');
    ASSERT_TRUE(w.Add("b.jpg", big.data(), big.size()).ok());
    ASSERT_TRUE(w.Close().ok());
  }
  std::vector<uint8_t> trunc = testing::ReadFile(dir.Join("big.tar"));
  trunc.resize(3000);
  WriteFile(dir.Join("short.tar"), trunc);
  auto short_ds = Open(dir.Join("short.tar"));
  ASSERT_NE(short_ds, nullptr);
  ASSERT_EQ(short_ds->size(), 2);
  EXPECT_EQ(Bytes(*short_ds, 0), "abc");
  const absl::Status truncated = ReadStatus(*short_ds, 1);
  EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(truncated.message(), HasSubstr("member 'b.jpg' at offset 1024 claims 5000 bytes"));
  EXPECT_THAT(truncated.message(), HasSubstr("past the end of the file"));
}

// Runs `f` on another thread and ends the test binary with a failure if it
// has not returned within `seconds`: a hang fails fast, naming what hung.
template <typename F>
void WithDeadline(const char* what, double seconds, F f) {
  std::promise<void> done;
  std::thread t([&] {
    f();
    done.set_value();
  });
  if (done.get_future().wait_for(std::chrono::duration<double>(seconds)) !=
      std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s did not return within %g s\n", what, seconds);
    std::_Exit(1);
  }
  t.join();
}

// One member whose size field (GNU base-256) is `size_field`: offset + size
// wraps past 2^64 for the largest values, which once made the scan go
// backwards forever.
std::vector<uint8_t> TarWithMemberSize(const std::vector<uint8_t>& size_field) {
  std::vector<uint8_t> tar = testing::TarHeader("a.jpg", size_field);
  tar.resize(2048, 0);
  return tar;
}

TEST(WebDataset, SizeFieldsThatWrapEndTheScan) {
  TempDir dir;
  const std::vector<std::vector<uint8_t>> sizes = {
      // 2^64 - 512: data + size wraps to the header's own offset.
      {0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, 0x00},
      // 2^64 - 1024: the next offset wraps to before the header.
      {0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFC, 0x00},
      // 2^63 - 1: no wrap, but far past the end.
      {0x80, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF},
      // Beyond 64 bits.
      {0x80, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF},
      // Negative (base-256 with the sign bit).
      {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, 0x00},
  };
  for (size_t k = 0; k < sizes.size(); ++k) {
    const std::string path = dir.Join(absl::StrCat("wrap", k, ".tar"));
    WriteFile(path, TarWithMemberSize(sizes[k]));
    WithDeadline("indexing a tar with a wrapping size", 30, [&] {
      auto ds = Open(path);
      ASSERT_NE(ds, nullptr);
      ASSERT_EQ(ds->size(), 1) << k;
      EXPECT_EQ(ReadStatus(*ds, 0).code(), absl::StatusCode::kDataLoss) << k;
    });
  }
}

// A FIFO (or any non-regular file) named like an image must not block the
// reader waiting for a writer.
TEST(Dataset, FifosFailWithoutBlocking) {
  TempDir dir;
  WriteFile(dir.Join("data/c/a.jpg"), std::vector<uint8_t>(10, 1));
  ASSERT_EQ(mkfifo(dir.Join("data/c/b.jpg").c_str(), 0644), 0);
  ASSERT_EQ(mkfifo(dir.Join("fifo.tar").c_str(), 0644), 0);
  WithDeadline("reading a FIFO", 30, [&] {
    auto ds = Open(dir.Join("data"));
    ASSERT_NE(ds, nullptr);
    ASSERT_EQ(ds->size(), 2);
    const absl::Status s = ReadStatus(*ds, 1);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("b.jpg is not a regular file"));
    EXPECT_TRUE(ReadStatus(*ds, 0).ok());
    proto::DatasetSpec spec;
    spec.set_path(dir.Join("fifo.tar"));
    auto tar = OpenDataset(spec);
    EXPECT_THAT(tar.status().message(), HasSubstr("fifo.tar is not a regular file"));
  });
}

// A folder symlinked into itself is walked once, with a warning; links that
// lead nowhere (dangling, or to themselves) are samples that fail to read,
// not silently dropped.
TEST(ImageFolder, SymlinkLoopsAreNotFollowed) {
  TempDir dir;
  WriteFile(dir.Join("data/c/a.jpg"), std::vector<uint8_t>(10, 1));
  WriteFile(dir.Join("data/c/sub/b.jpg"), std::vector<uint8_t>(10, 2));
  ASSERT_EQ(symlink("..", dir.Join("data/c/sub/up").c_str()), 0);
  ASSERT_EQ(symlink(".", dir.Join("data/c/self").c_str()), 0);
  ASSERT_EQ(symlink("loop.jpg", dir.Join("data/c/loop.jpg").c_str()), 0);
  WithDeadline("indexing a folder with symlink loops", 30, [&] {
    auto ds = Open(dir.Join("data"));
    ASSERT_NE(ds, nullptr);
    EXPECT_THAT(Paths(*ds), ElementsAre("c/a.jpg", "c/loop.jpg", "c/sub/b.jpg"));
    EXPECT_EQ(ds->index_warnings().size(), 2u);
    EXPECT_THAT(ds->index_warnings()[0], HasSubstr("symlink loop"));
    const absl::Status loop = ReadStatus(*ds, 1);
    EXPECT_FALSE(loop.ok());
    EXPECT_THAT(loop.message(), HasSubstr("loop.jpg"));
  });
}

TEST(Dataset, FilesOverTheSizeLimitAreRefusedBeforeReading) {
  TempDir dir;
  WriteFile(dir.Join("src/c/big.jpg"), std::vector<uint8_t>(5000, 1));
  WriteFile(dir.Join("src/c/small.jpg"), std::vector<uint8_t>(10, 1));
  PackOptions options;
  options.out_dir = dir.Join("shards");
  auto src = Open(dir.Join("src"));
  ASSERT_NE(src, nullptr);
  ASSERT_TRUE(PackWebDataset(*src, options, nullptr).ok());
  for (const std::string& path : {dir.Join("src"), dir.Join("shards")}) {
    proto::DatasetSpec spec;
    spec.set_path(path);
    spec.set_max_file_bytes(1000);
    auto ds = OpenDataset(spec);
    ASSERT_TRUE(ds.ok()) << ds.status();
    Buffer buf;
    size_t size = 0;
    const absl::Status big = (*ds)->Read(0, &buf, &size);
    EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << path;
    EXPECT_THAT(big.message(), HasSubstr("5000 bytes, over the limit of 1000 (--max-file-bytes)"));
    EXPECT_EQ(buf.capacity(), 0u) << "nothing reserved for a refused file";
    EXPECT_TRUE((*ds)->Read(1, &buf, &size).ok());
    EXPECT_EQ(size, 10u);
  }
}

// --format lines: every non-empty line a sample (\n or \r\n ends it; a last
// line without one counts), named by file and line; a folder's .jsonl and
// .txt files in order; a line over --max-file-bytes fails alone.
TEST(Lines, EveryNonEmptyLineIsADocument) {
  TempDir dir;
  WriteFile(dir.Join("corpus/a.jsonl"), Text("{\"text\": \"one\"}\r\n\n{\"text\": \"two\"}\n"));
  WriteFile(dir.Join("corpus/b.txt"), Text("\nthree\r\n" + std::string(3000, 'x')));
  WriteFile(dir.Join("corpus/skip.csv"), Text("not,read\n"));
  auto ds = Open(dir.Join("corpus"), proto::DatasetSpec::FORMAT_LINES);
  ASSERT_NE(ds, nullptr);
  ASSERT_EQ(ds->size(), 4);
  EXPECT_EQ(Bytes(*ds, 0), "{\"text\": \"one\"}");
  EXPECT_EQ(Bytes(*ds, 1), "{\"text\": \"two\"}");
  EXPECT_EQ(Bytes(*ds, 2), "three");
  EXPECT_EQ(Bytes(*ds, 3), std::string(3000, 'x'));
  EXPECT_THAT(Paths(*ds), ElementsAre("a.jsonl:1", "a.jsonl:3", "b.txt:2", "b.txt:3"));
  EXPECT_EQ(ds->Extension(0), "json");
  EXPECT_EQ(ds->Extension(2), "txt");
  EXPECT_EQ(ds->label(0), -1);
  // One file; a line over the limit fails its read, naming it.
  proto::DatasetSpec spec;
  spec.set_path(dir.Join("corpus/b.txt"));
  spec.set_format(proto::DatasetSpec::FORMAT_LINES);
  spec.set_max_file_bytes(1000);
  auto one = OpenDataset(spec);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ((*one)->size(), 2);
  Buffer buf;
  size_t size = 0;
  EXPECT_THAT(std::string((*one)->Read(1, &buf, &size).message()),
              HasSubstr("b.txt:3 is 3000 bytes, over the limit of 1000"));
  EXPECT_EQ(Bytes(**one, 0), "three");
  WriteFile(dir.Join("blank.txt"), Text("\n\r\n\n"));
  spec.set_path(dir.Join("blank.txt"));
  EXPECT_THAT(std::string(OpenDataset(spec).status().message()), HasSubstr("no lines in"));
  spec.set_path("https://example.com/corpus.jsonl");
  EXPECT_THAT(std::string(OpenDataset(spec).status().message()),
              HasSubstr("--format lines: local files only"));
}

TEST(DatasetFormat, ParsesNames) {
  EXPECT_EQ(*ParseDatasetFormat("wds"), proto::DatasetSpec::FORMAT_WEBDATASET);
  EXPECT_EQ(*ParseDatasetFormat("imagefolder"), proto::DatasetSpec::FORMAT_IMAGEFOLDER);
  EXPECT_EQ(*ParseDatasetFormat("lines"), proto::DatasetSpec::FORMAT_LINES);
  EXPECT_THAT(ParseDatasetFormat("zip").status().message(),
              HasSubstr("'zip' is not one of auto, imagefolder, wds, manifest"));
}

}  // namespace
}  // namespace prepflow
