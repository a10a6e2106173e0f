#include "client/remote/received_message.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace prepflow {
namespace {

// Reads protobuf wire format across a list of slices.
class Rope {
 public:
  explicit Rope(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    size_t offset = 0;
    for (const grpc::Slice& s : slices_) {
      starts_.push_back(offset);
      offset += s.size();
    }
    size_ = offset;
  }
  size_t size() const { return size_; }

  // The byte at absolute position `pos`. REQUIRES: pos < size().
  uint8_t At(size_t pos) {
    while (pos < starts_[cur_]) --cur_;
    while (pos >= starts_[cur_] + slices_[cur_].size()) ++cur_;
    return slices_[cur_].begin()[pos - starts_[cur_]];
  }

  bool ReadVarint(size_t* pos, size_t end, uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (*pos >= end) return false;
      const uint8_t b = At((*pos)++);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;
  }

  // Appends bytes [from, to) to `out`.
  void Append(size_t from, size_t to, std::string* out) { Pieces(from, to, nullptr, out); }
  // The pieces of [from, to), as views.
  void Views(size_t from, size_t to, std::vector<absl::string_view>* out) {
    Pieces(from, to, out, nullptr);
  }

 private:
  void Pieces(size_t from, size_t to, std::vector<absl::string_view>* views, std::string* out) {
    for (size_t i = 0; i < slices_.size() && from < to; ++i) {
      const size_t s = starts_[i], e = s + slices_[i].size();
      if (from >= e) continue;
      const size_t take = std::min(to, e) - from;
      const char* p = reinterpret_cast<const char*>(slices_[i].begin()) + (from - s);
      if (views != nullptr) views->emplace_back(p, take);
      if (out != nullptr) out->append(p, take);
      from += take;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  std::vector<size_t> starts_;
  size_t size_ = 0;
  size_t cur_ = 0;
};

// One field: its number, wire type, and where it (and its payload) lie.
struct Field {
  uint32_t number;
  uint32_t wire_type;
  size_t start;        // first byte of the tag
  size_t value_start;  // first byte of the value (after the length for type 2)
  size_t end;          // one past the last byte
};

absl::Status NextField(Rope& rope, size_t* pos, size_t end, Field* f) {
  f->start = *pos;
  uint64_t tag;
  if (!rope.ReadVarint(pos, end, &tag)) return absl::DataLossError("bad tag");
  f->number = static_cast<uint32_t>(tag >> 3);
  f->wire_type = static_cast<uint32_t>(tag & 7);
  uint64_t v;
  switch (f->wire_type) {
    case 0:
      if (!rope.ReadVarint(pos, end, &v)) return absl::DataLossError("bad varint");
      f->value_start = f->start;
      break;
    case 1:
      f->value_start = *pos;
      *pos += 8;
      break;
    case 5:
      f->value_start = *pos;
      *pos += 4;
      break;
    case 2:
      if (!rope.ReadVarint(pos, end, &v) || v > end - *pos) {
        return absl::DataLossError("bad length");
      }
      f->value_start = *pos;
      *pos += v;
      break;
    default:
      return absl::DataLossError(absl::StrCat("unsupported wire type ", f->wire_type));
  }
  if (*pos > end) return absl::DataLossError("field runs past its message");
  f->end = *pos;
  return absl::OkStatus();
}

// Parses `msg` from [begin, end), except that one length-delimited field
// (`special`) is handed to `on_special` instead.
template <typename Message, typename OnSpecial>
absl::Status ParseExcept(Rope& rope, size_t begin, size_t end, uint32_t special, Message* msg,
                         OnSpecial on_special) {
  std::string rest;
  size_t pos = begin;
  while (pos < end) {
    Field f;
    if (absl::Status s = NextField(rope, &pos, end, &f); !s.ok()) return s;
    if (f.number == special && f.wire_type == 2) {
      if (absl::Status s = on_special(f); !s.ok()) return s;
    } else {
      rope.Append(f.start, f.end, &rest);
    }
  }
  if (!rest.empty() && !msg->MergeFromString(rest)) return absl::DataLossError("bad message");
  return absl::OkStatus();
}

}  // namespace

size_t ReceivedMessage::payload_size(size_t i) const {
  size_t n = 0;
  for (absl::string_view p : payloads[i]) n += p.size();
  return n;
}

void ReceivedMessage::CopyPayload(size_t i, uint8_t* dst) const {
  for (absl::string_view p : payloads[i]) {
    std::memcpy(dst, p.data(), p.size());
    dst += p.size();
  }
}

absl::Status ParseReceivedMessage(std::vector<grpc::Slice> slices, ReceivedMessage* out) {
  auto owned = std::make_shared<const std::vector<grpc::Slice>>(std::move(slices));
  out->slices = owned;
  out->payloads.clear();
  out->wire_bytes = 0;
  for (const grpc::Slice& slice : *owned) out->wire_bytes += slice.size();
  Rope rope(*owned);
  // WorkerMessage: result (2) is taken apart; opened (1) is parsed as is.
  return ParseExcept(rope, 0, rope.size(), 2, &out->message, [&](const Field& result) {
    proto::ItemResult* item = out->message.mutable_result();
    // ItemResult: samples (2) one by one.
    return ParseExcept(rope, result.value_start, result.end, 2, item, [&](const Field& sample) {
      proto::SampleResult* s = item->add_samples();
      out->payloads.emplace_back();
      std::vector<absl::string_view>* payload = &out->payloads.back();
      // SampleResult: value (5); SampleValue: data (3) stays in the slices.
      return ParseExcept(rope, sample.value_start, sample.end, 5, s, [&](const Field& value) {
        return ParseExcept(rope, value.value_start, value.end, 3, s->mutable_value(),
                           [&](const Field& data) {
                             rope.Views(data.value_start, data.end, payload);
                             return absl::OkStatus();
                           });
      });
    });
  });
}

}  // namespace prepflow

namespace grpc {

Status SerializationTraits<prepflow::ReceivedMessage, void>::Deserialize(
    ByteBuffer* buffer, prepflow::ReceivedMessage* msg) {
  std::vector<Slice> slices;
  Status dumped = buffer->Dump(&slices);
  buffer->Clear();
  if (!dumped.ok()) return dumped;
  const absl::Status s = prepflow::ParseReceivedMessage(std::move(slices), msg);
  if (!s.ok()) return Status(StatusCode::INTERNAL, std::string(s.message()));
  return Status::OK;
}

}  // namespace grpc
