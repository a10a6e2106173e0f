// SentencePiece's normalization, as its Normalizer applies it before a model
// encodes: the model's precompiled character map (NFKC and the like, a
// Darts-clone double array of rules) replaces the longest rule at each
// point, user-defined pieces pass untouched, malformed UTF-8 becomes U+FFFD a
// byte at a time, and spaces are trimmed, squeezed, prefixed and escaped to
// U+2581 as the NormalizerSpec says. Output equals libsentencepiece's for
// every input (sentencepiece_test.cc holds it to the library); a crafted
// character map is read within its bounds, never past them.
//
// Thread-safety: immutable once made.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_NORMALIZER_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_NORMALIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ops/text/byte_trie.h"
#include "proto/sentencepiece_model.pb.h"

namespace prepflow::text {

class SentencePieceNormalizer {
 public:
  // InvalidArgument when the character map is not one.
  static absl::StatusOr<SentencePieceNormalizer> Create(
      const spm::NormalizerSpec& spec, bool whitespace_as_suffix,
      const std::vector<std::string_view>& user_defined);

  // `text` normalized, into `*out` (replaced).
  void Normalize(std::string_view text, std::string* out) const;

 private:
  SentencePieceNormalizer() = default;
  // What the text's first character (or rule, or user-defined piece)
  // becomes, and how many bytes of the text that takes.
  std::pair<std::string_view, size_t> NormalizePrefix(std::string_view text) const;
  // The longest rule of the map at the start of `text`: (its replacement,
  // its length), length 0 for none.
  std::pair<std::string_view, size_t> LongestRule(std::string_view text) const;
  // The space character as it is written out (U+2581 or ' ').
  std::string_view Space() const { return escape_whitespaces_ ? "\xe2\x96\x81" : " "; }

  std::vector<uint32_t> units_;  // the double array's units
  std::string replacements_;     // NUL-ended replacement strings
  ByteTrie user_defined_;
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = true;
  bool escape_whitespaces_ = true;
  bool whitespace_as_suffix_ = false;
};

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_SENTENCEPIECE_NORMALIZER_H_
