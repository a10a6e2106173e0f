// Cutting a pipeline at any stage boundary and carrying the value across in
// its wire form gives bit-identical results.
#include "pipeline/core/wire.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/core/checksum.h"
#include "pipeline/data/synthetic.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/plugins.h"
#include "pipeline/pipeline.h"
#include "tests/testing/test_util.h"

namespace prepflow {
namespace {

// Runs [0, cut) in one workspace, ships the value through a serialized
// SampleValue, and runs [cut, n) in another.
uint64_t RunSplit(const Pipeline& p, const std::vector<uint8_t>& bytes, int64_t index, int cut,
                  size_t* wire_bytes) {
  Workspace remote, local;
  Sample s;
  s.index = index;
  s.epoch = 3;
  s.label = 1;
  s.data = remote.encoded.Reserve(bytes.size());
  std::copy(bytes.begin(), bytes.end(), s.data);
  s.size = bytes.size();
  s.shape = {static_cast<int64_t>(bytes.size())};
  EXPECT_TRUE(p.Run(0, cut, s, remote).ok());
  proto::SampleValue value;
  ToWire(s, &value);
  const std::string wire = value.SerializeAsString();
  *wire_bytes = wire.size();

  proto::SampleValue received;
  EXPECT_TRUE(received.ParseFromString(wire));
  Sample t;
  t.index = s.index;
  t.epoch = s.epoch;
  t.label = s.label;
  EXPECT_TRUE(FromWire(received, local, t).ok());
  const absl::Status st = p.Run(cut, p.num_stages(), t, local);
  EXPECT_TRUE(st.ok()) << st;
  return SampleHash(t.index, t.label, t.data, t.size);
}

class CutAnywhere : public ::testing::TestWithParam<std::string> {};

// A pipeline with every op (tests/pipeline/op_schema_test.cc checks that
// the list below names each one): their random draws and types survive every
// cut.
constexpr char kEveryOp[] = R"pb(
  name: "every-op"
  stages { decode {} }
  stages { resize { shorter_side: 160 } }
  stages {
    random_resize {
      sizes: [ 150, 170 ]
      max_size: 400
    }
  }
  stages { center_crop { size: 144 } }
  stages { random_resized_crop { size: 96 scale_min: 0.3 } }
  stages { random_horizontal_flip {} }
  stages { random_vertical_flip {} }
  stages { random_grayscale { p: 0.5 } }
  stages { random_invert {} }
  stages { color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 hue: 0.1 } }
  stages { gaussian_blur { kernel_size: 5 } }
  stages { random_posterize { bits: 4 } }
  stages { random_solarize { threshold: 128 } }
  stages { random_adjust_sharpness { sharpness_factor: 2 } }
  stages { random_autocontrast {} }
  stages { random_channel_permutation { p: 0.7 } }
  stages { random_equalize {} }
  stages {
    pad {
      padding: [ 3, 5 ]
      padding_mode: PADDING_REFLECT
    }
  }
  stages {
    random_zoom_out {
      fill: [ 1, 2, 3 ]
      side_max: 1.5
      p: 0.6
    }
  }
  stages { random_rotation { degrees: 30 interpolation: INTERPOLATION_BILINEAR } }
  stages {
    random_affine {
      degrees: 10
      translate: [ 0.1, 0.1 ]
      scale: [ 0.9, 1.1 ]
      shear: 5
    }
  }
  stages { random_perspective { p: 0.7 interpolation: INTERPOLATION_BICUBIC } }
  stages { random_crop { size: 80 padding: 4 pad_if_needed: true } }
  stages {
    custom {
      name: "cutout"
      params { key: "size" value: "20" }
    }
  }
  stages { trivial_augment_wide {} }
  stages { rand_augment { interpolation: INTERPOLATION_BILINEAR } }
  stages { auto_augment { policy: AUTO_AUGMENT_CIFAR10 } }
  stages { aug_mix { severity: 5 } }
  stages {
    random_apply {
      p: 0.7
      stages { color_jitter { brightness: 0.3 } }
      stages { random_invert {} }
    }
  }
  stages {
    random_choice {
      stages { random_horizontal_flip { p: 1 } }
      stages { random_grayscale { p: 1 } }
      p: [ 1, 2 ]
    }
  }
  stages {
    random_order {
      stages { random_solarize { threshold: 100 } }
      stages { random_posterize { bits: 5 } }
    }
  }
  stages { resize { height: 72 width: 72 interpolation: INTERPOLATION_LANCZOS } }
  stages { normalize {} }
  stages { random_erasing { random_value: true } }
)pb";

// The ops that make a stack of images, which only normalize takes after them.
constexpr char kFiveCrop[] = R"pb(
  stages { decode {} }
  stages { resize { shorter_side: 100 } }
  stages { five_crop { height: 64 width: 48 } }
  stages {
    normalize {
      mean: [ 0.5, 0.4, 0.3 ]
      std: [ 0.2, 0.3, 0.4 ]
    }
  }
)pb";
constexpr char kTenCrop[] = R"pb(
  stages { decode {} }
  stages { resize { shorter_side: 90 } }
  stages { ten_crop { size: 63 vertical_flip: true } }
  stages { normalize {} }
)pb";

// The audio ops (their every-cut test is tests/pipeline/audio_ops_test.cc's).
constexpr char kAudio[] = R"pb(
  stages { decode_audio {} }
  stages { downmix {} }
  stages { resample { rate: 16000 } }
  stages { random_segment { seconds: 1 } }
  stages { fix_length { frames: 8000 } }
  stages { mel_spectrogram { n_mels: 40 } }
  stages { amplitude_to_db { top_db: 80 } }
  stages { frequency_masking { freq_mask_param: 8 } }
  stages { time_masking { time_mask_param: 4 } }
)pb";

// The speech-recipe ops (every cut: tests/pipeline/audio_ops_test.cc).
constexpr char kSpeech[] = R"pb(
  stages { decode_audio {} }
  stages { speed_perturb { factors: [ 0.9, 1.0, 1.1 ] } }
  stages { vol { gain: 0.5 } }
  stages { kaldi_fbank { num_mel_bins: 40 } }
  stages { utterance_cmvn { dim: 0 } }
  stages { transpose {} }
)pb";

// MFCC's steps, after a shift and beside a plain spectrogram (of trimmed audio).
constexpr char kSpectrogram[] = R"pb(
  stages { decode_audio {} }
  stages { vad { both_ends: true } }
  stages { time_shift {} }
  stages { spectrogram { n_fft: 256 } }
  stages { amplitude_to_db {} }
)pb";

// cedar's frequency-domain stretch: a complex spectrogram stretched, to
// power, masked and onto the mel scale.
constexpr char kStretch[] = R"pb(
  stages { decode_audio {} }
  stages { spectrogram { n_fft: 256 complex: true } }
  stages { time_stretch { rate_min: 0.8 rate_max: 1.25 } }
  stages { magnitude {} }
  stages { time_masking { time_mask_param: 4 } }
  stages { mel_scale { n_mels: 32 sample_rate: 16000 } }
)pb";

// Noise from a set (built with data access; its every cut runs on real
// workers in tests/python/test_noise.py).
constexpr char kNoise[] = R"pb(
  stages { decode_audio {} }
  stages { add_noise { path: "noise" } }
)pb";

// The video ops (every cut: tests/pipeline/video_ops_test.cc).
constexpr char kVideo[] = R"pb(
  stages { decode_video { frames: 8 } }
  stages { uniform_temporal_subsample { frames: 6 } }
  stages { random_temporal_crop { frames: 4 } }
  stages { random_resized_crop { size: 32 } }
  stages { normalize { layout: LAYOUT_CNHW } }
)pb";

// A caption tokenized (built with a model; every cut and the references:
// tests/pipeline/tokenize_test.cc, tests/python/test_text.py).
constexpr char kText[] = R"pb(
  stages { tokenize { kind: KIND_CLIP merges: "merges.txt" context_length: 77 pad: true } }
)pb";

constexpr char kMfcc[] = R"pb(
  stages { decode_audio {} }
  stages { time_shift { max_seconds: 0.05 rollover: true } }
  stages { preemphasis {} }
  stages { mel_spectrogram { n_mels: 40 } }
  stages { log {} }
  stages { dct { n_mfcc: 13 } }
)pb";

// kEveryOp's custom stage is the example plugin's cutout.
absl::StatusOr<proto::PipelineSpec> SpecOf(const std::string& name) {
  const char* text = name == "every-op"      ? kEveryOp
                     : name == "five-crop"   ? kFiveCrop
                     : name == "ten-crop"    ? kTenCrop
                     : name == "audio"       ? kAudio
                     : name == "speech"      ? kSpeech
                     : name == "mfcc"        ? kMfcc
                     : name == "spectrogram" ? kSpectrogram
                     : name == "stretch"     ? kStretch
                     : name == "noise"       ? kNoise
                     : name == "video"       ? kVideo
                     : name == "text"        ? kText
                                             : nullptr;
  if (text == nullptr) return LoadPipelineSpec(name);
  if (absl::Status s = LoadPlugin(PREPFLOW_CUTOUT_PLUGIN); !s.ok()) return s;
  proto::PipelineSpec spec;
  if (!google::protobuf::TextFormat::ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " does not parse"));
  }
  return spec;
}

TEST(EveryOp, NamesEveryRegisteredOp) {
  std::set<std::string> used;
  for (const char* name : {"every-op", "five-crop", "ten-crop", "audio", "speech", "mfcc",
                           "spectrogram", "stretch", "noise", "video", "text"}) {
    auto spec = SpecOf(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (const proto::Stage& stage : spec->stages()) {
      used.insert(OpRegistry::OpName(stage.op_case()));
    }
  }
  for (const std::string& name : BuiltinOps().Names()) {
    EXPECT_TRUE(used.count(name)) << name << " is missing from kEveryOp (or the crop pipelines)";
  }
}

TEST_P(CutAnywhere, EveryCutGivesTheSameBytes) {
  auto spec = SpecOf(GetParam());
  ASSERT_TRUE(spec.ok());
  PipelineOptions options;
  options.seed = 99;
  auto p = Pipeline::Create(*spec, options);
  ASSERT_TRUE(p.ok()) << p.status();
  const int n = (*p)->num_stages();
  std::vector<std::vector<uint8_t>> images = {
      testing::Jpeg(1600, 1200, 1),  // DCT scaling
      testing::Jpeg(500, 375, 2),    // region decode
      testing::Jpeg(97, 311, 3),     // upscaling
      SyntheticImage(400, 300, 4, 10, SyntheticFormat::kProgressiveJpeg),
      SyntheticImage(300, 300, 5, 10, SyntheticFormat::kGrayJpeg),
      SyntheticImage(260, 200, 6, 10, SyntheticFormat::kPng),
  };
  for (size_t i = 0; i < images.size(); ++i) {
    size_t ignored;
    const uint64_t reference = RunSplit(**p, images[i], static_cast<int64_t>(i), n, &ignored);
    for (int cut = 0; cut < n; ++cut) {
      size_t wire = 0;
      EXPECT_EQ(RunSplit(**p, images[i], static_cast<int64_t>(i), cut, &wire), reference)
          << GetParam() << " image " << i << " cut " << cut;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CutAnywhere,
                         ::testing::Values("imagenet-train", "imagenet-eval", "every-op",
                                           "five-crop", "ten-crop"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(Wire, RejectsInconsistentValues) {
  Workspace ws;
  Sample s;
  proto::SampleValue v;
  v.set_kind(proto::SampleValue::KIND_IMAGE);
  v.add_shape(2);
  v.add_shape(2);
  v.add_shape(3);
  v.set_data(std::string(11, 'x'));
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.set_data(std::string(12, 'x'));
  EXPECT_TRUE(FromWire(v, ws, s).ok());
  v.set_kind(proto::SampleValue::KIND_UNSPECIFIED);
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.set_kind(proto::SampleValue::KIND_TENSOR);
  v.add_shape(-1);
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Wire, TakesStacksOfImages) {
  Workspace ws;
  Sample s;
  proto::SampleValue v;
  v.set_kind(proto::SampleValue::KIND_IMAGE);
  for (int d : {5, 2, 4, 3}) v.add_shape(d);
  v.set_data(std::string(5 * 2 * 4 * 3, 'x'));
  ASSERT_TRUE(FromWire(v, ws, s).ok());
  EXPECT_EQ(s.images(), 5);
  EXPECT_EQ(s.height(), 2);
  EXPECT_EQ(s.width(), 4);
  v.set_shape(3, 1);  // not RGB
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
}

// A (hostile) worker's audio value: [channels, frames] with a positive rate,
// channels within 1 to 65535, the data the shape's floats.
TEST(Wire, AudioNeedsTwoDimsARateAndItsBytes) {
  Workspace ws;
  Sample s;
  proto::SampleValue v;
  v.set_kind(proto::SampleValue::KIND_AUDIO);
  v.add_shape(2);
  v.add_shape(3);
  v.set_sample_rate(16000);
  v.set_data(std::string(2 * 3 * sizeof(float), '\0'));
  ASSERT_TRUE(FromWire(v, ws, s).ok());
  EXPECT_EQ(s.sample_rate, 16000);
  v.set_sample_rate(0);
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.set_sample_rate(-8000);
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.set_sample_rate(16000);
  v.set_data(std::string(2 * 3 * sizeof(float) - 1, '\0'));
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.set_data(std::string(2 * 3 * sizeof(float), '\0'));
  v.add_shape(1);  // three dims
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.clear_shape();
  v.add_shape(0);  // no channels
  v.add_shape(6);
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
}

// A (hostile) worker's token ids: one dimension, its int32s' bytes.
TEST(Wire, TokensNeedOneDimAndTheirBytes) {
  Workspace ws;
  Sample s;
  proto::SampleValue v;
  v.set_kind(proto::SampleValue::KIND_TOKENS);
  v.add_shape(3);
  v.set_data(std::string(3 * sizeof(int32_t), '\1'));
  ASSERT_TRUE(FromWire(v, ws, s).ok());
  EXPECT_EQ(s.kind, ValueKind::kTokens);
  EXPECT_EQ(s.shape, Shape{3});
  v.set_data(std::string(3 * sizeof(int32_t) - 1, '\1'));
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.set_data(std::string(3 * sizeof(int32_t), '\1'));
  v.add_shape(1);  // two dims
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
  v.clear_shape();
  v.add_shape(-3);
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
}

// A crafted shape whose element count wraps around to the data's size (here
// 0 bytes) would let later stages read far past the buffer.
TEST(Wire, RefusesShapesThatWrapAround) {
  Workspace ws;
  Sample s;
  proto::SampleValue v;
  v.set_kind(proto::SampleValue::KIND_TENSOR);
  for (int i = 0; i < 3; ++i) v.add_shape(int64_t{1} << 31);  // 4 * 2^93 bytes
  v.add_shape(int64_t{1} << 32);
  const absl::Status st = FromWire(v, ws, s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("more elements than memory holds"), absl::string_view::npos) << st;
  v.set_kind(proto::SampleValue::KIND_IMAGE);
  v.clear_shape();
  for (int64_t d : {int64_t{1} << 24, int64_t{1} << 24, int64_t{1} << 24, int64_t{3}}) {
    v.add_shape(d);
  }
  EXPECT_EQ(FromWire(v, ws, s).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace prepflow
