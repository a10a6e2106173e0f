#include "pipeline/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/tar.h"
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
  // One shard file alone is a dataset too.
  auto one = Open(dir.Join("shards/shard-000003.tar"));
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->size(), 3);
  EXPECT_EQ(one->label(0), 2);
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

TEST(WebDataset, CorruptShardsAndLabelsAreClearErrors) {
  TempDir dir;
  {
    TarWriter w;
    ASSERT_TRUE(w.Open(dir.Join("bad-label.tar")).ok());
    ASSERT_TRUE(w.Add("k.jpg", "x", 1).ok());
    ASSERT_TRUE(w.Add("k.cls", "cat", 3).ok());
    ASSERT_TRUE(w.Close().ok());
  }
  proto::DatasetSpec spec;
  spec.set_path(dir.Join("bad-label.tar"));
  auto bad = OpenDataset(spec);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("bad-label.tar:k.cls: label"));

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
  spec.set_path(dir.Join("corrupt.tar"));
  auto corrupt = OpenDataset(spec);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.status().message(), HasSubstr("corrupt.tar: bad tar header"));
  EXPECT_THAT(corrupt.status().message(), HasSubstr("offset 1024"));

  // A member claiming more bytes than the file holds.
  {
    TarWriter w;
    ASSERT_TRUE(w.Open(dir.Join("big.tar")).ok());
    const std::string big(5000, 'x');
    ASSERT_TRUE(w.Add("a.jpg", big.data(), big.size()).ok());
    ASSERT_TRUE(w.Close().ok());
  }
  std::vector<uint8_t> trunc = testing::ReadFile(dir.Join("big.tar"));
  trunc.resize(3000);
  WriteFile(dir.Join("short.tar"), trunc);
  spec.set_path(dir.Join("short.tar"));
  auto short_status = OpenDataset(spec).status();
  EXPECT_EQ(short_status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(short_status.message(), HasSubstr("past the end of the file"));
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

TEST(DatasetFormat, ParsesNames) {
  EXPECT_EQ(*ParseDatasetFormat("wds"), proto::DatasetSpec::FORMAT_WEBDATASET);
  EXPECT_EQ(*ParseDatasetFormat("imagefolder"), proto::DatasetSpec::FORMAT_IMAGEFOLDER);
  EXPECT_THAT(ParseDatasetFormat("zip").status().message(), HasSubstr("--format: 'zip'"));
}

}  // namespace
}  // namespace prepflow
