#include "pipeline/core/batch.h"

#include <cstring>

namespace prepflow {

Batch::Batch(const ValueType& sample_type, int64_t capacity, HostAllocator allocator)
    : sample_type_(sample_type),
      capacity_(capacity),
      sample_bytes_(sample_type.bytes()),
      storage_(allocator) {
  storage_.Reserve(sample_bytes_ * static_cast<size_t>(capacity));
  indices_.reserve(capacity);
  labels_.reserve(capacity);
  hashes_.reserve(capacity);
  slot_errors_.resize(capacity);
  ok_.reserve(capacity);
}

void Batch::Reset(uint64_t epoch, int64_t number, absl::Span<const int64_t> indices,
                  absl::Span<const uint32_t> copies, int echo) {
  epoch_ = epoch;
  echo_ = echo;
  number_ = number;
  indices_.assign(indices.begin(), indices.end());
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
  pending_.store(static_cast<int64_t>(indices.size()), std::memory_order_release);
}

float* Batch::ResetSoftLabels(int64_t num_classes) {
  num_classes_ = num_classes;
  soft_labels_.assign(static_cast<size_t>(size() * num_classes), 0.0f);
  return soft_labels_.data();
}

bool Batch::Finish() { return pending_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

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
      std::memmove(slot(out), slot(i), sample_bytes_);
      indices_[out] = indices_[i];
      copies_[out] = copies_[i];
      labels_[out] = labels_[i];
      hashes_[out] = hashes_[i];
      remote_[out] = remote_[i];
    }
    ++out;
  }
  indices_.resize(out);
  copies_.resize(out);
  labels_.resize(out);
  hashes_.resize(out);
  remote_.resize(out);
  return errors;
}

int64_t Batch::remote_samples() const {
  int64_t n = 0;
  for (size_t i = 0; i < indices_.size(); ++i) n += remote_[i];
  return n;
}

Shape Batch::shape() const {
  Shape s = {size()};
  s.insert(s.end(), sample_type_.shape.begin(), sample_type_.shape.end());
  return s;
}

}  // namespace prepflow
