// Unicode helpers of the text ops: UTF-8 checked as Python decodes it,
// code points classed as the `regex` module's \p{L}, \p{N} and \s (from
// ICU's character database), and CLIP's cleaning of a caption.
//
// Thread-safety: pure functions.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_UNICODE_TEXT_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_UNICODE_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace prepflow::text {

// The offset of the first byte of `s` that is not well-formed UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included), or
// -1 when all of it is.
int64_t InvalidUtf8At(absl::string_view s);

// The bytes a UTF-8 sequence starting with `lead` takes, by its lead byte
// alone (1 for ASCII, continuation and invalid leads; 2, 3 or 4), as
// SentencePiece steps through text.
inline size_t Utf8SequenceLength(char lead) {
  static constexpr char kLength[] = "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4";
  return static_cast<size_t>(kLength[static_cast<uint8_t>(lead) >> 4]);
}

// A code point and where its bytes start in the text.
struct CodePoint {
  int32_t c;
  uint32_t at;
};
// The code points of `s`. REQUIRES: InvalidUtf8At(s) < 0.
std::vector<CodePoint> CodePoints(absl::string_view s);

bool IsLetter(int32_t c);  // general category L*
bool IsNumber(int32_t c);  // N*: Nd, Nl, No
bool IsSpace(int32_t c);   // White_Space, as regex's \s

// CLIP's whitespace_clean(text).lower(): every run of \s as one space,
// what str.strip() strips taken from both ends, then Python's str.lower()
// (full case mapping, final sigma). REQUIRES: valid UTF-8.
std::string ClipClean(absl::string_view s);

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_UNICODE_TEXT_H_
