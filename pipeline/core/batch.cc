#include "pipeline/core/batch.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

namespace prepflow {

std::string WhyNotBatchable(const ValueType& type) {
  if (type.fixed()) return "";
  const char* fix =
      "end it with a crop or a fixed-size resize (images), or make every dimension but one "
      "(time) fixed (audio: downmix; features: a fixed number of mels)";
  if (type.kind != ValueKind::kTensor && type.kind != ValueKind::kAudio) {
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

Batch::Batch(const ValueType& sample_type, int64_t capacity, HostAllocator allocator)
    : sample_type_(sample_type),
      capacity_(capacity),
      ragged_(!sample_type.fixed()),
      sample_bytes_(sample_type.bytes()),
      sample_shape_(sample_type.shape),
      storage_(allocator) {
  storage_.Reserve(sample_bytes_ * static_cast<size_t>(capacity));
  if (ragged_) {
    dim_ = VaryingDim(sample_type);
    for (int d = 0; d < static_cast<int>(sample_type.shape.size()); ++d) {
      if (d < dim_) runs_ *= static_cast<size_t>(sample_type.shape[d]);
      if (d > dim_) unit_ *= static_cast<size_t>(sample_type.shape[d]);
    }
    values_.resize(capacity);
  }
  indices_.reserve(capacity);
  labels_.reserve(capacity);
  hashes_.reserve(capacity);
  slot_errors_.resize(capacity);
  ok_.reserve(capacity);
}

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
  lengths_.assign(ragged_ ? indices.size() : 0, 0);
  pending_.store(static_cast<int64_t>(indices.size()), std::memory_order_release);
}

float* Batch::ResetSoftLabels(int64_t num_classes) {
  num_classes_ = num_classes;
  soft_labels_.assign(static_cast<size_t>(size() * num_classes), 0.0f);
  return soft_labels_.data();
}

bool Batch::Finish() { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

absl::Status Batch::Keep(int64_t i, const Sample& s) {
  if (!ragged_) {
    if (s.size != sample_bytes_) {
      return absl::InternalError(
          absl::StrCat("the output has ", s.size, " bytes where the batch holds ", sample_bytes_));
    }
    if (s.data != slot(i)) std::memcpy(slot(i), s.data, sample_bytes_);
    return absl::OkStatus();
  }
  size_t elements = 1;
  for (int64_t d : s.shape) elements *= static_cast<size_t>(std::max<int64_t>(d, 0));
  if (!sample_type_.Admits(s) || s.size != elements * sizeof(float)) {
    return absl::InternalError(absl::StrCat("the output (", s.size, " bytes) is not a value of ",
                                            sample_type_.DebugString()));
  }
  uint8_t* value = values_[i].Reserve(std::max<size_t>(s.size, 1));
  if (s.size > 0) std::memcpy(value, s.data, s.size);  // an empty value's data may be null
  lengths_[i] = s.shape[dim_];
  return absl::OkStatus();
}

bool Batch::FinishOk(int64_t i, int64_t label, uint64_t hash, bool remote) {
  labels_[i] = label;
  remote_[i] = remote ? 1 : 0;
  hashes_[i] = hash;
  ok_[i] = 1;
  return Finish();
}

bool Batch::FinishError(int64_t i, SampleError error) {
  slot_errors_[i] = std::move(error);
  ok_[i] = 0;
  return Finish();
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
      if (ragged_) {
        std::swap(values_[out], values_[i]);
        lengths_[out] = lengths_[i];
      } else {
        std::memmove(slot(out), slot(i), sample_bytes_);
      }
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
  if (ragged_) lengths_.resize(out);
  return errors;
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
  if (ragged_) {
    for (int64_t i = 0; i < n; ++i) std::swap(values_[have + i], donor->values_[i]);
    std::rotate(donor->values_.begin(), donor->values_.begin() + n,
                donor->values_.begin() + n + left);
    MoveFront(donor->lengths_, n, lengths_);
  } else {
    std::memcpy(slot(have), donor->slot(0), n * sample_bytes_);
    std::memmove(donor->slot(0), donor->slot(n), left * sample_bytes_);
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

absl::Status Batch::Pad() {
  if (!ragged_) return absl::OkStatus();
  // Each value is runs_ runs of its length x unit_ floats, padded to the
  // longest's.
  const size_t n = indices_.size();
  int64_t longest = 0, total = 0;
  for (const int64_t length : lengths_) {
    longest = std::max(longest, length);
    total += length;
  }
  sample_shape_ = sample_type_.shape;
  sample_shape_[dim_] = longest;
  const size_t unit_bytes = unit_ * sizeof(float);
  const size_t run_bytes = static_cast<size_t>(longest) * unit_bytes;
  sample_bytes_ = runs_ * run_bytes;
  padding_bytes_ =
      runs_ * unit_bytes * static_cast<size_t>(longest * static_cast<int64_t>(n) - total);
  uint8_t* out = nullptr;
  try {
    out = storage_.Reserve(std::max<size_t>(sample_bytes_ * n, 1));
  } catch (const std::bad_alloc&) {
    const size_t bytes = sample_bytes_ * n;
    sample_bytes_ = 0;
    padding_bytes_ = 0;
    lengths_.clear();
    return absl::ResourceExhaustedError(
        absl::StrCat("a batch of ", n, " values padded to the longest (", longest, ") needs ",
                     bytes, " bytes, more than can be had"));
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t have = static_cast<size_t>(lengths_[i]) * unit_bytes;
    const uint8_t* in = values_[i].data();
    for (size_t r = 0; r < runs_; ++r) {
      uint8_t* run = out + i * sample_bytes_ + r * run_bytes;
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

Shape Batch::shape() const {
  Shape s = {size()};
  s.insert(s.end(), sample_shape_.begin(), sample_shape_.end());
  return s;
}

}  // namespace prepflow
