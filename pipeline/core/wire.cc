#include "pipeline/core/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

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
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("sample value: unknown kind ", static_cast<int>(value.kind())));
  }
  return absl::OkStatus();
}

}  // namespace

void ToWire(const Sample& s, proto::SampleValue* out, bool include_data) {
  switch (s.kind) {
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
  }
  out->set_sample_rate(s.kind == ValueKind::kAudio ? s.sample_rate : 0);
  out->clear_shape();
  for (int64_t d : s.shape) out->add_shape(d);
  if (include_data) {
    out->set_data(s.data, s.size);
  } else {
    out->clear_data();
  }
  out->clear_view();
  if (s.kind == ValueKind::kImage) {
    proto::ImageView* v = out->mutable_view();
    v->set_source_width(s.view.source_width);
    v->set_source_height(s.view.source_height);
    v->set_scale_denom(s.view.scale_denom);
    v->set_x0(s.view.x0);
    v->set_y0(s.view.y0);
    if (s.view.has_crop) {
      v->set_has_crop(true);
      v->set_crop_x(s.view.crop_x);
      v->set_crop_y(s.view.crop_y);
      v->set_crop_width(s.view.crop_width);
      v->set_crop_height(s.view.crop_height);
    }
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
  Shape shape(value.shape().begin(), value.shape().end());
  size_t expected = 0;
  if (absl::Status st = ExpectedBytes(value, shape, data_size, &s.kind, &expected); !st.ok()) {
    return st;
  }
  if (expected == kOverflow) {
    return absl::InvalidArgumentError("sample value: shape has more elements than memory holds");
  }
  if (data_size != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample value: data has ", data_size, " bytes, shape needs ", expected));
  }
  Buffer* buf = s.kind == ValueKind::kEncoded ? &ws.encoded : ws.ScratchFor(nullptr);
  s.data = buf->Reserve(expected);
  uint8_t* dst = s.data;
  for (absl::string_view piece : data) {
    std::memcpy(dst, piece.data(), piece.size());
    dst += piece.size();
  }
  s.size = expected;
  s.shape = s.kind == ValueKind::kEncoded ? Shape{static_cast<int64_t>(expected)} : shape;
  s.view = ImageView();
  s.sample_rate = s.kind == ValueKind::kAudio ? value.sample_rate() : 0;
  if (s.kind == ValueKind::kImage) {
    const proto::ImageView& v = value.view();
    s.view.source_width = v.source_width();
    s.view.source_height = v.source_height();
    s.view.scale_denom = v.scale_denom() > 0 ? v.scale_denom() : 1;
    s.view.x0 = v.x0();
    s.view.y0 = v.y0();
    s.view.has_crop = v.has_crop();
    s.view.crop_x = v.crop_x();
    s.view.crop_y = v.crop_y();
    s.view.crop_width = v.crop_width();
    s.view.crop_height = v.crop_height();
    if (s.view.source_width <= 0 || s.view.source_height <= 0) {
      s.view.source_width = s.width();
      s.view.source_height = s.height();
    }
  }
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
