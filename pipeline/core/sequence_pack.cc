#include "pipeline/core/sequence_pack.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prepflow {

absl::StatusOr<PackMode> ParsePackMode(const std::string& text) {
  if (text == "greedy") return PackMode::kGreedy;
  if (text == "best_fit") return PackMode::kBestFit;
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not greedy or best_fit"));
}

const char* PackModeName(PackMode mode) {
  return mode == PackMode::kGreedy ? "greedy" : "best_fit";
}

SequencePacker::SequencePacker(const SequencePackOptions& options, PackPoint start)
    : options_(options), start_(start) {}

void SequencePacker::Add(absl::Span<const int32_t> tokens, int64_t index, int64_t position) {
  int64_t skip = 0;
  if (!started_) {
    started_ = true;
    // A resumed run starts where the row after the last one seen began (a
    // document that failed now as well cannot be resumed inside).
    if (position == start_.position) {
      skip = std::min<int64_t>(start_.skip_tokens, static_cast<int64_t>(tokens.size()));
      drop_rows_ = start_.skip_rows;
    }
  }
  last_position_ = position;
  if (options_.mode == PackMode::kGreedy) {
    AddGreedy(tokens, index, position, skip);
    return;
  }
  if (window_start_ < 0) window_start_ = position;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const size_t data = window_tokens_.size();
  window_tokens_.insert(window_tokens_.end(), tokens.begin(), tokens.end());
  // A document longer than a row: its full rows' pieces, then its rest.
  for (int64_t offset = 0; offset < n; offset += options_.length) {
    const int64_t length = std::min(options_.length, n - offset);
    window_.push_back(
        Piece{PackedPiece{index, offset, length}, data + static_cast<size_t>(offset)});
  }
  if (static_cast<int64_t>(window_tokens_.size()) >= options_.window_tokens) {
    PackWindow(position + 1);
  }
}

void SequencePacker::AddGreedy(absl::Span<const int32_t> tokens, int64_t index, int64_t position,
                               int64_t skip) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t offset = skip; offset < n;) {
    const int64_t take = std::min(n - offset, options_.length - open_.used);
    open_.pieces.push_back(PackedPiece{index, offset, take});
    open_.tokens.insert(open_.tokens.end(), tokens.begin() + offset,
                        tokens.begin() + offset + take);
    open_.used += take;
    offset += take;
    if (open_.used == options_.length) {
      CloseGreedyRow(offset < n ? PackPoint{position, offset, 0} : PackPoint{position + 1, 0, 0});
    }
  }
}

void SequencePacker::CloseGreedyRow(PackPoint next) {
  open_.tokens.resize(static_cast<size_t>(options_.length), options_.pad_id);
  open_.next = next;
  rows_.push_back(std::move(open_));
  open_ = PackedRow();
}

void SequencePacker::PackWindow(int64_t next_position) {
  std::vector<size_t> order(window_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return window_[a].at.length > window_[b].at.length; });
  // Best fit: the open row with the least room that still holds the piece
  // (the first made among equals).
  std::vector<PackedRow> rows;
  std::set<std::pair<int64_t, size_t>> open;  // (room, row)
  for (size_t i : order) {
    const Piece& p = window_[i];
    auto it = open.lower_bound({p.at.length, 0});
    size_t r;
    int64_t room;
    if (it == open.end()) {
      r = rows.size();
      rows.emplace_back();
      rows.back().tokens.reserve(static_cast<size_t>(options_.length));
      room = options_.length;
    } else {
      std::tie(room, r) = *it;
      open.erase(it);
    }
    PackedRow& row = rows[r];
    row.pieces.push_back(p.at);
    const auto from = window_tokens_.begin() + static_cast<std::ptrdiff_t>(p.data);
    row.tokens.insert(row.tokens.end(), from, from + p.at.length);
    row.used += p.at.length;
    room -= p.at.length;
    if (room > 0) open.insert({room, r});
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].tokens.resize(static_cast<size_t>(options_.length), options_.pad_id);
    rows[r].next = r + 1 < rows.size() ? PackPoint{window_start_, 0, static_cast<int64_t>(r + 1)}
                                       : PackPoint{next_position, 0, 0};
    if (static_cast<int64_t>(r) >= drop_rows_) rows_.push_back(std::move(rows[r]));
  }
  drop_rows_ = 0;
  window_.clear();
  window_tokens_.clear();
  window_start_ = -1;
}

void SequencePacker::Finish() {
  if (options_.mode == PackMode::kGreedy) {
    if (open_.used > 0) CloseGreedyRow(PackPoint{last_position_ + 1, 0, 0});
  } else if (window_start_ >= 0) {
    PackWindow(last_position_ + 1);
  }
}

PackedRow SequencePacker::Take() {
  PackedRow row = std::move(rows_.front());
  rows_.pop_front();
  return row;
}

}  // namespace prepflow
