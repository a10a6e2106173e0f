#include "pipeline/core/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "pipeline/core/record.h"

namespace prepflow {
namespace {

constexpr size_t kOverflow = std::numeric_limits<size_t>::max();

// The bytes of a value of `shape` with `element` bytes each; kOverflow when
// they do not fit a size_t (a crafted shape must not wrap to its data's size).
size_t ShapeBytes(const Shape& shape, size_t element) {
  size_t n = element;
  for (int64_t d : shape) {
    if (d != 0 && n > kOverflow / static_cast<size_t>(d)) return kOverflow;
    n *= static_cast<size_t>(d);
  }
  return n;
}

// The kind of `value` and the bytes its shape needs (kOverflow past a
// size_t); InvalidArgument for a shape its kind cannot have.
absl::Status ExpectedBytes(const proto::SampleValue& value, const Shape& shape, size_t data_size,
                           ValueKind* kind, size_t* expected) {
  switch (value.kind()) {
    case proto::SampleValue::KIND_ENCODED:
      *kind = ValueKind::kEncoded;
      *expected = data_size;
      break;
    case proto::SampleValue::KIND_IMAGE:
      *kind = ValueKind::kImage;
      // One image [h, w, 3], or a stack of them [n, h, w, 3].
      if ((shape.size() != 3 && shape.size() != 4) || shape.back() != 3 ||
          !std::all_of(shape.begin(), shape.end(),
                       [](int64_t d) { return d > 0 && d <= (int64_t{1} << 24); })) {
        return absl::InvalidArgumentError(
            "sample value: an image needs shape [h, w, 3] (or [n, h, w, 3] for a stack)");
      }
      *expected = ShapeBytes(shape, 1);
      break;
    case proto::SampleValue::KIND_TENSOR: {
      *kind = ValueKind::kTensor;
      for (int64_t d : shape) {
        if (d < 0 || d > (int64_t{1} << 32)) {
          return absl::InvalidArgumentError("sample value: tensor dimension out of range");
        }
      }
      *expected = ShapeBytes(shape, sizeof(float));
      break;
    }
    case proto::SampleValue::KIND_AUDIO:
      *kind = ValueKind::kAudio;
      if (shape.size() != 2 || shape[0] <= 0 || shape[0] > 65535 || shape[1] < 0 ||
          value.sample_rate() <= 0) {
        return absl::InvalidArgumentError(
            "sample value: audio needs shape [channels, frames] and a positive sample rate");
      }
      *expected = ShapeBytes(shape, sizeof(float));
      break;
    case proto::SampleValue::KIND_TOKENS:
      *kind = ValueKind::kTokens;
      if (shape.size() != 1 || shape[0] < 0 || shape[0] > (int64_t{1} << 32)) {
        return absl::InvalidArgumentError("sample value: tokens need shape [n]");
      }
      *expected = ShapeBytes(shape, sizeof(int32_t));
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("sample value: unknown kind ", static_cast<int>(value.kind())));
  }
  return absl::OkStatus();
}

// Writes a value's metadata (and `data` unless null) into `out`.
void SetValue(ValueKind kind, const Shape& shape, const ImageView& view, int sample_rate,
              const void* data, size_t size, proto::SampleValue* out) {
  switch (kind) {
    case ValueKind::kEncoded:
      out->set_kind(proto::SampleValue::KIND_ENCODED);
      break;
    case ValueKind::kImage:
      out->set_kind(proto::SampleValue::KIND_IMAGE);
      break;
    case ValueKind::kTensor:
      out->set_kind(proto::SampleValue::KIND_TENSOR);
      break;
    case ValueKind::kAudio:
      out->set_kind(proto::SampleValue::KIND_AUDIO);
      break;
    case ValueKind::kTokens:
      out->set_kind(proto::SampleValue::KIND_TOKENS);
      break;
  }
  out->set_sample_rate(kind == ValueKind::kAudio ? sample_rate : 0);
  out->clear_shape();
  for (int64_t d : shape) out->add_shape(d);
  if (data != nullptr) {
    out->set_data(data, size);
  } else {
    out->clear_data();
  }
  out->clear_view();
  if (kind == ValueKind::kImage) {
    proto::ImageView* v = out->mutable_view();
    v->set_source_width(view.source_width);
    v->set_source_height(view.source_height);
    v->set_scale_denom(view.scale_denom);
    v->set_x0(view.x0);
    v->set_y0(view.y0);
    if (view.has_crop) {
      v->set_has_crop(true);
      v->set_crop_x(view.crop_x);
      v->set_crop_y(view.crop_y);
      v->set_crop_width(view.crop_width);
      v->set_crop_height(view.crop_height);
    }
  }
}

// Checks `value` against the `data_size` bytes that carry it and reads its
// kind, shape, view and rate.
absl::Status ParseValue(const proto::SampleValue& value, size_t data_size, ValueKind* kind,
                        Shape* shape, ImageView* view, int* sample_rate) {
  *shape = Shape(value.shape().begin(), value.shape().end());
  size_t expected = 0;
  if (absl::Status st = ExpectedBytes(value, *shape, data_size, kind, &expected); !st.ok()) {
    return st;
  }
  if (expected == kOverflow) {
    return absl::InvalidArgumentError("sample value: shape has more elements than memory holds");
  }
  if (data_size != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample value: data has ", data_size, " bytes, shape needs ", expected));
  }
  if (*kind == ValueKind::kEncoded) *shape = Shape{static_cast<int64_t>(expected)};
  *view = ImageView();
  *sample_rate = *kind == ValueKind::kAudio ? value.sample_rate() : 0;
  if (*kind == ValueKind::kImage) {
    const proto::ImageView& v = value.view();
    view->source_width = v.source_width();
    view->source_height = v.source_height();
    view->scale_denom = v.scale_denom() > 0 ? v.scale_denom() : 1;
    view->x0 = v.x0();
    view->y0 = v.y0();
    view->has_crop = v.has_crop();
    view->crop_x = v.crop_x();
    view->crop_y = v.crop_y();
    view->crop_width = v.crop_width();
    view->crop_height = v.crop_height();
    if (view->source_width <= 0 || view->source_height <= 0) {
      view->source_width = static_cast<int>((*shape)[shape->size() - 2]);
      view->source_height = static_cast<int>((*shape)[shape->size() - 3]);
    }
  }
  return absl::OkStatus();
}

// A record's other fields from `value` into `s.fields`.
absl::Status FieldsFromWire(const proto::SampleValue& value, Sample& s) {
  s.fields.clear();
  if (value.fields_size() > kMaxRecordFields) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample value: ", value.fields_size(), " fields; a record has at most ", kMaxRecordFields));
  }
  for (const proto::NamedValue& named : value.fields()) {
    if (absl::Status st = CheckFieldName(named.name()); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sample value: field ", st.message()));
    }
    const proto::SampleValue& v = named.value();
    if (v.fields_size() > 0 || s.FindField(named.name()) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample value: field '", named.name(), "' is named twice or holds fields of its own"));
    }
    StoredField f;
    f.name = named.name();
    absl::Status st = ParseValue(v, v.data().size(), &f.kind, &f.shape, &f.view, &f.sample_rate);
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("field '", f.name, "': ", st.message()));
    }
    f.bytes = v.data();
    s.StoreField(std::move(f));
  }
  return absl::OkStatus();
}

}  // namespace

void ToWire(const Sample& s, proto::SampleValue* out, bool include_data) {
  SetValue(s.kind, s.shape, s.view, s.sample_rate, include_data ? s.data : nullptr, s.size, out);
  if (include_data && s.data == nullptr) out->set_data("");
  out->clear_fields();
  for (const StoredField& f : s.fields) {
    proto::NamedValue* named = out->add_fields();
    named->set_name(f.name);
    SetValue(f.kind, f.shape, f.view, f.sample_rate, f.bytes.data(), f.bytes.size(),
             named->mutable_value());
  }
}

absl::Status FromWire(const proto::SampleValue& value, Workspace& ws, Sample& s) {
  const absl::string_view data = value.data();
  return FromWire(value, absl::MakeConstSpan(&data, 1), ws, s);
}

absl::Status FromWire(const proto::SampleValue& value, absl::Span<const absl::string_view> data,
                      Workspace& ws, Sample& s) {
  size_t data_size = 0;
  for (absl::string_view piece : data) data_size += piece.size();
  if (absl::Status st = ParseValue(value, data_size, &s.kind, &s.shape, &s.view, &s.sample_rate);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = FieldsFromWire(value, s); !st.ok()) return st;
  Buffer* buf = s.kind == ValueKind::kEncoded ? &ws.encoded : ws.ScratchFor(nullptr);
  s.data = buf->Reserve(data_size);
  uint8_t* dst = s.data;
  for (absl::string_view piece : data) {
    std::memcpy(dst, piece.data(), piece.size());
    dst += piece.size();
  }
  s.size = data_size;
  return absl::OkStatus();
}

std::string ValueBytes(const Sample& s) {
  proto::SampleValue value;
  ToWire(s, &value, /*include_data=*/false);
  const std::string header = value.SerializeAsString();
  const auto header_size = static_cast<uint32_t>(header.size());
  std::string out(sizeof(header_size) + header.size() + s.size, '\0');
  char* p = out.data();
  std::memcpy(p, &header_size, sizeof(header_size));
  std::memcpy(p + sizeof(header_size), header.data(), header.size());
  if (s.size > 0) std::memcpy(p + sizeof(header_size) + header.size(), s.data, s.size);
  return out;
}

absl::Status FromValueBytes(absl::string_view bytes, Workspace& ws, Sample& s) {
  uint32_t header_size = 0;
  proto::SampleValue value;
  if (bytes.size() < sizeof(header_size)) return absl::InvalidArgumentError("value: truncated");
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  if (header_size > bytes.size() - sizeof(header_size) ||
      !value.ParseFromArray(bytes.data() + sizeof(header_size), static_cast<int>(header_size))) {
    return absl::InvalidArgumentError("value: malformed header");
  }
  const absl::string_view data = bytes.substr(sizeof(header_size) + header_size);
  return FromWire(value, absl::MakeConstSpan(&data, 1), ws, s);
}

}  // namespace prepflow
