#include "pipeline/braces.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace prepflow {
namespace {

// The parsed pattern: a sequence of parts, each literal text, a range or a
// set of alternatives (each a sequence of its own).
struct Sequence;
struct Range {
  int64_t start = 0, step = 1;
  uint64_t count = 0;
  int width = 0;         // zero-padding; 0: none
  bool letters = false;  // ASCII codes, printed as characters
  std::string At(uint64_t i) const {
    const int64_t v = start + step * static_cast<int64_t>(i);
    if (letters) return std::string(1, static_cast<char>(v));
    return width > 0 ? absl::StrFormat("%0*d", width, v) : absl::StrCat(v);
  }
};
struct Alternatives {
  std::vector<Sequence> options;
};
struct Sequence {
  std::vector<std::variant<std::string, Range, Alternatives>> parts;
};

// Counts, saturating just above `cap` (so that no product overflows).
uint64_t Count(const Sequence& s, uint64_t cap);
uint64_t Count(const Range& r, uint64_t) { return r.count; }
uint64_t Count(const std::string&, uint64_t) { return 1; }
uint64_t Count(const Alternatives& a, uint64_t cap) {
  uint64_t n = 0;
  for (const Sequence& s : a.options) n = std::min(cap + 1, n + Count(s, cap));
  return n;
}
uint64_t Count(const Sequence& s, uint64_t cap) {
  uint64_t n = 1;
  for (const auto& part : s.parts) {
    const uint64_t k = std::visit([cap](const auto& p) { return Count(p, cap); }, part);
    if (k == 0) return 0;
    n = n > (cap + 1) / k ? cap + 1 : n * k;
  }
  return n;
}

// Appends every expansion of parts[i..] after `prefix` to `out`.
void Expand(const Sequence& s, size_t i, const std::string& prefix, std::vector<std::string>* out);
void ExpandEach(const std::vector<std::string>& heads, const Sequence& s, size_t i,
                std::vector<std::string>* out) {
  for (const std::string& head : heads) Expand(s, i, head, out);
}
void Expand(const Sequence& s, size_t i, const std::string& prefix, std::vector<std::string>* out) {
  if (i == s.parts.size()) {
    out->push_back(prefix);
    return;
  }
  const auto& part = s.parts[i];
  if (const auto* text = std::get_if<std::string>(&part)) {
    Expand(s, i + 1, prefix + *text, out);
  } else if (const auto* range = std::get_if<Range>(&part)) {
    for (uint64_t k = 0; k < range->count; ++k) Expand(s, i + 1, prefix + range->At(k), out);
  } else {
    for (const Sequence& option : std::get<Alternatives>(part).options) {
      std::vector<std::string> heads;
      Expand(option, 0, prefix, &heads);
      ExpandEach(heads, s, i + 1, out);
    }
  }
}

// Bounds that keep a hostile pattern cheap: its length (scanning for a
// brace's end is linear, so parsing is quadratic in it), its nesting (the
// parser recurses) and the magnitude of range ends and steps (no overflow).
constexpr size_t kMaxPatternBytes = 4096;
constexpr int kMaxDepth = 32;
constexpr int64_t kMaxMagnitude = int64_t{1} << 62;

class Parser {
 public:
  explicit Parser(absl::string_view pattern) : p_(pattern) {}

  absl::StatusOr<Sequence> Parse() { return ParseSequence(0, p_.size(), 0); }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("shard pattern '", p_, "': ", what));
  }

  // The index of the '}' closing the '{' at `open`, or npos.
  size_t Closing(size_t open, size_t end) const {
    int depth = 0;
    for (size_t i = open; i < end; ++i) {
      if (p_[i] == '\\') {
        ++i;
      } else if (p_[i] == '{') {
        ++depth;
      } else if (p_[i] == '}' && --depth == 0) {
        return i;
      }
    }
    return absl::string_view::npos;
  }

  // The top-level commas of p_[begin, end).
  std::vector<size_t> Commas(size_t begin, size_t end) const {
    std::vector<size_t> commas;
    int depth = 0;
    for (size_t i = begin; i < end; ++i) {
      if (p_[i] == '\\') {
        ++i;
      } else if (p_[i] == '{') {
        ++depth;
      } else if (p_[i] == '}') {
        --depth;
      } else if (p_[i] == ',' && depth == 0) {
        commas.push_back(i);
      }
    }
    return commas;
  }

  absl::StatusOr<Sequence> ParseSequence(size_t begin, size_t end, int depth) {
    if (depth > kMaxDepth) return Error(absl::StrCat("braces nested over ", kMaxDepth, " deep"));
    Sequence s;
    std::string text;
    auto flush = [&] {
      if (!text.empty()) s.parts.emplace_back(std::move(text));
      text.clear();
    };
    for (size_t i = begin; i < end; ++i) {
      const char c = p_[i];
      if (c == '\\') {
        if (i + 1 < end) text += p_[++i];
        continue;
      }
      if (c == '}') return Error(absl::StrCat("'}' at column ", i + 1, " closes no '{'"));
      if (c != '{') {
        text += c;
        continue;
      }
      const size_t close = Closing(i, end);
      if (close == absl::string_view::npos) {
        return Error(absl::StrCat("'{' at column ", i + 1, " is never closed"));
      }
      flush();
      absl::Status st = ParseBrace(i + 1, close, depth + 1, &s);
      if (!st.ok()) return st;
      i = close;
    }
    flush();
    return s;
  }

  // The brace whose content is p_[begin, end), appended to `s`.
  absl::Status ParseBrace(size_t begin, size_t end, int depth, Sequence* s) {
    const std::vector<size_t> commas = Commas(begin, end);
    if (!commas.empty()) {
      Alternatives a;
      size_t from = begin;
      for (size_t k = 0; k <= commas.size(); ++k) {
        const size_t to = k < commas.size() ? commas[k] : end;
        absl::StatusOr<Sequence> option = ParseSequence(from, to, depth);
        if (!option.ok()) return option.status();
        a.options.push_back(*std::move(option));
        from = to + 1;
      }
      s->parts.emplace_back(std::move(a));
      return absl::OkStatus();
    }
    const absl::string_view content = p_.substr(begin, end - begin);
    if (absl::StrContains(content, "..")) {
      absl::StatusOr<Range> range = ParseRange(content);
      if (!range.ok()) return range.status();
      s->parts.emplace_back(*range);
      return absl::OkStatus();
    }
    // Neither: literal braces around whatever the content expands to.
    absl::StatusOr<Sequence> inner = ParseSequence(begin, end, depth);
    if (!inner.ok()) return inner.status();
    s->parts.emplace_back(std::string("{"));
    for (auto& part : inner->parts) s->parts.push_back(std::move(part));
    s->parts.emplace_back(std::string("}"));
    return absl::OkStatus();
  }

  absl::StatusOr<Range> ParseRange(absl::string_view content) const {
    const std::vector<absl::string_view> ends = absl::StrSplit(content, "..");
    const std::string where = absl::StrCat("{", content, "}");
    if (ends.size() != 2 && ends.size() != 3) {
      return Error(absl::StrCat(where, " is not a range (A..B or A..B..STEP)"));
    }
    Range r;
    int64_t step = 1;
    if (ends.size() == 3 &&
        (!absl::SimpleAtoi(ends[2], &step) || step == 0 || std::llabs(step) >= kMaxMagnitude)) {
      return Error(absl::StrCat(where, ": the step must be a non-zero integer"));
    }
    int64_t a = 0, b = 0;
    const auto letter = [](absl::string_view e) {
      return e.size() == 1 && ((e[0] >= 'a' && e[0] <= 'z') || (e[0] >= 'A' && e[0] <= 'Z'));
    };
    if (letter(ends[0]) && letter(ends[1])) {
      r.letters = true;
      a = ends[0][0];
      b = ends[1][0];
    } else if (absl::SimpleAtoi(ends[0], &a) && absl::SimpleAtoi(ends[1], &b) &&
               std::llabs(a) < kMaxMagnitude && std::llabs(b) < kMaxMagnitude) {
      const auto padded = [](absl::string_view e) {
        if (!e.empty() && (e[0] == '-' || e[0] == '+')) e.remove_prefix(1);
        return e.size() > 1 && e[0] == '0';
      };
      if (padded(ends[0]) || padded(ends[1])) {
        r.width = static_cast<int>(std::max(ends[0].size(), ends[1].size()));
      }
    } else {
      return Error(absl::StrCat(where, ": the ends must be both integers or both letters"));
    }
    const uint64_t span = static_cast<uint64_t>(a <= b ? b - a : a - b);
    const uint64_t stride = static_cast<uint64_t>(std::llabs(step));
    r.start = a;
    r.step = a <= b ? static_cast<int64_t>(stride) : -static_cast<int64_t>(stride);
    r.count = span / stride + 1;
    return r;
  }

  absl::string_view p_;
};

}  // namespace

bool HasBraces(absl::string_view pattern) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      ++i;
    } else if (pattern[i] == '{') {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern, size_t max_names) {
  if (pattern.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard pattern of ", pattern.size(), " bytes; at most ", kMaxPatternBytes));
  }
  absl::StatusOr<Sequence> parsed = Parser(pattern).Parse();
  if (!parsed.ok()) return parsed.status();
  const uint64_t cap = std::min<uint64_t>(max_names, uint64_t{1} << 40);
  const uint64_t n = Count(*parsed, cap);
  if (n > cap) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard pattern '", pattern, "' names more than ", max_names, " files"));
  }
  std::vector<std::string> out;
  out.reserve(n);
  Expand(*parsed, 0, "", &out);
  return out;
}

}  // namespace prepflow
