// A validated, runnable pipeline: an ordered list of ops built from a
// proto::PipelineSpec.
//
// The value before stage 0 is a sample's encoded bytes; stage k turns the
// value at boundary k into the value at boundary k + 1. Run(begin, end, ...)
// executes any contiguous range, which is what lets a prefix run on a worker
// and the rest on the trainer with bit-identical results.
//
// Thread-safety: a Pipeline is immutable after Create(); Run() may be called
// concurrently from many threads, each with its own Workspace.
#ifndef PREPFLOW_PIPELINE_PIPELINE_H_
#define PREPFLOW_PIPELINE_PIPELINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline/core/batch.h"
#include "pipeline/core/op.h"
#include "pipeline/core/profiler.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

struct PipelineOptions {
  uint64_t seed = 0;
  DecodeOptions decode;
  // How ops open data beside the samples (add_noise's noise set): as the
  // job's dataset is opened (pipeline/data's OpDataOpenerFor). Null: a
  // pipeline with such an op is refused (FailedPrecondition).
  OpDataOpener open_data;
  // How ops read one file (a tokenizer's model), likewise (pipeline/data's
  // OpFileReaderFor). Null: a pipeline with such an op is refused.
  OpFileReader read_file;
  // What one op may hold of the data it loads (OpEnvironment::max_data_bytes).
  int64_t max_data_bytes = 0;
};

class Pipeline {
 public:
  // Validates `spec` once: every stage's parameters and the type flow between
  // stages. Errors are InvalidArgument naming the stage ("stage 2
  // (normalize): ...").
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(const proto::PipelineSpec& spec,
                                                          const PipelineOptions& options);

  const std::string& name() const { return name_; }
  int num_stages() const { return static_cast<int>(ops_.size()); }
  // "random_resized_crop"
  const std::string& stage_name(int i) const { return stage_names_[i]; }
  const std::vector<std::string>& stage_names() const { return stage_names_; }
  // The type of the value at boundary k (k = 0: encoded bytes; k =
  // num_stages(): the output).
  const ValueType& boundary_type(int k) const { return field_types_[k][working_field(k)]; }
  const ValueType& output_type() const { return boundary_type(num_stages()); }
  // The name batches give the media field (""): "audio" when it decodes
  // audio, else "image".
  std::string field() const;
  // The fields of the records it runs on (record.h): each stage's field
  // (Stage.field; "" the media) in the order of their first stage, then the
  // carried ones (PipelineSpec.carry). One field, "", for a pipeline of one
  // field.
  const std::vector<std::string>& fields() const { return fields_; }
  bool record() const { return fields_.size() > 1; }
  // Which field stage i works on (an index into fields()).
  int stage_field(int i) const { return stage_field_[i]; }
  // The field whose value is the working one at boundary k: the field of
  // the stage before it (k = 0: stage 0's).
  int working_field(int k) const { return k == 0 ? stage_field_[0] : stage_field_[k - 1]; }
  // The type of field f at boundary k (encoded bytes before its first
  // stage); boundary_type(k) is the working field's.
  const ValueType& field_type(int k, int f) const { return field_types_[k][f]; }
  // The name batches give field f: field() for "", else its own.
  std::string FieldKey(int f) const;
  // The fields of a batch of its outputs: the working field at the end
  // first (the last op writes it into its slot), then the others in the
  // order of their names (as Sample::fields keeps them).
  std::vector<BatchField> OutputFields() const;
  // Why its outputs cannot be batched, naming the field; "" when they can
  // (carried fields' bytes always can).
  std::string WhyNotBatchable() const;
  const PipelineOptions& options() const { return options_; }
  // Whether stage i draws random numbers (its op's schema, or its plugin's
  // word).
  bool stage_random(int i) const { return random_[i]; }
  // Whether the value at boundary k is a function of the sample alone, the
  // same in every epoch and every job: no stage before k draws random
  // numbers, and stage k does not steer the decode before it with random
  // draws (random_resized_crop's region decode). What may be cached or
  // materialized. REQUIRES: 0 <= k <= num_stages().
  bool Deterministic(int k) const { return WhyNotDeterministic(k).empty(); }
  // Why boundary k is not deterministic, naming the stage; "" when it is.
  std::string WhyNotDeterministic(int k) const;
  // Why the value at boundary k cannot be made once and continued with other
  // random draws (data echoing): the decode before it is planned from stage
  // k's draws. "" when it can.
  std::string WhyNotSplittable(int k) const;
  // The last deterministic boundary before the first random stage
  // (num_stages() when no stage is random): the default cache boundary.
  int CacheBoundary() const;
  // A hash of stages [0, k) and the decode limits: with a dataset's
  // fingerprint, it names the values at boundary k (what a cache keys on).
  uint64_t PrefixFingerprint(int k) const { return prefix_fingerprints_[k]; }
  // An upper bound on one sample's bytes at boundary k, known before anything
  // runs: exact for a fixed type; for an image or tensor whose size depends
  // on the file, what --max-pixels allows (3 channels, 1 or 4 bytes each);
  // for encoded bytes, `max_file_bytes`; for audio, what the limits (and
  // the rate and channels the type fixes) allow, and for features made from
  // it (a spectrogram), that through each stage's frames and bands. A
  // record's is the sum over its fields. What a worker's memory budget and
  // the client's item sizes are computed from.
  int64_t MaxBytesAt(int k, int64_t max_file_bytes) const;

  // Runs stages [begin, end) on `sample`, which must hold the value at
  // boundary `begin` (a record: every field's, the working one's in the
  // sample's value). When `sink` is given and the output has exactly
  // `sink_bytes` bytes, the output is left there (written in place by the last
  // op where it can, else copied). Stage costs go to `profiler` (slot = stage
  // index) when given. Errors are the failing op's, prefixed with the stage.
  // REQUIRES: 0 <= begin <= end <= num_stages().
  absl::Status Run(int begin, int end, Sample& sample, Workspace& ws,
                   StageProfiler* profiler = nullptr, uint8_t* sink = nullptr,
                   size_t sink_bytes = 0) const;

  // A one-line description: "imagenet-train: decode -> random_resized_crop -> ...".
  std::string DebugString() const;

 private:
  Pipeline() = default;
  // Create's steps: the fields of `spec` (fields(), stage_field()), then
  // each stage's op and the types it makes.
  absl::Status LayOutFields(const proto::PipelineSpec& spec);
  absl::Status AddStage(const proto::Stage& stage, int i);
  // The next stage after stage i that works on its field; -1 when none.
  int NextOfField(int i) const;
  // DataLoss unless `sample` holds a record of boundary k's types.
  absl::Status CheckRecord(int k, const Sample& sample) const;

  std::string name_;
  PipelineOptions options_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<std::string> stage_names_;
  std::vector<std::string> fields_;                  // see fields()
  std::vector<int> stage_field_;                     // by stage
  std::vector<std::vector<ValueType>> field_types_;  // by boundary, by field
  std::vector<bool> random_;                         // by stage
  std::vector<bool> plans_decode_;                   // by stage: steers the decode before it
  std::vector<uint64_t> prefix_fingerprints_;        // by boundary
  // By boundary and field: a bound on a tensor made from audio, from the
  // audio's bound through the stages since (-1: none known; see MaxBytesAt).
  std::vector<std::vector<int64_t>> feature_bounds_;
};

// Sets the fidelity of every resizing stage (resize, random_resized_crop;
// inside compositions too) of `spec` that leaves it at FIDELITY_DEFAULT: what --fidelity does,
// before the spec is built, fingerprinted or sent to a worker, so that every placement resizes
// alike.
void ResolveFidelity(proto::Fidelity fidelity, proto::PipelineSpec* spec);
// "exact" | "fast"; InvalidArgument naming both otherwise.
absl::StatusOr<proto::Fidelity> ParseFidelity(const std::string& name);
const char* FidelityName(proto::Fidelity fidelity);

// Built-in pipelines by name ("imagenet-train", "imagenet-eval").
std::vector<std::string> PresetPipelineNames();
// A preset by name, pipeline text itself (anything with a '{': "stages {
// decode {} } ..."), or a protobuf text file at `name_or_path`. Errors:
// NotFound (neither a preset nor a readable file), InvalidArgument (parse
// error with file:line:column, or "pipeline text:line:column").
absl::StatusOr<proto::PipelineSpec> LoadPipelineSpec(absl::string_view name_or_path);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_PIPELINE_H_
