// The image op family: decode, resizing and cropping, geometry, colour,
// automatic augmentation and the ops on float tensors, as torchvision's
// transforms define them. builtin_ops.cc registers the family; nothing else
// outside pipeline/ops/image/ needs more than this header.
//
// Thread-safety: RegisterImageOps fills a registry before it is shared;
// NormalizeHwcToChw is pure.
#ifndef PREPFLOW_PIPELINE_OPS_IMAGE_IMAGE_FAMILY_H_
#define PREPFLOW_PIPELINE_OPS_IMAGE_IMAGE_FAMILY_H_

#include <cstddef>
#include <cstdint>

#include "pipeline/core/op.h"

namespace prepflow {

// Registers every op of the family.
void RegisterImageOps(OpRegistry* registry);

// The normalize kernel (exposed for tests and benchmarks): uint8 HWC RGB to
// float32 CHW, (x / 255 - mean[c]) / std[c] in float32 exactly as torchvision's
// ToTensor + Normalize compute it; channel c's plane at out + c *
// channel_stride (pixels: one CHW image; more: an image of a [3, n, h, w]
// clip).
void NormalizeHwcToChw(const uint8_t* in, size_t pixels, const float* mean, const float* std,
                       float* out, size_t channel_stride);
inline void NormalizeHwcToChw(const uint8_t* in, size_t pixels, const float* mean, const float* std,
                              float* out) {
  NormalizeHwcToChw(in, pixels, mean, std, out, pixels);
}

}  // namespace prepflow

#endif  // PREPFLOW_PIPELINE_OPS_IMAGE_IMAGE_FAMILY_H_
