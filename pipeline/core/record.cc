#include "pipeline/core/record.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/text.h"

namespace prepflow {

StoredField StoreValue(const Sample& s, const std::string& name) {
  StoredField f;
  f.name = name;
  f.kind = s.kind;
  f.shape = s.shape;
  f.view = s.view;
  f.sample_rate = s.sample_rate;
  f.bytes.assign(reinterpret_cast<const char*>(s.data), s.size);
  return f;
}

absl::Status SwitchField(const std::string& from, const std::string& to, Workspace& ws, Sample& s) {
  const auto next = std::find_if(s.fields.begin(), s.fields.end(),
                                 [&](const StoredField& f) { return f.name == to; });
  if (next == s.fields.end()) {
    return absl::DataLossError(absl::StrCat("the record has no field ", FieldName(to)));
  }
  StoredField taken = std::move(*next);
  s.fields.erase(next);
  s.StoreField(StoreValue(s, from));
  // Encoded bytes go where a read puts them; a decoded value in a scratch
  // buffer, as an op's output would be.
  Buffer* buf = taken.kind == ValueKind::kEncoded ? &ws.encoded : ws.ScratchFor(nullptr);
  s.data = buf->Reserve(std::max<size_t>(taken.bytes.size(), 1));
  if (!taken.bytes.empty()) std::memcpy(s.data, taken.bytes.data(), taken.bytes.size());
  s.size = taken.bytes.size();
  s.kind = taken.kind;
  s.shape = std::move(taken.shape);
  s.view = taken.view;
  s.sample_rate = taken.sample_rate;
  return absl::OkStatus();
}

absl::Status CheckFieldName(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
               c == '-' || c == ';';
      });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("'", SafeText(name),
                   "' is not a field name (1-64 letters, digits and . _ - ; as 'jpg;png')"));
}

std::string FieldName(const std::string& name) {
  return name.empty() ? "the media" : absl::StrCat("'", SafeText(name), "'");
}

}  // namespace prepflow
