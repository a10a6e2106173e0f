#include "server/result_encoding.h"

#include <cstring>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace prepflow {
namespace {

TEST(ResultEncoding, IsAPlainWorkerMessageWithThePayloadsInPlace) {
  proto::WorkerMessage expected;
  proto::ItemResult* want = expected.mutable_result();
  want->set_item_id(300);  // a multi-byte varint
  ItemOutput output;
  output.result.set_item_id(300);
  for (int i = 0; i < 4; ++i) {
    proto::SampleResult* s = output.result.add_samples();
    s->set_index(10 + i);
    s->set_label(i);
    s->add_stages()->set_cpu_seconds(0.125);
    Payload payload;
    if (i == 2) {
      s->set_code(15);
      s->set_error("corrupt");
    } else {
      proto::SampleValue* v = s->mutable_value();
      v->set_kind(proto::SampleValue::KIND_TENSOR);
      v->add_shape(3);
      v->add_shape(i == 3 ? 0 : 100 + i);
      const size_t size = i == 3 ? 0 : 3 * 4 * (100 + i) * 50;  // large and empty payloads
      payload.data.reset(static_cast<uint8_t*>(std::malloc(size + 1)));
      for (size_t k = 0; k < size; ++k) payload.data.get()[k] = static_cast<uint8_t>(k * 7 + i);
      payload.size = size;
    }
    proto::SampleResult* w = want->add_samples();
    *w = *s;
    if (payload.data) {
      w->mutable_value()->set_data(
          std::string(reinterpret_cast<char*>(payload.data.get()), payload.size));
    }
    output.payloads.push_back(std::move(payload));
  }
  grpc::ByteBuffer buffer = EncodeItemOutput(std::move(output));
  grpc::Slice flat;
  ASSERT_TRUE(buffer.DumpToSingleSlice(&flat).ok());
  proto::WorkerMessage got;
  ASSERT_TRUE(got.ParseFromArray(flat.begin(), static_cast<int>(flat.size())));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got, expected));
  EXPECT_EQ(got.result().samples(1).value().data().size(), 3u * 4 * 101 * 50);
}

}  // namespace
}  // namespace prepflow
