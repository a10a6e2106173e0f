#include "pipeline/core/batch.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace prepflow {

std::string WhyNotBatchable(const ValueType& type) {
  if (type.fixed()) return "";
  const char* fix =
      "end it with a crop or a fixed-size resize (images), or make every dimension but one "
      "(time) fixed (audio: downmix; features: a fixed number of mels)";
  if (type.kind != ValueKind::kTensor && type.kind != ValueKind::kAudio &&
      type.kind != ValueKind::kTokens) {
    return absl::StrCat("its output (", type.DebugString(),
                        ") has no fixed shape, so samples cannot be batched; ", fix);
  }
  if (VaryingDim(type) < 0) {
    return absl::StrCat("its output (", type.DebugString(),
                        ") varies in more than one dimension, so samples cannot be padded into "
                        "a batch; ",
                        fix);
  }
  if (type.kind == ValueKind::kAudio && type.sample_rate == 0) {
    return absl::StrCat("its output (", type.DebugString(),
                        ") has the sample rate of each file, so samples cannot be batched; "
                        "resample to one rate");
  }
  return "";
}

int VaryingDim(const ValueType& type) {
  int dim = -1;
  for (size_t d = 0; d < type.shape.size(); ++d) {
    if (type.shape[d] >= 0) continue;
    if (dim >= 0) return -1;
    dim = static_cast<int>(d);
  }
  return dim;
}

Batch::Column::Column(BatchField f, int64_t capacity, HostAllocator allocator)
    : field(std::move(f)),
      ragged(!field.type.fixed()),
      bytes_only(field.type.kind == ValueKind::kEncoded),
      sample_bytes(field.type.bytes()),
      sample_shape(field.type.shape),
      storage(allocator) {
  storage.Reserve(sample_bytes * static_cast<size_t>(capacity));
  if (ragged) {
    dim = bytes_only ? 0 : VaryingDim(field.type);
    for (int d = 0; d < static_cast<int>(field.type.shape.size()); ++d) {
      if (d < dim) runs *= static_cast<size_t>(field.type.shape[d]);
      if (d > dim) unit *= static_cast<size_t>(field.type.shape[d]);
    }
    values.resize(capacity);
  }
}

Batch::Batch(const ValueType& sample_type, int64_t capacity, HostAllocator allocator)
    : Batch(std::vector<BatchField>{BatchField{"", "", sample_type}}, capacity, allocator) {}

Batch::Batch(std::vector<BatchField> fields, int64_t capacity, HostAllocator allocator)
    : capacity_(capacity), finished_(new std::atomic<uint8_t>[capacity]()) {
  columns_.reserve(fields.size());
  for (BatchField& f : fields) columns_.emplace_back(std::move(f), capacity, allocator);
  indices_.reserve(capacity);
  labels_.reserve(capacity);
  hashes_.reserve(capacity);
  slot_errors_.resize(capacity);
  ok_.reserve(capacity);
}

Batch::~Batch() = default;

void Batch::Reset(uint64_t epoch, int64_t number, absl::Span<const int64_t> indices,
                  absl::Span<const uint32_t> copies, int echo, int64_t first_position) {
  epoch_ = epoch;
  echo_ = echo;
  number_ = number;
  indices_.assign(indices.begin(), indices.end());
  positions_.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) positions_[i] = first_position + i;
  end_position_ = first_position + static_cast<int64_t>(indices.size());
  if (copies.empty()) {
    copies_.assign(indices.size(), 0);
  } else {
    copies_.assign(copies.begin(), copies.end());
  }
  labels_.assign(indices.size(), -1);
  hashes_.assign(indices.size(), 0);
  ok_.assign(indices.size(), 0);
  remote_.assign(indices.size(), 0);
  num_classes_ = 0;
  soft_labels_.clear();
  for (Column& c : columns_) c.lengths.assign(c.ragged ? indices.size() : 0, 0);
  for (size_t i = 0; i < indices.size(); ++i) finished_[i].store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int64_t>(indices.size()), std::memory_order_release);
}

float* Batch::ResetSoftLabels(int64_t num_classes) {
  num_classes_ = num_classes;
  soft_labels_.assign(static_cast<size_t>(size() * num_classes), 0.0f);
  return soft_labels_.data();
}

bool Batch::Finish(int64_t i) {
  finished_[i].store(1, std::memory_order_release);
  return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

bool LoadingInEarlierEpoch(const std::deque<Batch*>& batches, uint64_t epoch,
                           absl::Span<const int64_t> indices) {
  absl::flat_hash_set<int64_t> loading;
  for (const Batch* b : batches) {
    if (b->epoch() >= epoch || b->complete()) continue;
    for (int64_t i = 0; i < b->size(); ++i) {
      if (!b->finished(i)) loading.insert(b->index_at(i));
    }
  }
  if (loading.empty()) return false;
  return std::any_of(indices.begin(), indices.end(),
                     [&](int64_t index) { return loading.contains(index); });
}

absl::Status Batch::Column::Keep(int64_t i, ValueKind kind, const Shape& shape, int sample_rate,
                                 const uint8_t* data, size_t size) {
  if (!ragged) {
    if (size != sample_bytes || kind != field.type.kind) {
      return absl::InternalError(
          absl::StrCat("the output has ", size, " bytes where the batch holds ", sample_bytes));
    }
    if (data != slot(i)) std::memcpy(slot(i), data, sample_bytes);
    return absl::OkStatus();
  }
  size_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<size_t>(std::max<int64_t>(d, 0));
  if (!field.type.Admits(kind, shape, sample_rate) ||
      (!bytes_only && size != elements * ElementBytes(kind))) {
    return absl::InternalError(
        absl::StrCat("the output (", size, " bytes) is not a value of ", field.type.DebugString()));
  }
  uint8_t* value = values[i].Reserve(std::max<size_t>(size, 1));
  if (size > 0) std::memcpy(value, data, size);  // an empty value's data may be null
  lengths[i] = bytes_only ? static_cast<int64_t>(size) : shape[dim];
  return absl::OkStatus();
}

absl::Status Batch::Keep(int64_t i, const Sample& s) {
  if (absl::Status st = main().Keep(i, s.kind, s.shape, s.sample_rate, s.data, s.size); !st.ok())
    return st;
  for (size_t c = 1; c < columns_.size(); ++c) {
    Column& column = columns_[c];
    const StoredField* f = s.FindField(column.field.name);
    if (f == nullptr) {
      return absl::InternalError(absl::StrCat("the record has no field '", column.field.name, "'"));
    }
    absl::Status st =
        column.Keep(i, f->kind, f->shape, f->sample_rate,
                    reinterpret_cast<const uint8_t*>(f->bytes.data()), f->bytes.size());
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("field '", column.field.name, "': ", st.message()));
    }
  }
  return absl::OkStatus();
}

bool Batch::FinishOk(int64_t i, int64_t label, uint64_t hash, bool remote) {
  labels_[i] = label;
  remote_[i] = remote ? 1 : 0;
  hashes_[i] = hash;
  ok_[i] = 1;
  return Finish(i);
}

bool Batch::FinishError(int64_t i, SampleError error) {
  slot_errors_[i] = std::move(error);
  ok_[i] = 0;
  return Finish(i);
}

std::vector<SampleError> Batch::Compact() {
  std::vector<SampleError> errors;
  size_t out = 0;
  for (size_t i = 0; i < indices_.size(); ++i) {
    if (!ok_[i]) {
      errors.push_back(std::move(slot_errors_[i]));
      continue;
    }
    if (out != i) {
      for (Column& c : columns_) c.Move(out, i);
      indices_[out] = indices_[i];
      positions_[out] = positions_[i];
      copies_[out] = copies_[i];
      labels_[out] = labels_[i];
      hashes_[out] = hashes_[i];
      remote_[out] = remote_[i];
    }
    ++out;
  }
  indices_.resize(out);
  positions_.resize(out);
  copies_.resize(out);
  labels_.resize(out);
  hashes_.resize(out);
  remote_.resize(out);
  ok_.assign(out, 1);
  for (Column& c : columns_) {
    if (c.ragged) c.lengths.resize(out);
  }
  return errors;
}

void Batch::Column::Move(size_t to, size_t from) {
  if (ragged) {
    std::swap(values[to], values[from]);
    lengths[to] = lengths[from];
  } else {
    std::memmove(slot(to), slot(from), sample_bytes);
  }
}

namespace {

// Appends v's first n elements to `to` and drops them from v.
template <typename T>
void MoveFront(std::vector<T>& v, int64_t n, std::vector<T>& to) {
  to.insert(to.end(), v.begin(), v.begin() + n);
  v.erase(v.begin(), v.begin() + n);
}

}  // namespace

void Batch::TakeFront(Batch* donor, int64_t n) {
  if (n <= 0) return;
  const size_t have = indices_.size(), left = donor->indices_.size() - n;
  for (size_t c = 0; c < columns_.size(); ++c) {
    columns_[c].TakeFront(&donor->columns_[c], have, n, left);
  }
  end_position_ = donor->positions_[n - 1] + 1;
  MoveFront(donor->indices_, n, indices_);
  MoveFront(donor->positions_, n, positions_);
  MoveFront(donor->copies_, n, copies_);
  MoveFront(donor->labels_, n, labels_);
  MoveFront(donor->hashes_, n, hashes_);
  MoveFront(donor->remote_, n, remote_);
  MoveFront(donor->ok_, n, ok_);
}

void Batch::Column::TakeFront(Column* donor, size_t have, int64_t n, size_t left) {
  if (ragged) {
    for (int64_t i = 0; i < n; ++i) std::swap(values[have + i], donor->values[i]);
    std::rotate(donor->values.begin(), donor->values.begin() + n, donor->values.begin() + n + left);
    MoveFront(donor->lengths, n, lengths);
  } else {
    std::memcpy(slot(have), donor->slot(0), n * sample_bytes);
    std::memmove(donor->slot(0), donor->slot(n), left * sample_bytes);
  }
}

absl::Status Batch::Pad() {
  for (size_t c = 0; c < columns_.size(); ++c) {
    absl::Status st = columns_[c].Pad(indices_.size());
    if (!st.ok()) {
      return c == 0 ? st
                    : absl::Status(st.code(), absl::StrCat("field '", columns_[c].field.name,
                                                           "': ", st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Batch::Column::Pad(size_t n) {
  if (!ragged || bytes_only) return absl::OkStatus();
  // Each value is `runs` runs of its length x `unit` elements (floats,
  // token ids), padded with zero bytes to the longest's.
  int64_t longest = 0, total = 0;
  for (const int64_t length : lengths) {
    longest = std::max(longest, length);
    total += length;
  }
  sample_shape = field.type.shape;
  sample_shape[dim] = longest;
  const size_t unitbytes = unit * ElementBytes(field.type.kind);
  const size_t run_bytes = static_cast<size_t>(longest) * unitbytes;
  sample_bytes = runs * run_bytes;
  padding_bytes = runs * unitbytes * static_cast<size_t>(longest * static_cast<int64_t>(n) - total);
  uint8_t* out = nullptr;
  try {
    out = storage.Reserve(std::max<size_t>(sample_bytes * n, 1));
  } catch (const std::bad_alloc&) {
    const size_t bytes = sample_bytes * n;
    sample_bytes = 0;
    padding_bytes = 0;
    lengths.clear();
    return absl::ResourceExhaustedError(
        absl::StrCat("a batch of ", n, " values padded to the longest (", longest, ") needs ",
                     bytes, " bytes, more than can be had"));
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t have = static_cast<size_t>(lengths[i]) * unitbytes;
    const uint8_t* in = values[i].data();
    for (size_t r = 0; r < runs; ++r) {
      uint8_t* run = out + i * sample_bytes + r * run_bytes;
      if (have > 0) std::memcpy(run, in + r * have, have);
      std::memset(run + have, 0, run_bytes - have);
    }
  }
  return absl::OkStatus();
}

int64_t Batch::remote_samples() const {
  int64_t n = 0;
  for (size_t i = 0; i < indices_.size(); ++i) n += remote_[i];
  return n;
}

Shape Batch::field_shape(int f) const {
  Shape s = {size()};
  if (columns_[f].bytes_only) return s;
  s.insert(s.end(), columns_[f].sample_shape.begin(), columns_[f].sample_shape.end());
  return s;
}

size_t Batch::padding_bytes() const {
  size_t n = 0;
  for (const Column& c : columns_) n += c.padding_bytes;
  return n;
}

size_t Batch::bytes() const {
  size_t n = 0;
  for (const Column& c : columns_) {
    if (!c.bytes_only) {
      n += c.sample_bytes * indices_.size();
      continue;
    }
    for (size_t i = 0; i < indices_.size(); ++i) n += static_cast<size_t>(c.lengths[i]);
  }
  return n;
}

}  // namespace prepflow
