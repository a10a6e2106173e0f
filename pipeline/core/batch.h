// A batch: the outputs of up to `capacity` samples in one contiguous tensor,
// plus their indices and labels.
//
// Workers write each sample straight into its slot (Pipeline::Run's sink), so
// assembling a batch copies nothing. Samples that failed are recorded per slot
// and removed by Compact(), which keeps the order of the rest; TakeFront()
// then fills the room they left with the next batch's first samples (a
// batch's samples stay in the epoch order's order, each slot knowing its
// position in it).
//
// Variable-length values (a float or token type with one dimension that
// varies: audio [channels, frames], a spectrogram [mels, frames], Kaldi
// features [frames, bins], token ids [n]) make a *ragged* batch:
// each slot keeps its own value (Keep), and Compact() pads them with zeros to
// the longest in the batch, recording each one's length. The padded batch
// depends only on which samples it holds, so it is the same at any thread
// count or placement.
//
// Records of several fields (Pipeline::fields) make one column per field:
// the working field's (the last stage's, whose slot is the last op's sink)
// is the batch's value as above, the others are columns beside it, each
// fixed, ragged (padded on its own), or bytes (a carried member, kept per
// sample). A sample's outcome is its whole record's.
//
// Thread-safety: between Reset() and the last Finish*(), distinct slots may be
// written from distinct threads; everything else needs external
// synchronisation (the Loader's).
#ifndef PREPFLOW_PIPELINE_CORE_BATCH_H_
#define PREPFLOW_PIPELINE_CORE_BATCH_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/value_type.h"

namespace prepflow {

struct SampleError {
  int64_t index = 0;
  std::string path;
  absl::Status status;
};

// Why values of `type` cannot be batched, "" when they can: a fixed type
// batches as it is; a float32 tensor or audio type with one dimension that
// varies (audio at one sample rate) is padded along it.
std::string WhyNotBatchable(const ValueType& type);
// The one dimension of `type` that varies; -1 when none or several do.
int VaryingDim(const ValueType& type);

// A field of the records a batch holds: its name in the record (Sample's
// stored fields), the key batches give it, and its values' type.
struct BatchField {
  std::string name;
  std::string key;
  ValueType type;
};

class Batch {
 public:
  // A batch of records: fields[0] is the working field's (see above).
  // REQUIRES: each field's type is batchable or encoded bytes.
  Batch(std::vector<BatchField> fields, int64_t capacity, HostAllocator allocator = {});
  // REQUIRES: WhyNotBatchable(sample_type) is "", capacity >= 1. `allocator`: where the
  // samples' storage comes from (e.g. page-locked memory for GPU copies).
  Batch(const ValueType& sample_type, int64_t capacity, HostAllocator allocator = {});
  ~Batch();

  // Prepares the batch for the samples `indices` (at most capacity()), and
  // with data echoing which copy of each it is (empty: every one copy 0).
  // `echo`: copies of each sample in this epoch (data echoing; 1: none).
  // `first_position`: where indices[0] stands in the epoch's order.
  void Reset(uint64_t epoch, int64_t number, absl::Span<const int64_t> indices,
             absl::Span<const uint32_t> copies = {}, int echo = 1, int64_t first_position = 0);

  // Where slot i's value goes. REQUIRES: !ragged().
  uint8_t* slot(int64_t i) { return main().slot(i); }
  // Values vary in length: Keep copies them, Compact pads them.
  bool ragged() const { return main().ragged; }
  // Makes `s`'s value slot i's: a fixed batch checks that it fills the slot
  // (and copies it there unless Pipeline::Run's sink left it there); a
  // ragged one checks it against the type and copies it; a record's other
  // fields go to their columns alike. Internal when a value does not fit or
  // a field is missing (a bug or a forged worker answer).
  absl::Status Keep(int64_t i, const Sample& s);
  int64_t index_at(int64_t i) const { return indices_[i]; }
  uint32_t copy_at(int64_t i) const { return copies_[i]; }
  // Where slot i's sample stands in the epoch's order.
  int64_t position_at(int64_t i) const { return positions_[i]; }
  // Records the outcome of slot i (`hash`: its SampleHash); returns true for
  // the call that completes the batch.
  // `remote`: some of its stages ran on a worker.
  bool FinishOk(int64_t i, int64_t label, uint64_t hash, bool remote = false);
  bool FinishError(int64_t i, SampleError error);
  bool complete() const { return pending_.load(std::memory_order_acquire) == 0; }
  // Slots not finished yet.
  int64_t pending() const { return pending_.load(std::memory_order_acquire); }
  // Whether slot i's outcome is recorded; may be asked from any thread while
  // others finish slots. A complete batch answers true for every slot.
  bool finished(int64_t i) const {
    return complete() || finished_[i].load(std::memory_order_acquire) != 0;
  }
  // Drops failed slots (moving later samples down) and returns their errors;
  // called again, it finds none.
  std::vector<SampleError> Compact();
  // Moves `donor`'s first n samples to the end of this batch (after both
  // were Compact()ed), and the donor's others down: the way a batch short of
  // failed samples is filled from the next one, in the epoch's order.
  // REQUIRES: the same sample type, n <= donor->size(), size() + n <=
  // capacity(), neither Pad()ded.
  void TakeFront(Batch* donor, int64_t n);
  // After Compact, a ragged batch pads its values to the longest into one
  // tensor; ResourceExhausted naming the bytes when they cannot be had.
  // Nothing to do for a fixed batch.
  absl::Status Pad();

  // The delivered batch.
  uint64_t epoch() const { return epoch_; }
  int echo() const { return echo_; }
  int64_t number() const { return number_; }  // within the epoch
  // Where the epoch's order goes on after this batch: past its last sample,
  // or past its own slots when none was taken from the next batch (a
  // resumed run's next batch starts there).
  int64_t end_position() const { return end_position_; }
  int64_t size() const { return static_cast<int64_t>(indices_.size()); }
  int64_t capacity() const { return capacity_; }
  // [size(), sample dims...] (ragged: padded, after Compact).
  Shape shape() const { return field_shape(0); }
  // Ragged, after Compact: each sample's length along the dimension that
  // varies, before padding; empty for a fixed batch.
  const std::vector<int64_t>& lengths() const { return main().lengths; }
  // Ragged, after Pad: the bytes of the batch that are padding (every
  // field's).
  size_t padding_bytes() const;
  const ValueType& sample_type() const { return main().field.type; }
  size_t sample_bytes() const { return main().sample_bytes; }
  const uint8_t* data() const { return main().storage.data(); }
  // The delivered bytes: every field's.
  size_t bytes() const;
  const float* floats() const { return reinterpret_cast<const float*>(data()); }

  // A record's fields, 0 the working one (the accessors above are its).
  int num_fields() const { return static_cast<int>(columns_.size()); }
  const BatchField& field(int f) const { return columns_[f].field; }
  bool field_ragged(int f) const { return columns_[f].ragged; }
  // [size(), dims...] of field f (padded, after Pad); bytes fields: [size()].
  Shape field_shape(int f) const;
  const uint8_t* field_data(int f) const { return columns_[f].storage.data(); }
  const std::vector<int64_t>& field_lengths(int f) const { return columns_[f].lengths; }
  // A bytes field's value of sample i. REQUIRES: field f holds encoded bytes.
  absl::string_view field_bytes(int f, int64_t i) const {
    return absl::string_view(reinterpret_cast<const char*>(columns_[f].values[i].data()),
                             static_cast<size_t>(columns_[f].lengths[i]));
  }
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::vector<uint32_t>& copies() const { return copies_; }
  const std::vector<int64_t>& labels() const { return labels_; }
  // Soft labels, [size(), num_classes()] float32, when a batch op (MixUp,
  // CutMix) made them; num_classes() is 0 otherwise.
  int64_t num_classes() const { return num_classes_; }
  const std::vector<float>& soft_labels() const { return soft_labels_; }
  // For batch ops: the samples as mutable floats, and the soft labels to
  // write (sized [size(), num_classes]).
  float* mutable_floats() { return reinterpret_cast<float*>(columns_[0].storage.data()); }
  float* ResetSoftLabels(int64_t num_classes);
  const std::vector<uint64_t>& hashes() const { return hashes_; }
  // Delivered samples that ran (partly) on a worker.
  int64_t remote_samples() const;
  const uint8_t* sample(int64_t i) const { return main().storage.data() + i * sample_bytes(); }

 private:
  // One field's values.
  struct Column {
    Column(BatchField f, int64_t capacity, HostAllocator allocator);
    uint8_t* slot(int64_t i) { return storage.data() + i * sample_bytes; }
    // Slot i's value: checked against the type and kept.
    absl::Status Keep(int64_t i, ValueKind kind, const Shape& shape, int sample_rate,
                      const uint8_t* data, size_t size);
    void Move(size_t to, size_t from);  // Compact's step
    void TakeFront(Column* donor, size_t have, int64_t n, size_t left);
    absl::Status Pad(size_t n);

    BatchField field;
    bool ragged;          // values kept per slot: variable lengths, or bytes
    bool bytes_only;      // encoded bytes, never padded
    size_t sample_bytes;  // ragged: the padded value's, after Pad
    Shape sample_shape;   // ragged: the padded value's, after Pad
    Buffer storage;
    // Ragged: the dimension that varies, the floats before it (runs) and
    // after it (per unit of length); each slot's own value until Pad.
    int dim = -1;
    size_t runs = 1, unit = 1;
    std::vector<Buffer> values;
    std::vector<int64_t> lengths;  // ragged: per slot, then per delivered sample
    size_t padding_bytes = 0;
  };
  Column& main() { return columns_[0]; }
  const Column& main() const { return columns_[0]; }
  bool Finish(int64_t i);

  int64_t capacity_;
  std::vector<Column> columns_;
  uint64_t epoch_ = 0;
  int64_t number_ = 0;
  std::vector<int64_t> indices_;
  std::vector<int64_t> positions_;  // in the epoch's order, per slot
  int64_t end_position_ = 0;
  std::vector<uint32_t> copies_;
  int echo_ = 1;
  std::vector<int64_t> labels_;
  int64_t num_classes_ = 0;
  std::vector<float> soft_labels_;
  std::vector<uint64_t> hashes_;
  std::vector<SampleError> slot_errors_;
  std::vector<uint8_t> ok_;
  std::vector<uint8_t> remote_;
  std::unique_ptr<std::atomic<uint8_t>[]> finished_;  // per slot, capacity_ of them
  std::atomic<int64_t> pending_{0};
};

// Whether one of `indices` is a slot not finished in one of `batches` of an
// epoch before `epoch`: a sample whose earlier run may still be loading.
bool LoadingInEarlierEpoch(const std::deque<Batch*>& batches, uint64_t epoch,
                           absl::Span<const int64_t> indices);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_BATCH_H_
