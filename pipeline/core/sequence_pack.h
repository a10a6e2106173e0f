// Sequence packing: documents of token ids, in the epoch's order, into rows
// of exactly `length` tokens for language-model training.
//
// Greedy packing concatenates the documents and cuts the stream every
// `length` tokens (a document may be split across rows; the epoch's last row
// is padded). Best-fit packing keeps documents whole where they fit: the
// documents of a window (up to `window_tokens` tokens) are cut into pieces of
// at most `length` tokens (a longer document's full pieces first, then its
// rest) and placed, longest first, each in the open row it fills best, a new
// row where none has room (best-fit decreasing); rows are padded.
//
// Each row lists its pieces (the document's dataset index, where the piece
// starts in it, its length), so a batch can give position ids, segment ids
// and cu_seqlens per piece, and the documents can be put back together.
//
// Resuming: every row says where the row after it starts (PackPoint). A
// packer started at that point, fed the same documents from that position of
// the same epoch's order, makes exactly the rows that followed.
//
// Pure and single-threaded.
#ifndef PREPFLOW_PIPELINE_CORE_SEQUENCE_PACK_H_
#define PREPFLOW_PIPELINE_CORE_SEQUENCE_PACK_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace prepflow {

enum class PackMode { kGreedy, kBestFit };
absl::StatusOr<PackMode> ParsePackMode(const std::string& text);  // "greedy" | "best_fit"
const char* PackModeName(PackMode mode);

struct SequencePackOptions {
  int64_t length = 0;  // tokens per row, >= 1
  PackMode mode = PackMode::kGreedy;
  // Best-fit: the window closes once its documents hold this many tokens (a
  // document longer than that is a window of its own).
  int64_t window_tokens = int64_t{1} << 20;
  int32_t pad_id = 0;
};

// Where a row starts: at the document at `position` of the epoch's order,
// `skip_tokens` into it (greedy), or as row `skip_rows` of the window that
// starts there (best-fit).
struct PackPoint {
  int64_t position = 0;
  int64_t skip_tokens = 0;
  int64_t skip_rows = 0;
  bool operator==(const PackPoint& o) const {
    return position == o.position && skip_tokens == o.skip_tokens && skip_rows == o.skip_rows;
  }
};

struct PackedPiece {
  int64_t index = 0;   // the document's, in the dataset
  int64_t offset = 0;  // where the piece starts in the document
  int64_t length = 0;
};

struct PackedRow {
  std::vector<int32_t> tokens;      // `length`, pad_id after `used`
  std::vector<PackedPiece> pieces;  // in the row's order
  int64_t used = 0;
  PackPoint next;  // where the row after this one starts
};

class SequencePacker {
 public:
  // REQUIRES: options.length >= 1, options.window_tokens >= 1.
  SequencePacker(const SequencePackOptions& options, PackPoint start);

  // Adds the epoch's next document: its tokens, dataset index and position
  // in the epoch's order (increasing).
  void Add(absl::Span<const int32_t> tokens, int64_t index, int64_t position);
  // Every document of the epoch was added: its last rows are made.
  void Finish();
  // Rows made and not taken, in order.
  size_t ready() const { return rows_.size(); }
  PackedRow Take();

 private:
  struct Piece {
    PackedPiece at;
    size_t data = 0;  // into window_tokens_
  };
  void AddGreedy(absl::Span<const int32_t> tokens, int64_t index, int64_t position, int64_t skip);
  void CloseGreedyRow(PackPoint next);
  void PackWindow(int64_t next_position);

  SequencePackOptions options_;
  PackPoint start_;
  bool started_ = false;  // a document was added
  std::deque<PackedRow> rows_;
  // Greedy: the row being filled and where it started.
  PackedRow open_;
  // Best-fit: the window's pieces and tokens, where it starts, and how many
  // of its rows to drop (a resumed run's first window).
  std::vector<Piece> window_;
  std::vector<int32_t> window_tokens_;
  int64_t window_start_ = -1;
  int64_t last_position_ = -1;
  int64_t drop_rows_ = 0;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_SEQUENCE_PACK_H_
