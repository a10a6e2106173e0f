// An op applied to a clip frame by frame: the image ops (and the ops on
// [C, H, W] tensors) take a clip [T, H, W, 3] (or [T, C, H, W]) by running on
// each frame with the one random draw the sample gets for the stage, so a
// clip keeps one crop box, flip and set of jitter factors, as torchvision's
// transforms treat a video tensor. Pipeline::Create wraps an op this way
// where it refuses the clip but takes one frame of it.
//
// Thread-safety: as op.h.
#ifndef PREPFLOW_PIPELINE_OPS_PER_FRAME_H_
#define PREPFLOW_PIPELINE_OPS_PER_FRAME_H_

#include <memory>

#include "absl/status/statusor.h"
#include "pipeline/core/op.h"

namespace prepflow {

// Whether `type` is a clip whose frames an op may take one by one: a stack
// of images [T, H, W, 3], or a tensor [T, C, H, W].
bool IsClip(const ValueType& type);

// The type `op` makes of clip `in` applied frame by frame: the frames'
// type with T before it; InvalidArgument (the op's own message on one
// frame) where it takes no frame, or makes of one anything but an image or
// a [C, H, W] tensor.
absl::StatusOr<ValueType> PerFrameOutputType(const Op& op, const ValueType& in);

// `op`, applied frame by frame (REQUIRES: PerFrameOutputType succeeded).
std::unique_ptr<Op> ApplyPerFrame(std::unique_ptr<Op> op);

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_PER_FRAME_H_
