#include "base/text.h"

#include "absl/strings/str_format.h"

namespace prepflow {
namespace {

// The length of the valid UTF-8 sequence at s[i] (shortest form, no
// surrogates, at most U+10FFFF), or 0.
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  uint32_t min, cp;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  // C1 controls (U+0080..U+009F) move terminals too.
  if (cp < 0xA0) return 0;
  return n;
}

}  // namespace

std::string SafeText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (const size_t n = c >= 0x80 ? Utf8Length(text, i) : 0; n > 0) {
      out.append(text.data() + i, n);
      i += n;
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    }
  }
  return out;
}

int64_t LogLimiter::Admit(int64_t now_nanos) {
  if (passed_ < burst_ || now_nanos - last_nanos_ >= interval_nanos_) {
    ++passed_;
    last_nanos_ = now_nanos;
    const int64_t held = held_;
    held_ = 0;
    return held;
  }
  ++held_;
  return -1;
}

}  // namespace prepflow
