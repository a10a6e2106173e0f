// The pre-tokenizers of GPT-2 and CLIP: their regular expressions written
// out as scanners over code points, alternative by alternative, so that each
// pre-token is the one `regex.findall` finds (leftmost alternative first at
// each position, each run greedy).
#include <vector>

#include "absl/strings/string_view.h"
#include "pipeline/ops/text/bpe.h"
#include "pipeline/ops/text/unicode_text.h"

namespace prepflow::text {
namespace {

enum class Class { kLetter, kNumber, kSpace, kOther };

Class ClassOf(int32_t c) {
  if (IsLetter(c)) return Class::kLetter;
  if (IsNumber(c)) return Class::kNumber;
  if (IsSpace(c)) return Class::kSpace;
  return Class::kOther;
}

// A text's code points, and the text of a run of them.
class Scanned {
 public:
  explicit Scanned(absl::string_view text) : text_(text), cps_(CodePoints(text)) {}
  size_t size() const { return cps_.size(); }
  const CodePoint& operator[](size_t k) const { return cps_[k]; }
  // The bytes of code points [from, to).
  absl::string_view Span(size_t from, size_t to) const {
    return text_.substr(At(from), At(to) - At(from));
  }

 private:
  size_t At(size_t k) const { return k < cps_.size() ? cps_[k].at : text_.size(); }
  absl::string_view text_;
  std::vector<CodePoint> cps_;
};

// The code points past a contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
// `fold_s`: CLIP's IGNORECASE, under which 'ſ' (U+017F) matches 's'.
size_t Contraction(const Scanned& cps, size_t i, bool fold_s) {
  const size_t n = cps.size();
  if (cps[i].c != '\'' || i + 1 >= n) return 0;
  const int32_t c1 = cps[i + 1].c;
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' || (fold_s && c1 == 0x17F)) return 2;
  if (i + 2 >= n) return 0;
  const int32_t c2 = cps[i + 2].c;
  if (((c1 == 'r' || c1 == 'v') && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// The end of the run of `k` from `i`.
size_t RunEnd(const Scanned& cps, size_t i, Class k) {
  while (i < cps.size() && ClassOf(cps[i].c) == k) ++i;
  return i;
}

}  // namespace

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void BpeTokenizer::PreTokenizeGpt2(absl::string_view text, std::vector<int32_t>* ids) const {
  const Scanned cps(text);
  const size_t n = cps.size();
  const auto word = [&](size_t from, size_t to) { EncodeWord(cps.Span(from, to), ids); };
  size_t i = 0;
  while (i < n) {
    if (const size_t len = Contraction(cps, i, /*fold_s=*/false); len > 0) {
      word(i, i + len);
      i += len;
      continue;
    }
    // " ?" before a run of letters, numbers or others.
    const size_t j = cps[i].c == ' ' && i + 1 < n && !IsSpace(cps[i + 1].c) ? i + 1 : i;
    if (const Class k = ClassOf(cps[j].c); k != Class::kSpace) {
      const size_t end = RunEnd(cps, j + 1, k);
      word(i, end);
      i = end;
      continue;
    }
    // Whitespace: all of it at the end; else all but its last (which then
    // starts the next pre-token), or one alone.
    const size_t end = RunEnd(cps, i, Class::kSpace);
    const size_t to = end == n || end - i == 1 ? end : end - 1;
    word(i, to);
    i = to;
  }
}

// <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// (IGNORECASE), on the cleaned, lowered text; whitespace between is skipped.
void BpeTokenizer::PreTokenizeClip(absl::string_view text, std::vector<int32_t>* ids) const {
  static constexpr absl::string_view kStart = "<|startoftext|>", kEnd = "<|endoftext|>";
  const Scanned cps(text);
  const size_t n = cps.size();
  const auto word = [&](size_t from, size_t to) { EncodeWord(cps.Span(from, to), ids); };
  size_t i = 0;
  while (i < n) {
    const absl::string_view rest = text.substr(cps[i].at);
    if (rest.substr(0, kStart.size()) == kStart || rest.substr(0, kEnd.size()) == kEnd) {
      const bool start = rest[2] == 's';
      ids->push_back(start ? clip_start_ : clip_end_);
      i += start ? kStart.size() : kEnd.size();  // ASCII: one code point a byte
      continue;
    }
    if (const size_t len = Contraction(cps, i, /*fold_s=*/true); len > 0) {
      word(i, i + len);
      i += len;
      continue;
    }
    const Class k = ClassOf(cps[i].c);
    size_t end = i + 1;
    if (k == Class::kSpace) {
      i = end;
      continue;
    }
    if (k != Class::kNumber) end = RunEnd(cps, i + 1, k);  // a number is one digit each
    word(i, end);
    i = end;
  }
}

}  // namespace prepflow::text
