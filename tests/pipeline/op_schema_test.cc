// The vocabulary's schema (pipeline/core/op_schema.h) against the registry and the
// ops it documents.
#include "pipeline/core/op_schema.h"

#include <fstream>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/core/op.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

proto::Stage StageOf(const std::string& text) {
  proto::Stage stage;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &stage)) << text;
  return stage;
}

TEST(OpSchema, EveryOpAndFieldIsDocumented) {
  ASSERT_FALSE(OpSchemas().empty());
  for (const OpSchema& op : OpSchemas()) {
    SCOPED_TRACE(op.name);
    EXPECT_FALSE(op.summary.empty());
    EXPECT_FALSE(op.parity.empty());
    // "image or tensor": custom, whose plugin decides; "image stack": the
    // crops of five_crop and ten_crop.
    const std::set<std::string> kinds = {"encoded", "image",           "image stack", "audio",
                                         "tensor",  "image or tensor", "batch",       "tokens"};
    EXPECT_THAT(kinds, ::testing::Contains(op.input));
    EXPECT_THAT(kinds, ::testing::Contains(op.output));
    EXPECT_EQ(op.batch, op.input == "batch") << "batch ops take batches, and only they do";
    for (const FieldSchema& f : op.fields) EXPECT_FALSE(f.summary.empty()) << f.name;
  }
}

TEST(OpSchema, TheRegistryBuildsExactlyTheDocumentedOps) {
  // The registry builds per-sample ops; batch ops are built by
  // CreateBatchOps (batch_ops_test).
  std::vector<std::string> documented;
  for (const OpSchema& op : OpSchemas()) {
    if (!op.batch) documented.push_back(op.name);
  }
  EXPECT_EQ(BuiltinOps().Names(), documented);
}

TEST(OpSchema, EveryDefaultParses) {
  for (const OpSchema& op : OpSchemas()) {
    if (op.batch) {
      proto::BatchStage stage;
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(op.name + " {}", &stage));
      EXPECT_TRUE(ApplyDefaults(&stage).ok()) << op.name;
      continue;
    }
    proto::Stage stage = StageOf(op.name + " {}");
    EXPECT_TRUE(ApplyDefaults(&stage).ok()) << op.name;
  }
}

TEST(OpSchema, UnsetFieldsTakeTheirDefaults) {
  proto::Stage crop = StageOf("random_resized_crop { size: 224 scale_max: 0.5 }");
  ASSERT_TRUE(ApplyDefaults(&crop).ok());
  EXPECT_EQ(crop.random_resized_crop().scale_min(), 0.08);
  EXPECT_EQ(crop.random_resized_crop().scale_max(), 0.5);  // given, kept
  EXPECT_EQ(crop.random_resized_crop().ratio_max(), 4.0 / 3.0);
  EXPECT_EQ(crop.random_resized_crop().size(), 224);

  proto::Stage norm = StageOf("normalize { std: [0.5, 0.5, 0.5] }");
  ASSERT_TRUE(ApplyDefaults(&norm).ok());
  EXPECT_THAT(norm.normalize().mean(), ElementsAre(0.485, 0.456, 0.406));
  EXPECT_THAT(norm.normalize().std(), ElementsAre(0.5, 0.5, 0.5));

  // An optional field set to 0 is set: p = 0 never flips.
  proto::Stage never = StageOf("random_horizontal_flip { p: 0 }");
  ASSERT_TRUE(ApplyDefaults(&never).ok());
  EXPECT_EQ(never.random_horizontal_flip().p(), 0);
  proto::Stage half = StageOf("random_horizontal_flip {}");
  ASSERT_TRUE(ApplyDefaults(&half).ok());
  EXPECT_EQ(half.random_horizontal_flip().p(), 0.5);
}

TEST(OpSchema, DescribesFieldsWithTypesAndChoices) {
  const OpSchema* crop = FindOpSchema("random_resized_crop");
  ASSERT_NE(crop, nullptr);
  EXPECT_TRUE(crop->random);
  EXPECT_EQ(crop->torchvision, "RandomResizedCrop");
  const FieldSchema* interp = nullptr;
  for (const FieldSchema& f : crop->fields) {
    if (f.name == "interpolation") interp = &f;
  }
  ASSERT_NE(interp, nullptr);
  EXPECT_EQ(interp->type, "enum");
  EXPECT_EQ(interp->default_value, "INTERPOLATION_BILINEAR");
  EXPECT_THAT(interp->choices, ::testing::Contains("INTERPOLATION_NEAREST"));
  EXPECT_EQ(FindOpSchema("normalize")->fields[0].type, "list of float");
  EXPECT_FALSE(FindOpSchema("center_crop")->random);
  EXPECT_EQ(FindOpSchema("color_jitter_that_does_not_exist"), nullptr);
}

TEST(OpSchema, ParseErrorsListWhatExists) {
  testing::TempDir dir;
  const std::string unknown_op = dir.Join("unknown_op.pbtxt");
  std::ofstream(unknown_op)
      << "stages { decode {} }\nstages { colour_jitter { brightness: 0.4 } }\n";
  absl::Status s = LoadPipelineSpec(unknown_op).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(unknown_op + ":2:"));
  EXPECT_THAT(s.message(), HasSubstr("There is no op 'colour_jitter'; the ops are: decode, "
                                     "random_resized_crop, resize,"));

  const std::string unknown_field = dir.Join("unknown_field.pbtxt");
  std::ofstream(unknown_field) << "stages { resize { size: 256 } }\n";
  s = LoadPipelineSpec(unknown_field).status();
  EXPECT_THAT(
      s.message(),
      HasSubstr("resize takes shorter_side, height, width, interpolation, max_size, fidelity."));

  // Other errors are left as protobuf words them.
  EXPECT_EQ(ExplainParseError("Expected identifier, got: 3"), "Expected identifier, got: 3");
}

TEST(OpSchema, TextAndMarkdownShowEveryOp) {
  const std::string text = OpsText();
  const std::string markdown = OpsMarkdown();
  for (const OpSchema& op : OpSchemas()) {
    EXPECT_THAT(text, HasSubstr(op.name + "  ("));
    EXPECT_THAT(markdown, HasSubstr("\n## " + op.name + "\n"));
  }
  EXPECT_THAT(text, HasSubstr("scale_min (float) = 0.08: smallest area fraction"));
  EXPECT_THAT(markdown, HasSubstr("| `scale_min` | float | `0.08` | smallest area fraction |"));
}

}  // namespace
}  // namespace prepflow
