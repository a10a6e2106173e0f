#include "pipeline/ops/text/bpe.h"

#include <unicode/utf8.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "pipeline/ops/text/unicode_text.h"

namespace prepflow::text {
namespace {

// CLIP's merges, as it slices them: lines [1, 49152 - 256 - 2 + 1).
constexpr size_t kClipMerges = 49152 - 256 - 2;

// GPT-2's bytes_to_unicode(): the printable bytes as themselves, the others
// as U+0100 on, in byte order. `order` lists the bytes in the order its dict
// holds them (printable first), which is CLIP's vocabulary order.
struct ByteUnicode {
  int32_t cp[256];
  int order[256];
  ByteUnicode() {
    int n = 0, k = 0;
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) cp[b] = b, order[k++] = b;
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable(b)) cp[b] = 256 + n++, order[k++] = b;
    }
  }
};

const ByteUnicode& Bytes() {
  static const ByteUnicode table;
  return table;
}

std::string Utf8(int32_t c) {
  uint8_t bytes[U8_MAX_LENGTH];
  int32_t n = 0;
  U8_APPEND_UNSAFE(bytes, n, c);
  return std::string(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
}

uint64_t PairKey(int32_t a, int32_t b) {
  return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
}

// vocab.json read as a stream: one flat object of token to id, nothing else.
class VocabReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit VocabReader(absl::flat_hash_map<std::string, int32_t>* vocab) : vocab_(vocab) {}
  std::string error;

  bool start_object(std::size_t) override { return depth_++ == 0 || Fail("a nested object"); }
  bool end_object() override { return --depth_, true; }
  bool key(string_t& k) override { return key_ = std::move(k), true; }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return Fail(absl::StrCat("the id of '", key_, "' is out of range"));
    }
    (*vocab_)[key_] = static_cast<int32_t>(v);
    return true;
  }
  bool number_integer(number_integer_t) override { return Fail("a negative id"); }
  bool number_float(number_float_t, const string_t&) override {
    return Fail("an id not an integer");
  }
  bool null() override { return Fail("null"); }
  bool boolean(bool) override { return Fail("a boolean"); }
  bool string(string_t&) override { return Fail("a string where an id belongs"); }
  bool binary(binary_t&) override { return Fail("binary data"); }
  bool start_array(std::size_t) override { return Fail("an array"); }
  bool end_array() override { return false; }
  bool parse_error(std::size_t at, const std::string&,
                   const nlohmann::detail::exception& e) override {
    if (error.empty()) error = absl::StrCat("not JSON at byte ", at, " (", e.what(), ")");
    return false;
  }

 private:
  bool Fail(const std::string& what) {
    error = absl::StrCat("expected one object of token to id, found ", what);
    return false;
  }
  absl::flat_hash_map<std::string, int32_t>* vocab_;
  std::string key_;
  int depth_ = 0;
};

absl::Status ReadVocab(const BpeFiles& files, absl::flat_hash_map<std::string, int32_t>* vocab) {
  VocabReader reader(vocab);
  const bool ok =
      nlohmann::json::sax_parse(files.vocab_json.begin(), files.vocab_json.end(), &reader);
  if (!ok || !reader.error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.vocab_name, ": ", reader.error.empty() ? "not JSON" : reader.error));
  }
  return absl::OkStatus();
}

// The merge lines as the flavor reads them: GPT-2 skips a first "#version"
// line and blank lines; CLIP skips its first line and keeps kClipMerges
// (a blank one, as the end of a short file gives, is an empty entry).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> MergeLines(BpeFlavor flavor,
                                                                            const BpeFiles& f) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<absl::string_view> lines = absl::StrSplit(f.merges, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (i == 0 && (flavor == BpeFlavor::kClip || line.find("#version") == 0)) continue;
    if (flavor == BpeFlavor::kClip && out.size() == kClipMerges) break;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (flavor == BpeFlavor::kClip) out.emplace_back();
      continue;
    }
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.merges_name, ":", i + 1, ": expected two tokens separated by a space"));
    }
    out.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  return out;
}

}  // namespace

std::string ByteSymbol(uint8_t b) { return Utf8(Bytes().cp[b]); }

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(BpeFlavor flavor,
                                                                 const BpeFiles& files) {
  auto t = std::unique_ptr<BpeTokenizer>(new BpeTokenizer(flavor));
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> merges =
      MergeLines(flavor, files);
  if (!merges.ok()) return merges.status();
  if (flavor == BpeFlavor::kGpt2) {
    if (absl::Status s = ReadVocab(files, &t->vocab_); !s.ok()) return s;
  } else {
    t->BuildClipVocabulary(*merges);
  }
  const std::string& bytes_file =
      flavor == BpeFlavor::kGpt2 ? std::string(files.vocab_name) : std::string(files.merges_name);
  if (absl::Status s = t->SetBytes(bytes_file); !s.ok()) return s;
  if (absl::Status s = t->ReadMerges(*merges, files.merges_name); !s.ok()) return s;
  return t;
}

void BpeTokenizer::BuildClipVocabulary(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  // CLIP: the bytes, the bytes with </w>, each merge's result, then
  // <|startoftext|> and <|endoftext|>; a later duplicate takes the id.
  std::vector<std::string> tokens;
  for (int k = 0; k < 256; ++k) tokens.push_back(Utf8(Bytes().cp[Bytes().order[k]]));
  for (int k = 0; k < 256; ++k) tokens.push_back(tokens[k] + "</w>");
  for (const auto& [a, b] : merges) tokens.push_back(a + b);
  tokens.push_back("<|startoftext|>");
  tokens.push_back("<|endoftext|>");
  for (size_t i = 0; i < tokens.size(); ++i) vocab_[tokens[i]] = static_cast<int32_t>(i);
  clip_start_ = static_cast<int32_t>(tokens.size() - 2);
  clip_end_ = static_cast<int32_t>(tokens.size() - 1);
}

absl::Status BpeTokenizer::SetBytes(const std::string& file) {
  for (int b = 0; b < 256; ++b) {
    const std::string symbol = Utf8(Bytes().cp[b]);
    byte_id_[b] = Id(symbol);
    byte_end_id_[b] = flavor_ == BpeFlavor::kClip ? Id(symbol + "</w>") : -1;
    if (byte_id_[b] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": the vocabulary has no symbol for byte ", b, " ('", symbol, "')"));
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ReadMerges(const std::vector<std::pair<std::string, std::string>>& lines,
                                      absl::string_view file) {
  int32_t rank = 0;
  for (const auto& [a, b] : lines) {
    const int32_t rank_here = rank++;
    if (a.empty()) continue;  // CLIP's blank last line
    const int32_t left = Id(a), right = Id(b), result = Id(a + b);
    if (left < 0 || right < 0 || result < 0) {
      const std::string& missing = left < 0 ? a : right < 0 ? b : a + b;
      return absl::InvalidArgumentError(absl::StrCat(file, ": merge ", rank_here + 1, " ('", a, " ",
                                                     b, "'): the vocabulary has no token '",
                                                     missing, "'"));
    }
    merges_[PairKey(left, right)] = Merge{rank_here, result};  // a later duplicate's rank wins
  }
  return absl::OkStatus();
}

int32_t BpeTokenizer::Id(absl::string_view token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeTokenizer::EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  const int n = static_cast<int>(word.size());
  if (n == 1) {  // most punctuation and digits: nothing to merge
    const auto b = static_cast<uint8_t>(word[0]);
    ids->push_back(flavor_ == BpeFlavor::kClip ? byte_end_id_[b] : byte_id_[b]);
    return;
  }
  // Per thread, reused from word to word: no allocation once they have grown
  // (to a usual word's size: see the end).
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<std::pair<int32_t, int32_t>> heap;
  thread_local std::vector<int32_t> changed;
  syms.resize(static_cast<size_t>(n));
  heap.clear();
  for (int i = 0; i < n; ++i) {
    const auto b = static_cast<uint8_t>(word[i]);
    syms[i] = {flavor_ == BpeFlavor::kClip && i == n - 1 ? byte_end_id_[b] : byte_id_[b], i - 1,
               i + 1 < n ? i + 1 : -1};
  }
  // A min-heap of (rank, position): leftmost first within a rank.
  const std::greater<std::pair<int32_t, int32_t>> later;
  const auto find = [&](int pos) -> const Merge* {
    const int next = syms[pos].next;
    if (syms[pos].id < 0 || next < 0) return nullptr;
    const auto it = merges_.find(PairKey(syms[pos].id, syms[next].id));
    return it == merges_.end() ? nullptr : &it->second;
  };
  const auto push = [&](int pos) {
    if (const Merge* m = find(pos); m != nullptr) {
      heap.emplace_back(m->rank, pos);
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    // Every occurrence of the lowest-ranked pair, left to right; the pairs
    // they make are ranked after (the reference's one pass per merge).
    const int32_t rank = heap.front().first;
    changed.clear();
    while (!heap.empty() && heap.front().first == rank) {
      const int pos = heap.front().second;
      std::pop_heap(heap.begin(), heap.end(), later);
      heap.pop_back();
      const Merge* m = find(pos);
      if (m == nullptr || m->rank != rank) continue;  // stale: a side has merged since
      const int next = syms[pos].next;
      syms[pos].id = m->result;
      syms[pos].next = syms[next].next;
      if (syms[pos].next >= 0) syms[syms[pos].next].prev = pos;
      syms[next].id = -1;
      changed.push_back(pos);
    }
    for (const int pos : changed) {
      if (syms[pos].prev >= 0) push(syms[pos].prev);
      push(pos);
    }
  }
  for (int i = 0; i >= 0 && i < n; i = syms[i].next) ids->push_back(syms[i].id);
  // A crafted long word does not keep its scratch: only words' usual sizes stay.
  constexpr size_t kKeep = 4096;
  if (syms.capacity() > kKeep) {
    syms = {};
    heap = {};
    changed = {};
  }
}

void BpeTokenizer::Encode(absl::string_view text, std::vector<int32_t>* ids) const {
  if (flavor_ == BpeFlavor::kGpt2) {
    PreTokenizeGpt2(text, ids);
  } else {
    PreTokenizeClip(ClipClean(text), ids);
  }
}

}  // namespace prepflow::text
