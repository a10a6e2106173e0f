#include "pipeline/core/value_type.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace prepflow {

bool ValueType::fixed() const {
  if (kind == ValueKind::kEncoded) return false;
  for (int64_t d : shape) {
    if (d < 0) return false;
  }
  return true;
}

bool ValueType::Admits(ValueKind k, const Shape& s, int rate) const {
  if (k != kind) return false;
  if (kind == ValueKind::kAudio && sample_rate != 0 && rate != sample_rate) return false;
  if (kind == ValueKind::kEncoded) return true;
  if (s.size() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (s[i] < 0 || (shape[i] >= 0 && s[i] != shape[i])) return false;
  }
  return true;
}

size_t ValueType::bytes() const {
  if (!fixed()) return 0;
  size_t n = kind == ValueKind::kTensor || kind == ValueKind::kAudio ? sizeof(float) : 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string ValueType::DebugString() const {
  if (kind == ValueKind::kEncoded) return "encoded bytes";
  const char* name = kind == ValueKind::kImage   ? "uint8 image ["
                     : kind == ValueKind::kAudio ? "float32 audio ["
                                                 : "float32 tensor [";
  return absl::StrCat(name,
                      absl::StrJoin(shape, ", ",
                                    [](std::string* out, int64_t d) {
                                      absl::StrAppend(out,
                                                      d < 0 ? std::string("?") : absl::StrCat(d));
                                    }),
                      "]", sample_rate > 0 ? absl::StrCat(" at ", sample_rate, " Hz") : "");
}

}  // namespace prepflow
