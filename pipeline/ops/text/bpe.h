// Byte-level byte-pair encoding as GPT-2 and CLIP define it: the text is cut
// into pre-tokens by the model's pattern, each pre-token's UTF-8 bytes are
// its first symbols (a byte as the printable character GPT-2's
// bytes_to_unicode() gives it; CLIP marks a pre-token's last symbol with
// "</w>"), and the merges are applied by rank: the lowest-ranked adjacent
// pair first, every occurrence of it left to right, as the reference bpe()
// does, in O(n log n) per pre-token (a heap of pairs) so that a crafted
// megabyte "word" costs milliseconds, not hours.
//
// Thread-safety: a loaded tokenizer is immutable; Encode may be called
// concurrently.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_BPE_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_BPE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace prepflow::text {

enum class BpeFlavor {
  kGpt2,  // vocab.json + merges; pattern 's|'t|...| ?\p{L}+| ?\p{N}+|...
  kClip,  // merges only; CLIP's vocabulary, cleaning, lower case and </w>
};

// The files a tokenizer is made from, with their names for messages.
struct BpeFiles {
  absl::string_view vocab_json, vocab_name;  // kGpt2 only
  absl::string_view merges, merges_name;
};

// Byte `b`'s symbol in GPT-2's and CLIP's vocabularies: the character
// bytes_to_unicode() gives it, as UTF-8.
std::string ByteSymbol(uint8_t b);

class BpeTokenizer {
 public:
  // Errors name the file and line (InvalidArgument): a merge line that is
  // not two tokens, a token no vocabulary entry has, vocab.json that is not
  // one flat object of token to id, a byte without its symbol.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Load(BpeFlavor flavor,
                                                            const BpeFiles& files);

  // Appends the ids of `text`. REQUIRES: valid UTF-8.
  void Encode(absl::string_view text, std::vector<int32_t>* ids) const;

  // The id of a vocabulary token, or -1.
  int32_t Id(absl::string_view token) const;
  // CLIP's <|startoftext|> and <|endoftext|> (the vocabulary's last two).
  int32_t clip_start() const { return clip_start_; }
  int32_t clip_end() const { return clip_end_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  struct Symbol {            // a symbol of a word being merged
    int32_t id, prev, next;  // id -1: merged into the symbol before it
  };
  explicit BpeTokenizer(BpeFlavor flavor) : flavor_(flavor) {}
  absl::Status ReadMerges(const std::vector<std::pair<std::string, std::string>>& lines,
                          absl::string_view file);
  absl::Status SetBytes(const std::string& file);
  void BuildClipVocabulary(const std::vector<std::pair<std::string, std::string>>& merges);
  // The ids of one pre-token (its bytes), merged.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;
  void PreTokenizeGpt2(absl::string_view text, std::vector<int32_t>* ids) const;
  void PreTokenizeClip(absl::string_view text, std::vector<int32_t>* ids) const;

  BpeFlavor flavor_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
  int32_t byte_id_[256] = {};
  int32_t byte_end_id_[256] = {};  // CLIP: the byte's symbol with </w>
  int32_t clip_start_ = -1, clip_end_ = -1;
};

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_BPE_H_
