#include "server/result_encoding.h"

#include <string>
#include <vector>

#include "grpcpp/support/slice.h"

namespace prepflow {
namespace {

constexpr uint32_t kLengthDelimited = 2;

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void AppendTag(uint32_t field, uint32_t wire_type, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | wire_type, out);
}

// Field numbers (proto/worker.proto, proto/pipeline.proto).
constexpr uint32_t kWorkerMessageResult = 2;
constexpr uint32_t kItemResultSamples = 2;
constexpr uint32_t kSampleResultValue = 5;
constexpr uint32_t kSampleValueData = 3;

}  // namespace

grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer EncodeItemOutput(ItemOutput output) {
  proto::ItemResult& result = output.result;
  // Pieces of the ItemResult body: small strings, each followed by a payload
  // (or none).
  std::vector<std::string> heads;
  std::vector<Payload*> tails;
  size_t body = 0;
  {
    // Everything but the samples, as protobuf writes it.
    proto::ItemResult rest = result;
    rest.clear_samples();
    heads.push_back(rest.SerializeAsString());
    tails.push_back(nullptr);
    body += heads.back().size();
  }
  for (int i = 0; i < result.samples_size(); ++i) {
    proto::SampleResult& sample = *result.mutable_samples(i);
    Payload* payload = static_cast<size_t>(i) < output.payloads.size() && output.payloads[i].data
                           ? &output.payloads[i]
                           : nullptr;
    std::string head;
    if (payload == nullptr || !sample.has_value()) {
      const std::string bytes = sample.SerializeAsString();
      AppendTag(kItemResultSamples, kLengthDelimited, &head);
      AppendVarint(bytes.size(), &head);
      head += bytes;
      body += head.size();
      heads.push_back(std::move(head));
      tails.push_back(nullptr);
      continue;
    }
    // SampleResult = [fields but value] [value: [fields but data] [data]]
    const std::string value_rest = sample.value().SerializeAsString();
    std::string data_head;
    AppendTag(kSampleValueData, kLengthDelimited, &data_head);
    AppendVarint(payload->size, &data_head);
    const size_t value_size = value_rest.size() + data_head.size() + payload->size;
    sample.clear_value();
    const std::string sample_rest = sample.SerializeAsString();
    std::string value_head;
    AppendTag(kSampleResultValue, kLengthDelimited, &value_head);
    AppendVarint(value_size, &value_head);
    const size_t sample_size = sample_rest.size() + value_head.size() + value_size;
    AppendTag(kItemResultSamples, kLengthDelimited, &head);
    AppendVarint(sample_size, &head);
    head += sample_rest;
    head += value_head;
    head += value_rest;
    head += data_head;
    body += head.size() + payload->size;
    heads.push_back(std::move(head));
    tails.push_back(payload);
  }
  std::string top;
  AppendTag(kWorkerMessageResult, kLengthDelimited, &top);
  AppendVarint(body, &top);
  std::vector<grpc::Slice> slices;
  slices.reserve(2 * heads.size() + 1);
  heads.front().insert(0, top);
  for (size_t i = 0; i < heads.size(); ++i) {
    if (!heads[i].empty()) slices.emplace_back(std::move(heads[i]));
    if (tails[i] != nullptr) {
      const size_t size = tails[i]->size;
      slices.emplace_back(tails[i]->data.release(), size, [](void* p) { std::free(p); });
    }
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace prepflow
