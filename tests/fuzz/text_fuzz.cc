// Fuzz target: the tokenizers' hostile inputs. The first byte picks what the
// rest is:
//   0  a GPT-2 vocab.json (with a fixed merges.txt),
//   1  a merges file (GPT-2's, with a vocabulary of the bytes and every merge
//      result; and CLIP's, whose vocabulary is made from it),
//   2  a caption: a record's JSON member (tokenize's json_key "caption":
//      nesting bombs, escapes, duplicates) and a .txt (GPT-2's pre-tokens),
//      both through the tokenize op on a CLIP vocabulary,
//   3  a SentencePiece .model, encoded natively where it is a unigram model
//      (its pieces, character map and specs crafted).
// Loading must end with a tokenizer or an error Status naming the file and
// line, and encoding must end: never a crash, a hang or deep recursion.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/data/dataset.h"
#include "pipeline/ops/text/bpe.h"
#include "pipeline/ops/text/sentencepiece_unigram.h"
#include "pipeline/ops/text/unicode_text.h"
#include "pipeline/pipeline.h"
#include "tests/fuzz/fuzz_seeds.h"

namespace {

using prepflow::text::BpeFlavor;
using prepflow::text::BpeTokenizer;

const char kMerges[] = "#version: 0.2\nh e\nl l\nhe ll\nĠ w\n";

// A vocab.json of the 256 byte symbols and kMerges' results.
std::string ByteVocab(const std::vector<std::string>& extra) {
  std::string vocab = "{";
  int id = 0;
  const auto add = [&](const std::string& token) {
    std::string escaped;
    for (char c : token) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += c;
    }
    absl::StrAppend(&vocab, id ? "," : "", "\"", escaped, "\":", id);
    ++id;
  };
  for (int b = 0; b < 256; ++b) add(prepflow::text::ByteSymbol(static_cast<uint8_t>(b)));
  for (const std::string& token : extra) add(token);
  return vocab + "}";
}

void Encode(const BpeTokenizer& bpe, const std::string& text) {
  std::vector<int32_t> ids;
  bpe.Encode("hello world, it's 2026!", &ids);
  if (prepflow::text::InvalidUtf8At(text) < 0) bpe.Encode(text, &ids);
}

// tokenize stages over a CLIP merges file in a directory of their own.
struct CaptionPipelines {
  std::unique_ptr<prepflow::Pipeline> json, txt;
};

const CaptionPipelines& Captions() {
  static const CaptionPipelines* pipelines = [] {
    const std::string dir = prepflow::fuzz::TempRoot("text");
    std::ofstream(dir + "/merges.txt") << kMerges;
    auto* p = new CaptionPipelines;
    for (bool json : {true, false}) {
      prepflow::proto::PipelineSpec spec;
      spec.set_name(json ? "json" : "txt");
      auto* t = spec.add_stages()->mutable_tokenize();
      t->set_kind(prepflow::proto::Tokenize::KIND_CLIP);
      t->set_merges(dir + "/merges.txt");
      t->set_context_length(77);
      t->set_add_bos(true);
      t->set_add_eos(true);
      if (json) t->set_json_key("caption");
      prepflow::PipelineOptions options;
      options.read_file = prepflow::OpFileReaderFor({});
      auto made = prepflow::Pipeline::Create(spec, options);
      if (!made.ok()) std::abort();
      (json ? p->json : p->txt) = *std::move(made);
    }
    return p;
  }();
  return *pipelines;
}

// A unigram model of a few pieces: controls, a user-defined piece, a byte.
std::string TinyUnigramModel() {
  using Piece = prepflow::spm::ModelProto::SentencePiece;
  prepflow::spm::ModelProto model;
  model.mutable_trainer_spec()->set_byte_fallback(true);
  const std::pair<const char*, Piece::Type> pieces[] = {{"<unk>", Piece::UNKNOWN},
                                                        {"<s>", Piece::CONTROL},
                                                        {"</s>", Piece::CONTROL},
                                                        {"\xe2\x96\x81", Piece::NORMAL},
                                                        {"a", Piece::NORMAL},
                                                        {"\xe2\x96\x81"
                                                         "ab",
                                                         Piece::NORMAL},
                                                        {"b", Piece::NORMAL},
                                                        {"<sep>", Piece::USER_DEFINED},
                                                        {"<0x63>", Piece::BYTE}};
  float score = -1;
  for (const auto& [text, type] : pieces) {
    Piece* p = model.add_pieces();
    p->set_piece(text);
    p->set_type(type);
    p->set_score(score -= 0.5f);
  }
  return model.SerializeAsString();
}

void EncodeSentencePiece(const std::string& bytes) {
  prepflow::spm::ModelProto proto;
  if (!proto.ParseFromString(bytes) ||
      proto.trainer_spec().model_type() != prepflow::spm::TrainerSpec::UNIGRAM) {
    return;
  }
  auto model = prepflow::text::SentencePieceUnigram::Load(proto);
  if (!model.ok()) return;
  std::string text = "  ab<sep>c \xff\xe2\x96 caf\xc3\xa9  ";
  for (int i = 0; i < proto.pieces_size() && i < 64; ++i) text += proto.pieces(i).piece();
  std::vector<int32_t> ids;
  (*model)->Encode(text, &ids);
  for (int32_t id : ids) {
    if (id < 0 || id >= proto.pieces_size()) std::abort();
  }
}

}  // namespace

void WriteSeeds(const std::string& dir) {
  prepflow::fuzz::WriteSeed(dir, "vocab", std::string(1, '\0') + ByteVocab({"he", "ll"}));
  prepflow::fuzz::WriteSeed(dir, "vocab-nested", std::string(1, '\0') + "{\"a\": {\"b\": [1]}}");
  prepflow::fuzz::WriteSeed(dir, "merges", std::string(1, '\1') + kMerges);
  prepflow::fuzz::WriteSeed(dir, "merges-bad", std::string(1, '\1') + "#version\nonly\na b c\n");
  prepflow::fuzz::WriteSeed(
      dir, "caption", std::string(1, '\2') + "{\"caption\": \"a caf\\u00e9 \\ud83d\\ude42\"}");
  prepflow::fuzz::WriteSeed(dir, "caption-deep",
                            std::string(1, '\2') + std::string(200, '[') + "\"x\"");
  prepflow::fuzz::WriteSeed(dir, "caption-dup",
                            std::string(1, '\2') + "{\"caption\": 1, \"caption\": \"last wins\"}");
  prepflow::fuzz::WriteSeed(dir, "spm-unigram", std::string(1, '\3') + TinyUnigramModel());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto bpe = BpeTokenizer::Load(BpeFlavor::kGpt2, {rest, "vocab.json", kMerges, "merges.txt"});
      if (bpe.ok()) Encode(**bpe, rest);
      break;
    }
    case 1: {
      // Every merge's result, as far as the lines are two tokens.
      std::vector<std::string> results;
      std::istringstream lines(rest);
      for (std::string line, a, b; std::getline(lines, line) && results.size() < 4096;) {
        std::istringstream words(line);
        if (words >> a >> b) results.push_back(a + b);
      }
      const std::string vocab = ByteVocab(results);
      auto gpt2 = BpeTokenizer::Load(BpeFlavor::kGpt2, {vocab, "vocab.json", rest, "merges.txt"});
      if (gpt2.ok()) Encode(**gpt2, rest);
      auto clip = BpeTokenizer::Load(BpeFlavor::kClip, {"", "", rest, "merges.txt"});
      if (clip.ok()) Encode(**clip, rest);
      break;
    }
    case 2:
      prepflow::fuzz::RunOnBytes(*Captions().json, data + 1, size - 1);
      prepflow::fuzz::RunOnBytes(*Captions().txt, data + 1, size - 1);
      break;
    default:
      EncodeSentencePiece(rest);
  }
  return 0;
}
