#include "pipeline/ops/text/byte_trie.h"

#include <algorithm>

namespace prepflow::text {
namespace {

// Keys [begin, end) share their first `depth` bytes; they hang below `node`.
struct Span {
  int32_t node;
  size_t begin, end, depth;
};

}  // namespace

size_t ByteTrie::NextFree(size_t slot) {
  // skip_[s] leads towards the first free slot >= s (s itself when free);
  // the links walked are pointed at the answer (path splitting).
  while (slot < skip_.size() && skip_[slot] != slot) {
    const size_t next = skip_[slot];
    if (next < skip_.size()) skip_[slot] = skip_[next];
    slot = next;
  }
  return slot;
}

void ByteTrie::Take(size_t slot, int32_t parent) {
  if (slot >= nodes_.size()) {
    const size_t old = nodes_.size();
    nodes_.resize(std::max(slot + 1, old * 2));
    skip_.resize(nodes_.size());
    for (size_t i = old; i < skip_.size(); ++i) skip_[i] = i;
  }
  nodes_[slot].check = parent;
  skip_[slot] = slot + 1;
}

int32_t ByteTrie::FreeBase(const std::vector<uint8_t>& labels) {
  auto free_slot = [&](size_t slot) { return slot >= nodes_.size() || nodes_[slot].check == -1; };
  // A crafted key set can leave free slots no node fits: past kMaxTries of
  // them the children go after the last slot taken (at most 256 slots
  // lost), so building stays linear in the keys' bytes.
  constexpr int kMaxTries = 64;
  size_t slot = NextFree(labels[0] + size_t{1});
  for (int tries = 0;; ++tries, slot = NextFree(slot + 1)) {
    if (tries == kMaxTries) slot = std::max(slot, last_taken_ + 1);
    const size_t base = slot - labels[0];
    if (std::all_of(labels.begin() + 1, labels.end(),
                    [&](uint8_t c) { return free_slot(base + c); })) {
      return static_cast<int32_t>(base);
    }
  }
}

ByteTrie ByteTrie::Build(std::vector<std::pair<std::string_view, int32_t>> keys) {
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  ByteTrie trie;
  trie.nodes_.resize(256);
  trie.skip_.resize(256);
  for (size_t i = 0; i < 256; ++i) trie.skip_[i] = i;
  trie.Take(kRoot, -2);
  std::vector<Span> work{{kRoot, 0, keys.size(), 0}};
  std::vector<uint8_t> labels;
  std::vector<size_t> starts;
  while (!work.empty()) {
    const Span s = work.back();
    work.pop_back();
    size_t i = s.begin;
    if (i < s.end && keys[i].first.size() == s.depth) {
      trie.nodes_[s.node].value = keys[i].second;
      while (i < s.end && keys[i].first.size() == s.depth) ++i;
    }
    labels.clear();
    starts.clear();
    for (; i < s.end; ++i) {
      const uint8_t c = static_cast<uint8_t>(keys[i].first[s.depth]);
      if (labels.empty() || c != labels.back()) {
        labels.push_back(c);
        starts.push_back(i);
      }
    }
    if (labels.empty()) continue;
    const int32_t base = trie.FreeBase(labels);
    trie.nodes_[s.node].base = base;
    for (size_t k = 0; k < labels.size(); ++k) {
      const int32_t child = base + labels[k];
      trie.Take(static_cast<size_t>(child), s.node);
      trie.last_taken_ = std::max(trie.last_taken_, static_cast<size_t>(child));
      work.push_back(
          {child, starts[k], k + 1 < labels.size() ? starts[k + 1] : s.end, s.depth + 1});
    }
  }
  trie.nodes_.resize(trie.last_taken_ + 1);
  trie.nodes_.shrink_to_fit();
  trie.skip_ = {};
  return trie;
}

int32_t ByteTrie::Find(std::string_view key) const {
  int32_t node = kRoot;
  for (const char c : key) {
    node = Next(node, static_cast<uint8_t>(c));
    if (node < 0) return -1;
  }
  return Value(node);
}

}  // namespace prepflow::text
