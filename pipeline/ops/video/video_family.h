// The video op family: decode_video (FFmpeg's libraries) and the temporal
// ops on clips. A clip is a stack of frames, an image value [T, H, W, 3];
// the image ops apply to it frame by frame (pipeline/ops/per_frame.h).
// builtin_ops.cc registers the family; nothing outside pipeline/ops/video/
// needs more than this header (and video_probe.h for indexing).
//
// Thread-safety: RegisterVideoOps fills a registry before it is shared.
#ifndef PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_FAMILY_H_
#define PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_FAMILY_H_

#include <cstdint>
#include <vector>

#include "pipeline/core/op.h"

namespace prepflow {

// Registers every op of the family.
void RegisterVideoOps(OpRegistry* registry);

// The frames uniform_temporal_subsample keeps of a clip of `frames`:
// torch.linspace(0, frames - 1, keep) in float32 as torch 1.13 computes it
// on AVX2 CPUs (halves from each end, eight lanes at a time), clamped and
// truncated, as PyTorchVideo's UniformTemporalSubsample.
std::vector<int64_t> UniformTemporalIndices(int64_t frames, int64_t keep);
// Its i-th index alone (what the op copies, with nothing allocated).
int64_t UniformTemporalIndex(int64_t frames, int64_t keep, int64_t i);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_VIDEO_VIDEO_FAMILY_H_
