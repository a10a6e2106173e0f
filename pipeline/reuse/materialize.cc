#include "pipeline/reuse/materialize.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "google/protobuf/text_format.h"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "pipeline/core/profiler.h"
#include "pipeline/core/wire.h"
#include "pipeline/ops/image/image_op.h"

namespace prepflow {
namespace {

// Q of "jpeg:Q", or 0 when `encoding` is not a valid one.
int JpegQuality(const std::string& encoding) {
  int q = 0;
  if (!absl::StartsWith(encoding, "jpeg:") || !absl::SimpleAtoi(encoding.substr(5), &q) || q < 1 ||
      q > 100) {
    return 0;
  }
  return q;
}

bool WholeImage(const Sample& s) {
  const ImageView& v = s.view;
  return v.scale_denom == 1 && v.x0 == 0 && v.y0 == 0 && !v.has_crop &&
         v.source_width == s.width() && v.source_height == s.height();
}

std::string StagesText(const proto::PipelineSpec& spec) {
  std::vector<std::string> names;
  for (const proto::Stage& stage : spec.stages())
    names.push_back(OpRegistry::OpName(stage.op_case()));
  return names.empty() ? "(none)" : absl::StrJoin(names, " -> ");
}

// Records of several fields are materialized raw (a record's value bytes
// hold every field); a picture holds one image.
absl::Status NoRecords(const std::string& encoding) {
  return absl::InvalidArgumentError(
      absl::StrCat("--encoding ", encoding,
                   ": this pipeline's records have several fields (Stage.field, carry), which one "
                   "picture cannot hold (use --encoding raw)"));
}

}  // namespace

absl::Status CheckEncoding(const std::string& encoding) {
  if (encoding == "raw" || encoding == "png" || JpegQuality(encoding) > 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--encoding: '", encoding, "' is not raw, png or jpeg:Q (Q from 1 to 100)"));
}

absl::Status EncodeMaterialized(const Sample& s, const std::string& encoding, std::string* bytes,
                                std::string* ext) {
  if (encoding == "raw") {
    *bytes = ValueBytes(s);
    *ext = "pfv";
    return absl::OkStatus();
  }
  if (s.kind != ValueKind::kImage) {
    return absl::InvalidArgumentError(absl::StrCat("--encoding ", encoding, " holds images; the ",
                                                   "value here is a ", ValueKindName(s.kind),
                                                   " (use --encoding raw)"));
  }
  if (s.shape.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--encoding ", encoding, ": the value here is a stack of ", s.images(),
        " images (five_crop or ten_crop), which one picture cannot hold (use --encoding raw)"));
  }
  if (!WholeImage(s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--encoding ", encoding,
        ": the image here is a partial decode (planned by the next "
        "stage), whose placement in its source a picture cannot keep (use --encoding raw, or "
        "materialize a stage later)"));
  }
  cv::Mat bgr;
  cv::cvtColor(detail::ImageMat(s), bgr, cv::COLOR_RGB2BGR);
  std::vector<uchar> out;
  const int quality = JpegQuality(encoding);
  const bool ok = quality > 0 ? cv::imencode(".jpg", bgr, out, {cv::IMWRITE_JPEG_QUALITY, quality})
                              : cv::imencode(".png", bgr, out, {cv::IMWRITE_PNG_COMPRESSION, 1});
  if (!ok) return absl::InternalError(absl::StrCat("OpenCV could not encode as ", encoding));
  bytes->assign(out.begin(), out.end());
  *ext = quality > 0 ? "jpg" : "png";
  return absl::OkStatus();
}

absl::Status DecodeMaterialized(const proto::Materialized& m, const DecodeOptions& decode,
                                Workspace& ws, Sample& s) {
  if (m.encoding() == "raw") {
    const absl::string_view stored(reinterpret_cast<const char*>(s.data), s.size);
    absl::Status status = FromValueBytes(stored, ws, s);
    if (!status.ok()) {
      return absl::DataLossError(absl::StrCat("not a materialized value: ", status.message()));
    }
    return absl::OkStatus();
  }
  Buffer* out = ws.ScratchFor(s.data);
  DecodedImage image;
  if (absl::Status status = ws.decoder.Decode(s.data, s.size, decode, nullptr, out, &image);
      !status.ok()) {
    return status;
  }
  detail::SetImage(s, image.data, image.height, image.width, image.view);
  return absl::OkStatus();
}

absl::Status CheckMaterializedPrefix(const proto::Materialized& m, const Pipeline& pipeline) {
  if (m.upto() < 0 || m.upto() > pipeline.num_stages() ||
      pipeline.PrefixFingerprint(m.upto()) != m.prefix_fingerprint()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data was materialized after stages [0, ", m.upto(), ") = ", StagesText(m.prefix()),
        " (", kManifestName, "), and pipeline ", pipeline.name(),
        " does not begin with exactly those stages and decode limits (--max-pixels, "
        "--max-jpeg-scans); run it on the source data (",
        m.source(), ") instead"));
  }
  return absl::OkStatus();
}

std::string BoundaryTag(uint64_t prefix_fingerprint) {
  return absl::StrFormat("p%016x", prefix_fingerprint);
}

absl::Status CheckMaterializedSamples(const proto::Materialized& m, const Dataset& dataset) {
  const std::string tag = absl::StrCat(".", BoundaryTag(m.prefix_fingerprint()), ".");
  for (int64_t i = 0; i < dataset.size(); ++i) {
    const std::string path = dataset.SamplePath(i);
    const size_t member = path.rfind(':');
    if (member != std::string::npos && path.find(tag, member) != std::string::npos) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", SafeText(path), " was not made by the stages ", kManifestName,
                     " names (its member is not tagged ", tag.substr(1, tag.size() - 2),
                     "): the manifest and the shards disagree; run prepflow materialize again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::Materialized> Materialize(
    const Dataset& dataset, const Pipeline& pipeline, const proto::PipelineSpec& spec,
    const MaterializeOptions& options, const std::function<void(const PackStats&)>& progress) {
  if (absl::Status s = CheckEncoding(options.encoding); !s.ok()) return s;
  if (pipeline.record() && options.encoding != "raw") return NoRecords(options.encoding);
  const int upto = options.upto >= 0 ? options.upto : pipeline.CacheBoundary();
  if (upto > pipeline.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("--upto ", upto, ": past the last boundary (",
                                                   pipeline.num_stages(), " stages)"));
  }
  if (const std::string why = pipeline.WhyNotDeterministic(upto); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--upto ", upto, ": the values there differ from epoch to epoch (", why,
        "); the last boundary that may be materialized is ", pipeline.CacheBoundary()));
  }
  PackOptions pack = options.pack;
  const auto& finished = options.pack.finished;
  pack.make = [&](int64_t i, Workspace& ws, std::string* bytes, std::string* ext) {
    Sample s;
    dataset.Describe(i, s);
    size_t size = 0;
    if (absl::Status st = ReadRecord(dataset, pipeline.fields(), ws, s, &size); !st.ok()) {
      return st;
    }
    if (absl::Status st = pipeline.Run(0, upto, s, ws); !st.ok()) return st;
    if (absl::Status st = EncodeMaterialized(s, options.encoding, bytes, ext); !st.ok()) return st;
    // "000123.p<prefix fingerprint>.pfv": each member says which values it holds.
    *ext = absl::StrCat(BoundaryTag(pipeline.PrefixFingerprint(upto)), ".", *ext);
    return absl::OkStatus();
  };
  absl::StatusOr<PackStats> packed = PackWebDataset(dataset, pack, progress);
  if (!packed.ok()) return packed.status();
  proto::Materialized m;
  m.set_upto(upto);
  m.set_encoding(options.encoding);
  m.set_prefix_fingerprint(pipeline.PrefixFingerprint(upto));
  *m.mutable_prefix() = spec;
  m.mutable_prefix()->mutable_stages()->DeleteSubrange(upto, spec.stages_size() - upto);
  m.mutable_prefix()->clear_batch_stages();
  m.set_source(dataset.root());
  m.set_source_fingerprint(dataset.fingerprint());
  m.set_samples(packed->samples);
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  const std::string manifest = absl::StrCat(pack.out_dir, "/", kManifestName);
  if (absl::Status s = WriteFileAtomically(manifest, text); !s.ok()) return s;
  if (finished) {
    if (absl::Status s = finished(manifest); !s.ok()) return s;
  }
  return m;
}

namespace {

// A sample's stored bytes at boundary 0 (as read), with its identity.
struct Source {
  Sample sample;
  std::string bytes;
};

absl::Status RunTimed(const Pipeline& p, int begin, int end, Sample& s, Workspace& ws,
                      double* cpu) {
  const int64_t t0 = ThreadCpuNanos();
  absl::Status status = p.Run(begin, end, s, ws);
  *cpu += (ThreadCpuNanos() - t0) * 1e-9;
  return status;
}

// Measures the materialized strategy (upto, encoding) on one sample whose
// value at `upto` is `at` (made from the source by `prefix_cpu`).
void MeasureMaterialized(const Pipeline& p, const Sample& at, double prefix_cpu, Strategy* st,
                         Workspace& ws) {
  std::string stored, ext;
  int64_t t0 = ThreadCpuNanos();
  const absl::Status encoded = EncodeMaterialized(at, st->encoding, &stored, &ext);
  const double encode_cpu = (ThreadCpuNanos() - t0) * 1e-9;
  if (!encoded.ok()) {
    if (st->unusable.empty()) st->unusable = std::string(encoded.message());
    return;
  }
  proto::Materialized m;
  m.set_upto(st->upto);
  m.set_encoding(st->encoding);
  Sample s;
  s.index = at.index;
  s.label = at.label;
  uint8_t* data = ws.encoded.Reserve(stored.size());
  std::memcpy(data, stored.data(), stored.size());
  s.kind = ValueKind::kEncoded;
  s.data = data;
  s.size = stored.size();
  s.shape = {static_cast<int64_t>(stored.size())};
  double online = 0;
  t0 = ThreadCpuNanos();
  absl::Status status = DecodeMaterialized(m, p.options().decode, ws, s);
  online += (ThreadCpuNanos() - t0) * 1e-9;
  if (status.ok()) status = RunTimed(p, st->upto, p.num_stages(), s, ws, &online);
  if (!status.ok()) {
    if (st->unusable.empty()) st->unusable = std::string(status.message());
    return;
  }
  st->bytes += static_cast<double>(stored.size());
  st->oneoff_cpu += prefix_cpu + encode_cpu;
  st->online_cpu += online;
  ++st->samples;
}

}  // namespace

absl::StatusOr<std::vector<Strategy>> MeasureStrategies(
    const Dataset& dataset, const Pipeline& p, const std::vector<int64_t>& indices,
    const std::vector<std::string>& encodings, const std::function<void(int64_t)>& progress) {
  if (p.record()) {
    return absl::UnimplementedError(
        "measuring materialization strategies of records of several fields is not supported "
        "yet (prepflow materialize --encoding raw stores them)");
  }
  std::vector<Strategy> out(1);  // the source
  for (int k = 1; k <= p.CacheBoundary(); ++k) {
    for (const std::string& e : encodings) {
      if (absl::Status s = CheckEncoding(e); !s.ok()) return s;
      Strategy st;
      st.upto = k;
      st.encoding = e;
      out.push_back(st);
    }
  }
  Workspace ws, scratch;
  for (int64_t done = 0; done < static_cast<int64_t>(indices.size()); ++done) {
    const int64_t i = indices[done];
    Sample s;
    dataset.Describe(i, s);
    size_t size = 0;
    int64_t t0 = ThreadCpuNanos();
    absl::Status status = dataset.Read(i, &ws.encoded, &size);
    const double read_cpu = (ThreadCpuNanos() - t0) * 1e-9;
    if (!status.ok()) return status;
    const std::string bytes(reinterpret_cast<const char*>(ws.encoded.data()), size);
    auto fresh = [&](Sample& x) {
      uint8_t* d = ws.encoded.Reserve(bytes.size());
      std::memcpy(d, bytes.data(), bytes.size());
      x.epoch = 0;
      x.view = ImageView();
      dataset.Describe(i, x);
      x.kind = ValueKind::kEncoded;
      x.data = d;
      x.size = bytes.size();
      x.shape = {static_cast<int64_t>(bytes.size())};
    };
    // The source: read and every stage, fused as a job runs them.
    fresh(s);
    double online = read_cpu;
    status = RunTimed(p, 0, p.num_stages(), s, ws, &online);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat(dataset.SamplePath(i), ": ", status.message()));
    }
    out[0].bytes += static_cast<double>(size);
    out[0].online_cpu += online;
    ++out[0].samples;
    // Each boundary: the prefix once, then each encoding of its value.
    fresh(s);
    double prefix = read_cpu;
    size_t next = 1;
    for (int k = 1; k <= p.CacheBoundary(); ++k) {
      if (absl::Status st = RunTimed(p, k - 1, k, s, ws, &prefix); !st.ok()) return st;
      for (size_t e = 0; e < encodings.size(); ++e, ++next) {
        MeasureMaterialized(p, s, prefix, &out[next], scratch);
      }
    }
    if (progress) progress(done + 1);
  }
  for (Strategy& st : out) {
    if (st.samples == 0) continue;
    st.bytes /= static_cast<double>(st.samples);
    st.oneoff_cpu /= static_cast<double>(st.samples);
    st.online_cpu /= static_cast<double>(st.samples);
  }
  return out;
}

}  // namespace prepflow
