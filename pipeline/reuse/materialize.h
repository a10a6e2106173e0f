// Materialization (PRESTO's offline step): running the deterministic prefix
// of a pipeline once over a dataset and keeping its output as a dataset of
// its own, so that every later epoch and job runs only the stages after it.
//
// `prepflow materialize` writes WebDataset shards whose sample members hold
// each sample's value at boundary `upto`, encoded as `encoding`:
//   raw     its wire form (pipeline/core/wire.h): exact for any value; ".pfv"
//   png     images only, lossless; ".png"
//   jpeg:Q  images only, lossy at quality Q (1 to 100); ".jpg"
// each member named key.p<prefix fingerprint>.ext (BoundaryTag),
// and a manifest, materialized.pbtxt (proto::Materialized), that names the
// pipeline prefix. A job given the shards continues from `upto` with the
// same checksum as the unmaterialized job when the encoding is lossless.
//
// Thread-safety: pure functions; Materialize runs its own threads.
#ifndef PREPFLOW_PIPELINE_REUSE_MATERIALIZE_H_
#define PREPFLOW_PIPELINE_REUSE_MATERIALIZE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/data/dataset.h"
#include "pipeline/data/pack.h"
#include "pipeline/pipeline.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

inline constexpr char kManifestName[] = "materialized.pbtxt";

// Checks an --encoding: "raw", "png" or "jpeg:Q" (Q from 1 to 100).
// InvalidArgument naming the flag.
absl::Status CheckEncoding(const std::string& encoding);

// Encodes the value `s` holds (at the materialized boundary) as `encoding`,
// into `*bytes`, and names its member's extension. InvalidArgument when the
// encoding cannot hold it (png or jpeg for a value that is not an image, or
// an image that is a partial decode, whose view a picture cannot keep).
absl::Status EncodeMaterialized(const Sample& s, const std::string& encoding, std::string* bytes,
                                std::string* ext);

// Makes `s`, which holds a materialized sample's stored bytes (as read),
// hold its value at the materialized boundary, in `ws`.
absl::Status DecodeMaterialized(const proto::Materialized& m, const DecodeOptions& decode,
                                Workspace& ws, Sample& s);

// Whether `pipeline` may continue data materialized as `m`: its stages
// [0, m.upto) and decode limits are those that made it. InvalidArgument
// naming both prefixes when not.
absl::Status CheckMaterializedPrefix(const proto::Materialized& m, const Pipeline& pipeline);

// The tag every materialized member carries between its key and its
// extension ("000123.p<16 hex>.pfv"): the fingerprint of the prefix that made
// it, so the shards themselves say which values they hold.
std::string BoundaryTag(uint64_t prefix_fingerprint);

// Whether every sample of `dataset` (opened from shards that `m` describes)
// was made by the prefix `m` names: a manifest edited to claim a later
// boundary of the same type, with that boundary's fingerprint, would
// otherwise skip stages silently. InvalidArgument naming the first sample
// that is not.
absl::Status CheckMaterializedSamples(const proto::Materialized& m, const Dataset& dataset);

struct MaterializeOptions {
  int upto = -1;  // -1: the pipeline's cache boundary (its deterministic prefix)
  std::string encoding = "raw";
  PackOptions pack;  // out_dir, samples_per_shard, overwrite, finished, threads
};

// Runs stages [0, upto) of `pipeline` over every sample of `dataset` and
// writes the shards and the manifest (handed to pack.finished too, last).
// Errors: InvalidArgument (a boundary that is not deterministic, an
// encoding that cannot hold the values), and the first sample that fails,
// named (a materialized dataset keeps every index of its source).
absl::StatusOr<proto::Materialized> Materialize(
    const Dataset& dataset, const Pipeline& pipeline, const proto::PipelineSpec& spec,
    const MaterializeOptions& options, const std::function<void(const PackStats&)>& progress);

// One way to run a pipeline over a dataset (PRESTO's strategies): online
// from the source (upto 0), or materialized after stages [0, upto) as
// `encoding`, measured per sample on one thread.
struct Strategy {
  int upto = 0;
  std::string encoding;   // "" for the source
  double bytes = 0;       // stored per sample
  double oneoff_cpu = 0;  // CPU seconds per sample to materialize (read, stages, encode)
  double online_cpu = 0;  // CPU seconds per sample each epoch (decode stored, rest)
  int64_t samples = 0;    // measured
  std::string unusable;   // why the encoding cannot hold the values here; "" if it can
};

// Measures every strategy: the source, and each deterministic boundary
// 1..CacheBoundary() in each of `encodings`, over `indices` of `dataset`.
// Stages before a boundary run one at a time, so a decode fused with the
// stage after the boundary costs what it costs once that fusion is lost.
// Errors: the first sample that fails at the source, named.
absl::StatusOr<std::vector<Strategy>> MeasureStrategies(
    const Dataset& dataset, const Pipeline& pipeline, const std::vector<int64_t>& indices,
    const std::vector<std::string>& encodings, const std::function<void(int64_t)>& progress);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_REUSE_MATERIALIZE_H_
