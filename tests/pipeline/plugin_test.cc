// Plugins (pipeline/ops/plugins.h): loading and its errors, and the example
// plugin's cutout op run through the registry like any op.
#include <cstring>
#include <fstream>

#include "base/text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/core/op_schema.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

using ::testing::HasSubstr;

const std::string kCutout = PREPFLOW_CUTOUT_PLUGIN;
std::string TestPlugin(const std::string& mode) {
  return absl::StrCat(PREPFLOW_TEST_PLUGIN_DIR, "/libprepflow_test_plugin_", mode, ".so");
}

proto::Stage Custom(const std::string& name, std::map<std::string, std::string> params = {}) {
  proto::Stage stage;
  stage.mutable_custom()->set_name(name);
  for (const auto& [k, v] : params) (*stage.mutable_custom()->mutable_params())[k] = v;
  return stage;
}

// A w x h image with every byte distinct enough to see any change.
struct Image {
  Image(int h, int w) : h(h), w(w), bytes(static_cast<size_t>(h) * w * 3) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(1 + i % 251);
  }
  Sample AsSample(int64_t index) {
    Sample s;
    s.index = index;
    s.kind = ValueKind::kImage;
    s.data = bytes.data();
    s.size = bytes.size();
    s.shape = {h, w, 3};
    s.view = ImageView::Whole(w, h);
    return s;
  }
  int h, w;
  std::vector<uint8_t> bytes;
};

absl::StatusOr<Sample> ApplyTo(const Op& op, Image& image, int64_t index, Workspace& ws) {
  StageContext ctx;
  ctx.seed = 9;
  ctx.stage = 3;
  ctx.ws = &ws;
  DecodeOptions decode;
  ctx.decode = &decode;
  Sample s = image.AsSample(index);
  if (absl::Status st = op.Apply(ctx, s); !st.ok()) return st;
  return s;
}

TEST(Plugins, LoadingErrorsNameTheFile) {
  absl::Status missing = LoadPlugin("/nonexistent/libnothing.so");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("/nonexistent/libnothing.so"));

  testing::TempDir dir;
  const std::string text = dir.Join("not-a-library.so");
  std::ofstream(text) << "hello";
  absl::Status not_elf = LoadPlugin(text);
  EXPECT_EQ(not_elf.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_elf.message(), HasSubstr("cannot be loaded"));

  EXPECT_THAT(LoadPlugin(TestPlugin("no_init")).message(),
              HasSubstr("has no prepflow_plugin_init"));
  EXPECT_THAT(LoadPlugin(TestPlugin("refuses")).message(), HasSubstr("refused to load"));
  EXPECT_THAT(LoadPlugins({kCutout, TestPlugin("refuses")}).message(),
              HasSubstr("--plugin: plugin " + TestPlugin("refuses")));

  ASSERT_TRUE(LoadPlugin(kCutout).ok());
  EXPECT_TRUE(LoadPlugin(kCutout).ok());  // again: nothing to do
  absl::Status duplicate = LoadPlugin(TestPlugin("duplicate"));
  EXPECT_THAT(duplicate.message(), HasSubstr("op 'cutout' is also in"));
  EXPECT_THAT(duplicate.message(), HasSubstr("libprepflow_cutout.so"));
  bool listed = false;
  for (const PluginOpInfo& op : LoadedPluginOps()) {
    if (op.name != "cutout") continue;
    listed = true;
    EXPECT_TRUE(op.random);
    EXPECT_THAT(op.file, HasSubstr("libprepflow_cutout.so"));
    EXPECT_THAT(op.summary, HasSubstr("Cutout"));
  }
  EXPECT_TRUE(listed);
}

TEST(Plugins, AnOpNotLoadedIsAClearErrorAndCutsTheWorkersPipeline) {
  ASSERT_TRUE(LoadPlugin(kCutout).ok());
  auto op = BuiltinOps().Create(Custom("sharpen_more"));
  EXPECT_THAT(op.status().message(), HasSubstr("custom op 'sharpen_more' is not loaded"));
  EXPECT_THAT(op.status().message(), HasSubstr("--plugin"));
  EXPECT_THAT(op.status().message(), HasSubstr("loaded: cutout"));
  auto spec = LoadPipelineSpec(
      "stages { decode {} } stages { center_crop { size: 8 } } "
      "stages { custom { name: \"cutout\" } } stages { custom { name: \"sharpen_more\" } } "
      "stages { normalize {} }");
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string why;
  EXPECT_EQ(FirstMissingOp(*spec, &why), 3);
  EXPECT_THAT(why, HasSubstr("stage 3: custom op 'sharpen_more'"));
  spec->mutable_stages()->DeleteSubrange(3, 1);
  EXPECT_EQ(FirstMissingOp(*spec, &why), -1);
  EXPECT_TRUE(Pipeline::Create(*spec, PipelineOptions()).ok());
}

// A job's op name is anyone's bytes, of any length: messages and the
// worker's log show at most a loadable name's worth, printable.
TEST(Plugins, AHostileOpNameIsShownShortAndPrintable) {
  const std::string name = std::string(100000, 'x') + "\xff\xfe";
  const absl::Status s = BuiltinOps().Create(Custom(name)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 400u);
  EXPECT_THAT(s.message(), HasSubstr("xxx...' is not loaded"));
  proto::PipelineSpec spec;
  *spec.add_stages() = Custom("\xff" + name);
  std::string why;
  EXPECT_EQ(FirstMissingOp(spec, &why), 0);
  EXPECT_LT(why.size(), 200u);
  EXPECT_EQ(why.find('\xff'), std::string::npos);
}

TEST(Plugins, CutoutFillsOneClippedSquareAndNothingElse) {
  ASSERT_TRUE(LoadPlugin(kCutout).ok());
  auto op = BuiltinOps().Create(Custom("cutout", {{"size", "6"}, {"fill", "0"}}));
  ASSERT_TRUE(op.ok()) << op.status();
  Workspace ws;
  Image image(20, 30);
  int clipped = 0;
  for (int64_t index = 0; index < 40; ++index) {
    auto s = ApplyTo(**op, image, index, ws);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->shape, (Shape{20, 30, 3}));
    // The filled pixels form one rectangle of at most 6 x 6; all else is the input.
    int y0 = 20, y1 = -1, x0 = 30, x1 = -1, filled = 0;
    for (int y = 0; y < 20; ++y) {
      for (int x = 0; x < 30; ++x) {
        const uint8_t* px = s->data + (y * 30 + x) * 3;
        if (px[0] == 0 && px[1] == 0 && px[2] == 0) {
          ++filled;
          y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, x), x1 = std::max(x1, x);
        } else {
          ASSERT_EQ(std::memcmp(px, image.bytes.data() + (y * 30 + x) * 3, 3), 0);
        }
      }
    }
    ASSERT_GT(filled, 0);
    ASSERT_EQ(filled, (y1 - y0 + 1) * (x1 - x0 + 1));
    ASSERT_LE(y1 - y0 + 1, 6);
    ASSERT_LE(x1 - x0 + 1, 6);
    clipped += filled < 36;
    // The same sample gives the same bytes: the draws come from its stream.
    std::vector<uint8_t> first(s->data, s->data + s->size);
    auto again = ApplyTo(**op, image, index, ws);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(std::memcmp(again->data, first.data(), first.size()), 0);
  }
  EXPECT_GT(clipped, 0);  // some centres fall near a border

  auto never = BuiltinOps().Create(Custom("cutout", {{"p", "0"}}));
  ASSERT_TRUE(never.ok());
  auto s = ApplyTo(**never, image, 1, ws);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(std::memcmp(s->data, image.bytes.data(), image.bytes.size()), 0);
}

TEST(Plugins, BadParamsTypesAndResultsAreErrorsNamingTheOp) {
  ASSERT_TRUE(LoadPlugin(kCutout).ok());
  const OpRegistry& r = BuiltinOps();
  EXPECT_THAT(r.Create(Custom("cutout", {{"radius", "3"}})).status().message(),
              HasSubstr("custom op 'cutout': no param 'radius'"));
  EXPECT_THAT(r.Create(Custom("cutout", {{"size", "0"}})).status().message(), HasSubstr("size"));
  EXPECT_THAT(r.Create(Custom("cutout", {{"p", "often"}})).status().message(),
              HasSubstr("p: expected a number, got 'often'"));
  auto op = r.Create(Custom("cutout"));
  ASSERT_TRUE(op.ok());
  EXPECT_THAT((*op)->OutputType(ValueType{ValueKind::kEncoded, {-1}}).status().message(),
              HasSubstr("put a decode stage before it"));
  EXPECT_THAT((*op)->OutputType(ValueType{ValueKind::kTensor, {3, 8, 8}}).status().message(),
              HasSubstr("cutout takes images"));

  ASSERT_TRUE(LoadPlugin(TestPlugin("bad_output")).ok());
  auto odd = r.Create(Custom("odd_shape"));
  ASSERT_TRUE(odd.ok());
  EXPECT_THAT((*odd)->OutputType(ValueType{ValueKind::kImage, {8, 8, 3}}).status().message(),
              HasSubstr("which is not a value"));
  ASSERT_TRUE(LoadPlugin(TestPlugin("failing")).ok());
  auto picky = r.Create(Custom("picky"));
  ASSERT_TRUE(picky.ok());
  Workspace ws;
  Image image(4, 4);
  EXPECT_THAT(ApplyTo(**picky, image, 0, ws).status().message(),
              HasSubstr("custom op 'picky': the sample is not to this op's taste"));
}

TEST(Plugins, AnOutputOverMaxPixelsIsRefusedBeforeAnyMemory) {
  ASSERT_TRUE(LoadPlugin(kCutout).ok());
  auto op = BuiltinOps().Create(Custom("cutout"));
  ASSERT_TRUE(op.ok());
  StageContext ctx;
  Workspace ws;
  DecodeOptions decode;
  decode.max_pixels = 100;
  ctx.ws = &ws;
  ctx.decode = &decode;
  Image image(20, 30);
  Sample s = image.AsSample(0);
  EXPECT_EQ((*op)->Apply(ctx, s).code(), absl::StatusCode::kResourceExhausted);
}

TEST(Plugins, TheCustomStageIsInTheSchemaWithItsMapOfParams) {
  const OpSchema* custom = FindOpSchema("custom");
  ASSERT_NE(custom, nullptr);
  ASSERT_EQ(custom->fields.size(), 2u);
  EXPECT_EQ(custom->fields[1].type, "map of string to string");
}

}  // namespace
}  // namespace prepflow
