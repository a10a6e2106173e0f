#include "client/remote/received_message.h"

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "pipeline/core/rng.h"

namespace prepflow {
namespace {

proto::WorkerMessage Sample(int samples, size_t bytes) {
  proto::WorkerMessage m;
  proto::ItemResult* r = m.mutable_result();
  r->set_item_id(77);
  for (int i = 0; i < samples; ++i) {
    proto::SampleResult* s = r->add_samples();
    s->set_index(1000 + i);
    s->set_label(i % 3);
    s->set_read_cpu_seconds(0.25 * i);
    s->add_stages()->set_cpu_seconds(0.5);
    s->mutable_stages(0)->set_output_bytes(12345);
    if (i == 1) {  // a failed sample: no value
      s->set_code(15);
      s->set_error("corrupt JPEG: bad Huffman code");
      continue;
    }
    proto::SampleValue* v = s->mutable_value();
    v->set_kind(proto::SampleValue::KIND_IMAGE);
    v->add_shape(2);
    v->add_shape(3);
    std::string data(bytes + i, '\0');
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<char>(k * 31 + i);
    v->set_data(data);
    v->mutable_view()->set_source_width(640);
    v->mutable_view()->set_has_crop(true);
  }
  return m;
}

// Cuts `bytes` into slices at the given sizes (cycling), as gRPC might.
std::vector<grpc::Slice> Cut(const std::string& bytes, const std::vector<size_t>& sizes) {
  std::vector<grpc::Slice> out;
  size_t pos = 0, k = 0;
  while (pos < bytes.size()) {
    const size_t n = std::min(sizes[k++ % sizes.size()], bytes.size() - pos);
    out.emplace_back(bytes.data() + pos, n);
    pos += n;
  }
  return out;
}

TEST(ReceivedMessage, MatchesProtobufForAnySlicing) {
  for (size_t payload : {size_t{0}, size_t{5}, size_t{300}, size_t{70000}}) {
    const proto::WorkerMessage original = Sample(4, payload);
    const std::string bytes = original.SerializeAsString();
    SampleRng rng(1, 0, payload, 0);
    for (const std::vector<size_t>& sizes :
         std::vector<std::vector<size_t>>{{bytes.size()}, {1}, {7, 1, 64}, {4096}, {3, 10000}}) {
      ReceivedMessage got;
      ASSERT_TRUE(ParseReceivedMessage(Cut(bytes, sizes), &got).ok());
      // Everything but the payloads parses as protobuf would...
      proto::WorkerMessage expected = original;
      for (auto& s : *expected.mutable_result()->mutable_samples()) {
        if (s.has_value()) s.mutable_value()->clear_data();
      }
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got.message, expected))
          << got.message.DebugString();
      // ...and each payload is the same bytes, in pieces.
      ASSERT_EQ(got.payloads.size(), 4u);
      for (int i = 0; i < 4; ++i) {
        const std::string& want = original.result().samples(i).value().data();
        ASSERT_EQ(got.payload_size(i), want.size());
        std::string copy(want.size(), '\0');
        got.CopyPayload(i, reinterpret_cast<uint8_t*>(copy.data()));
        EXPECT_EQ(copy, want) << "payload " << payload << " sample " << i;
      }
    }
  }
}

TEST(ReceivedMessage, OpenedMessagesAndGarbage) {
  proto::WorkerMessage opened;
  opened.mutable_opened()->set_worker_id("w");
  opened.mutable_opened()->set_threads(3);
  ReceivedMessage got;
  ASSERT_TRUE(ParseReceivedMessage(Cut(opened.SerializeAsString(), {2}), &got).ok());
  EXPECT_EQ(got.message.opened().threads(), 3);
  EXPECT_TRUE(got.payloads.empty());

  std::string bad = Sample(2, 100).SerializeAsString();
  bad.resize(bad.size() / 2);  // truncated inside a length-delimited field
  ReceivedMessage broken;
  EXPECT_EQ(ParseReceivedMessage(Cut(bad, {13}), &broken).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseReceivedMessage(Cut(std::string("\x0f\x01", 2), {1}), &broken).code(),
            absl::StatusCode::kDataLoss);  // wire type 7
}

}  // namespace
}  // namespace prepflow
