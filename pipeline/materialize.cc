#include "pipeline/materialize.h"

#include <cstdio>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"
#include "opencv2/imgcodecs.hpp"
#include "opencv2/imgproc.hpp"
#include "pipeline/detail/image_op.h"
#include "pipeline/wire.h"

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

absl::StatusOr<proto::Materialized> Materialize(
    const Dataset& dataset, const Pipeline& pipeline, const proto::PipelineSpec& spec,
    const MaterializeOptions& options, const std::function<void(const PackStats&)>& progress) {
  if (absl::Status s = CheckEncoding(options.encoding); !s.ok()) return s;
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
    s.index = i;
    s.label = dataset.label(i);
    size_t size = 0;
    if (absl::Status st = dataset.Read(i, &ws.encoded, &size); !st.ok()) return st;
    s.kind = ValueKind::kEncoded;
    s.data = ws.encoded.data();
    s.size = size;
    s.shape = {static_cast<int64_t>(size)};
    if (absl::Status st = pipeline.Run(0, upto, s, ws); !st.ok()) return st;
    return EncodeMaterialized(s, options.encoding, bytes, ext);
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

}  // namespace prepflow
