#include "pipeline/pipeline.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/text_format.h"
#include "opencv2/core.hpp"
#include "pipeline/core/op_schema.h"
#include "pipeline/core/record.h"
#include "pipeline/ops/audio/spectrogram.h"
#include "pipeline/ops/builtin_ops.h"
#include "pipeline/ops/compose_ops.h"
#include "pipeline/ops/per_frame.h"
#include "pipeline/ops/plugins.h"

namespace prepflow {
namespace {

constexpr char kImagenetTrain[] = R"pb(
  name: "imagenet-train"
  stages { decode {} }
  stages {
    random_resized_crop {
      size: 224
      scale_min: 0.08
      scale_max: 1.0
      ratio_min: 0.75
      ratio_max: 1.3333333333333333
    }
  }
  stages { random_horizontal_flip { p: 0.5 } }
  stages {
    normalize {
      mean: [ 0.485, 0.456, 0.406 ]
      std: [ 0.229, 0.224, 0.225 ]
    }
  }
)pb";

constexpr char kImagenetEval[] = R"pb(
  name: "imagenet-eval"
  stages { decode {} }
  stages { resize { shorter_side: 256 } }
  stages { center_crop { size: 224 } }
  stages {
    normalize {
      mean: [ 0.485, 0.456, 0.406 ]
      std: [ 0.229, 0.224, 0.225 ]
    }
  }
)pb";

class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorCollector(std::string file) : file_(std::move(file)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat(file_, ":", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string file_;
  std::string first_;
};

absl::StatusOr<proto::PipelineSpec> ParseText(const std::string& text, const std::string& origin) {
  proto::PipelineSpec spec;
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors(origin);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad pipeline: ", ExplainParseError(errors.first())));
  }
  return spec;
}

// Whether `stage`'s op draws random numbers.
bool StageRandom(const proto::Stage& stage) {
  if (stage.op_case() == proto::Stage::kCustom) {
    for (const PluginOpInfo& op : LoadedPluginOps()) {
      if (op.name == stage.custom().name()) return op.random;
    }
    return true;  // unknown here: assume the worst
  }
  if (stage.op_case() == proto::Stage::kDecodeVideo) {
    // A clip placed by its window alone (centred, from a start, clip k of
    // N) draws nothing: caches and materialized data may keep it.
    const proto::DecodeVideo& v = stage.decode_video();
    return v.sampler() == proto::DecodeVideo::SAMPLER_RANDOM ||
           v.max_stride() > (v.has_stride() ? v.stride() : 1);
  }
  const OpSchema* schema = FindOpSchema(OpRegistry::OpName(stage.op_case()));
  return schema == nullptr || schema->random;
}

// Audio's bytes: what the type fixes, else the limits.
int64_t AudioBound(const ValueType& t, const DecodeOptions& decode) {
  const int64_t channels = t.shape[0] >= 0 ? t.shape[0] : decode.max_audio_channels;
  const int64_t frames = t.shape[1] >= 0 ? t.shape[1] : MaxAudioFrames(decode, t.sample_rate);
  return channels * frames * static_cast<int64_t>(sizeof(float));
}

// A bound on the bytes `stage` makes from a value of `in` within `bound`
// bytes, for the ops that make features from audio and those that keep a
// tensor's size; -1 for any other.
double StageBound(proto::Stage stage, const ValueType& in, double bound,
                  const DecodeOptions& decode) {
  if (!ApplyDefaults(&stage).ok()) return -1;
  const double samples = bound / sizeof(float);  // every channel's
  switch (stage.op_case()) {
    case proto::Stage::kMelSpectrogram: {  // 1 + length / hop frames a channel
      const proto::MelSpectrogram& m = stage.mel_spectrogram();
      const int hop = HopLength(m.n_fft(), m.win_length(), m.hop_length());
      const double channels = in.shape[0] >= 0 ? in.shape[0] : decode.max_audio_channels;
      return sizeof(float) * m.n_mels() * (samples / hop + channels);
    }
    case proto::Stage::kSpectrogram: {  // as mel_spectrogram's, n_fft / 2 + 1 bins
      const proto::Spectrogram& m = stage.spectrogram();
      const int hop = HopLength(m.n_fft(), m.win_length(), m.hop_length());
      const double channels = in.shape[0] >= 0 ? in.shape[0] : decode.max_audio_channels;
      return sizeof(float) * (m.complex() ? 2 : 1) * (m.n_fft() / 2 + 1) *
             (samples / hop + channels);
    }
    case proto::Stage::kTimeStretch: {  // ceil(frames / rate) of each bin's frames
      const proto::TimeStretch& t = stage.time_stretch();
      const double rate = t.fixed_rate() > 0 ? t.fixed_rate() : t.rate_min();
      return rate > 0 ? bound * (1 + 1 / rate) : -1;
    }
    case proto::Stage::kMagnitude:
      return bound / 2;
    case proto::Stage::kMelScale: {  // n_mels bands for each n_stft bins
      const int64_t bins = in.shape.size() >= 2 ? in.shape[in.shape.size() - 2] : -1;
      return bins > 0
                 ? bound * std::max(1.0, stage.mel_scale().n_mels() / static_cast<double>(bins))
                 : -1;
    }
    case proto::Stage::kKaldiFbank: {  // at most length / shift + 1 frames of one channel
      const proto::KaldiFbank& f = stage.kaldi_fbank();
      const double rate = in.sample_rate > 0 ? in.sample_rate : 1;
      const double shift = std::max(1.0, std::floor(rate * f.frame_shift() * 0.001));
      return sizeof(float) * (f.num_mel_bins() + (f.use_energy() ? 1 : 0)) * (samples / shift + 1);
    }
    case proto::Stage::kAmplitudeToDb:
    case proto::Stage::kFrequencyMasking:
    case proto::Stage::kTimeMasking:
    case proto::Stage::kUtteranceCmvn:
    case proto::Stage::kTranspose:
    case proto::Stage::kLog:
    case proto::Stage::kDct:  // keeps at most its input's bands
      return bound;
    default:
      return -1;
  }
}

// The bytes of a tokenize stage's ids: BPE gives at most one id per byte of
// its text (within max_text_bytes), SentencePiece at most one per byte of
// the normalized text, which NFKC may make up to 11 times longer (U+FDFA);
// and BOS and EOS.
int64_t TokensBound(const proto::Tokenize& t) {
  const int64_t text = t.has_max_text_bytes() ? t.max_text_bytes() : int64_t{1} << 20;
  const int64_t per_byte = t.kind() == proto::Tokenize::KIND_SENTENCEPIECE ? 12 : 1;
  return 4 * (per_byte * std::min<int64_t>(text, int64_t{1} << 40) + 3);
}

// Per boundary and field, a bound on a tensor made from audio, or on token
// ids (-1 where none).
std::vector<std::vector<int64_t>> FeatureBounds(const proto::PipelineSpec& spec,
                                                const Pipeline& p) {
  const size_t fields = p.fields().size();
  std::vector<std::vector<int64_t>> out(p.num_stages() + 1, std::vector<int64_t>(fields, -1));
  std::vector<double> bounds(fields, -1);
  for (int k = 1; k <= p.num_stages(); ++k) {
    out[k] = out[k - 1];
    const int f = p.stage_field(k - 1);
    const ValueType& t = p.field_type(k, f);
    double& bound = bounds[f];
    out[k][f] = -1;
    if (t.kind == ValueKind::kAudio) {
      bound = static_cast<double>(AudioBound(t, p.options().decode));
      continue;
    }
    if (t.kind == ValueKind::kTokens && spec.stages(k - 1).has_tokenize()) {
      out[k][f] = TokensBound(spec.stages(k - 1).tokenize());
      bound = -1;
      continue;
    }
    bound = bound >= 0 && t.kind == ValueKind::kTensor
                ? StageBound(spec.stages(k - 1), p.field_type(k - 1, f), bound, p.options().decode)
                : -1;
    if (bound >= 0 && bound < 9e18) out[k][f] = static_cast<int64_t>(std::ceil(bound));
  }
  return out;
}

// XXH3 of the stages [0, k) for every k, and of the decode limits.
std::vector<uint64_t> PrefixFingerprints(const proto::PipelineSpec& given,
                                         const DecodeOptions& decode) {
  // A stage that leaves its fidelity to the default is exact here: it is
  // named as exact, so both spellings name the same values.
  proto::PipelineSpec spec = given;
  ResolveFidelity(proto::FIDELITY_EXACT, &spec);
  // Each prefix is hashed whole: stages are a few dozen bytes each.
  // The audio limits count where audio is decoded (image pipelines keep the
  // fingerprints, and caches, they had).
  std::string bytes = absl::StrCat(decode.max_pixels, ",", decode.max_jpeg_scans);
  for (const proto::Stage& stage : spec.stages()) {
    if (stage.has_decode_audio()) {
      absl::StrAppend(&bytes, ",", decode.max_audio_seconds, ",", decode.max_audio_channels);
      break;
    }
  }
  for (const proto::Stage& stage : spec.stages()) {
    if (stage.has_decode_video()) {
      absl::StrAppend(&bytes, ",video:", decode.max_video_seconds, ",", decode.max_video_frames);
      break;
    }
  }
  // Carried fields are part of every value (image pipelines carry none and
  // keep their fingerprints).
  for (const std::string& carried : spec.carry()) absl::StrAppend(&bytes, ",carry:", carried);
  bytes += ";";
  std::vector<uint64_t> out = {XXH3_64bits(bytes.data(), bytes.size())};
  for (const proto::Stage& stage : spec.stages()) {
    std::string serialized;
    {
      google::protobuf::io::StringOutputStream stream(&serialized);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      stage.SerializeToCodedStream(&coded);
    }
    absl::StrAppend(&bytes, serialized.size(), ":", serialized);
    out.push_back(XXH3_64bits(bytes.data(), bytes.size()));
  }
  return out;
}

}  // namespace

std::vector<std::string> PresetPipelineNames() { return {"imagenet-train", "imagenet-eval"}; }

absl::StatusOr<proto::PipelineSpec> LoadPipelineSpec(absl::string_view name_or_path) {
  if (name_or_path == "imagenet-train") return ParseText(kImagenetTrain, "imagenet-train");
  if (name_or_path == "imagenet-eval") return ParseText(kImagenetEval, "imagenet-eval");
  // No preset and no file name holds a brace; pipeline text always does.
  if (absl::StrContains(name_or_path, '{')) {
    return ParseText(std::string(name_or_path), "pipeline text");
  }
  const std::string path(name_or_path);
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("pipeline '", path, "' is neither a preset (",
                                            absl::StrJoin(PresetPipelineNames(), ", "),
                                            ") nor a readable file: ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  auto spec = ParseText(text.str(), path);
  if (spec.ok() && spec->name().empty()) spec->set_name(path);
  return spec;
}

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(const proto::PipelineSpec& spec,
                                                           const PipelineOptions& options) {
  // Stages are single-threaded; parallelism comes from running many samples.
  // OpenCV's own thread pool would only oversubscribe the cores.
  static const bool kOpenCvSerial = [] {
    cv::setNumThreads(0);
    return true;
  }();
  (void)kOpenCvSerial;

  std::unique_ptr<Pipeline> p(new Pipeline);
  p->name_ = spec.name().empty() ? "pipeline" : spec.name();
  p->options_ = options;
  if (spec.stages_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline ", p->name_, ": has no stages"));
  }
  if (spec.stages_size() >= static_cast<int>(kMaxStages)) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline ", p->name_, ": has ",
                                                   spec.stages_size(), " stages; at most ",
                                                   kMaxStages - 1, " are allowed"));
  }
  if (options.decode.max_pixels <= 0) {
    return absl::InvalidArgumentError("max_pixels: must be positive");
  }
  if (!(options.decode.max_audio_seconds > 0 &&
        options.decode.max_audio_seconds <= kMaxAudioSeconds) ||
      options.decode.max_audio_channels <= 0) {
    return absl::InvalidArgumentError(
        "max_audio_seconds, max_audio_channels: must be positive (seconds at most a day)");
  }
  if (!(options.decode.max_video_seconds > 0 &&
        options.decode.max_video_seconds <= kMaxVideoSeconds) ||
      options.decode.max_video_frames <= 0) {
    return absl::InvalidArgumentError(
        "max_video_seconds, max_video_frames: must be positive (seconds at most a day)");
  }
  if (absl::Status st = p->LayOutFields(spec); !st.ok()) return st;
  for (int i = 0; i < spec.stages_size(); ++i) {
    if (absl::Status st = p->AddStage(spec.stages(i), i); !st.ok()) return st;
  }
  p->prefix_fingerprints_ = PrefixFingerprints(spec, options.decode);
  p->feature_bounds_ = FeatureBounds(spec, *p);
  // Each op's consumer is the next stage of its field (a record's stages
  // of other fields may come between).
  for (int i = 0; i < p->num_stages(); ++i) {
    const int next = p->NextOfField(i);
    if (next >= 0) p->ops_[i]->SetConsumer(p->ops_[next].get(), next);
  }
  return p;
}

absl::Status Pipeline::LayOutFields(const proto::PipelineSpec& spec) {
  auto where = [&] { return absl::StrCat("pipeline ", name_, ": "); };
  for (const proto::Stage& stage : spec.stages()) {
    const auto it = std::find(fields_.begin(), fields_.end(), stage.field());
    if (it == fields_.end() && !stage.field().empty()) {
      if (absl::Status st = CheckFieldName(stage.field()); !st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "stage ", stage_field_.size(), ": field: ", st.message()));
      }
    }
    stage_field_.push_back(static_cast<int>(it - fields_.begin()));
    if (it == fields_.end()) fields_.push_back(stage.field());
  }
  for (const std::string& carried : spec.carry()) {
    if (absl::Status st = CheckFieldName(carried); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "carry: ", st.message()));
    }
    if (std::find(fields_.begin(), fields_.end(), carried) != fields_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "carry: '", carried, "' is named twice, or also by a stage"));
    }
    fields_.push_back(carried);
  }
  field_types_.assign(1, std::vector<ValueType>(fields_.size(), {ValueKind::kEncoded, {-1}}));
  return absl::OkStatus();
}

absl::Status Pipeline::AddStage(const proto::Stage& stage, int i) {
  const std::string name = OpRegistry::OpName(stage.op_case());
  auto where = [&] { return absl::StrCat("pipeline ", name_, ": stage ", i, " (", name, "): "); };
  auto op = BuiltinOps().Create(stage);
  if (!op.ok()) return absl::InvalidArgumentError(absl::StrCat(where(), op.status().message()));
  const int f = stage_field_[i];
  const ValueType& in = field_types_.back()[f];
  auto type = (*op)->OutputType(in);
  // An op of one frame takes a clip frame by frame.
  if (!type.ok() && IsClip(in)) {
    if (auto per_frame = PerFrameOutputType(**op, in); per_frame.ok()) {
      type = per_frame;
      op = ApplyPerFrame(*std::move(op));
    }
  }
  if (!type.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), type.status().message()));
  }
  // A fixed-size output is held to the same bound as a decoded image, so a
  // job cannot make a worker allocate gigabytes (found by
  // tests/fuzz/job_fuzz: a 15000 px crop).
  if (type->kind == ValueKind::kAudio && type->fixed()) {
    if (type->shape[1] > MaxAudioFrames(options_.decode)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%sits output (%s) is longer than --max-audio-seconds %g allows at %d Hz", where(),
          type->DebugString(), options_.decode.max_audio_seconds, kMaxAudioRate));
    }
  } else if (type->kind != ValueKind::kEncoded && type->fixed()) {
    const double pixels = static_cast<double>(type->bytes()) /
                          (type->kind == ValueKind::kTensor ? 3 * sizeof(float) : 3);
    if (pixels > static_cast<double>(options_.decode.max_pixels)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%sits output (%s) has %.0f pixels, over the limit of %d (--max-pixels)",
                          where(), type->DebugString(), pixels, options_.decode.max_pixels));
    }
  }
  // Last: what an op loads (a noise set) is loaded only for a valid stage.
  const OpEnvironment env{options_.open_data, &options_.decode, options_.max_data_bytes,
                          options_.read_file};
  if (absl::Status st = (*op)->Open(env); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(where(), st.message()));
  }
  field_types_.push_back(field_types_.back());
  field_types_.back()[f] = *type;
  stage_names_.push_back(stage.op_case() == proto::Stage::OP_NOT_SET ? "?" : name);
  random_.push_back(StageRandom(stage));
  plans_decode_.push_back((*op)->PlansDecode());
  ops_.push_back(*std::move(op));
  return absl::OkStatus();
}

absl::Status Pipeline::CheckRecord(int k, const Sample& sample) const {
  const int working = working_field(k);
  if (!boundary_type(k).Admits(sample)) {
    ValueType got{sample.kind, sample.shape};
    return absl::DataLossError(absl::StrCat("the value before stage ", k, " (", stage_names_[k],
                                            ") is ", got.DebugString(), "; the stage takes ",
                                            boundary_type(k).DebugString()));
  }
  if (sample.fields.size() + 1 != fields_.size()) {
    return absl::DataLossError(absl::StrCat("the record before stage ", k, " has ",
                                            sample.fields.size() + 1,
                                            " fields; the pipeline's have ", fields_.size()));
  }
  for (size_t f = 0; f < fields_.size(); ++f) {
    if (static_cast<int>(f) == working) continue;
    const StoredField* stored = sample.FindField(fields_[f]);
    if (stored == nullptr ||
        !field_types_[k][f].Admits(stored->kind, stored->shape, stored->sample_rate)) {
      return absl::DataLossError(absl::StrCat("the record before stage ", k, " has no field ",
                                              FieldName(fields_[f]), " of ",
                                              field_types_[k][f].DebugString()));
    }
  }
  return absl::OkStatus();
}

absl::Status Pipeline::Run(int begin, int end, Sample& sample, Workspace& ws,
                           StageProfiler* profiler, uint8_t* sink, size_t sink_bytes) const {
  // A value from elsewhere (a worker, a cache, a materialized file) must be
  // what the stages expect, or an op would read a shape that is not there.
  if (begin < end) {
    if (absl::Status st = CheckRecord(begin, sample); !st.ok()) return st;
  }
  StageContext ctx;
  ctx.seed = options_.seed;
  ctx.ws = &ws;
  ctx.decode = &options_.decode;
  ctx.sink = sink;
  ctx.sink_bytes = sink_bytes;
  for (int i = begin; i < end; ++i) {
    ctx.stage = i;
    ctx.last = i + 1 == end;
    const int64_t t0 = profiler != nullptr ? ThreadCpuNanos() : 0;
    absl::Status status;
    if (stage_field_[i] != working_field(i)) {
      status = SwitchField(fields_[working_field(i)], fields_[stage_field_[i]], ws, sample);
      if (!status.ok()) return status;
    }
    // Ops return Status; these catch what a library might still throw, so no
    // input can take a worker thread (and the process) down.
    try {
      status = ops_[i]->Apply(ctx, sample);
    } catch (const cv::Exception& e) {
      status = absl::InternalError(absl::StrCat("OpenCV: ", e.what()));
    } catch (const std::bad_alloc& e) {
      status = absl::ResourceExhaustedError(OutOfMemoryMessage(e));
    }
    if (!status.ok()) {
      return absl::Status(
          status.code(), absl::StrCat("stage ", i, " (", stage_names_[i], "): ", status.message()));
    }
    if (profiler != nullptr) {
      profiler->Record(i, ThreadCpuNanos() - t0, static_cast<int64_t>(sample.record_bytes()));
    }
  }
  if (sink != nullptr && sample.size == sink_bytes && sample.data != sink) {
    std::memcpy(sink, sample.data, sink_bytes);
    sample.data = sink;
  }
  return absl::OkStatus();
}

std::string Pipeline::WhyNotDeterministic(int k) const {
  for (int i = 0; i < k; ++i) {
    if (random_[i]) {
      return absl::StrCat("stage ", i, " (", stage_names_[i], ") before it draws random numbers");
    }
  }
  return WhyNotSplittable(k);
}

int Pipeline::NextOfField(int i) const {
  for (int j = i + 1; j < num_stages(); ++j) {
    if (stage_field_[j] == stage_field_[i]) return j;
  }
  return -1;
}

std::string Pipeline::WhyNotSplittable(int k) const {
  // A decode (stage d) feeding a stage c of its field decodes the region
  // that c's draws pick: every boundary between them holds that region.
  for (int d = 0; d < k && d < num_stages(); ++d) {
    const int c = NextOfField(d);
    if (c < k || !random_[c] || !plans_decode_[c] ||
        field_types_[d][stage_field_[d]].kind != ValueKind::kEncoded) {
      continue;
    }
    return absl::StrCat("stage ", d, " (", stage_names_[d], ") decodes the region that ", "stage ",
                        c, " (", stage_names_[c], ") draws at random");
  }
  return "";
}

std::string Pipeline::field() const {
  const auto media = std::find(fields_.begin(), fields_.end(), "") - fields_.begin();
  if (media == static_cast<int64_t>(fields_.size())) return "image";
  for (const std::vector<ValueType>& types : field_types_) {
    if (types[media].kind == ValueKind::kAudio) return "audio";
  }
  return "image";
}

std::vector<BatchField> Pipeline::OutputFields() const {
  const int n = num_stages(), working = working_field(n);
  std::vector<BatchField> out = {{fields_[working], FieldKey(working), field_types_[n][working]}};
  std::vector<int> others;
  for (int f = 0; f < static_cast<int>(fields_.size()); ++f) {
    if (f != working) others.push_back(f);
  }
  std::sort(others.begin(), others.end(), [&](int a, int b) { return fields_[a] < fields_[b]; });
  for (int f : others) out.push_back({fields_[f], FieldKey(f), field_types_[n][f]});
  return out;
}

std::string Pipeline::WhyNotBatchable() const {
  const std::vector<BatchField> out = OutputFields();
  for (size_t f = 0; f < out.size(); ++f) {
    if (f > 0 && out[f].type.kind == ValueKind::kEncoded) continue;
    std::string why = prepflow::WhyNotBatchable(out[f].type);
    if (!why.empty())
      return record() ? absl::StrCat("field ", FieldName(out[f].name), ": ", why) : why;
  }
  return "";
}

std::string Pipeline::FieldKey(int f) const { return fields_[f].empty() ? field() : fields_[f]; }

int Pipeline::CacheBoundary() const {
  int b = 0;
  while (b < num_stages() && !random_[b]) ++b;
  // Back to one no decode's planned region reaches (a record's decode may
  // be several stages before the crop of its field that plans it).
  while (b > 0 && !Deterministic(b)) --b;
  return b;
}

int64_t Pipeline::MaxBytesAt(int k, int64_t max_file_bytes) const {
  int64_t sum = 0;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const ValueType& t = field_types_[k][f];
    int64_t bound;
    if (t.kind == ValueKind::kEncoded) {
      bound = max_file_bytes;
    } else if (t.fixed()) {
      bound = static_cast<int64_t>(t.bytes());
    } else if (t.kind == ValueKind::kAudio) {
      bound = AudioBound(t, options_.decode);
    } else if (t.kind == ValueKind::kTokens && feature_bounds_[k][f] >= 0) {
      bound = feature_bounds_[k][f];  // the tokenize stage's
    } else if (t.kind == ValueKind::kTokens) {
      // A tokenizer gives at most one id per byte of its text, and BOS and
      // EOS.
      bound = max_file_bytes > (std::numeric_limits<int64_t>::max() - 2) / 4
                  ? std::numeric_limits<int64_t>::max()
                  : 4 * (max_file_bytes + 2);
    } else {
      // An image, or a clip's frames together (decode_video and the ops
      // applied frame by frame hold a clip to it), within --max-pixels.
      const int64_t pixels =
          options_.decode.max_pixels * 3 * (t.kind == ValueKind::kTensor ? 4 : 1);
      bound = feature_bounds_[k][f] >= 0 ? std::min(pixels, feature_bounds_[k][f]) : pixels;
    }
    sum = bound > std::numeric_limits<int64_t>::max() - sum ? std::numeric_limits<int64_t>::max()
                                                            : sum + bound;
  }
  return sum;
}

std::string Pipeline::DebugString() const {
  return absl::StrCat(name_, ": ", absl::StrJoin(stage_names_, " -> "), " => ",
                      output_type().DebugString());
}

namespace {

void ResolveStages(proto::Fidelity fidelity,
                   google::protobuf::RepeatedPtrField<proto::Stage>* stages) {
  for (proto::Stage& stage : *stages) {
    if (stage.has_resize() && stage.resize().fidelity() == proto::FIDELITY_DEFAULT) {
      stage.mutable_resize()->set_fidelity(fidelity);
    } else if (stage.has_random_resized_crop() &&
               stage.random_resized_crop().fidelity() == proto::FIDELITY_DEFAULT) {
      stage.mutable_random_resized_crop()->set_fidelity(fidelity);
    } else if (auto* inner = MutableInnerStages(&stage); inner != nullptr) {
      ResolveStages(fidelity, inner);
    }
  }
}

}  // namespace

void ResolveFidelity(proto::Fidelity fidelity, proto::PipelineSpec* spec) {
  ResolveStages(fidelity, spec->mutable_stages());
}

absl::StatusOr<proto::Fidelity> ParseFidelity(const std::string& name) {
  if (name == "exact") return proto::FIDELITY_EXACT;
  if (name == "fast") return proto::FIDELITY_FAST;
  return absl::InvalidArgumentError(
      absl::StrCat("expected exact or fast, got '", SafeText(name), "'"));
}

const char* FidelityName(proto::Fidelity fidelity) {
  return fidelity == proto::FIDELITY_FAST ? "fast" : "exact";
}

}  // namespace prepflow
