// tokenize: byte-level BPE on vocabularies written here (merge order, every
// occurrence left to right, GPT-2's pre-tokens, a megabyte word), the op's
// BOS/EOS, truncation and padding, captions from JSON, and hostile models
// and texts. tests/python/test_text.py holds the ids to the references
// (python3-sentencepiece, GPT-2's and CLIP's algorithms) on real text.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/data/dataset.h"
#include "pipeline/ops/text/bpe.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::prepflow::testing::RunPipeline;
using ::prepflow::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Merges = std::vector<std::pair<std::string, std::string>>;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

class TokenizeTest : public ::testing::Test {
 protected:
  // vocab.json: byte b's symbol has id b, each merge's result the next id,
  // then "<|endoftext|>"; merges.txt with GPT-2's "#version" line.
  void WriteGpt2(const Merges& merges) {
    std::string vocab = "{", lines = "#version: 0.2\n";
    for (int b = 0; b < 256; ++b) {
      absl::StrAppend(&vocab, b ? "," : "", "\"", Escaped(text::ByteSymbol(b)), "\":", b);
    }
    int id = 256;
    for (const auto& [a, c] : merges) {
      ids_[a + c] = id;
      absl::StrAppend(&vocab, ",\"", Escaped(a + c), "\":", id++);
      absl::StrAppend(&lines, a, " ", c, "\n");
    }
    absl::StrAppend(&vocab, ",\"<|endoftext|>\":", id, "}");
    eot_ = id;
    Write(dir_.Join("vocab.json"), vocab);
    Write(dir_.Join("merges.txt"), lines);
  }

  static std::string Escaped(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    return out;
  }

  absl::StatusOr<std::unique_ptr<Pipeline>> Make(const std::string& fields,
                                                 DatasetOptions files = {},
                                                 int64_t max_data_bytes = 0) {
    proto::PipelineSpec spec;
    const std::string text =
        absl::StrCat("stages { tokenize { kind: KIND_BPE vocab: '", dir_.Join("vocab.json"),
                     "' merges: '", dir_.Join("merges.txt"), "' ", fields, " } }");
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec)) << text;
    PipelineOptions options;
    options.read_file = OpFileReaderFor(std::move(files));
    options.max_data_bytes = max_data_bytes;
    return Pipeline::Create(spec, options);
  }

  // The ids of `text` through `p`; empty (and a failure) when it fails.
  static std::vector<int32_t> Ids(const Pipeline& p, const std::string& text) {
    testing::Output out = RunPipeline(p, Bytes(text));
    EXPECT_EQ(out.kind, ValueKind::kTokens);
    std::vector<int32_t> ids(out.bytes.size() / 4);
    if (!ids.empty()) std::memcpy(ids.data(), out.bytes.data(), out.bytes.size());
    return ids;
  }

  // Byte b's id, and a merge result's.
  static int32_t B(char b) { return static_cast<uint8_t>(b); }
  int32_t M(const std::string& token) { return ids_.at(token); }

  TempDir dir_;
  std::map<std::string, int32_t> ids_;
  int32_t eot_ = -1;
};

TEST_F(TokenizeTest, MergesByRankEveryOccurrenceLeftToRight) {
  WriteGpt2({{"b", "c"}, {"a", "b"}, {"a", "a"}, {"aa", "aa"}});
  auto p = Make("");
  ASSERT_TRUE(p.ok()) << p.status();
  // (b, c) ranks before (a, b): "abc" is a + bc, never ab + c.
  EXPECT_THAT(Ids(**p, "abc"), ElementsAre(B('a'), M("bc")));
  // Every (a, a) left to right, then (aa, aa) in the next pass: 5 a's are
  // aaaa + a, 3 a's aa + a.
  EXPECT_THAT(Ids(**p, "aaaaa"), ElementsAre(M("aaaa"), B('a')));
  EXPECT_THAT(Ids(**p, "aaa"), ElementsAre(M("aa"), B('a')));
}

TEST_F(TokenizeTest, PreTokensAreGpt2Patterns) {
  const std::string space = text::ByteSymbol(' ');  // Ġ
  WriteGpt2({{space, "b"}, {space, space}, {"o", space}, {"'", "s"}, {"t", "'"}});
  auto p = Make("");
  ASSERT_TRUE(p.ok()) << p.status();
  // " ?\p{L}+": the space starts the next word and never ends this one.
  EXPECT_THAT(Ids(**p, "o b"), ElementsAre(B('o'), M(space + "b")));
  // Two spaces before a word: one alone, one with the word; at the end both.
  EXPECT_THAT(Ids(**p, "a  b"), ElementsAre(B('a'), B(' '), M(space + "b")));
  EXPECT_THAT(Ids(**p, "a  "), ElementsAre(B('a'), M(space + space)));
  // A contraction is its own pre-token ('s), so t and ' never merge.
  EXPECT_THAT(Ids(**p, "it's"), ElementsAre(B('i'), B('t'), M("'s")));
  // A newline before a word is alone (" ?" is a space only).
  EXPECT_THAT(Ids(**p, "\nb"), ElementsAre(B('\n'), B('b')));
}

TEST_F(TokenizeTest, AMegabyteWordCostsLittle) {
  // 2^20 a's merge in 10 passes of doubling tokens: a heap makes it
  // n log n; the reference's loop would take hours.
  Merges merges;
  std::string t = "a";
  for (int k = 0; k < 10; ++k, t += t) merges.emplace_back(t, t);
  WriteGpt2(merges);
  auto p = Make("max_text_bytes: 2000000");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<int32_t> ids = Ids(**p, std::string(1 << 20, 'a'));
  ASSERT_EQ(ids.size(), 1024u);
  for (int32_t id : ids) ASSERT_EQ(id, M(std::string(1024, 'a')));
}

TEST_F(TokenizeTest, BosEosTruncationAndPadding) {
  WriteGpt2({});
  auto p = Make("add_bos: true add_eos: true context_length: 4");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(Ids(**p, "ab"), ElementsAre(eot_, B('a'), B('b'), eot_));
  // Cut to the context, the last id EOS again (CLIP's truncate=True).
  EXPECT_THAT(Ids(**p, "abcdef"), ElementsAre(eot_, B('a'), B('b'), eot_));
  auto padded = Make("add_eos: true context_length: 6 pad: true pad_id: 7");
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ((*padded)->output_type().shape, Shape{6});
  EXPECT_THAT(Ids(**padded, "ab"), ElementsAre(B('a'), B('b'), eot_, 7, 7, 7));
}

TEST_F(TokenizeTest, CaptionsFromJson) {
  WriteGpt2({});
  auto p = Make("json_key: 'caption'");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(Ids(**p, R"({"url": "x", "caption": "hi", "n": {"caption": 5}})"),
              ElementsAre(B('h'), B('i')));
  // A key given twice is its last value's, as json.loads keeps.
  EXPECT_THAT(Ids(**p, R"({"caption": "a", "caption": "b"})"), ElementsAre(B('b')));
  const auto fails = [&](const std::string& json, const std::string& message) {
    const testing::Output out = RunPipeline(**p, Bytes(json));
    EXPECT_FALSE(out.status.ok()) << json;
    EXPECT_THAT(std::string(out.status.message()), HasSubstr(message)) << json;
  };
  fails(R"({"url": "x"})", "the JSON has no key 'caption'");
  fails(R"({"caption": 12})", "json_key 'caption' is a number, not a string");
  fails(R"({"caption": ["a"]})", "is an object or array, not a string");
  fails(R"({"caption": "a")", "not JSON");
  fails(std::string(100000, '[') + std::string(100000, ']'), "nested deeper than 64 levels");
  fails("{\"caption\": \"\xff\"}", "not JSON");  // invalid UTF-8 inside JSON
}

TEST_F(TokenizeTest, HostileTextsFailTheirSample) {
  WriteGpt2({});
  auto p = Make("max_text_bytes: 16");
  ASSERT_TRUE(p.ok()) << p.status();
  const testing::Output bad = RunPipeline(**p, Bytes("ok \xc3\x28 no"));
  EXPECT_THAT(std::string(bad.status.message()), HasSubstr("not UTF-8 (at byte 3)"));
  const testing::Output surrogate = RunPipeline(**p, Bytes("\xed\xa0\x80"));
  EXPECT_THAT(std::string(surrogate.status.message()), HasSubstr("not UTF-8 (at byte 0)"));
  const testing::Output big = RunPipeline(**p, Bytes(std::string(17, 'a')));
  EXPECT_EQ(big.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status.message()), HasSubstr("over max_text_bytes 16"));
  EXPECT_TRUE(Ids(**p, "").empty());
}

TEST_F(TokenizeTest, BadModelsAreRefusedNamingTheFile) {
  const auto refused = [&](const std::string& vocab, const std::string& merges,
                           const std::string& message) {
    Write(dir_.Join("vocab.json"), vocab);
    Write(dir_.Join("merges.txt"), merges);
    auto p = Make("");
    ASSERT_FALSE(p.ok()) << message;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(message));
  };
  WriteGpt2({{"a", "b"}});
  std::ifstream in(dir_.Join("vocab.json"));
  const std::string vocab((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  refused(vocab, "#version: 0.2\na b c\n", "merges.txt:2: expected two tokens");
  refused(vocab, "#version: 0.2\nb c\n", "merge 1 ('b c'): the vocabulary has no token 'bc'");
  refused("{\"a\": {\"b\": 1}}", "", "vocab.json: expected one object of token to id");
  refused("{\"a\": 1", "", "vocab.json: not JSON");
  refused("{\"a\": -1}", "", "a negative id");
  refused("{\"a\": 97}", "", "vocab.json: the vocabulary has no symbol for byte 0");
  WriteGpt2({});  // vocab.json of 256 symbols: over 100 bytes
  auto huge = Make("max_model_bytes: 100");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("over the limit of 100"));
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("(max_model_bytes)"));
  // A worker's share of its memory bounds a model whatever the job asks.
  auto worker = Make("", {}, /*max_data_bytes=*/200);
  ASSERT_FALSE(worker.ok());
  EXPECT_THAT(std::string(worker.status().message()),
              HasSubstr("over the limit of 200 (this worker's limit for an op's data"));
}

TEST_F(TokenizeTest, ACorruptSentencePieceModelIsRefused) {
  Write(dir_.Join("bad.model"), std::string(300, '\x17'));
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      absl::StrCat("stages { tokenize { kind: KIND_SENTENCEPIECE model: '", dir_.Join("bad.model"),
                   "' } }"),
      &spec));
  PipelineOptions options;
  options.read_file = OpFileReaderFor({});
  auto p = Pipeline::Create(spec, options);
  ASSERT_FALSE(p.ok());
  if (absl::StrContains(p.status().message(), "not available in sanitizer builds")) {
    GTEST_SKIP() << p.status();  // libsentencepiece needs RTLD_DEEPBIND
  }
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("is not a SentencePiece model"));
}

TEST_F(TokenizeTest, ModelsAreReadAsTheJobsDataIs) {
  WriteGpt2({});
  // Below a data root: read; above it, refused naming the path.
  DatasetOptions confined;
  confined.confine_to = dir_.path();
  EXPECT_TRUE(Make("", confined).ok());
  confined.confine_to = dir_.Join("elsewhere");
  std::filesystem::create_directories(confined.confine_to);
  auto outside = Make("", confined);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(outside.status().message()), HasSubstr("is outside the data root"));
  // Without a reader (no file access), FailedPrecondition: the stage runs
  // where the model can be read.
  proto::PipelineSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      absl::StrCat("stages { tokenize { kind: KIND_CLIP merges: '", dir_.Join("merges.txt"),
                   "' } }"),
      &spec));
  auto none = Pipeline::Create(spec, PipelineOptions());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TokenizeTest, SpecErrorsNameTheField) {
  const auto refused = [](const std::string& stage, const std::string& message) {
    proto::PipelineSpec spec;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
        absl::StrCat("stages { tokenize { ", stage, " } }"), &spec));
    auto p = Pipeline::Create(spec, PipelineOptions());
    ASSERT_FALSE(p.ok()) << stage;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(message)) << stage;
  };
  refused("", "kind: KIND_SENTENCEPIECE, KIND_BPE or KIND_CLIP");
  refused("kind: KIND_SENTENCEPIECE", "model: name the SentencePiece .model file");
  refused("kind: KIND_BPE merges: 'm'", "vocab, merges: BPE needs vocab.json and merges.txt");
  refused("kind: KIND_CLIP merges: 'm' vocab: 'v'", "vocab: CLIP's vocabulary follows");
  refused("kind: KIND_CLIP merges: 'm' pad: true", "pad: needs a context_length");
  refused("kind: KIND_CLIP merges: 'm' context_length: 1 add_bos: true add_eos: true",
          "context_length: too short for BOS and EOS");
  refused("kind: KIND_CLIP merges: 'm' context_length: -1", "context_length: 0 (no limit)");
}

}  // namespace
}  // namespace prepflow
