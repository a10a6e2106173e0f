// A Loader of documents packed into sequences: a pipeline that ends in token
// ids (a tokenize stage) delivers rows of exactly pack_length tokens,
// batch_size rows a batch (pipeline/core/sequence_pack.h; docs/text.md).
//
// The documents come from an inner Loader (local, offloaded or mixed, with
// everything it does: the rows are the same wherever each document ran),
// in the epoch's order, and each epoch is packed on its own (its last rows
// padded; its last batch short unless drop_last). Every batch says where the
// batch after it starts (PackedBatch::next): a PackedLoader made with
// skip_samples = next.position, pack_skip_tokens and pack_skip_rows from it
// delivers exactly the batches that followed.
//
// Thread-safety: Next() from one thread at a time; Stats() from any.
#ifndef PREPFLOW_CLIENT_PACKED_LOADER_H_
#define PREPFLOW_CLIENT_PACKED_LOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/loader.h"
#include "pipeline/core/sequence_pack.h"

namespace prepflow {

struct PackedBatch {
  uint64_t epoch = 0;
  int64_t number = 0;  // within the epoch
  int64_t rows = 0;
  int64_t length = 0;
  // [rows, length]: the tokens (pad id after a row's pieces); each token's
  // position in its piece (0 at a piece's start; padding 0); its piece's
  // number in the row (1, 2, ...; padding 0).
  std::vector<int32_t> tokens, position_ids, segment_ids;
  // The batch flattened to rows * length tokens: where each piece (and each
  // row's padding, as a run of its own) starts, then rows * length; and the
  // longest of them (flash-attention's varlen arguments).
  std::vector<int32_t> cu_seqlens;
  int32_t max_seqlen = 0;
  // [rows, max_pieces]: each piece's document (its dataset index; -1 past a
  // row's pieces) and where in the document it starts.
  int64_t max_pieces = 0;
  std::vector<int64_t> piece_index, piece_offset;
  int64_t padding_tokens = 0;
  PackPoint next;         // where the batch after this one starts
  uint64_t checksum = 0;  // of its rows: the same wherever documents ran
};

class PackedLoader {
 public:
  // InvalidArgument when options.pack_length is 0 or the pipeline does not
  // end in token ids; else as Loader::Create.
  static absl::StatusOr<std::unique_ptr<PackedLoader>> Create(const LoaderOptions& options);

  // The next batch in order; nullptr after the last. Errors as Loader::Next.
  absl::StatusOr<std::unique_ptr<PackedBatch>> Next();

  Loader& loader() { return *loader_; }
  const Loader& loader() const { return *loader_; }
  // Documents added to rows so far, and those that ran (partly) on workers.
  int64_t documents() const { return documents_; }
  int64_t remote_documents() const { return remote_documents_; }

 private:
  PackedLoader() = default;
  void StartEpoch(uint64_t epoch, PackPoint start);
  void Feed(const Batch& batch);
  std::unique_ptr<PackedBatch> Emit(int64_t rows);

  LoaderOptions options_;
  SequencePackOptions pack_;
  std::unique_ptr<Loader> loader_;
  std::unique_ptr<SequencePacker> packer_;
  uint64_t epoch_ = 0;
  int64_t number_ = 0;
  bool epoch_done_ = false;
  BatchPtr pending_;  // the next epoch's first document batch
  int64_t documents_ = 0;
  int64_t remote_documents_ = 0;
};

// The loader `options` ask for: a Loader, or (pack_length) a PackedLoader.
struct AnyLoader {
  std::unique_ptr<Loader> plain;
  std::unique_ptr<PackedLoader> packed;
  Loader* loader = nullptr;  // plain's, or packed's documents'
};
absl::StatusOr<AnyLoader> OpenAnyLoader(const LoaderOptions& options);

}  // namespace prepflow

#endif  // PREPFLOW_CLIENT_PACKED_LOADER_H_
