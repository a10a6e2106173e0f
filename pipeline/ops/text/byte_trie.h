// A trie of byte strings as a double array: node n's child on byte c is slot
// base(n) + c when that slot's check is n, so one step is two loads from one
// cache line. SentencePiece's encoder walks it from every character of a
// text (sentencepiece_unigram.cc).
//
// Thread-safety: immutable once built.
#ifndef PREPFLOW_PIPELINE_OPS_TEXT_BYTE_TRIE_H_
#define PREPFLOW_PIPELINE_OPS_TEXT_BYTE_TRIE_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace prepflow::text {

class ByteTrie {
 public:
  static constexpr int32_t kRoot = 0;

  // The trie of `keys` (any order; of equal keys the first's value holds).
  // REQUIRES: values >= 0.
  static ByteTrie Build(std::vector<std::pair<std::string_view, int32_t>> keys);

  // The node after `node` on byte `c`, or -1 where no key goes on so.
  int32_t Next(int32_t node, uint8_t c) const {
    const uint32_t slot = static_cast<uint32_t>(nodes_[node].base) + c;
    return slot < nodes_.size() && nodes_[slot].check == node ? static_cast<int32_t>(slot) : -1;
  }
  // The value of the key that ends at `node`, or -1.
  int32_t Value(int32_t node) const { return nodes_[node].value; }
  // The value of `key`, or -1.
  int32_t Find(std::string_view key) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    int32_t base = 0;
    int32_t check = -1;  // the parent; -1 free, -2 the root
    int32_t value = -1;
  };
  // While building: a base >= 1 whose slots for `labels` (ascending) are
  // free; the first free slot at or after `slot`; `slot` given to `parent`.
  int32_t FreeBase(const std::vector<uint8_t>& labels);
  size_t NextFree(size_t slot);
  void Take(size_t slot, int32_t parent);

  std::vector<Node> nodes_;
  std::vector<size_t> skip_;  // while building: see NextFree
  size_t last_taken_ = 0;
};

}  // namespace prepflow::text

#endif  // PREPFLOW_PIPELINE_OPS_TEXT_BYTE_TRIE_H_
