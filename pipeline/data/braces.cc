#include "pipeline/data/braces.h"

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

// How many names an expansion makes and how many bytes they take, both
// saturating at kSaturated (so that no sum or product overflows).
struct Extent {
  uint64_t names = 0, bytes = 0;
};
constexpr uint64_t kSaturated = uint64_t{1} << 62;
uint64_t Add(uint64_t a, uint64_t b) { return std::min(kSaturated, a + b); }
uint64_t Mul(uint64_t a, uint64_t b) {
  return a != 0 && b > kSaturated / a ? kSaturated : std::min(kSaturated, a * b);
}

Extent Measure(const Sequence& s);
Extent Measure(const std::string& text) { return {1, text.size()}; }
Extent Measure(const Range& r) {  // every name as long as the longer end
  const size_t longest = std::max(r.At(0).size(), r.At(r.count - 1).size());
  return {r.count, Mul(r.count, longest)};
}
Extent Measure(const Alternatives& a) {
  Extent e;
  for (const Sequence& option : a.options) {
    const Extent o = Measure(option);
    e = {Add(e.names, o.names), Add(e.bytes, o.bytes)};
  }
  return e;
}
// Each part's bytes appear once per combination of the other parts.
Extent Measure(const Sequence& s) {
  Extent e{1, 0};
  for (const auto& part : s.parts) {
    const Extent p = std::visit([](const auto& x) { return Measure(x); }, part);
    e = {Mul(e.names, p.names), Add(Mul(e.bytes, p.names), Mul(p.bytes, e.names))};
  }
  return e;
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

  // The '}' closing the '{' at `open` (npos when none) and the commas
  // between them outside nested braces: one scan.
  struct BraceSpan {
    size_t close = absl::string_view::npos;
    std::vector<size_t> commas;
  };
  BraceSpan Span(size_t open, size_t end) const {
    BraceSpan span;
    int depth = 0;
    for (size_t i = open; i < end; ++i) {
      if (p_[i] == '\\') {
        ++i;
      } else if (p_[i] == '{') {
        ++depth;
      } else if (p_[i] == '}' && --depth == 0) {
        span.close = i;
        return span;
      } else if (p_[i] == ',' && depth == 1) {
        span.commas.push_back(i);
      }
    }
    span.commas.clear();
    return span;
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
      const BraceSpan span = Span(i, end);
      if (span.close == absl::string_view::npos) {
        return Error(absl::StrCat("'{' at column ", i + 1, " is never closed"));
      }
      flush();
      absl::Status st = ParseBrace(i + 1, span, depth + 1, &s);
      if (!st.ok()) return st;
      i = span.close;
    }
    flush();
    return s;
  }

  // The brace whose content is p_[begin, end), appended to `s`.
  absl::Status ParseBrace(size_t begin, const BraceSpan& span, int depth, Sequence* s) {
    const size_t end = span.close;
    const std::vector<size_t>& commas = span.commas;
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

absl::StatusOr<std::vector<std::string>> ExpandBraces(absl::string_view pattern, size_t max_names,
                                                      size_t max_bytes) {
  if (pattern.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard pattern of ", pattern.size(), " bytes; at most ", kMaxPatternBytes));
  }
  absl::StatusOr<Sequence> parsed = Parser(pattern).Parse();
  if (!parsed.ok()) return parsed.status();
  const Extent extent = Measure(*parsed);
  if (extent.names > max_names) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard pattern '", pattern, "' names more than ", max_names, " files"));
  }
  if (extent.bytes > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard pattern '", pattern, "' expands to more than ", max_bytes, " bytes of names"));
  }
  std::vector<std::string> out;
  out.reserve(extent.names);
  Expand(*parsed, 0, "", &out);
  return out;
}

}  // namespace prepflow
