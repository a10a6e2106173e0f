#include "client/packed_loader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeline/core/checksum.h"

namespace prepflow {

absl::StatusOr<std::unique_ptr<PackedLoader>> PackedLoader::Create(const LoaderOptions& options) {
  if (options.pack_length <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(OptionName("pack_length", options.surface), ": must be at least 1"));
  }
  if (options.pack_length * options.batch_size > int64_t{1} << 31) {
    return absl::InvalidArgumentError(absl::StrCat(
        OptionName("pack_length", options.surface), " x ",
        OptionName("batch_size", options.surface), ": a batch of ",
        options.pack_length * options.batch_size, " tokens is over 2^31 (cu_seqlens are int32)"));
  }
  std::unique_ptr<PackedLoader> packed(new PackedLoader());
  packed->options_ = options;
  // The documents' loader: batches of batch_size documents, resumed at a
  // document (skip_samples) rather than at a batch.
  LoaderOptions documents = options;
  documents.skip_batches = 0;
  auto loader = Loader::Create(documents);
  if (!loader.ok()) return loader.status();
  packed->loader_ = *std::move(loader);
  const ValueType& type = packed->loader_->pipeline().OutputFields()[0].type;
  if (type.kind != ValueKind::kTokens || type.shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(OptionName("pack_length", options.surface),
                     ": the pipeline must end in token ids (a tokenize stage), and it ends in ",
                     type.DebugString()));
  }
  packed->pack_ =
      SequencePackOptions{options.pack_length, options.pack_mode, options.pack_window_tokens,
                          static_cast<int32_t>(options.pack_pad_id)};
  packed->StartEpoch(
      static_cast<uint64_t>(options.first_epoch),
      PackPoint{options.skip_samples, options.pack_skip_tokens, options.pack_skip_rows});
  packed->number_ = options.skip_batches;
  return packed;
}

void PackedLoader::StartEpoch(uint64_t epoch, PackPoint start) {
  epoch_ = epoch;
  number_ = 0;
  epoch_done_ = false;
  packer_ = std::make_unique<SequencePacker>(pack_, start);
}

absl::StatusOr<std::unique_ptr<PackedBatch>> PackedLoader::Next() {
  const auto batch_rows = static_cast<size_t>(options_.batch_size);
  while (true) {
    const size_t ready = packer_->ready();
    if (ready >= batch_rows || (epoch_done_ && ready > 0)) {
      if (ready < batch_rows && options_.drop_last) {
        while (packer_->ready() > 0) packer_->Take();
        continue;
      }
      return Emit(static_cast<int64_t>(std::min(ready, batch_rows)));
    }
    if (epoch_done_) {
      if (pending_ == nullptr) return nullptr;  // the last epoch is over
      StartEpoch(pending_->epoch(), PackPoint{});
    }
    BatchPtr batch = std::move(pending_);
    if (batch == nullptr) {
      absl::StatusOr<BatchPtr> next = loader_->Next();
      if (!next.ok()) return next.status();
      batch = *std::move(next);
    }
    if (batch == nullptr || batch->epoch() != epoch_) {
      pending_ = std::move(batch);
      epoch_done_ = true;
      packer_->Finish();
      continue;
    }
    Feed(*batch);
  }
}

void PackedLoader::Feed(const Batch& batch) {
  const Shape shape = batch.field_shape(0);  // [documents, tokens] (padded)
  const int64_t stride = shape.size() == 2 ? shape[1] : 0;
  const auto* tokens = reinterpret_cast<const int32_t*>(batch.field_data(0));
  const std::vector<int64_t>& lengths = batch.field_lengths(0);
  for (int64_t i = 0; i < batch.size(); ++i) {
    const int64_t n = lengths.empty() ? stride : lengths[static_cast<size_t>(i)];
    packer_->Add(absl::MakeConstSpan(tokens + i * stride, static_cast<size_t>(n)),
                 batch.index_at(i), batch.position_at(i));
  }
  documents_ += batch.size();
  remote_documents_ += batch.remote_samples();
}

std::unique_ptr<PackedBatch> PackedLoader::Emit(int64_t rows) {
  auto b = std::make_unique<PackedBatch>();
  const int64_t length = pack_.length;
  b->epoch = epoch_;
  b->number = number_++;
  b->rows = rows;
  b->length = length;
  const auto cells = static_cast<size_t>(rows * length);
  b->tokens.reserve(cells);
  b->position_ids.assign(cells, 0);
  b->segment_ids.assign(cells, 0);
  std::vector<PackedRow> taken;
  for (int64_t r = 0; r < rows; ++r) taken.push_back(packer_->Take());
  for (const PackedRow& row : taken) {
    b->max_pieces = std::max<int64_t>(b->max_pieces, static_cast<int64_t>(row.pieces.size()));
  }
  b->piece_index.assign(static_cast<size_t>(rows * b->max_pieces), -1);
  b->piece_offset.assign(static_cast<size_t>(rows * b->max_pieces), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const PackedRow& row = taken[static_cast<size_t>(r)];
    b->tokens.insert(b->tokens.end(), row.tokens.begin(), row.tokens.end());
    const int64_t base = r * length;
    int64_t at = 0;
    for (size_t p = 0; p < row.pieces.size(); ++p) {
      const PackedPiece& piece = row.pieces[p];
      b->cu_seqlens.push_back(static_cast<int32_t>(base + at));
      b->max_seqlen = std::max<int32_t>(b->max_seqlen, static_cast<int32_t>(piece.length));
      for (int64_t t = 0; t < piece.length; ++t) {
        b->position_ids[static_cast<size_t>(base + at + t)] = static_cast<int32_t>(t);
        b->segment_ids[static_cast<size_t>(base + at + t)] = static_cast<int32_t>(p + 1);
      }
      b->piece_index[static_cast<size_t>(r * b->max_pieces) + p] = piece.index;
      b->piece_offset[static_cast<size_t>(r * b->max_pieces) + p] = piece.offset;
      at += piece.length;
    }
    if (at < length) {  // the padding, a run of its own
      b->cu_seqlens.push_back(static_cast<int32_t>(base + at));
      b->max_seqlen = std::max<int32_t>(b->max_seqlen, static_cast<int32_t>(length - at));
      b->padding_tokens += length - at;
    }
    // The row's tokens and how they are cut, the same wherever they ran.
    b->checksum += SampleHash(row.used, static_cast<int64_t>(row.pieces.size()), row.tokens.data(),
                              row.tokens.size() * sizeof(int32_t)) +
                   SampleHash(0, 0, row.pieces.data(), row.pieces.size() * sizeof(PackedPiece));
    b->next = row.next;
  }
  b->cu_seqlens.push_back(static_cast<int32_t>(rows * length));
  return b;
}

absl::StatusOr<AnyLoader> OpenAnyLoader(const LoaderOptions& options) {
  AnyLoader any;
  if (options.pack_length > 0) {
    auto packed = PackedLoader::Create(options);
    if (!packed.ok()) return packed.status();
    any.packed = *std::move(packed);
    any.loader = &any.packed->loader();
    return any;
  }
  auto plain = Loader::Create(options);
  if (!plain.ok()) return plain.status();
  any.plain = *std::move(plain);
  any.loader = any.plain.get();
  return any;
}

}  // namespace prepflow
