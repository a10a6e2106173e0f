// Speech datasets: JSON Lines manifests (NeMo's layout: paths relative to
// the manifest, transcripts, durations and labels as written, and every
// malformed line refused with its file and line), and LibriSpeech's folders
// with their .trans.txt transcripts.
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/pack.h"
#include "pipeline/data/shard_index.h"
#include "pipeline/data/tar.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenAt(const std::string& path,
                                                const DatasetOptions& options = {},
                                                int64_t max_file_bytes = 0) {
  proto::DatasetSpec spec;
  spec.set_path(path);
  spec.set_max_file_bytes(max_file_bytes);
  return OpenDataset(spec, options);
}

std::string Read(const Dataset& ds, int64_t i) {
  Buffer buf;
  size_t size = 0;
  const absl::Status s = ds.Read(i, &buf, &size);
  if (!s.ok()) return s.ToString();
  return std::string(reinterpret_cast<const char*>(buf.data()), size);
}

TEST(Manifest, ListsLinesInOrderWithTextsDurationsAndLabels) {
  TempDir dir;
  mkdir(dir.Join("wav").c_str(), 0755);
  Write(dir.Join("wav/a.flac"), "A");
  Write(dir.Join("wav/b.flac"), "B");
  Write(dir.Join("c.wav"), "C");
  Write(dir.Join("train.jsonl"),
        absl::StrCat(R"({"audio_filepath": "wav/b.flac", "duration": 1.5, "text": "go", )",
                     R"("label": "yes"})", "\n\n",
                     R"({"audio_filepath": "wav/a.flac", "text": "n\u00famero", "label": "no",)",
                     R"( "offset": 0, "lang": "es"})", "\r\n", R"({"audio_filepath": ")",
                     dir.Join("c.wav"), R"(", "duration": 2, "label": "yes"})"));
  auto ds = OpenAt(dir.Join("train.jsonl"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  EXPECT_STREQ(d.format(), "manifest");
  ASSERT_EQ(d.size(), 3);
  EXPECT_EQ(Read(d, 0), "B");
  EXPECT_EQ(Read(d, 1), "A");
  EXPECT_EQ(Read(d, 2), "C");
  EXPECT_EQ(d.SamplePath(2), dir.Join("c.wav"));
  EXPECT_EQ(d.Extension(0), "flac");
  ASSERT_TRUE(d.has_texts());
  EXPECT_EQ(d.text(0), "go");
  EXPECT_EQ(d.text(1), "n\xc3\xbamero");
  EXPECT_EQ(d.text(2), "");  // none given
  ASSERT_TRUE(d.has_durations());
  EXPECT_EQ(d.duration(0), 1.5);
  EXPECT_LT(d.duration(1), 0);  // unknown
  EXPECT_EQ(d.duration(2), 2.0);
  EXPECT_THAT(d.classes(), ElementsAre("no", "yes"));
  EXPECT_THAT((std::vector<int64_t>{d.label(0), d.label(1), d.label(2)}), ElementsAre(1, 0, 1));

  // A transcript is part of the data: changing it changes the fingerprint.
  const uint64_t before = d.fingerprint();
  Write(dir.Join("other.jsonl"), R"({"audio_filepath": "wav/b.flac", "text": "stop"})");
  Write(dir.Join("same.jsonl"), R"({"audio_filepath": "wav/b.flac", "text": "go"})");
  auto other = OpenAt(dir.Join("other.jsonl"));
  auto same = OpenAt(dir.Join("same.jsonl"));
  ASSERT_TRUE(other.ok() && same.ok());
  EXPECT_NE((*other)->fingerprint(), (*same)->fingerprint());
  EXPECT_NE(before, (*same)->fingerprint());
  EXPECT_FALSE((*same)->has_durations());
  EXPECT_EQ((*same)->label(0), -1);
  EXPECT_TRUE((*same)->classes().empty());
}

TEST(Manifest, IntegerLabelsAreTakenAsTheyAre) {
  TempDir dir;
  Write(dir.Join("m.json"),
        "{\"audio_filepath\": \"a.wav\", \"label\": 7}\n{\"audio_filepath\": \"b.wav\", "
        "\"label\": 0}\n");
  auto ds = OpenAt(dir.Join("m.json"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->label(0), 7);
  EXPECT_EQ((*ds)->label(1), 0);
  EXPECT_FALSE((*ds)->has_texts());
  // The file is missing: its read fails alone, naming it.
  EXPECT_THAT(Read(**ds, 0), HasSubstr(dir.Join("a.wav")));
}

TEST(Manifest, MalformedLinesNameTheFileAndLine) {
  TempDir dir;
  const std::string good = R"({"audio_filepath": "a.wav"})";
  const struct {
    std::string line;
    std::string error;
  } cases[] = {
      {"{\"audio_filepath\": \"a.wav\"", ":2: not valid JSON"},
      {"[1, 2]", ":2: not an object"},
      {R"({"text": "no file"})", ":2: audio_filepath: expected the audio file's path"},
      {R"({"audio_filepath": ""})", ":2: audio_filepath: expected"},
      {R"({"audio_filepath": 5})", ":2: audio_filepath: expected"},
      {R"({"audio_filepath": "a\u0000.wav"})", ":2: audio_filepath holds a NUL byte"},
      {R"({"audio_filepath": "a.wav", "duration": -1})", ":2: duration: expected seconds"},
      {R"({"audio_filepath": "a.wav", "duration": "3"})", ":2: duration: expected seconds"},
      {R"({"audio_filepath": "a.wav", "duration": 1e999})", ":2: not valid JSON"},
      {R"({"audio_filepath": "a.wav", "offset": 1.5})", ":2: offset: segments of a file"},
      {R"({"audio_filepath": "a.wav", "text": 5})", ":2: text: expected a string"},
      {R"({"audio_filepath": "a.wav", "label": -3})", ":2: label: expected a class name"},
      {R"({"audio_filepath": "a.wav", "label": "x"})", ":2: label: every line needs one"},
      {std::string(100000, '['), ":2: not valid JSON"},
  };
  for (const auto& c : cases) {
    Write(dir.Join("m.jsonl"), absl::StrCat(good, "\n", c.line, "\n"));
    auto ds = OpenAt(dir.Join("m.jsonl"));
    ASSERT_FALSE(ds.ok()) << c.line;
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_THAT(ds.status().message(), HasSubstr(dir.Join("m.jsonl") + c.error)) << c.line;
  }
  Write(dir.Join("empty.jsonl"), "\n  \n");
  EXPECT_THAT(OpenAt(dir.Join("empty.jsonl")).status().message(), HasSubstr("lists no samples"));
  proto::DatasetSpec spec;
  spec.set_path(dir.path());
  spec.set_format(proto::DatasetSpec::FORMAT_MANIFEST);
  EXPECT_THAT(OpenDataset(spec).status().message(), HasSubstr("is a folder, not a manifest"));
}

TEST(Manifest, TheManifestIsBoundedAndConfined) {
  TempDir dir, outside;
  Write(outside.Join("secret.wav"), "S");
  Write(dir.Join("m.jsonl"),
        absl::StrCat(R"({"audio_filepath": "a.wav"})", "\n", R"({"audio_filepath": ")",
                     outside.Join("secret.wav"), R"("})", "\n"));
  Write(dir.Join("a.wav"), "A");
  // Over --max-file-bytes: refused before it is read.
  auto big = OpenAt(dir.Join("m.jsonl"), {}, 10);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("--max-file-bytes"));
  // A worker confined to its data root reads what lies below it, and no
  // line leads it out.
  DatasetOptions confined;
  confined.confine_to = dir.path();
  auto ds = OpenAt(dir.Join("m.jsonl"), confined);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(Read(**ds, 0), "A");
  EXPECT_THAT(Read(**ds, 1), HasSubstr("PERMISSION_DENIED"));
  // Nor does the manifest itself lie outside.
  Write(outside.Join("m.jsonl"), R"({"audio_filepath": "secret.wav"})");
  EXPECT_EQ(OpenAt(outside.Join("m.jsonl"), confined).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(LibriSpeech, TranscriptsComeFromTransTxtBesideTheAudio) {
  TempDir dir;
  // root/<speaker>/<chapter>/<speaker>-<chapter>-<utterance>.flac
  for (const char* d : {"19", "19/198", "84", "84/121123"}) mkdir(dir.Join(d).c_str(), 0755);
  for (const char* f : {"19/198/19-198-0000.flac", "19/198/19-198-0001.flac",
                        "84/121123/84-121123-0000.flac", "84/121123/84-121123-0005.flac"}) {
    Write(dir.Join(f), f);
  }
  Write(dir.Join("19/198/19-198.trans.txt"),
        "19-198-0001 NORTHANGER ABBEY\n19-198-0000 THIS IS THE FIRST\r\n\n");
  Write(dir.Join("84/121123/84-121123.trans.txt"), "84-121123-0000 GO DO YOU HEAR\nstray\n");
  proto::DatasetSpec spec;
  spec.set_path(dir.path());
  auto ds = OpenDataset(spec);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  ASSERT_EQ(d.size(), 4);
  ASSERT_TRUE(d.has_texts());
  EXPECT_EQ(d.text(0), "THIS IS THE FIRST");
  EXPECT_EQ(d.text(1), "NORTHANGER ABBEY");
  EXPECT_EQ(d.text(2), "GO DO YOU HEAR");
  EXPECT_EQ(d.text(3), "");  // no line for it: said at indexing
  EXPECT_THAT(d.index_warnings(), ElementsAre(HasSubstr("1 of 4 audio files")));
  EXPECT_THAT(d.classes(), ElementsAre("19", "84"));  // speakers
  EXPECT_EQ(d.label(2), 1);
  // A transcript file is read under --max-file-bytes like any file: over
  // it, the open fails naming the file and the flag.
  spec.set_max_file_bytes(40);
  auto bounded = OpenDataset(spec);
  EXPECT_EQ(bounded.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(bounded.status().message(), HasSubstr("19-198.trans.txt"));
  EXPECT_THAT(bounded.status().message(), HasSubstr("--max-file-bytes"));
}

// A manifest packed into shards: each record's audio and transcript (key.txt,
// tabs and newlines kept through the sidecar), no label where it had none;
// read from the shards as from the manifest, by pass or by sidecar.
TEST(WebDataset, AudioMembersCarryTheirTranscripts) {
  TempDir dir;
  Write(dir.Join("a.flac"), "AAAA");
  Write(dir.Join("b.wav"), "BB");
  Write(dir.Join("m.jsonl"),
        "{\"audio_filepath\": \"a.flac\", \"text\": \"first\\tline\\nnext\"}\n"
        "{\"audio_filepath\": \"b.wav\"}\n");
  auto src = OpenAt(dir.Join("m.jsonl"));
  ASSERT_TRUE(src.ok()) << src.status();
  PackOptions options;
  options.out_dir = dir.Join("shards");
  ASSERT_TRUE(PackWebDataset(**src, options, nullptr).ok());
  for (const bool sidecar : {true, false}) {
    if (!sidecar) std::remove(dir.Join("shards/shard-000000.tar.idx").c_str());
    auto wds = OpenAt(dir.Join("shards"));
    ASSERT_TRUE(wds.ok()) << wds.status();
    const Dataset& d = **wds;
    EXPECT_STREQ(d.format(), "wds");
    ASSERT_EQ(d.size(), 2);
    EXPECT_EQ(Read(d, 0), "AAAA");
    EXPECT_EQ(d.Extension(1), "wav");
    ASSERT_TRUE(d.has_texts());
    EXPECT_EQ(d.text(0), "first\tline\nnext");
    EXPECT_EQ(d.text(1), "");
    EXPECT_EQ(d.label(0), -1);
  }
}

// A transcript over kMaxTranscriptBytes fails its sample alone.
TEST(WebDataset, ATranscriptOverTheLimitFailsItsSample) {
  TempDir dir;
  TarWriter tar;
  ASSERT_TRUE(tar.Open(dir.Join("s.tar")).ok());
  const std::string long_text(kMaxTranscriptBytes + 1, 'x');
  ASSERT_TRUE(tar.Add("a.flac", "A", 1).ok());
  ASSERT_TRUE(tar.Add("a.txt", long_text.data(), long_text.size()).ok());
  ASSERT_TRUE(tar.Add("b.flac", "B", 1).ok());
  ASSERT_TRUE(tar.Add("b.txt", "ok", 2).ok());
  ASSERT_TRUE(tar.Close().ok());
  auto wds = OpenAt(dir.Join("s.tar"));
  ASSERT_TRUE(wds.ok()) << wds.status();
  ASSERT_EQ((*wds)->size(), 2);
  EXPECT_THAT(Read(**wds, 0), HasSubstr("a.txt: transcript of 16385 bytes is over the limit"));
  EXPECT_EQ(Read(**wds, 1), "B");
  EXPECT_EQ((*wds)->text(1), "ok");
}

// A text-only record's .txt is its media, read as a sample is: a document
// of any size up to --max-file-bytes (a language model's corpus).
TEST(WebDataset, ATextOnlyRecordIsItsDocumentOnce) {
  TempDir dir;
  TarWriter tar;
  ASSERT_TRUE(tar.Open(dir.Join("s.tar")).ok());
  const std::string document(3 * kMaxTranscriptBytes, 'd');
  ASSERT_TRUE(tar.Add("a.txt", document.data(), document.size()).ok());
  ASSERT_TRUE(tar.Add("b.txt", "short", 5).ok());
  ASSERT_TRUE(tar.Close().ok());
  auto wds = OpenAt(dir.Join("s.tar"));
  ASSERT_TRUE(wds.ok()) << wds.status();
  ASSERT_EQ((*wds)->size(), 2);
  EXPECT_EQ(Read(**wds, 0), document);
  EXPECT_EQ(Read(**wds, 1), "short");
  // Its .txt is its media, not also a transcript carried beside it (a
  // batch's "text" would hold every document twice).
  EXPECT_FALSE((*wds)->has_texts());
}

// --require-fields: records without one of the members are left out (a
// filter: no errors), alternatives count, and what is left is said.
TEST(WebDataset, RequireFieldsLeavesOutRecordsWithoutThem) {
  TempDir dir;
  TarWriter tar;
  ASSERT_TRUE(tar.Open(dir.Join("s.tar")).ok());
  ASSERT_TRUE(tar.Add("a.jpg", "A", 1).ok());
  ASSERT_TRUE(tar.Add("a.txt", "a cat", 5).ok());
  ASSERT_TRUE(tar.Add("b.jpg", "B", 1).ok());  // no caption
  ASSERT_TRUE(tar.Add("c.png", "C", 1).ok());
  ASSERT_TRUE(tar.Add("c.txt", "a dog", 5).ok());
  ASSERT_TRUE(tar.Close().ok());
  proto::DatasetSpec spec;
  spec.set_path(dir.Join("s.tar"));
  spec.add_require_fields("txt");
  auto ds = OpenDataset(spec, {});
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 2);
  EXPECT_EQ(Read(**ds, 0), "A");
  EXPECT_EQ(Read(**ds, 1), "C");
  EXPECT_THAT((*ds)->index_warnings(), Contains(HasSubstr("1 of 3 records lack a field")));
  spec.add_require_fields("jpg");  // c has a png, not a jpg
  ds = OpenDataset(spec, {});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 1);
  spec.set_require_fields(1, "jpg;png");
  ds = OpenDataset(spec, {});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 2);
  spec.set_require_fields(1, "json");
  EXPECT_THAT(std::string(OpenDataset(spec, {}).status().message()),
              HasSubstr("has every field of --require-fields (txt,json)"));
  spec.set_require_fields(1, "../x");
  EXPECT_THAT(std::string(OpenDataset(spec, {}).status().message()),
              HasSubstr("--require-fields: '../x' is not a field name"));
}

}  // namespace
}  // namespace prepflow
