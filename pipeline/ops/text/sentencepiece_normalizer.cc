#include "pipeline/ops/text/sentencepiece_normalizer.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeline/ops/text/unicode_text.h"

namespace prepflow::text {
namespace {

// Darts-clone's unit: a label (with a leaf flag in bit 31), an offset to the
// children, or (in a leaf) a value.
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t LeafValue(uint32_t unit) { return unit & ((1U << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1U << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// The length of the character at the start of `s` and whether it is
// well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF: SentencePiece's rules and Python's). REQUIRES: !s.empty().
std::pair<size_t, bool> CharAt(std::string_view s) {
  if (static_cast<uint8_t>(s[0]) < 0x80) return {1, true};
  const size_t n = Utf8SequenceLength(s[0]);
  if (n > 1 && n <= s.size() && InvalidUtf8At(absl::string_view(s.data(), n)) < 0) {
    return {n, true};
  }
  return {1, false};
}

}  // namespace

absl::StatusOr<SentencePieceNormalizer> SentencePieceNormalizer::Create(
    const spm::NormalizerSpec& spec, bool whitespace_as_suffix,
    const std::vector<std::string_view>& user_defined) {
  SentencePieceNormalizer n;
  n.add_dummy_prefix_ = spec.add_dummy_prefix();
  n.remove_extra_whitespaces_ = spec.remove_extra_whitespaces();
  n.escape_whitespaces_ = spec.escape_whitespaces();
  n.whitespace_as_suffix_ = whitespace_as_suffix;
  const std::string& blob = spec.precompiled_charsmap();
  if (!blob.empty()) {
    uint32_t trie_bytes = 0;  // little-endian, as SentencePiece writes it on x86 and Arm
    if (blob.size() > sizeof(trie_bytes)) std::memcpy(&trie_bytes, blob.data(), sizeof(trie_bytes));
    if (blob.size() <= sizeof(trie_bytes) || trie_bytes >= blob.size() - sizeof(trie_bytes) ||
        trie_bytes % sizeof(uint32_t) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("normalizer_spec.precompiled_charsmap: a broken character map (",
                       blob.size(), " bytes, its trie said to be ", trie_bytes, ")"));
    }
    n.units_.resize(trie_bytes / sizeof(uint32_t));
    std::memcpy(n.units_.data(), blob.data() + sizeof(trie_bytes), trie_bytes);
    n.replacements_ = blob.substr(sizeof(trie_bytes) + trie_bytes);
  }
  std::vector<std::pair<std::string_view, int32_t>> keys;
  for (std::string_view piece : user_defined) keys.emplace_back(piece, 0);
  n.user_defined_ = ByteTrie::Build(std::move(keys));
  return n;
}

std::pair<std::string_view, size_t> SentencePieceNormalizer::LongestRule(
    std::string_view text) const {
  constexpr int kMaxResults = 32;  // the matches the library's search keeps
  std::pair<std::string_view, size_t> best{{}, 0};
  const size_t n = units_.size();
  if (n == 0) return best;
  size_t id = Offset(units_[0]);
  int results = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    id ^= c;
    if (id >= n) break;
    const uint32_t unit = units_[id];
    if (Label(unit) != c) break;
    id ^= Offset(unit);
    if (id >= n) break;
    if (!HasLeaf(unit)) continue;
    if (++results > kMaxResults) break;
    const size_t at = LeafValue(units_[id]);
    std::string_view replacement;
    if (at < replacements_.size()) {
      replacement = std::string_view(replacements_).substr(at);
      replacement = replacement.substr(0, replacement.find('\0'));
    }
    best = {replacement, i + 1};
  }
  return best;
}

std::pair<std::string_view, size_t> SentencePieceNormalizer::NormalizePrefix(
    std::string_view text) const {
  if (!user_defined_.empty()) {
    size_t longest = 0;
    int32_t node = ByteTrie::kRoot;
    for (size_t i = 0; i < text.size(); ++i) {
      node = user_defined_.Next(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      if (user_defined_.Value(node) >= 0) longest = i + 1;
    }
    if (longest > 0) return {text.substr(0, longest), longest};
  }
  if (const auto rule = LongestRule(text); rule.second > 0) return rule;
  const auto [length, valid] = CharAt(text);
  if (!valid) return {kReplacementCharacter, 1};
  return {text.substr(0, length), length};
}

void SentencePieceNormalizer::Normalize(std::string_view text, std::string* out) const {
  out->clear();
  if (remove_extra_whitespaces_) {
    while (!text.empty()) {
      const auto [piece, used] = NormalizePrefix(text);
      if (piece != " ") break;
      text.remove_prefix(used);
    }
  }
  if (text.empty()) return;
  out->reserve(text.size() * 3);
  const std::string_view space = Space();
  if (!whitespace_as_suffix_ && add_dummy_prefix_) out->append(space);
  bool after_space = remove_extra_whitespaces_;
  while (!text.empty()) {
    auto [piece, used] = NormalizePrefix(text);
    while (after_space && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      for (const char c : piece) {
        if (c == ' ' && escape_whitespaces_) {
          out->append(space);
        } else {
          out->push_back(c);
        }
      }
      after_space = piece.back() == ' ';
    }
    text.remove_prefix(used);
    if (!remove_extra_whitespaces_) after_space = false;
  }
  if (remove_extra_whitespaces_) {
    while (std::string_view(*out).substr(out->size() - std::min(out->size(), space.size())) ==
           space) {
      out->resize(out->size() - space.size());
    }
  }
  if (whitespace_as_suffix_ && add_dummy_prefix_) out->append(space);
}

}  // namespace prepflow::text
