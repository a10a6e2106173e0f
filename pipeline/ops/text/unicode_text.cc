#include "pipeline/ops/text/unicode_text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

namespace prepflow::text {

int64_t InvalidUtf8At(absl::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  int64_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII, most of any text
      ++i;
      continue;
    }
    const int64_t at = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return at;
  }
  return -1;
}

std::vector<CodePoint> CodePoints(absl::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int64_t n = static_cast<int64_t>(s.size());
  std::vector<CodePoint> out;
  out.reserve(s.size());
  int64_t i = 0;
  while (i < n) {
    const auto at = static_cast<uint32_t>(i);
    UChar32 c;
    U8_NEXT(p, i, n, c);
    out.push_back({c, at});
  }
  return out;
}

bool IsLetter(int32_t c) { return (U_GET_GC_MASK(c) & U_GC_L_MASK) != 0; }
bool IsNumber(int32_t c) { return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }
bool IsSpace(int32_t c) { return c == ' ' || u_isUWhiteSpace(c); }

namespace {

// What Python's str.isspace() holds: White_Space and the information
// separators U+001C..U+001F.
bool IsPythonSpace(int32_t c) { return IsSpace(c) || (c >= 0x1c && c <= 0x1f); }

}  // namespace

std::string ClipClean(absl::string_view s) {
  std::string collapsed;
  collapsed.reserve(s.size());
  const std::vector<CodePoint> cps = CodePoints(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (IsSpace(cps[i].c)) {
      while (i + 1 < cps.size() && IsSpace(cps[i + 1].c)) ++i;
      collapsed.push_back(' ');
      continue;
    }
    const uint32_t end = i + 1 < cps.size() ? cps[i + 1].at : static_cast<uint32_t>(s.size());
    collapsed.append(s.data() + cps[i].at, end - cps[i].at);
  }
  // strip(): from each end, what str.isspace() holds.
  const std::vector<CodePoint> kept = CodePoints(collapsed);
  size_t first = 0, last = kept.size();
  while (first < last && IsPythonSpace(kept[first].c)) ++first;
  while (last > first && IsPythonSpace(kept[last - 1].c)) --last;
  const auto at = [&](size_t k) {
    return k < kept.size() ? kept[k].at : static_cast<uint32_t>(collapsed.size());
  };
  const uint32_t from = at(first), to = at(last);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(collapsed.data() + from, static_cast<int32_t>(to - from)));
  u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace prepflow::text
