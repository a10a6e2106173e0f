// ValueType: the static type of the values at a stage boundary, as batches,
// the wire and the op registry see them (kept apart from op.h so that
// batches and the wire need not include the registry).
//
// Thread-safety: a plain value.
#ifndef PREPFLOW_PIPELINE_CORE_VALUE_TYPE_H_
#define PREPFLOW_PIPELINE_CORE_VALUE_TYPE_H_

#include <cstddef>
#include <string>

#include "pipeline/core/sample.h"

namespace prepflow {

// The bytes of one element of a value of `kind` (1 for encoded bytes and
// images, 4 for float32 tensors, audio and int32 tokens).
size_t ElementBytes(ValueKind kind);

// The static type of a stage-boundary value; -1 marks a dimension that
// varies from sample to sample.
struct ValueType {
  ValueKind kind = ValueKind::kEncoded;
  Shape shape;
  // kAudio: the sample rate every value has (after resample), or 0 where it
  // varies with the file.
  int sample_rate = 0;

  bool fixed() const;
  // Whether `s` holds a value of this type: the same kind, rank, and every
  // dimension this type fixes.
  bool Admits(const Sample& s) const { return Admits(s.kind, s.shape, s.sample_rate); }
  // The same for a value given by its parts (a record's stored field).
  bool Admits(ValueKind kind, const Shape& shape, int sample_rate) const;
  // Bytes per sample when fixed(), else 0.
  size_t bytes() const;
  std::string DebugString() const;

  friend bool operator==(const ValueType& a, const ValueType& b) {
    return a.kind == b.kind && a.shape == b.shape && a.sample_rate == b.sample_rate;
  }
  friend bool operator!=(const ValueType& a, const ValueType& b) { return !(a == b); }
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_VALUE_TYPE_H_
