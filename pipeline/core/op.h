// Pipeline stages ("ops") and the registry they are built from.
//
// Each op is built once from its proto::Stage, validated then (a bad parameter
// is InvalidArgument naming the field), and applied to many samples from many
// threads: Apply() is const and keeps per-call state in the StageContext.
// Randomness comes only from ctx.Rng(sample), keyed by (seed, epoch, sample
// index, stage index), so an op gives the same bytes wherever it runs.
//
// Ops never throw: OpenCV exceptions are caught and returned as Status.
//
// Thread-safety: an Op is immutable once built: Apply() runs from many
// threads at once, each with its own Workspace (one per thread). An
// OpRegistry is filled before it is shared (BuiltinOps() once, thread-safely);
// Create() may then run from any thread.
#ifndef PREPFLOW_PIPELINE_CORE_OP_H_
#define PREPFLOW_PIPELINE_CORE_OP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pipeline/core/image_decode.h"
#include "pipeline/core/rng.h"
#include "pipeline/core/sample.h"
#include "pipeline/core/value_type.h"
#include "pipeline/core/workspace.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

// What an op sees of the run it is part of.
struct StageContext {
  uint64_t seed = 0;
  int stage = 0;  // index of the running stage
  // 0, or which stage inside a composition is running (compose_ops.h): its
  // draws come from the stage's substream.
  uint64_t substream = 0;
  Workspace* ws = nullptr;
  const DecodeOptions* decode = nullptr;
  // Where the pipeline's last stage should write its output, if it can.
  uint8_t* sink = nullptr;
  size_t sink_bytes = 0;
  bool last = false;

  SampleRng Rng(const Sample& s) const {
    SampleRng rng(seed, s.epoch, static_cast<uint64_t>(s.index), static_cast<uint32_t>(stage),
                  s.copy_at(stage));
    return substream == 0 ? rng : rng.Substream(substream);
  }
  // Memory for an `n`-byte output of an op whose input is `in`.
  uint8_t* Output(const void* in, size_t n) const {
    if (last && sink != nullptr && n == sink_bytes) return sink;
    return ws->ScratchFor(in)->Reserve(n);
  }
  // The same for an op that still reads `also` (its own scratch) as it writes.
  uint8_t* Output(const void* in, const void* also, size_t n) const {
    if (last && sink != nullptr && n == sink_bytes) return sink;
    return ws->ScratchFor(in, also)->Reserve(n);
  }
};

// Data an op reads beside the samples (add_noise's noise set), opened by
// whoever builds the pipeline as its samples are.
class OpData {
 public:
  virtual ~OpData() = default;
  virtual int64_t size() const = 0;
  // Where item i comes from, for messages.
  virtual std::string Where(int64_t i) const = 0;
  // Reads item i's bytes into `out` (`*size` of them); errors name it.
  virtual absl::Status Read(int64_t i, Buffer* out, size_t* size) const = 0;
};

// Opens the dataset at `path` (a folder, manifest, shards or URL) as the
// job's own data is opened: on a worker below its --data-root, URLs as it
// allows.
using OpDataOpener =
    std::function<absl::StatusOr<std::unique_ptr<OpData>>(const std::string& path)>;

// Reads the one file at `path` (a tokenizer's model) as the job's data is
// read: on a worker below its --data-root, URLs as it allows. Over
// `max_bytes` is ResourceExhausted naming the file; max_bytes < 0 only
// checks that it can be read (and returns "").
using OpFileReader =
    std::function<absl::StatusOr<std::string>(const std::string& path, int64_t max_bytes)>;

// What Op::Open is given when a pipeline is built.
struct OpEnvironment {
  OpDataOpener open_data;                 // null: no data can be opened here
  const DecodeOptions* decode = nullptr;  // the pipeline's limits
  // The most bytes one op may hold of what it loads (0: as the op's own
  // parameters say): a worker's share of its memory, whatever a job asks.
  int64_t max_data_bytes = 0;
  OpFileReader read_file;  // null: no file can be read here
};

class Op {
 public:
  virtual ~Op() = default;
  // The type this op produces from `in`, or InvalidArgument when it cannot
  // take `in` (the message says what it expects).
  virtual absl::StatusOr<ValueType> OutputType(const ValueType& in) const = 0;
  virtual absl::Status Apply(const StageContext& ctx, Sample& sample) const = 0;

  // Ops that can tell a decoder which region of the source they will read
  // return a hint; `rng` is the op's own stream for this sample, so the
  // decoder draws exactly what Apply() would.
  virtual bool PlansDecode() const { return false; }
  virtual DecodeHint PlanDecode(int src_w, int src_h, SampleRng& rng) const { return {}; }

  // Called once by the pipeline: the op that consumes this op's output.
  virtual void SetConsumer(const Op* next, int next_stage) {}

  // Called once by the pipeline after the op is built, before any Apply:
  // ops that read data beside the samples open and load it here. Errors
  // name what failed (FailedPrecondition where `env` cannot open data).
  virtual absl::Status Open(const OpEnvironment& env) { return absl::OkStatus(); }
};

using OpFactory = std::function<absl::StatusOr<std::unique_ptr<Op>>(const proto::Stage&)>;

// The factory of an op class with `static StatusOr<unique_ptr<Op>> Create(const Stage&)`.
template <typename T>
OpFactory FactoryOf() {
  return [](const proto::Stage& stage) { return T::Create(stage); };
}

// The ops prepflow knows, keyed by the Stage oneof case.
class OpRegistry {
 public:
  void Register(proto::Stage::OpCase op_case, OpFactory factory);
  // InvalidArgument for an unset or unknown op; otherwise what the factory says.
  absl::StatusOr<std::unique_ptr<Op>> Create(const proto::Stage& stage) const;
  // The op's name as written in pipeline files ("random_resized_crop").
  static std::string OpName(proto::Stage::OpCase op_case);
  std::vector<std::string> Names() const;

 private:
  std::vector<std::pair<proto::Stage::OpCase, OpFactory>> factories_;
};

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_CORE_OP_H_
