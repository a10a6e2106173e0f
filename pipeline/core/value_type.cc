#include "pipeline/core/value_type.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace prepflow {

size_t ElementBytes(ValueKind kind) {
  switch (kind) {
    case ValueKind::kTensor:
    case ValueKind::kAudio:
      return sizeof(float);
    case ValueKind::kTokens:
      return sizeof(int32_t);
    default:
      return 1;
  }
}

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
  size_t n = ElementBytes(kind);
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string ValueType::DebugString() const {
  if (kind == ValueKind::kEncoded) return "encoded bytes";
  const char* name = kind == ValueKind::kImage    ? "uint8 image ["
                     : kind == ValueKind::kAudio  ? "float32 audio ["
                     : kind == ValueKind::kTokens ? "int32 tokens ["
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
