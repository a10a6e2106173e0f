#include "pipeline/ops/text/sentencepiece_unigram.h"

#include <algorithm>
#include <cfloat>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/ops/text/unicode_text.h"

namespace prepflow::text {
namespace {

using Piece = spm::ModelProto::SentencePiece;

// The score of an unknown character: the lowest piece's, less this.
constexpr float kUnknownPenalty = 10.0f;

std::string Quoted(std::string_view piece) {
  return absl::StrCat(
      "'",
      absl::Utf8SafeCHexEscape(absl::string_view(piece.data(), std::min<size_t>(piece.size(), 40))),
      piece.size() > 40 ? "..." : "", "'");
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceUnigram>> SentencePieceUnigram::Load(
    const spm::ModelProto& model) {
  std::vector<std::string_view> user_defined;
  for (const Piece& p : model.pieces()) {
    if (p.type() == Piece::USER_DEFINED) user_defined.push_back(p.piece());
  }
  absl::StatusOr<SentencePieceNormalizer> normalizer = SentencePieceNormalizer::Create(
      model.normalizer_spec(), model.trainer_spec().treat_whitespace_as_suffix(), user_defined);
  if (!normalizer.ok()) return normalizer.status();
  auto unigram =
      std::unique_ptr<SentencePieceUnigram>(new SentencePieceUnigram(*std::move(normalizer)));
  if (absl::Status s = unigram->ReadPieces(model); !s.ok()) return s;
  return unigram;
}

absl::Status SentencePieceUnigram::ReadPieces(const spm::ModelProto& model) {
  byte_fallback_ = model.trainer_spec().byte_fallback();
  // Pieces the encoder may emit (normal, user-defined, unused) and the rest
  // (<unk>, controls, bytes) are two name spaces, as in the library.
  absl::flat_hash_map<std::string_view, int32_t> normal, reserved;
  std::vector<std::pair<std::string_view, int32_t>> keys;
  min_score_ = FLT_MAX;
  max_score_ = FLT_MIN;
  for (int32_t i = 0; i < model.pieces_size(); ++i) {
    const Piece& p = model.pieces(i);
    const std::string_view piece = p.piece();
    if (piece.empty()) return absl::InvalidArgumentError(absl::StrCat("pieces[", i, "] is empty"));
    const bool emitted =
        p.type() == Piece::NORMAL || p.type() == Piece::USER_DEFINED || p.type() == Piece::UNUSED;
    if (const auto [at, added] = (emitted ? normal : reserved).emplace(piece, i); !added) {
      return absl::InvalidArgumentError(
          absl::StrCat("pieces[", i, "]: ", Quoted(piece), " is pieces[", at->second, "] too"));
    }
    if (emitted) keys.emplace_back(piece, i);
    if (p.type() == Piece::UNKNOWN) {
      if (unk_id_ >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("pieces[", i, "] and pieces[", unk_id_, "] are both <unk>"));
      }
      unk_id_ = i;
    }
    if (p.type() == Piece::BYTE && !byte_fallback_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pieces[", i, "] ", Quoted(piece), " is a byte piece, but byte_fallback is false"));
    }
    if (p.type() == Piece::NORMAL) {
      min_score_ = std::min(min_score_, p.score());
      max_score_ = std::max(max_score_, p.score());
    }
    score_.push_back(p.score());
    type_.push_back(p.type());
  }
  if (unk_id_ < 0) return absl::InvalidArgumentError("the model has no <unk> piece");
  if (keys.empty()) return absl::InvalidArgumentError("the model has no normal pieces");
  pieces_ = ByteTrie::Build(std::move(keys));
  const auto id = [&](std::string_view piece) {
    if (auto it = reserved.find(piece); it != reserved.end()) return it->second;
    if (auto it = normal.find(piece); it != normal.end()) return it->second;
    return unk_id_;
  };
  const auto control = [&](std::string_view piece) {
    const int32_t i = id(piece);
    return type_[i] == Piece::CONTROL ? i : -1;
  };
  bos_id_ = control(model.trainer_spec().bos_piece());
  eos_id_ = control(model.trainer_spec().eos_piece());
  for (int b = 0; b < 256; ++b) byte_id_[b] = id(absl::StrFormat("<0x%02X>", b));
  return absl::OkStatus();
}

void SentencePieceUnigram::Viterbi(std::string_view text, std::vector<Best>* best) const {
  const size_t size = text.size();
  best->assign(size + 1, Best{0.0f, -1, -1});
  const float unknown_score = min_score_ - kUnknownPenalty;
  // Scores are compared as the library compares them: a piece's score and
  // the path's sum in double, the path stored in float, <unk>'s in float.
  const auto offer = [](Best& to, double score, int32_t start, int32_t id) {
    if (to.start == -1 || score > to.score) to = {static_cast<float>(score), start, id};
  };
  for (size_t start = 0; start < size;) {
    const float so_far = (*best)[start].score;
    const size_t char_length = std::min(Utf8SequenceLength(text[start]), size - start);
    bool whole_char = false;
    int32_t node = ByteTrie::kRoot;
    for (size_t end = start; end < size;) {
      node = pieces_.Next(node, static_cast<uint8_t>(text[end++]));
      if (node < 0) break;
      const int32_t id = pieces_.Value(node);
      if (id < 0 || type_[id] == Piece::UNUSED) continue;
      const size_t length = end - start;
      const double score = type_[id] == Piece::USER_DEFINED
                               ? static_cast<float>(length) * max_score_ - 0.1
                               : static_cast<double>(score_[id]);
      offer((*best)[end], score + so_far, static_cast<int32_t>(start), id);
      whole_char |= length == char_length;
    }
    if (!whole_char) {
      Best& to = (*best)[start + char_length];
      const float score = unknown_score + so_far;
      if (to.start == -1 || score > to.score) to = {score, static_cast<int32_t>(start), unk_id_};
    }
    start += char_length;
  }
}

void SentencePieceUnigram::Emit(std::string_view text, const std::vector<Best>& best,
                                std::vector<int32_t>* ids) const {
  thread_local std::vector<int32_t> ends;  // the path's pieces' ends, last first
  ends.clear();
  for (size_t end = best.size() - 1; end > 0 && best[end].start >= 0;
       end = static_cast<size_t>(best[end].start)) {
    ends.push_back(static_cast<int32_t>(end));
  }
  bool after_unknown = false;
  for (auto it = ends.rbegin(); it != ends.rend(); ++it) {
    const Best& piece = best[*it];
    const bool unknown = piece.id == unk_id_;
    if (unknown && byte_fallback_) {
      for (int32_t i = piece.start; i < *it; ++i) {
        ids->push_back(byte_id_[static_cast<uint8_t>(text[static_cast<size_t>(i)])]);
      }
    } else if (!(unknown && after_unknown)) {  // a run of <unk> is one
      ids->push_back(piece.id);
    }
    after_unknown = unknown;
  }
}

void SentencePieceUnigram::Encode(std::string_view text, std::vector<int32_t>* ids) const {
  thread_local std::string normalized;
  thread_local std::vector<Best> best;
  normalizer_.Normalize(text, &normalized);
  if (normalized.empty()) return;
  Viterbi(normalized, &best);
  Emit(normalized, best, ids);
}

}  // namespace prepflow::text
