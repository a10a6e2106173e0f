// Batch ops: transforms of a whole assembled batch, run on the trainer after
// batching (never on a worker, so they do not affect where samples run).
// Today: MixUp and CutMix (proto::MixupCutmix), as torchvision's
// classification reference (RandomMixup, RandomCutmix) and timm compute them.
//
// Draws come from (seed, epoch, batch number) on a stream no sample uses, so
// a batch is mixed the same way wherever its samples ran.
//
// Thread-safety: Apply is const; distinct batches may be mixed concurrently.
#ifndef PREPFLOW_PIPELINE_OPS_BATCH_OPS_H_
#define PREPFLOW_PIPELINE_OPS_BATCH_OPS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "pipeline/core/batch.h"
#include "pipeline/core/rng.h"
#include "proto/pipeline.pb.h"

namespace prepflow {

class MixupCutmix {
 public:
  // InvalidArgument for bad parameters, a sample type that is not a float32
  // CHW tensor, or no class count (num_classes unset and `dataset_classes`
  // 0). `stage` must have its defaults applied (ApplyDefaults).
  static absl::StatusOr<std::unique_ptr<MixupCutmix>> Create(const proto::MixupCutmix& stage,
                                                             const ValueType& sample_type,
                                                             int64_t dataset_classes);

  // Mixes the batch's samples in place and writes its soft labels.
  // InvalidArgument when a label is outside [0, num_classes).
  absl::Status Apply(uint64_t seed, Batch* batch) const;

  int64_t num_classes() const { return num_classes_; }

 private:
  MixupCutmix() = default;
  void Mixup(Batch* batch, double lambda) const;
  // Returns the label weight of each sample's own image: 1 - box area / area.
  double Cutmix(Batch* batch, SampleRng& rng, double lambda) const;

  double mixup_alpha_ = 0, cutmix_alpha_ = 0, p_ = 1, switch_prob_ = 0.5;
  int64_t num_classes_ = 0;
  int channels_ = 0, height_ = 0, width_ = 0;
};

// A Beta(alpha, alpha) draw (Marsaglia-Tsang gammas); for tests.
double SampleBeta(SampleRng& rng, double alpha);

// Builds the spec's batch ops (at most one today); null when there are none.
absl::StatusOr<std::unique_ptr<MixupCutmix>> CreateBatchOps(const proto::PipelineSpec& spec,
                                                            const ValueType& sample_type,
                                                            int64_t dataset_classes);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_BATCH_OPS_H_
