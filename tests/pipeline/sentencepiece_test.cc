// SentencePiece unigram models encoded natively, held to libsentencepiece
// (the library python3-sentencepiece binds) id for id: models trained here by
// spm_train with each normalization and whitespace option, byte fallback and
// user-defined pieces, and variants edited in the .model (escaping off,
// unused pieces); texts generated from words, scripts NFKC rewrites,
// whitespace runs and malformed UTF-8. Crafted models are refused with the
// reason or read within their bounds (the sanitizer build runs these).
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/ops/text/byte_trie.h"
#include "pipeline/ops/text/sentencepiece_model.h"
#include "proto/sentencepiece_model.pb.h"
#include "tests/testing/test_util.h"

namespace prepflow::text {
namespace {

using ::prepflow::testing::TempDir;
using ::testing::HasSubstr;
using Engine = SentencePieceModel::Engine;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string Utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Texts from `words` and the characters normalization and segmentation
// treat specially: NFKC's compatibility forms, combining marks, spaces of
// every kind, controls, user-defined pieces, malformed UTF-8.
class TextMaker {
 public:
  TextMaker(std::vector<std::string> words, uint32_t seed) : words_(std::move(words)), rng_(seed) {}

  std::string Make(size_t parts) {
    static const std::vector<std::pair<uint32_t, uint32_t>> kRanges = {
        {0x20, 0x7E},       {0x00, 0x1F},     {0xA0, 0xFF},     {0x300, 0x36F},
        {0x391, 0x3C9},     {0x4E00, 0x4E40}, {0x3040, 0x3090}, {0xAC00, 0xAC20},
        {0xFF01, 0xFF5E},   {0xFB00, 0xFB06}, {0x2000, 0x200F}, {0x2160, 0x2170},
        {0x1F600, 0x1F610}, {0xFDFA, 0xFDFA}, {0x2581, 0x2581}, {0xE000, 0xE002}};
    static const std::vector<std::string> kOdd = {
        "\xC0\x80",
        "\xED\xA0\x80",
        "\xF4\x90\x80\x80",
        "\x80",
        "\xFF",
        "\xE2\x96",
        "\xC3",
        "<sep>",
        "@@",
        "\xEF\xAC\x81" /* the fi ligature, user-defined in one model */,
        "  ",
        "\t",
        "\n",
        "\xE3\x80\x80",
        "\xC2\xA0",
        " \xE2\x96\x81 "};
    std::string text;
    for (size_t i = 0; i < parts; ++i) {
      const int kind = Draw(10);
      if (kind < 5) {
        text += words_[Draw(words_.size())];
        text += Draw(4) == 0 ? "" : " ";
      } else if (kind < 8) {
        const auto& [lo, hi] = kRanges[Draw(kRanges.size())];
        text += Utf8(lo + Draw(hi - lo + 1));
      } else {
        text += kOdd[Draw(kOdd.size())];
      }
    }
    return text;
  }

 private:
  size_t Draw(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  std::vector<std::string> words_;
  std::mt19937 rng_;
};

class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    std::ofstream corpus(dir_->Join("corpus.txt"), std::ios::binary);
    for (const char* name : {"GPL-3", "Apache-2.0", "Artistic", "MPL-2.0"}) {
      const std::string text = Slurp(std::string("/usr/share/common-licenses/") + name);
      corpus << text << "\n";
      std::string word;
      for (char c : text) {
        if (c == ' ' || c == '\n') {
          if (!word.empty() && words_->size() < 20000) words_->push_back(word);
          word.clear();
        } else {
          word += c;
        }
      }
    }
    TextMaker lines(*words_, 7);
    for (int i = 0; i < 3000; ++i) corpus << lines.Make(12) << "\n";
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // A model trained on the corpus with `flags`; its bytes ("" where spm_train
  // is missing).
  static std::string Train(const std::string& name, const std::string& flags) {
    const std::string prefix = dir_->Join(name);
    const std::string command = absl::StrCat(
        "spm_train --input ", dir_->Join("corpus.txt"), " --model_prefix ", prefix,
        " --vocab_size 1000 --model_type unigram --minloglevel 2 ", flags, " > /dev/null 2>&1");
    if (std::system(command.c_str()) != 0) return "";
    return Slurp(prefix + ".model");
  }

  // Both engines' ids for generated texts, equal. Sanitizer builds, which
  // cannot load the library, encode the texts natively and stop there.
  static void ExpectTheLibrarysIds(const std::string& bytes, const std::string& what,
                                   uint32_t seed) {
    std::string error;
    auto native = SentencePieceModel::Load(bytes, &error);
    ASSERT_NE(native, nullptr) << what << ": " << error;
    ASSERT_TRUE(native->native()) << what;
    TextMaker maker(*words_, seed);
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> ids(2000);
    for (int i = 0; i < 2000; ++i) {
      texts.push_back(maker.Make(1 + i % 40) + (i % 500 == 0 ? maker.Make(4000) : ""));
      ASSERT_TRUE(native->Encode(texts.back(), &ids[i], &error));
    }
    auto library = SentencePieceModel::Load(bytes, &error, Engine::kLibrary);
    if (library == nullptr) GTEST_SKIP() << error;
    EXPECT_EQ(native->bos_id(), library->bos_id()) << what;
    EXPECT_EQ(native->eos_id(), library->eos_id()) << what;
    int differ = 0;
    for (size_t i = 0; i < texts.size() && differ < 5; ++i) {
      std::vector<int32_t> want;
      ASSERT_TRUE(library->Encode(texts[i], &want, &error)) << error;
      if (ids[i] != want) ++differ;
      EXPECT_EQ(ids[i], want) << what << ": text " << i << " '" << absl::CHexEscape(texts[i])
                              << "'";
    }
  }

  static TempDir* dir_;
  static std::vector<std::string>* words_;
};

TempDir* SentencePieceTest::dir_ = nullptr;
std::vector<std::string>* SentencePieceTest::words_ = new std::vector<std::string>;

TEST_F(SentencePieceTest, TheLibrarysIdsWithEachNormalization) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"nmt_nfkc", "--character_coverage 0.995"},
      {"fallback",
       "--byte_fallback true --character_coverage 0.995 "
       "--user_defined_symbols '<sep>,@@,\xEF\xAC\x81,\xE2\x96\x81@'"},
      {"identity",
       "--normalization_rule_name identity --remove_extra_whitespaces false "
       "--add_dummy_prefix false --character_coverage 1.0"},
      {"nfkc_cf",
       "--normalization_rule_name nfkc_cf --treat_whitespace_as_suffix true "
       "--bos_id=-1 --eos_id=1 --unk_id=2"},
  };
  uint32_t seed = 1;
  for (const auto& [name, flags] : models) {
    const std::string bytes = Train(name, flags);
    if (bytes.empty()) GTEST_SKIP() << "spm_train (Debian's sentencepiece) is not installed";
    ExpectTheLibrarysIds(bytes, name, seed++);
  }
}

TEST_F(SentencePieceTest, TheLibrarysIdsWithEditedModels) {
  const std::string bytes = Train("edited", "--character_coverage 0.995");
  if (bytes.empty()) GTEST_SKIP() << "spm_train (Debian's sentencepiece) is not installed";
  spm::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(bytes));
  // Spaces kept as spaces; every 7th normal piece unused.
  model.mutable_normalizer_spec()->set_escape_whitespaces(false);
  for (int i = 0; i < model.pieces_size(); i += 7) {
    if (model.pieces(i).type() == spm::ModelProto::SentencePiece::NORMAL) {
      model.mutable_pieces(i)->set_type(spm::ModelProto::SentencePiece::UNUSED);
    }
  }
  ExpectTheLibrarysIds(model.SerializeAsString(), "edited", 11);
}

TEST_F(SentencePieceTest, CraftedModelsAreRefusedWithTheReason) {
  const std::string bytes = Train("crafted", "");
  if (bytes.empty()) GTEST_SKIP() << "spm_train (Debian's sentencepiece) is not installed";
  spm::ModelProto good;
  ASSERT_TRUE(good.ParseFromString(bytes));
  const auto refused = [](const spm::ModelProto& m, const std::string& reason) {
    std::string error;
    EXPECT_EQ(SentencePieceModel::Load(m.SerializeAsString(), &error), nullptr) << reason;
    EXPECT_THAT(error, HasSubstr(reason));
  };
  spm::ModelProto m = good;
  m.mutable_pieces(5)->set_piece("");
  refused(m, "pieces[5] is empty");
  m = good;
  m.mutable_pieces(9)->set_piece(good.pieces(8).piece());
  refused(m, "pieces[9]: '" + good.pieces(8).piece() + "' is pieces[8] too");
  m = good;
  m.mutable_pieces(0)->set_type(spm::ModelProto::SentencePiece::CONTROL);
  refused(m, "no <unk> piece");
  m = good;
  std::string* map = m.mutable_normalizer_spec()->mutable_precompiled_charsmap();
  (*map)[3] = '\x7f';  // the trie's size, past the blob
  refused(m, "precompiled_charsmap: a broken character map");
  std::string error;
  EXPECT_EQ(SentencePieceModel::Load(std::string(300, '\x17'), &error), nullptr);
  EXPECT_THAT(error, HasSubstr("is not a SentencePiece model (not a ModelProto message)"));
}

// A character map with bytes changed at random still loads or is refused,
// and encodes any text within its bounds (ASan checks every read).
TEST_F(SentencePieceTest, ACorruptCharacterMapIsReadWithinItsBounds) {
  const std::string bytes = Train("corrupt", "");
  if (bytes.empty()) GTEST_SKIP() << "spm_train (Debian's sentencepiece) is not installed";
  spm::ModelProto good;
  ASSERT_TRUE(good.ParseFromString(bytes));
  std::mt19937 rng(5);
  TextMaker texts(*words_, 9);
  for (int trial = 0; trial < 20; ++trial) {
    spm::ModelProto m = good;
    std::string* map = m.mutable_normalizer_spec()->mutable_precompiled_charsmap();
    for (int i = 0; i < 200; ++i) {
      (*map)[4 + rng() % (map->size() - 4)] = static_cast<char>(rng());
    }
    std::string error;
    auto model = SentencePieceModel::Load(m.SerializeAsString(), &error);
    ASSERT_NE(model, nullptr) << error;
    for (int i = 0; i < 100; ++i) {
      std::vector<int32_t> ids;
      ASSERT_TRUE(model->Encode(texts.Make(30), &ids, &error));
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < m.pieces_size());
    }
  }
}

TEST(ByteTrieTest, FindsEveryKeyAndNothingElse) {
  std::mt19937 rng(3);
  std::vector<std::string> keys;
  for (int i = 0; i < 50000; ++i) {
    std::string key(1 + rng() % 12, '\0');
    for (char& c : key) c = static_cast<char>(rng() % (i % 2 ? 256 : 6));  // dense and sparse
    keys.push_back(key);
  }
  keys.push_back(keys[10]);  // a repeat: the first value holds
  std::vector<std::pair<std::string_view, int32_t>> pairs;
  for (size_t i = 0; i < keys.size(); ++i) pairs.emplace_back(keys[i], static_cast<int32_t>(i));
  const ByteTrie trie = ByteTrie::Build(pairs);
  std::set<std::string> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!seen.insert(keys[i]).second) continue;
    ASSERT_EQ(trie.Find(keys[i]), static_cast<int32_t>(i)) << i;
  }
  EXPECT_EQ(trie.Find(keys[10]), 10);
  for (int i = 0; i < 20000; ++i) {
    std::string probe(1 + rng() % 12, '\0');
    for (char& c : probe) c = static_cast<char>(rng());
    if (!seen.count(probe)) {
      ASSERT_EQ(trie.Find(probe), -1);
    }
  }
  EXPECT_EQ(ByteTrie::Build({}).Find("a"), -1);
}

}  // namespace
}  // namespace prepflow::text
