// A SentencePiece unigram model encoded natively: the text normalized as the
// model says (sentencepiece_normalizer.h), then the highest-scoring
// segmentation into the model's pieces by Viterbi over the normalized bytes
// (each character a piece or <unk>, user-defined pieces always taken), runs
// of <unk> merged into one, or spelled as <0xXX> byte pieces where the model
// falls back to bytes. The ids equal libsentencepiece's Encode (its
// optimized unigram encoder, scores compared in the same precisions) for any
// input; sentencepiece_test.cc holds it to the library on generated text.
//
// Why not the library: it builds a SentencePieceText message, a string per
// piece, for every text, which with its normalizer's alignment table costs
// more than the segmentation itself; and it cannot be loaded in sanitizer
// builds. Here a text costs its normalized copy and one array of positions.
//
// Thread-safety: immutable once loaded; Encode may be called concurrently.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_UNIGRAM_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_UNIGRAM_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ops/text/byte_trie.h"
#include "pipeline/ops/text/sentencepiece_normalizer.h"
#include "proto/sentencepiece_model.pb.h"

namespace prepflow::text {

class SentencePieceUnigram {
 public:
  // InvalidArgument naming what is wrong where the library refuses the model
  // too (an empty or repeated piece, no <unk> or two, no normal piece, a
  // broken character map). REQUIRES: a unigram model (model_type UNIGRAM).
  static absl::StatusOr<std::unique_ptr<SentencePieceUnigram>> Load(const spm::ModelProto& model);

  // Appends the ids of `text` (any bytes).
  void Encode(std::string_view text, std::vector<int32_t>* ids) const;
  // The BOS and EOS control pieces' ids; -1 where the model has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }

 private:
  using Type = spm::ModelProto::SentencePiece::Type;
  // The best segmentation of `text` ending at each byte: the last piece's
  // start (-1: none yet) and id, and the path's score.
  struct Best {
    float score;
    int32_t start;
    int32_t id;
  };
  explicit SentencePieceUnigram(SentencePieceNormalizer normalizer)
      : normalizer_(std::move(normalizer)) {}
  absl::Status ReadPieces(const spm::ModelProto& model);
  // best[i] for every character boundary i of `text` (normalized).
  void Viterbi(std::string_view text, std::vector<Best>* best) const;
  // The ids of the path that ends at best.size() - 1, appended.
  void Emit(std::string_view text, const std::vector<Best>& best, std::vector<int32_t>* ids) const;

  SentencePieceNormalizer normalizer_;
  ByteTrie pieces_;           // normal, user-defined and unused pieces -> id
  std::vector<float> score_;  // by id
  std::vector<Type> type_;    // by id
  float min_score_ = 0, max_score_ = 0;
  int32_t unk_id_ = -1, bos_id_ = -1, eos_id_ = -1;
  bool byte_fallback_ = false;
  int32_t byte_id_[256] = {};  // <0xXX>'s id (the unk id where missing)
};

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_UNIGRAM_H_
